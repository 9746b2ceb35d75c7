"""A run killed with SIGKILL and started again with the same command ends with the same weights."""

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from safetensors.torch import load_file

pytestmark = pytest.mark.e2e


def command(recipe: str, out: Path, data: Path, *extra: str) -> list[str]:
    return [sys.executable, "-m", "posttrain", "train", "--recipe", recipe, f"training.output_dir={out}",
            f"data.datasets[0].name={data}", "training.save_steps=2", "training.logging_steps=1", *extra]


def kill_after_checkpoint(cmd: list[str], out: Path, repo: Path, step: int) -> None:
    """Start the run, SIGKILL it as soon as checkpoint-`step` is complete (mid-run, no clean-up)."""
    proc = subprocess.Popen(cmd, cwd=repo, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env=os.environ.copy())
    marker = out / f"checkpoint-{step}" / "trainer_state.json"
    deadline = time.time() + 240
    while not marker.is_file():
        assert proc.poll() is None, "the run ended before it could be killed"
        assert time.time() < deadline, "no checkpoint appeared"
        time.sleep(0.05)
    proc.send_signal(signal.SIGKILL)
    proc.wait()


def weights(out: Path) -> dict:
    name = "adapter_model.safetensors" if (out / "adapter_model.safetensors").is_file() else "model.safetensors"
    return load_file(out / name)


@pytest.mark.parametrize("recipe, data_file, extra", [
    ("recipes/sft/tiny-cpu.yaml", "sft.jsonl", ("training.max_steps=8", "training.per_device_train_batch_size=4")),
    ("recipes/grpo/tiny-cpu.yaml", "problems.jsonl", ("training.max_steps=6", "training.rewards=[{name: 'user_rewards:digit_share'}]",
                                                     "training.learning_rate=3e-3", "training.max_completion_length=12")),
], ids=["sft", "grpo"])
def test_sigkill_then_same_command_resumes_to_identical_weights(cli, repo, tmp_path, data_dir, recipe, data_file, extra, monkeypatch):
    monkeypatch.setenv("PYTHONPATH", str(Path(__file__).parent))
    data = data_dir / data_file
    reference = cli(*command(recipe, tmp_path / "straight", data, *extra)[3:])
    assert reference.returncode == 0, reference.stderr[-2000:]

    out = tmp_path / "killed"
    cmd = command(recipe, out, data, *extra)
    kill_after_checkpoint(cmd, out, repo, step=2)
    assert not (out / "run_summary.json").exists()  # it really died mid-run
    # A checkpoint cut off mid-write (the kill can land there) is skipped, never resumed from.
    (out / "checkpoint-999").mkdir()
    (out / "checkpoint-999" / "model.safetensors").write_bytes(b"partial")

    again = subprocess.run(cmd, cwd=repo, capture_output=True, text=True, env=os.environ.copy())
    assert again.returncode == 0, again.stderr[-2000:]
    assert "skipping checkpoint-999: no trainer_state.json" in again.stdout
    assert "resuming from" in again.stdout

    final, expected = weights(out), weights(tmp_path / "straight")
    assert final.keys() == expected.keys()
    for name in expected:
        assert (final[name] == expected[name]).all(), name
    steps = [json.loads(l)["step"] for l in (out / "metrics.jsonl").read_text().splitlines() if "loss" in json.loads(l)]
    assert steps == sorted(set(steps))  # metrics continue without duplicated steps


def test_explicit_incomplete_checkpoint_is_refused(cli, tmp_path, data_dir):
    broken = tmp_path / "run" / "checkpoint-4"
    broken.mkdir(parents=True)
    result = cli("train", "--recipe", "recipes/sft/tiny-cpu.yaml", f"training.output_dir={tmp_path / 'run'}",
                 f"data.datasets[0].name={data_dir / 'sft.jsonl'}", f"training.resume_from_checkpoint={broken}")
    assert result.returncode == 2 and "no trainer_state.json" in result.stderr
