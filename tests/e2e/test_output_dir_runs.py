"""One run owns its output_dir, and a resumed run continues the recipe its checkpoint was trained with.

Real CLI processes on a tiny model: a second run started while the first holds the folder exits 2
naming the holder; a killed holder leaves a stale lock that the next run takes over; resuming with a
longer schedule works and is printed, any other change is refused unless forced; every start is kept
in recipe_history/; a torn last line in metrics.jsonl does not break the resume.
"""

import json
import os
import shlex
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

pytestmark = pytest.mark.e2e


def train(out: Path, data: Path, *extra: str) -> list[str]:
    return [sys.executable, "-m", "posttrain", "train", "recipes/sft/tiny-cpu.yaml", f"training.output_dir={out}",
            f"data.datasets[0].name={data}", "training.logging_steps=1", *extra]


def run(cli, cmd: list[str]) -> subprocess.CompletedProcess:
    """The command (python -m posttrain ...) forked from the suite's pre-imported CLI (tests/cli_zygote.py): ~3 s a run, not ~9."""
    assert cmd[1:3] == ["-m", "posttrain"]
    return cli(*cmd[3:])


def test_one_run_per_output_dir_and_resume_continues_the_same_recipe(repo, tmp_path, data_dir, cli):
    out = tmp_path / "run"
    data = data_dir / "sft.jsonl"
    first = subprocess.Popen(train(out, data, "training.max_steps=100000", "training.save_steps=100000"), cwd=repo,
                             stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env=os.environ.copy())
    lock = out / ".posttrain.lock"
    deadline = time.time() + 120
    try:
        while not (lock.is_file() and f'"pid": {first.pid}' in lock.read_text()):
            assert first.poll() is None and time.time() < deadline, "the first run never took the lock"
            time.sleep(0.1)
        while not (out / "metrics.jsonl").is_file():  # it is training
            assert first.poll() is None and time.time() < deadline
            time.sleep(0.1)
        before = {p.name for p in out.iterdir() if not p.name.startswith("checkpoint-")}

        second = run(cli, train(out, data, "training.max_steps=2"))
        assert second.returncode == 2, second.stderr[-2000:]
        assert f"pid {first.pid} on host {socket.gethostname()}" in second.stderr and "is in use by another run" in second.stderr
        assert f"stop it with `kill -INT {first.pid}`" in second.stderr  # the fix it suggests (Ctrl-C's path: tests/e2e/test_run_folder.py)
        assert "Traceback" not in second.stderr
        assert first.poll() is None  # the holder was not disturbed
        assert {p.name for p in out.iterdir() if not p.name.startswith("checkpoint-")} == before
        assert len(list((out / "recipe_history").glob("*.yaml"))) == 1  # the second run wrote nothing
    finally:
        first.send_signal(signal.SIGKILL)  # dies holding the lock: a stale lock file remains
        first.wait()

    base = ("training.save_steps=2", "training.per_device_train_batch_size=4")
    third = run(cli, train(out, data, "training.max_steps=2", "training.resume_from_checkpoint=false", *base))
    assert third.returncode == 0, third.stderr[-2000:]
    assert f"previous run in this folder (pid {first.pid}" in third.stdout and "taking over" in third.stdout
    assert lock.read_text() == ""  # released on a clean exit
    assert (out / "checkpoint-2" / "posttrain_recipe.yaml").is_file()
    # starting over moved the killed run's files aside, whole: its start is in previous-*/, not in this run's history
    [previous] = out.glob("previous-*")
    assert len(list((previous / "recipe_history").glob("*.yaml"))) == 1 and (previous / "metrics.jsonl").is_file()
    assert "moved to" in third.stdout
    # A SIGKILL mid-write leaves a torn last line; resume must read past it.
    with (out / "metrics.jsonl").open("a") as f:
        f.write('{"step": 3, "loss": 2.7')

    longer = run(cli, train(out, data, "training.max_steps=4", "training.resume_from_checkpoint=auto", *base))
    assert longer.returncode == 0, longer.stderr[-2000:]
    assert "resuming from" in longer.stdout and "training.max_steps: 2 -> 4" in longer.stdout
    assert "training.resume_from_checkpoint: False -> 'auto'" in longer.stdout  # printed, allowed
    assert "dropped 1 unreadable line" in longer.stdout
    records = [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()]
    assert max(r["step"] for r in records) == 4

    recipe_before = (out / "resolved_recipe.yaml").read_text()
    changed = run(cli, train(out, data, "training.max_steps=6", "training.learning_rate=0.01", "data.datasets[0].max_samples=32", *base))
    assert changed.returncode == 2, changed.stderr[-2000:]
    assert "training.learning_rate: 0.003 -> 0.01" in changed.stderr and "data.datasets[0].max_samples" in changed.stderr
    assert "resume_from_checkpoint=force" in changed.stderr and "Traceback" not in changed.stderr
    assert (out / "resolved_recipe.yaml").read_text() == recipe_before  # nothing overwritten
    assert len(list((out / "recipe_history").glob("*.yaml"))) == 2

    # the fix the refusal prints, run as printed
    lines = changed.stderr.splitlines()
    suggested = shlex.split(next(lines[i + 1] for i, line in enumerate(lines) if "continue the old run with the new values" in line))
    assert suggested[0] == "posttrain" and "training.resume_from_checkpoint=force" in suggested
    forced = run(cli, [sys.executable, "-m", *suggested])
    assert forced.returncode == 0, forced.stderr[-2000:]
    assert "warning: resuming checkpoint-4 with a changed recipe" in forced.stdout and "training.learning_rate" in forced.stdout
    # ... and the forced learning rate is the one that trains (the checkpoint's optimizer state carried the old one):
    # step 5 of a 6-step linear decay from 0.01
    lr = {r["step"]: r["learning_rate"] for r in map(json.loads, (out / "metrics.jsonl").read_text().splitlines()) if "learning_rate" in r}
    assert lr[5] == pytest.approx(0.01 * (6 - 4) / 6) and lr[6] == pytest.approx(0.01 * (6 - 5) / 6)
    history = sorted((out / "recipe_history").glob("*.yaml"))
    assert [p.name.split("-from-step-")[1] for p in history] == ["0.yaml", "2.yaml", "4.yaml"]
    assert "learning_rate: 0.003" in history[0].read_text() and "learning_rate: 0.01" in history[2].read_text()
    assert json.loads(history[2].with_suffix(".trl_config.json").read_text())["learning_rate"] == 0.01
