"""A run folder you can trust, through the real CLI on tiny:qwen2-1m (three short trainings, the
rest answered before torch loads):

- a finished run re-run with the same recipe says "already complete at step N", exits 0 and
  changes no file (names, sizes and modification times compared);
- a recipe the checkpoint cannot continue is refused with commands that work: switching a full run
  to LoRA is not offered `force` (its optimizer state cannot fit) and `force` itself is refused; the
  suggested start-over command is then run as printed: the old run moves to previous-<time>/ and
  nothing of it mixes with the new one;
- Ctrl-C (SIGINT) saves a checkpoint at the current step, exits 130 and prints the resume command;
  that command, run as printed, continues with the learning-rate schedule of the recipe's max_steps
  (a larger max_steps than the finished run's: the schedule a run planned for it has from there on);
- run_summary.json covers the whole run: every segment listed, steps, loss and wall time over all.
"""

import json
import os
import shlex
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

pytestmark = pytest.mark.e2e

LR = 0.003  # recipes/sft/tiny-cpu.yaml, linear decay without warmup


def argv(out: Path, data: Path, *extra: str) -> list[str]:
    return ["train", "recipes/sft/tiny-cpu.yaml", f"training.output_dir={out}", f"data.datasets[0].name={data}",
            "training.logging_steps=1", "training.save_steps=100", "training.per_device_train_batch_size=4", *extra]




def suggested(text: str, marker: str) -> list[str]:
    """The `posttrain ...` command printed on the line after `marker`, as argv after `posttrain`."""
    lines = text.splitlines()
    line = next(lines[i + 1] for i, l in enumerate(lines) if marker in l)
    words = shlex.split(line)
    assert words[0] == "posttrain", line
    return words[1:]


def snapshot(folder: Path) -> dict:
    return {str(p.relative_to(folder)): (p.stat().st_mtime_ns, p.stat().st_size) for p in folder.rglob("*")}


def records(out: Path) -> list[dict]:
    return [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()]


