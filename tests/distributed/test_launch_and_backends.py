"""Launch lines, training.distributed, and the machine checks of DeepSpeed/FSDP/vLLM (fast, no training)."""

from __future__ import annotations

import sys

import pytest
from mp_testing import posttrain

from posttrain.distributed.backends import BACKENDS, backend_fields, config_path
from posttrain.distributed.launch import LaunchOptions, check, torchrun_command
from posttrain.errors import UserError

TORCHRUN = [sys.executable, "-m", "torch.distributed.run"]


def test_one_node_is_a_standalone_torchrun_and_the_recipe_is_passed_unchanged():
    cmd = torchrun_command(LaunchOptions(nproc=8), ["train", "--recipe", "r.yaml", "training.max_steps=5"])
    assert cmd == [*TORCHRUN, "--nproc-per-node", "8", "--standalone", "-m", "posttrain", "train", "--recipe", "r.yaml", "training.max_steps=5"]


def test_multi_node_flags_reach_torchrun_unchanged():
    static = torchrun_command(LaunchOptions(8, 2, node_rank=1, master_addr="10.0.0.1", master_port=29555), ["train"])
    assert static[3:13] == ["--nproc-per-node", "8", "--nnodes", "2", "--node-rank", "1", "--master-addr", "10.0.0.1", "--master-port", "29555"]
    rdzv = torchrun_command(LaunchOptions(4, 3, rdzv_endpoint="head:29400", rdzv_id="job7"), ["train"])
    assert rdzv[3:13] == ["--nproc-per-node", "4", "--nnodes", "3", "--rdzv-backend", "c10d", "--rdzv-endpoint", "head:29400", "--rdzv-id", "job7"]


@pytest.mark.parametrize("opts, message", [
    (LaunchOptions(nproc=0), "at least 1 process"),
    (LaunchOptions(nnodes=2), "needs --node-rank and --master-addr"),
    (LaunchOptions(nnodes=2, node_rank=2, master_addr="h"), "outside 0..1"),
    (LaunchOptions(nnodes=2, node_rank=0, master_addr="h", rdzv_endpoint="h:1"), "assigns node ranks itself"),
    (LaunchOptions(node_rank=1), "give --nnodes"),
])
def test_launch_flags_that_cannot_work_are_refused(opts, message):
    with pytest.raises(UserError, match=message):
        check(opts)


def test_inside_a_launcher_runs_in_process_and_refuses_to_launch_more(monkeypatch):
    monkeypatch.setenv("RANK", "3")
    monkeypatch.setenv("WORLD_SIZE", "8")
    check(LaunchOptions())  # no flags: this process is one rank of the launcher's job
    with pytest.raises(UserError, match=r"already inside a launcher \(RANK=3, WORLD_SIZE=8\)"):
        check(LaunchOptions(nproc=2))


def test_bad_launch_flags_exit_2_before_anything_starts(tmp_path):
    result = posttrain("train", "--recipe", "recipes/sft/tiny-cpu.yaml", "--num-gpus", "2", "--nnodes", "2", f"training.output_dir={tmp_path}/x")
    assert result.returncode == 2 and "needs --node-rank and --master-addr" in result.stderr
    assert "Traceback" not in result.stderr and not (tmp_path / "x").exists()


def test_batch_shapes_are_validated_for_the_processes_to_be_launched():
    """2 completions per process cannot hold a group of 4 on one process, but can on two."""
    args = ["validate", "recipes/grpo/tiny-cpu.yaml", "training.per_device_train_batch_size=2", "--schema-only"]
    one = posttrain(*args)
    assert one.returncode == 2 and "must hold whole groups of num_generations=4" in one.stderr
    two = posttrain(*args, "--nproc", "2")
    assert two.returncode == 0, two.stderr


# ------------------------------------------------------------------------- training.distributed
@pytest.mark.parametrize("choice", list(BACKENDS))
def test_every_choice_ships_a_commented_config_of_trl_fields(choice):
    from posttrain.recipe.trl_fields import trl_fields

    text = config_path(choice).read_text()
    assert text.startswith("# training.distributed: " + choice)
    fields = backend_fields(choice)
    for family in ("sft", "dpo", "grpo"):
        assert set(fields) <= set(trl_fields(family)), family


