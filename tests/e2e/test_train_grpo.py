"""GRPO and GSPO through the real CLI on a tiny model: live KL, presets, prompt length, rewards, telemetry."""

import json
import os
from pathlib import Path

import pytest

pytestmark = pytest.mark.e2e
HERE = Path(__file__).resolve().parent
# A reward with variance inside each group, so a random tiny model still takes real policy steps.
GRPO_ARGS = ["training.rewards=[{name: 'user_rewards:digit_share'}, {name: answer_match}]", "training.learning_rate=3e-3",
             "training.max_steps=4", "training.num_generations=4", "training.per_device_train_batch_size=8",
             "training.max_completion_length=16", "training.save_steps=100"]


def grpo(cli, out: Path, *overrides, recipe="recipes/grpo/tiny-cpu.yaml", env=None, data_dir=None):
    args = ["train", "--recipe", recipe, f"training.output_dir={out}", *GRPO_ARGS]
    if data_dir is not None:
        args.append(f"data.datasets[0].name={data_dir / 'problems.jsonl'}")
    # keep an outer PYTHONPATH (a worktree's src) ahead of the installed package, and add env's
    env = dict(env or {})
    pythonpath = os.pathsep.join(filter(None, [env.pop("PYTHONPATH", None), str(HERE), os.environ.get("PYTHONPATH")]))
    result = cli(*args, *overrides, env={"PYTHONPATH": pythonpath, **env})
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    return result


def metrics(out: Path) -> list[dict]:
    return [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()]


@pytest.fixture(scope="module")
def beta_runs(tmp_path_factory, data_dir, cli):
    """Two runs that differ only in training.beta: the default (0.04) and 0.0."""
    root = tmp_path_factory.mktemp("grpo")
    (root / "default.log").write_text(grpo(cli, root / "default", data_dir=data_dir).stdout)
    grpo(cli, root / "beta0", "training.beta=0.0", data_dir=data_dir)
    return root


def test_default_beta_reaches_trl_and_kl_is_live(beta_runs):
    config = json.loads((beta_runs / "default" / "trl_config.json").read_text())
    assert config["beta"] == 0.04
    kl = [r["kl"] for r in metrics(beta_runs / "default") if "kl" in r]
    assert len(kl) == 4 and kl[0] == 0.0 and max(kl[1:]) > 0  # policy == reference only at step 1
    # on a CPU both passes score flattened rows (models/flat_batches.py): one path, so the KL starts at exactly 0
    assert "scored batches: each batch's prompt + completion rows run as one flattened row" in (beta_runs / "default.log").read_text()


def test_beta_zero_has_no_kl_channel(beta_runs):
    assert json.loads((beta_runs / "beta0" / "trl_config.json").read_text())["beta"] == 0.0
    assert all(r.get("kl", 0.0) == 0.0 for r in metrics(beta_runs / "beta0"))


def test_the_reference_forward_runs_only_with_a_kl_term(beta_runs):
    """time/logprobs_s times the no-grad log-prob forwards: the reference model's with beta > 0; with
    beta = 0 and on-policy steps there is none at all (TRL builds no reference model)."""
    with_kl = [r for r in metrics(beta_runs / "default") if "time/logprobs_s" in r]
    without = [r for r in metrics(beta_runs / "beta0") if "time/logprobs_s" in r]
    assert len(with_kl) == len(without) == 4
    assert all(r["time/logprobs_s"] > 0 for r in with_kl) and all(r["time/logprobs_s"] == 0.0 for r in without)
    assert all(0 < r["time/logprobs_s"] + r["time/optimizer_s"] < r["time/training_s"] for r in with_kl)


def test_grpo_keeps_trl_clipping_and_gspo_gets_its_preset(cli, tmp_path, beta_runs, data_dir):
    grpo_config = json.loads((beta_runs / "default" / "trl_config.json").read_text())
    assert (grpo_config["epsilon"], grpo_config["epsilon_high"], grpo_config["importance_sampling_level"]) == (0.2, None, "token")
    out = tmp_path / "gspo"
    grpo(cli, out, recipe="recipes/gspo/tiny-cpu.yaml", data_dir=data_dir)
    config = json.loads((out / "trl_config.json").read_text())
    assert config["importance_sampling_level"] == "sequence"
    assert (config["epsilon"], config["epsilon_high"], config["loss_type"], config["beta"]) == (3e-4, 4e-4, "grpo", 0.0)
    assert config["steps_per_generation"] == 4 * config["gradient_accumulation_steps"]  # off-policy


