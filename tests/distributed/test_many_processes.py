"""Real multi-process training on CPU (torchrun + gloo), launched the way users launch it.

The runs are shared through module fixtures: one process with batch 16 (the reference), two
processes with batch 8 (`posttrain train --nproc 2`), and two torchrun "nodes" of one process each
that meet on 127.0.0.1. Same seed and data, so the two-process run must reproduce the reference's
loss trajectory and final weights, and the two-node run the two-process one.

Tolerance: the runs differ only in how float32 sums are split and reduced across ranks. Losses and
grad-norms: 1e-5 relative (observed about 1e-7). Weights: 1e-4 absolute on every element
(observed 5e-5): Adam divides each gradient by its own running magnitude, so a rounding-level
difference in a near-zero gradient can move that weight by a visible share of one step (lr 1e-2);
the test also checks that training moved the weights 100x further than that tolerance.
"""

from __future__ import annotations

import json

import pytest
from mp_testing import FAST, REPO, free_port, losses, max_weight_diff, posttrain, start

pytestmark = [pytest.mark.e2e, pytest.mark.slow]

RECIPE = "recipes/sft/tiny-cpu.yaml"
# Both reference runs score held-out items while they train (it changes nothing about training): with two
# processes each answers half the items and the records are gathered.
HELD_OUT = "held_out={task: arithmetic, n: 10, every: 2, max_new_tokens: 6}"
LOSS_RTOL = 1e-5
WEIGHT_ATOL = 1e-4


@pytest.fixture(scope="module")
def one_process(tmp_path_factory, sft_data):
    out = tmp_path_factory.mktemp("one") / "run"
    result = posttrain("train", "--recipe", RECIPE, sft_data, f"training.output_dir={out}", "training.per_device_train_batch_size=16", *FAST,
                       HELD_OUT)
    assert result.returncode == 0, result.stderr[-3000:]
    assert "launching" not in result.stdout  # --nproc 1 (the default) is one plain process
    return out


@pytest.fixture(scope="module")
def two_processes(tmp_path_factory, sft_data):
    out = tmp_path_factory.mktemp("two") / "run"
    result = posttrain("train", "--recipe", RECIPE, "--nproc", "2", sft_data, f"training.output_dir={out}",
                       "training.per_device_train_batch_size=8", *FAST, HELD_OUT)
    assert result.returncode == 0, result.stderr[-3000:]
    return out, result


def test_two_processes_launch_through_torchrun_and_form_one_job(two_processes):
    out, result = two_processes
    assert "launching 2 process(es) on this node: -m torch.distributed.run --nproc-per-node 2 --standalone" in result.stdout
    assert "2 processes (2 on this node), distributed type MULTI_CPU" in result.stdout
    assert result.stdout.count("done: final model in") == 1  # rank 0 alone reports and writes
    records = [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()]
    assert len([r for r in records if "loss" in r]) == 3  # one record per step, not one per rank
    # 64 rows, 2 ranks x 8 rows per step: each rank reads its own half, so 3 steps are 3/4 of an epoch.
    assert records[-1]["epoch"] == pytest.approx(0.75)


def test_two_processes_batch_8_equal_one_process_batch_16(one_process, two_processes, tiny_dir):
    """Invariant 9: N processes x batch B train like one process with batch N*B."""
    out, _ = two_processes
    assert losses(out) == pytest.approx(losses(one_process), rel=LOSS_RTOL)
    assert losses(out, "grad_norm") == pytest.approx(losses(one_process, "grad_norm"), rel=LOSS_RTOL)
    assert max_weight_diff(out, one_process) < WEIGHT_ATOL
    assert max_weight_diff(one_process, tiny_dir) > 100 * WEIGHT_ATOL  # the runs really trained


def test_two_processes_score_the_held_out_items_as_one_process_does(one_process, two_processes):
    """Each rank answers its share of the items; gathered, the scores and every answer are the one process's."""
    out, result = two_processes
    held = lambda run: [{k: v for k, v in r.items() if not k.startswith("time/")}
                        for r in map(json.loads, (run / "metrics.jsonl").read_text().splitlines()) if "held_out/strict" in r]
    assert [r["step"] for r in held(out)] == [0, 2, 3] and held(out) == held(one_process)
    for step in (0, 2, 3):
        answers = lambda run: [(r["id"], r["completion"]) for r in map(json.loads, (run / "held_out" / f"step-{step}.jsonl").read_text().splitlines())]
        assert len(answers(out)) == 10 and answers(out) == answers(one_process)
    assert result.stdout.count("held-out step 3:") == 1  # rank 0 alone reports