@pytest.mark.parametrize("choice, key, expected", [
    ("zero3", "deepspeed", 3), ("zero2", "deepspeed", 2), ("zero3_offload", "deepspeed", 3),
    ("fsdp", "fsdp", "full_shard auto_wrap"), ("ddp", "ddp_find_unused_parameters", False),
])
def test_the_chosen_config_reaches_the_trl_config(choice, key, expected):
    from posttrain.algorithms.trl_config import config_kwargs
    from posttrain.models.loading import DeviceInfo
    from posttrain.recipe.load import load_recipe

    recipe = load_recipe("recipes/dpo/tiny-cpu.yaml", [f"training.distributed={choice}"]).recipe
    kwargs = config_kwargs(recipe, DeviceInfo("cuda", True), "preference")
    value = kwargs[key]["zero_optimization"]["stage"] if key == "deepspeed" else kwargs[key]
    assert value == expected
    assert "distributed" not in kwargs  # posttrain's own key, not TRL's


def test_a_recipe_ddp_knob_beats_the_shipped_preset():
    from posttrain.algorithms.trl_config import config_kwargs
    from posttrain.models.loading import DeviceInfo
    from posttrain.recipe.load import load_recipe

    recipe = load_recipe("recipes/sft/tiny-cpu.yaml", ["training.distributed=ddp", "training.ddp_timeout=60"]).recipe
    kwargs = config_kwargs(recipe, DeviceInfo("cuda", True), "prompt_completion")
    assert kwargs["ddp_timeout"] == 60 and kwargs["ddp_find_unused_parameters"] is False


def test_distributed_and_trl_backend_keys_together_are_refused():
    result = posttrain("validate", "recipes/sft/tiny-cpu.yaml", "training.distributed=zero2", "training.deepspeed=ds.json", "--schema-only")
    assert result.returncode == 2 and "keep one" in result.stderr and "training.deepspeed" in result.stderr


def test_qlora_with_zero3_is_refused_with_the_reason():
    result = posttrain("validate", "recipes/sft/llama-3.2-3b-qlora.yaml", "training.distributed=zero3", "--schema-only")
    assert result.returncode == 2
    assert "bitsandbytes packs 4/8-bit weights into uint8 storage" in result.stderr and "zero2 or ddp" in result.stderr
    ok = posttrain("validate", "recipes/sft/llama-3.2-3b-qlora.yaml", "training.distributed=zero2", "--schema-only")
    assert ok.returncode == 0, ok.stderr


def test_missing_deepspeed_package_is_exit_2_with_the_fix(tmp_path):
    """A real import failure (a finder that hides deepspeed), not a patched function."""
    (tmp_path / "sitecustomize.py").write_text(
        "import sys\n"
        "class Hide:\n"
        "    def find_spec(self, name, path=None, target=None):\n"
        "        if name == 'deepspeed' or name.startswith('deepspeed.'):\n"
        "            raise ModuleNotFoundError(name)\n"
        "sys.meta_path.insert(0, Hide())\n")
    import os

    env = {"PYTHONPATH": f"{tmp_path}{os.pathsep}{os.environ.get('PYTHONPATH', '')}"}
    for args in (["validate", "recipes/sft/tiny-cpu.yaml", "training.distributed=zero3"],
                 ["train", "--recipe", "recipes/sft/tiny-cpu.yaml", "training.distributed=zero2", f"training.output_dir={tmp_path}/run"]):
        result = posttrain(*args, env=env)
        assert result.returncode == 2, result.stderr[-2000:]
        assert "needs the deepspeed package, which is not installed: pip install deepspeed" in result.stderr
        assert "Traceback" not in result.stderr and "PackageNotFoundError" not in result.stderr


def test_user_deepspeed_file_must_exist(tmp_path):
    result = posttrain("validate", "recipes/sft/tiny-cpu.yaml", f"training.deepspeed={tmp_path}/nope.json")
    assert result.returncode == 2 and "nope.json' does not exist" in result.stderr