def test_user_reward_sees_columns_and_long_prompts_are_dropped(cli, tmp_path, data_dir):
    log = tmp_path / "calls.jsonl"
    result = grpo(cli, tmp_path / "run", "training.max_steps=1", "data.max_prompt_length=168", "data.max_drop_fraction=1",
                  env={"REWARD_LOG": str(log)}, data_dir=data_dir)
    calls = [json.loads(line) for line in log.read_text().splitlines()]
    assert calls and "prompts" in calls[0]["keys"] and "trainer_state" in calls[0]["keys"]
    golds = {json.loads(line)["answer"].split("####")[1].strip() for line in (data_dir / "problems.jsonl").read_text().splitlines()}
    assert set(calls[0]["answer"]) <= golds  # gold taken after '####' by the gsm8k template
    line = next(l for l in result.stdout.splitlines() if l.startswith("data.max_prompt_length=168"))
    dropped, total = (int(x) for x in line.split("dropped ")[1].split(" prompts")[0].split(" of "))
    assert 0 < dropped < total == 64, line


def test_report_prints_binned_telemetry_of_two_runs(cli, beta_runs, tmp_path):
    result = cli("report", beta_runs / "default", beta_runs / "beta0", "--bins", "2", "--plot", tmp_path / "t.png")
    assert result.returncode == 0, result.stderr
    text = result.stdout
    assert "| steps | default | beta0 |" in text and "| 1-2 |" in text and "| 3-4 |" in text
    kl_table = text.split("## KL")[1].split("##")[0]
    assert "| 3-4 | " in kl_table and kl_table.count(" - |") == 2  # beta0 has no KL at all
    assert "beta0: beta=0.0, no KL term" in text
    assert (tmp_path / "t.png").stat().st_size > 10_000
    # where each RL step went: generation (with its tokens/s) ... optimizer, one row per run
    step_table = text.split("## where an RL step goes")[1]
    speed = json.loads((beta_runs / "default" / "run_summary.json").read_text())["speed"]
    row = next(line for line in step_table.splitlines() if line.startswith("| default |")).split("|")[2:-1]
    assert len(row) == 7 and all(cell.strip() not in ("", "-") for cell in row)
    assert float(row[2]) == pytest.approx(speed["generation_tokens_per_s"], rel=0.01)
    assert float(row[5]) == pytest.approx(speed["training_s"] - speed["logprobs_s"] - speed["optimizer_s"], rel=0.05, abs=2e-3)


def test_http_reward_service_that_fails_first(cli, tmp_path, data_dir):
    import sys

    sys.path.insert(0, str(HERE.parent / "rewards"))
    from test_http_reward import Scorer

    server = Scorer(fail_first=2, status=503)
    try:
        grpo(cli, tmp_path / "run", "training.max_steps=1",
             f"training.rewards=[{{name: http, url: '{server.url}', retries: 3, backoff: 0.05, api_key_env: SCORER_KEY}}]",
             env={"SCORER_KEY": "sk-e2e-secret"}, data_dir=data_dir)
    finally:
        server.close()
    assert len(server.requests) >= 3  # two failures, then every batch scored
    body = server.requests[-1]
    assert set(body["columns"]) >= {"answer", "question"} and len(body["completions"]) == 8
    record = next(r for r in metrics(tmp_path / "run") if "rewards/http/mean" in r)
    assert record["rewards/http/mean"] >= 0.0
    for path in (tmp_path / "run").rglob("*"):
        if path.is_file() and path.suffix in (".json", ".jsonl", ".yaml", ".md"):
            assert "sk-e2e-secret" not in path.read_text()


def test_shipped_tiny_recipe_says_it_cannot_learn_and_stops_with_a_checkpoint(cli, tmp_path, data_dir):
    """recipes/grpo/tiny-cpu.yaml as shipped (rewards a random model never earns, stop_on
    no_learning_signal); only the window and completion length shortened to keep the test fast."""
    out = tmp_path / "tiny"
    result = cli("train", "--recipe", "recipes/grpo/tiny-cpu.yaml", f"training.output_dir={out}",
                 f"data.datasets[0].name={data_dir / 'problems.jsonl'}", "training.health_window=2",
                 "training.max_completion_length=8")
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    assert "health: no_learning_signal (steps 1-2)" in result.stdout
    assert "stopping at step 2 (training.stop_on: no_learning_signal)" in result.stdout
    # one compact line per logged step, not transformers' dict of every value (which metrics.jsonl keeps)
    assert "step 1/10  loss 0  reward 0 ± 0  kl 0  len 8  lr " in result.stdout
    assert "'completions/mean_length'" not in result.stdout + result.stderr
    summary = json.loads((out / "run_summary.json").read_text())
    assert summary["global_step"] == 2 and summary["stopped_by"] == "no_learning_signal"
    assert [f["name"] for f in summary["health"]] == ["no_learning_signal", "all_truncated"]  # 8 tokens: every answer cut
    assert (out / "checkpoint-2" / "model.safetensors").is_file()  # saved where it stopped
    report = cli("report", str(out))
    assert report.returncode == 0 and "no_learning_signal (steps 1-2)" in report.stdout