# A stand-in for SLURM's srun: start the job step's command once per "node" on this machine, with the
# variables srun sets (SLURM_NODEID, SLURM_NNODES), and fail if any node fails. scontrol names the head.
FAKE_SRUN = """#!/bin/bash
while [[ "$1" == --* ]]; do shift; done
pids=()
for node in $(seq 0 $((SLURM_NNODES - 1))); do SLURM_NODEID=$node "$@" > "$SRUN_LOGS/node$node.log" 2>&1 & pids+=($!); done
rc=0; for p in "${pids[@]}"; do wait $p || rc=1; done; exit $rc
"""
FAKE_SCONTROL = "#!/bin/bash\necho 127.0.0.1\n"


def test_two_nodes_on_one_machine_equal_two_processes_on_one_node(tmp_path, sft_data, two_processes):
    """examples/slurm/train.sbatch on 2 "nodes" of one process each: two torchruns rendezvous on 127.0.0.1."""
    import os
    import subprocess
    import sys

    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    for name, text in (("srun", FAKE_SRUN), ("scontrol", FAKE_SCONTROL)):
        (bin_dir / name).write_text(text)
        (bin_dir / name).chmod(0o755)
    out = tmp_path / "nodes"
    env = {**os.environ, "OMP_NUM_THREADS": "1", "PATH": f"{bin_dir}:{os.environ['PATH']}", "SLURM_NNODES": "2",
           "SLURM_JOB_NODELIST": "node[0-1]", "SRUN_LOGS": str(tmp_path), "GPUS_PER_NODE": "1",
           "MASTER_PORT": str(free_port()), "POSTTRAIN": f"{sys.executable} -m posttrain"}
    job = subprocess.run(["bash", "examples/slurm/train.sbatch", RECIPE, sft_data, f"training.output_dir={out}",
                          "training.per_device_train_batch_size=8", *FAST], cwd=REPO, env=env, capture_output=True, text=True, timeout=300)
    logs = [(tmp_path / f"node{i}.log").read_text() for i in (0, 1)]
    assert job.returncode == 0, logs[0][-2000:] + logs[1][-2000:]
    assert "--nproc-per-node 1 --nnodes 2 --node-rank 0 --master-addr 127.0.0.1" in logs[0]
    assert "--node-rank 1" in logs[1]
    assert "2 processes (1 on this node), distributed type MULTI_CPU" in logs[0]
    reference, _ = two_processes
    assert losses(out) == pytest.approx(losses(reference), rel=LOSS_RTOL)
    assert max_weight_diff(out, reference) < WEIGHT_ATOL


@pytest.mark.parametrize("backend", ["zero2", "zero3"])
def test_deepspeed_zero_trains_like_ddp_on_cpu(backend, tmp_path, sft_data, two_processes):
    """DeepSpeed ZeRO-2/3 run on CPU (DeepSpeed's CPU accelerator over gloo): same numbers as DDP, and no C++ build of
    DeepSpeed's shared-memory all-reduce (only inference uses it): an empty extensions folder stays empty.
    (FSDP cannot run on CPU through the trainer; see test_backends.py.)"""
    pytest.importorskip("deepspeed")
    out = tmp_path / backend
    extensions = tmp_path / "torch_extensions"  # where torch would build (or find) the op
    result = posttrain("train", "--recipe", RECIPE, "--nproc", "2", sft_data, f"training.output_dir={out}",
                       "training.per_device_train_batch_size=8", f"training.distributed={backend}", *FAST,
                       env={"TORCH_EXTENSIONS_DIR": str(extensions)})
    assert result.returncode == 0, result.stderr[-3000:]
    assert not extensions.exists() or not any(extensions.rglob("*shm*")), "DeepSpeed built its inference all-reduce"
    assert "distributed type DEEPSPEED" in result.stdout
    reference, _ = two_processes
    assert losses(out) == pytest.approx(losses(reference), rel=1e-4)
    assert max_weight_diff(out, reference) < 1e-4  # the full model is gathered into one model.safetensors


@pytest.mark.parametrize("recipe, overrides, train_rows", [
    # the recipe holds out 20% of examples/data/preferences.jsonl (200 pairs) for evaluation every 5 steps: 160 train
    ("recipes/dpo/tiny-cpu.yaml", ["training.per_device_train_batch_size=4"], 160),
    ("recipes/grpo/tiny-cpu.yaml", ["training.per_device_train_batch_size=4", "training.max_completion_length=8"], None),
])
def test_dpo_and_grpo_on_two_processes(recipe, overrides, train_rows, tmp_path):
    out = tmp_path / "run"
    result = posttrain("train", "--recipe", recipe, "--nproc", "2", f"training.output_dir={out}", "training.max_steps=2",
                       "training.logging_steps=1", "training.save_steps=1000", *overrides)
    assert result.returncode == 0, result.stderr[-3000:]
    assert "2 processes (2 on this node), distributed type MULTI_CPU" in result.stdout
    assert result.stdout.count("done: final model in") == 1
    records = [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()]
    assert len([r for r in records if "loss" in r]) == 2
    if train_rows:  # 2 steps x 2 ranks x 4 pairs: each rank reads its own share of the data
        assert records[-1]["epoch"] == pytest.approx(2 * 2 * 4 / train_rows)