def test_finished_stays_finished_starting_over_starts_over_and_ctrl_c_keeps_the_work(cli, repo, tmp_path, data_dir):
    out, data = tmp_path / "run", data_dir / "sft.jsonl"
    first = cli(*argv(out, data, "training.max_steps=2"))
    assert first.returncode == 0, first.stderr[-2000:]
    assert json.loads((out / "run_summary.json").read_text())["state"] == "finished"
    for noise in ("Setting accelerator to CPU", "Writing model shards", "Loading weights", "FutureWarning", "gloo processes"):
        assert noise not in first.stdout + first.stderr, noise  # the libraries' routine output is off without --verbose
    assert "training.use_cpu = True  (posttrain at start-up: cpu: one process)" in first.stdout
    # The run card: posttrain's, not TRL's stock one, and a model card the hub can read.
    from huggingface_hub import ModelCard

    card = ModelCard.load(out / "README.md")
    assert card.data.library_name == "transformers" and "sft" in card.data.tags and card.data.base_model is None  # a local base: no hub id
    for text in ("tiny:qwen2-1m", "| algorithm | sft |", "| steps | 2 ", "kept 64 of 64 rows", "## Final metrics", "| loss |",
                 "No health flag was raised.", "## Reproduce", f"training.output_dir={out}"):
        assert text in card.text, text
    assert "fine-tuned version of [None]" not in card.text
    # File modes: the weights are readable like every other file (safetensors wrote them 0600).
    modes = {str(p.relative_to(out)): p.stat().st_mode & 0o777 for p in out.rglob("*") if p.is_file() and p.name != ".posttrain.lock"}
    umask = os.umask(0)
    os.umask(umask)
    expected = 0o666 & ~umask  # 0o644 under the usual umask 022
    assert set(modes.values()) == {expected}, {k: oct(v) for k, v in modes.items() if v != expected}

    # Finished: the same command does nothing, fast, and touches no file (not even the lock).
    before = snapshot(out)
    again = cli(*argv(out, data, "training.max_steps=2"))
    assert again.returncode == 0, again.stderr[-2000:]
    assert "already complete at step 2" in again.stdout
    assert snapshot(out) == before
    checked = cli("validate", *argv(out, data, "training.max_steps=2")[1:])  # validate says what train would do
    assert checked.returncode == 0 and "# output_dir: " in checked.stdout and "already complete at step 2" in checked.stdout

    # Full -> LoRA: force is not offered, and refused when asked for, before anything loads.
    lora = argv(out, data, "training.max_steps=2", "model.use_lora=true")
    refused = cli(*lora)
    assert refused.returncode == 2 and "model.use_lora: False -> True" in refused.stderr
    assert "resume_from_checkpoint=force\n" not in refused.stderr and "Traceback" not in refused.stderr
    forced = cli(*lora, "training.resume_from_checkpoint=force")
    assert forced.returncode == 2 and "cannot be continued" in forced.stderr and "Traceback" not in forced.stderr
    assert cli("validate", *lora[1:]).returncode == 2  # and validate refuses it as train does
    assert snapshot(out) == before

    # The suggested fix, run as printed: start over; the old run moves aside whole.
    over = cli(*suggested(forced.stderr, "start over"))
    assert over.returncode == 0, over.stderr[-2000:]
    [previous] = out.glob("previous-*")
    assert "moved to" in over.stdout and str(previous) in over.stdout
    assert (previous / "model.safetensors").is_file() and (previous / "checkpoint-2" / "optimizer.pt").is_file()
    assert json.loads((previous / "run_summary.json").read_text())["global_step"] == 2
    assert (out / "adapter_model.safetensors").is_file() and not (out / "model.safetensors").exists()
    assert [r["step"] for r in records(out) if "loss" in r] == [1, 2]  # this run's records only
    assert len(list((out / "recipe_history").glob("*.yaml"))) == 1
    assert ModelCard.load(out / "README.md").data.library_name == "peft"
    # The plain re-run now finds the new run complete, not the old one.
    assert "already complete at step 2" in cli(*lora).stdout

    # A longer schedule continues; Ctrl-C saves a checkpoint where it is and says how to resume.
    longer = argv(out, data, "training.max_steps=10", "model.use_lora=true")
    # as a run in a terminal has it: Ctrl-C not ignored, even when the suite itself runs under nohup (which a run keeps)
    proc = subprocess.Popen([sys.executable, "-m", "posttrain", *longer], cwd=repo, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True, env=os.environ.copy(), preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))
    deadline = time.time() + 240
    while not any(r.get("step", 0) >= 3 and "loss" in r for r in records(out)):
        assert proc.poll() is None and time.time() < deadline, "the continued run ended before it could be interrupted"
        time.sleep(0.02)
    proc.send_signal(signal.SIGINT)
    stdout, stderr = proc.communicate(timeout=120)
    assert proc.returncode == 130, stderr[-2000:]
    [stopped] = [int(p.name.split("-")[1]) for p in out.glob("checkpoint-*") if p.name != "checkpoint-2"]
    assert 3 <= stopped < 10 and f"interrupted (SIGINT) at step {stopped}" in stdout
    assert json.loads((out / "run_summary.json").read_text())["global_step"] == 2  # the summary is the finished run's until the end

    resumed = cli(*suggested(stdout, "Resume with:"))
    assert resumed.returncode == 0, resumed.stderr[-2000:]
    assert f"resuming from {out / f'checkpoint-{stopped}'}" in resumed.stdout
    logged = {r["step"]: r for r in records(out) if "loss" in r}
    assert sorted(logged) == list(range(1, 11))
    # The schedule: steps 3..10 have what a 10-step linear schedule has there (no zero-LR step after the 2-step run's end).
    for step in range(3, 11):
        assert logged[step]["learning_rate"] == pytest.approx(LR * (10 - (step - 1)) / 10), step

    summary = json.loads((out / "run_summary.json").read_text())
    segments = summary["segments"]
    assert [(s["from_step"], s["to_step"], s["ended"]) for s in segments] == [
        (0, 2, "finished"), (2, stopped, "interrupted (SIGINT)"), (stopped, 10, "finished")]
    assert summary["global_step"] == summary["steps_trained"] == 10
    assert summary["wall_seconds"] == pytest.approx(sum(s["wall_seconds"] for s in segments), abs=0.02)
    assert summary["train_loss"] == pytest.approx(sum(logged[s]["loss"] for s in logged) / 10)
    assert segments[1]["train_loss"] == pytest.approx(sum(logged[s]["loss"] for s in range(3, stopped + 1)) / (stopped - 2))