def test_learning_run_is_healthy_and_measures_its_speed(beta_runs):
    summary = json.loads((beta_runs / "default" / "run_summary.json").read_text())
    # every completion of the 4 steps hits max_completion_length=16, and a run shorter than its health_window (5)
    # says so: all_truncated's window is capped by the run's length
    assert [(f["name"], f["first_step"], f["last_step"]) for f in summary["health"]] == [("all_truncated", 1, 4)]
    assert summary["stopped_by"] is None
    speed = summary["speed"]
    assert speed["tokens_per_s"] > 0 and speed["samples_per_s"] > 0
    # generation + scoring + training add up to the step time
    assert speed["generation_s"] > 0 and speed["scoring_s"] > 0 and speed["training_s"] > 0
    assert speed["generation_s"] + speed["scoring_s"] + speed["training_s"] == pytest.approx(speed["step_s"], rel=0.01)
    assert 0 < speed["logprobs_s"] + speed["optimizer_s"] < speed["training_s"]  # parts of training time
    assert speed["optimizer_s"] > 0
    records = [r for r in metrics(beta_runs / "default") if "loss" in r]
    assert all(r["speed/tokens_per_s"] > 0 and r["time/generation_s"] > 0 for r in records[1:])
    # tokens/s is TRL's non-padding token count over step time
    tokens = [r["num_tokens"] for r in records]
    assert records[1]["speed/tokens_per_s"] == pytest.approx((tokens[1] - tokens[0]) / (records[1]["step_time"]), rel=0.25)
    assert "health/empty_think_frac" in records[0]


def test_cpu_bf16_generates_in_float32_and_trains_in_bf16(tmp_path, data_dir, repo, monkeypatch):
    """Autocast re-casts every weight for each decoded token (generation 1.46x slower than float32 on
    tiny:qwen2-6m), so a CPU bf16 run generates without it and keeps it for the forward passes
    that compute log-probs and gradients. Checked inside a decoder layer, on every call of one step."""
    import torch

    from posttrain.algorithms.run import build_run
    from posttrain.recipe.load import load_recipe

    monkeypatch.chdir(repo)
    loaded = load_recipe("recipes/grpo/tiny-cpu.yaml", [f"data.datasets[0].name={data_dir / 'problems.jsonl'}",
                                                        f"training.output_dir={tmp_path / 'run'}", "training.max_steps=1",
                                                        "training.bf16=true", "training.save_strategy=no", "training.save_steps=null",
                                                        "training.per_device_train_batch_size=4", "training.num_generations=4",
                                                        "training.max_completion_length=8"])
    run, trainer = build_run(loaded)
    calls, generating = [], [False]
    generate = trainer._generate

    def marked_generate(*args, **kwargs):
        generating[0] = True
        try:
            return generate(*args, **kwargs)
        finally:
            generating[0] = False

    trainer._generate = marked_generate
    layer = trainer.model.model.layers[0]
    layer.register_forward_pre_hook(lambda module, args: calls.append((generating[0], torch.is_grad_enabled(),
                                                                       torch.is_autocast_enabled("cpu"))))
    try:
        trainer.train()
    finally:
        run.lock.release()
    in_generation = {autocast for gen, _, autocast in calls if gen}
    elsewhere = [(grad, autocast) for gen, grad, autocast in calls if not gen]
    assert in_generation == {False}  # every decoded token in float32
    assert any(grad for grad, _ in elsewhere) and all(autocast for _, autocast in elsewhere)  # the loss's pass (and log-probs) in bf16


def test_posttrain_rollouts_train_the_same_run_as_transformers_generate(cli, tmp_path, beta_runs, data_dir):
    """training.rollout_engine=posttrain (the default) against TRL's own model.generate, same seed and
    the same draw rule (posttrain's own draws one uniform per row: the same distribution, other
    samples; generate_draws/ swaps in generate's): the same completions, so every step's reward, KL
    and loss agree; the log says which engine ran, and the run measures its generation tokens/s."""
    result = grpo(cli, tmp_path / "hf", "training.rollout_engine=transformers", data_dir=data_dir)
    assert "rollouts: transformers' generate (training.rollout_engine=transformers)" in result.stdout
    assert "rollouts: posttrain's decoding loop (cpu's default: training.rollout_engine=posttrain)" in (beta_runs / "default.log").read_text()
    grpo(cli, tmp_path / "ours", data_dir=data_dir, env={"PYTHONPATH": str(HERE / "generate_draws")})
    ours, theirs = ([r for r in metrics(out) if "loss" in r] for out in (tmp_path / "ours", tmp_path / "hf"))
    assert len(ours) == len(theirs) == 4
    for a, b in zip(ours, theirs):
        assert a["reward"] == pytest.approx(b["reward"], abs=1e-6)
        assert a["completions/mean_length"] == b["completions/mean_length"]
        assert a["kl"] == pytest.approx(b["kl"], rel=1e-3, abs=1e-7)
        assert a["loss"] == pytest.approx(b["loss"], rel=1e-3, abs=1e-7)
    assert all(r["speed/generation_tokens_per_s"] > 0 for r in ours + theirs)
    summary = json.loads((beta_runs / "default" / "run_summary.json").read_text())
    assert summary["speed"]["generation_tokens_per_s"] > 0