def test_sigkill_of_one_rank_then_the_same_command_resumes_on_all_ranks(tmp_path, sft_data):
    import os
    import signal
    import time
    from pathlib import Path

    out = tmp_path / "killed"
    args = ["train", "--recipe", RECIPE, "--nproc", "2", sft_data, f"training.output_dir={out}", "training.per_device_train_batch_size=8",
            "training.max_steps=16", "training.save_steps=2", "training.logging_steps=1", "training.max_length=64", "training.seed=0"]
    first = start(*args)
    deadline = time.time() + 240
    while not (out / "checkpoint-2" / "trainer_state.json").is_file():
        assert first.poll() is None and time.time() < deadline, "the run ended before its first checkpoint"
        time.sleep(0.05)
    rank1 = [int(p) for p in os.listdir("/proc") if p.isdigit() and _is_rank(Path("/proc", p), str(out), "1")]
    assert len(rank1) == 1
    os.kill(rank1[0], signal.SIGKILL)
    first.communicate(timeout=120)
    assert first.returncode != 0  # torchrun noticed and stopped the job
    steps = sorted(int(p.name.split("-")[1]) for p in out.glob("checkpoint-*"))
    assert steps and max(steps) < 16

    second = posttrain(*args)
    assert second.returncode == 0, second.stderr[-3000:]
    assert "resuming from" in second.stdout
    summary = json.loads((out / "run_summary.json").read_text())
    assert summary["global_step"] == 16
    logged = [r["step"] for r in map(json.loads, (out / "metrics.jsonl").read_text().splitlines()) if "loss" in r]
    assert logged == list(range(1, 17))  # every step once: nothing lost, nothing repeated


def _is_rank(proc, output_dir: str, rank: str) -> bool:
    try:
        environ = (proc / "environ").read_bytes().split(b"\0")
        cmdline = (proc / "cmdline").read_bytes()
    except OSError:
        return False
    return f"RANK={rank}".encode() in environ and output_dir.encode() in cmdline and b"torch.distributed.run" not in cmdline


def test_secret_overrides_reach_every_rank_and_no_command_line(tmp_path):
    """`--nproc` hands the ranks their secret overrides (here an http reward's header) in the environment:
    any user can read a process's command line (ps), only its owner its environment. The test watches
    every process's command line during the run and checks the header the scoring service received."""
    import sys
    import time
    from pathlib import Path

    sys.path.insert(0, str(REPO / "tests" / "rewards"))
    from test_http_reward import Scorer

    secret = "Bearer sk-argv-0123456789abcdef"
    server = Scorer()
    try:
        proc = start("train", "--recipe", "recipes/grpo/tiny-cpu.yaml", "--nproc", "2", f"training.output_dir={tmp_path / 'run'}",
                     "training.max_steps=1", "training.per_device_train_batch_size=4", "training.max_completion_length=8",
                     "training.save_steps=1000",
                     f"training.rewards=[{{name: http, url: '{server.url}', headers: {{Authorization: '{secret}'}}}}]")
        ranks_seen, leaks = set(), []
        while proc.poll() is None:
            for cmdline in Path("/proc").glob("[0-9]*/cmdline"):
                try:
                    words = cmdline.read_bytes().split(b"\0")
                except OSError:
                    continue  # the process ended meanwhile
                # the user's own command (`--nproc`, until it execs torchrun) holds what the user typed;
                # posttrain answers for the processes it starts: torchrun and the ranks
                if b"posttrain" in words and b"train" in words and b"--nproc" not in words:
                    ranks_seen.add(cmdline.parent.name)
                    leaks += [w for w in words if secret.encode() in w]
            time.sleep(0.05)
        stdout = proc.stdout.read()
    finally:
        server.close()
    assert proc.returncode == 0, stdout[-3000:]
    assert len(ranks_seen) >= 3, ranks_seen  # torchrun and its two ranks were watched
    assert leaks == []
    assert "training.rewards=***" in stdout and secret not in stdout
    assert server.headers and {h["Authorization"] for h in server.headers} == {secret}  # every rank scored with it