def test_fsdp_on_cpu_is_refused_rather_than_silently_ddp():
    result = posttrain("validate", "recipes/sft/tiny-cpu.yaml", "training.distributed=fsdp", env={"CUDA_VISIBLE_DEVICES": ""})
    assert result.returncode == 2 and "silently runs plain DDP instead of FSDP" in result.stderr
    assert posttrain("validate", "recipes/sft/tiny-cpu.yaml", "training.distributed=fsdp", "--schema-only").returncode == 0


# ------------------------------------------------------------------------------------- vLLM
def test_vllm_keys_reach_grpo_config():
    from posttrain.algorithms.trl_config import build_trl_config
    from posttrain.models.loading import DeviceInfo
    from posttrain.recipe.load import load_recipe

    overrides = ["training.use_vllm=true", "training.vllm_mode=server", "training.vllm_gpu_memory_utilization=0.55",
                 "training.vllm_tensor_parallel_size=2", "training.vllm_server_port=8123"]
    recipe = load_recipe("recipes/grpo/tiny-cpu.yaml", overrides).recipe
    config = build_trl_config(recipe, DeviceInfo("cpu", False), "prompt")
    assert (config.use_vllm, config.vllm_mode, config.vllm_gpu_memory_utilization, config.vllm_tensor_parallel_size,
            config.vllm_server_port) == (True, "server", 0.55, 2, 8123)


@pytest.mark.parametrize("overrides, message", [
    (["training.use_vllm=true", "training.vllm_mode=remote"], "TRL knows 'colocate'"),
    (["training.vllm_gpu_memory_utilization=0.5"], "only applies with training.use_vllm=true"),
])
def test_vllm_settings_that_would_do_nothing_or_fail_are_refused(overrides, message):
    result = posttrain("validate", "recipes/grpo/tiny-cpu.yaml", *overrides, "--schema-only")
    assert result.returncode == 2 and message in result.stderr


@pytest.mark.skipif(__import__("importlib").util.find_spec("vllm") is not None, reason="vllm is installed here")
def test_use_vllm_without_vllm_fails_at_load_not_mid_run(tmp_path):
    result = posttrain("train", "--recipe", "recipes/grpo/tiny-cpu.yaml", "training.use_vllm=true", f"training.output_dir={tmp_path}/g")
    assert result.returncode == 2 and "vLLM needs the vllm package" in result.stderr
    assert not (tmp_path / "g").exists()  # nothing started
    serve = posttrain("vllm-serve", "--model", "tiny:qwen2-1m")
    assert serve.returncode == 2 and "cannot start the vLLM server" in serve.stderr and "Traceback" not in serve.stderr


def test_vllm_serve_hands_the_settings_to_trls_server_command():
    result = posttrain("vllm-serve", "--model", "tiny:qwen2-1m", "--tensor-parallel-size", "2", "--gpu-memory-utilization", "0.4",
                       "--port", "8123", "--print-command", "--", "--enforce-eager")
    assert result.returncode == 0, result.stderr
    line = result.stdout.strip()
    assert "-m vllm.entrypoints.cli.main serve " in line and "/tiny/qwen2-1m" in line  # tiny: resolved to its directory
    for part in ("--tensor-parallel-size 2", "--gpu-memory-utilization 0.4", "--port 8123", "--logprobs-mode processed_logprobs", "--enforce-eager"):
        assert part in line


def test_validate_with_launch_flags_and_a_backend_imports_no_torch(repo):
    import subprocess

    code = ("import sys, io, contextlib; from posttrain.cli import main\n"
            "with contextlib.redirect_stdout(io.StringIO()): rc = main(['validate', 'recipes/sft/tiny-cpu.yaml', 'training.distributed=zero3', '--nproc', '2'])\n"
            "print(rc, [m for m in ('torch', 'transformers', 'trl', 'deepspeed') if m in sys.modules])")
    result = subprocess.run([sys.executable, "-c", code], cwd=repo, capture_output=True, text=True, timeout=120)
    assert result.stdout.strip() == "0 []", result.stdout + result.stderr[-2000:]
