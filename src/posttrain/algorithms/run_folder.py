"""The run folder's state, and what `posttrain train` does in each.

A run folder (training.output_dir) is in one of four states:

- **new**: no run in it yet (missing, empty, or the leftovers of an attempt that saved nothing);
- **running**: another process holds its lock (`.posttrain.lock`, see output_lock.py): refused;
- **interrupted**: it holds a complete `checkpoint-N` newer than any finished summary (Ctrl-C,
  SIGTERM, a crash, SIGKILL): `resume_from_checkpoint: auto` continues from the newest one;
- **finished**: `run_summary.json` says the run finished at step N and no checkpoint is newer.

Re-running a finished run with the same recipe changes nothing: "already complete at step N",
exit 0. A schedule that ends later (a larger `max_steps` or `num_train_epochs`) continues from the
checkpoint at step N. Starting over (`resume_from_checkpoint: false`) in a folder that holds a run
first moves that run, whole, into `output_dir/previous-<time>/`, so two runs' checkpoints, metrics
and summaries never mix and nothing trained is deleted.

Standard library and yaml only: the CLI answers "already complete" before torch is imported.
"""

from __future__ import annotations

import datetime
import json
import shlex
from dataclasses import dataclass
from pathlib import Path

from posttrain.checkpoints import checkpoint_dirs
from posttrain.errors import UserError

from .output_lock import LOCK_NAME
from .recipe_history import checkpoint_recipe, recipe_changes, render
from .resume import newest_complete_checkpoint

NEW, INTERRUPTED, FINISHED = "new", "interrupted", "finished"
SUMMARY = "run_summary.json"
SEGMENTS_IN_CHECKPOINT = "posttrain_segments.json"  # the run's segments up to this checkpoint
PREVIOUS = "previous-"  # output_dir/previous-<time>/: an earlier run, moved aside when a new one started over

# Keys that change which parameters train, or how their optimizer state is laid out: a checkpoint's
# optimizer state cannot be loaded into a run that differs in them (torch refuses the parameter
# groups), so `resume_from_checkpoint: force` is refused for them instead of crashing in the load.
STRUCTURAL = ("model.base_model_name", "model.use_lora", "model.lora_r", "model.lora_target_modules",
              "model.lora_modules_to_save", "model.freeze_vision_tower", "training.optim", "training.optim_target_modules")


@dataclass
class FolderState:
    state: str  # NEW, INTERRUPTED or FINISHED (RUNNING is the lock's to say)
    step: int = 0  # finished: the step it finished at; interrupted: the newest complete checkpoint's
    checkpoint: Path | None = None  # the newest complete checkpoint, if any
    summary: dict | None = None  # run_summary.json of a finished run

    def describe(self) -> str:
        if self.state == FINISHED:
            return f"finished at step {self.step}"
        if self.state == INTERRUPTED:
            return f"interrupted, resumable from {self.checkpoint.name}"
        return "new"


def read_summary(output_dir: Path) -> dict | None:
    try:
        summary = json.loads((Path(output_dir) / SUMMARY).read_text())
    except (OSError, ValueError):
        return None
    if not isinstance(summary, dict) or not isinstance(summary.get("global_step"), int):
        return None
    return summary


def folder_state(output_dir: Path) -> FolderState:
    """What output_dir holds, from its files alone (no lock taken, nothing written)."""
    output_dir = Path(output_dir)
    checkpoint, _ = newest_complete_checkpoint(output_dir)
    newest = _step(checkpoint)
    summary = read_summary(output_dir)
    if summary is not None and summary["global_step"] >= newest and summary.get("state", FINISHED) == FINISHED:
        return FolderState(FINISHED, summary["global_step"], checkpoint, summary)
    if checkpoint is not None:
        return FolderState(INTERRUPTED, newest, checkpoint, summary)
    return FolderState(NEW)


def running_holder(output_dir: Path) -> str | None:
    """The run that holds output_dir's lock right now, read without taking it: the lock file names a
    process of this host that is alive (a record left by a killed run is stale, not running)."""
    import os
    import socket

    try:
        record = json.loads((Path(output_dir) / LOCK_NAME).read_text() or "{}")
    except (OSError, ValueError):
        return None
    if not isinstance(record, dict) or record.get("host") != socket.gethostname() or not isinstance(record.get("pid"), int):
        return None
    try:
        os.kill(record["pid"], 0)
    except ProcessLookupError:
        return None
    except PermissionError:  # alive, another user's
        pass
    return f"pid {record['pid']}, started {record.get('started')}: {record.get('command')}"


def holds_a_run(output_dir: Path) -> bool:
    """Whether output_dir holds (part of) an earlier posttrain run: its recipe, metrics or checkpoints."""
    output_dir = Path(output_dir)
    return any((output_dir / name).exists() for name in ("resolved_recipe.yaml", "metrics.jsonl", SUMMARY, "recipe_history")) \
        or bool(checkpoint_dirs(output_dir))


def move_aside(output_dir: Path) -> Path:
    """Move everything of the earlier run (all but the lock and earlier previous-* folders) into
    output_dir/previous-<time>/; returns that folder."""
    output_dir = Path(output_dir)
    stamp = datetime.datetime.now().strftime("%Y%m%dT%H%M%S")
    target, n = output_dir / f"{PREVIOUS}{stamp}", 1
    while target.exists():
        n += 1
        target = output_dir / f"{PREVIOUS}{stamp}-{n}"
    target.mkdir()
    for path in sorted(output_dir.iterdir()):
        if path == target or path.name == LOCK_NAME or (path.is_dir() and path.name.startswith(PREVIOUS)):
            continue
        path.rename(target / path.name)
    return target


def command_with(argv: list[str], key: str, value: str | None) -> str:
    """`posttrain ARGV` with the override `key=value` set (replacing one given), or removed when value
    is None: the command a message tells the user to run."""
    kept = [a for a in argv if not a.startswith(f"{key}=")]
    if value is not None:
        kept.append(f"{key}={value}")
    return shlex.join(["posttrain", *kept])


def _step(checkpoint: Path | None) -> int:
    if checkpoint is None:
        return 0
    try:
        return int(json.loads((checkpoint / "trainer_state.json").read_text())["global_step"])
    except (OSError, ValueError, KeyError, TypeError):
        return 0


def _schedule(recipe: dict) -> tuple:
    training = recipe.get("training") or {}
    # an RFT run's epochs are its rounds (recipe/rft_section.py: one epoch per round; num_train_epochs is refused there)
    return training.get("max_steps"), training.get("num_train_epochs", training.get("rounds"))


def extends(old: dict, new: dict, finished_at: int) -> bool:
    """Whether the new recipe's schedule ends after the step a finished run ended at.

    With max_steps > 0 that is a max_steps past both the step it finished at and the old recipe's
    max_steps (a run that stopped early, on a health flag or early stopping, stays stopped under the
    same recipe). An epoch-based schedule (max_steps <= 0) continues when num_train_epochs grew: the
    steps per epoch are only known once the data is read.
    """
    new_steps, new_epochs = _schedule(new)
    old_steps, old_epochs = _schedule(old)
    if isinstance(new_steps, int) and new_steps > 0:
        return new_steps > finished_at and not (isinstance(old_steps, int) and new_steps <= old_steps)
    if isinstance(old_steps, int) and old_steps > 0:  # the finished run counted steps, the new one epochs
        return True
    return isinstance(new_epochs, (int, float)) and isinstance(old_epochs, (int, float)) and new_epochs > old_epochs


def check_recipe(checkpoint: Path, output_dir: Path, new: dict, mode, argv: list[str], log=print) -> None:
    """Refuse to continue `checkpoint` under a different recipe (unless forced, and then only when
    its optimizer state still fits); print schedule changes. Every fix it suggests is a command."""
    old, where = checkpoint_recipe(checkpoint, output_dir)
    if old is None:
        log(f"note: {checkpoint} carries no recipe to compare with; resuming as asked")
        return
    allowed, refused = recipe_changes(old, new)
    if allowed:
        log(f"changed since {checkpoint.name} (allowed on resume):\n{render(allowed)}")
    if not refused:
        return
    structural = [row for row in refused if row[0] in STRUCTURAL]
    key = "training.resume_from_checkpoint"
    over = (f"  start over (the run in {output_dir} moves to {output_dir}/{PREVIOUS}<time>/, nothing is deleted):\n"
            f"    {command_with(argv, key, 'false')}\n")
    if structural:
        what = "cannot be continued" if mode == "force" else "was trained with another recipe"
        others = [row for row in refused if row not in structural]
        raise UserError(
            f"{key}: {checkpoint} {what} ({where}): these keys change which parameters train, so its optimizer "
            f"state does not fit the new model (resume_from_checkpoint=force cannot help):\n{render(structural)}\n"
            + (f"and these differ too:\n{render(others)}\n" if others else "") +
            f"Fix it with one of:\n{over}"
            f"  or keep that run and give the new one another training.output_dir=DIR,\n"
            f"  or restore the keys above to continue the old run.")
    if mode != "force":
        raise UserError(
            f"{key}: {checkpoint} was trained with another recipe ({where}); these keys differ:\n{render(refused)}\n"
            f"Only the schedule (max_steps, num_train_epochs, save/logging/eval cadence), tracking, s3 and "
            f"activation_checkpointing may change on resume. Fix it with one of:\n{over}"
            f"  continue the old run with the new values (its weights and optimizer state, the changed keys from here on):\n"
            f"    {command_with(argv, key, 'force')}\n"
            f"  or restore the keys above, or give the new run another training.output_dir=DIR.")
    log(f"warning: resuming {checkpoint.name} with a changed recipe ({key}=force):\n{render(refused)}")


def finished_verdict(output_dir: Path, new: dict, mode, argv: list[str], log=print, remote: bool | None = None) -> str | None:
    """For a finished run folder: "already complete at step N ..." when this recipe asks for nothing
    more (the caller exits 0 and changes nothing), None when it should continue or the folder is not
    finished. A recipe that may not continue this run raises UserError (exit 2).

    remote: whether the checkpoint to continue from may be in S3 instead of output_dir (default: the
    recipe has an s3 section); the run then looks there before refusing."""
    if mode not in ("auto", "force"):
        return None
    state = folder_state(output_dir)
    if state.state != FINISHED:
        return None
    old_where = state.checkpoint if state.checkpoint is not None else output_dir
    old, _ = checkpoint_recipe(old_where, output_dir)
    if state.checkpoint is not None:
        check_recipe(state.checkpoint, output_dir, new, mode, argv, log=lambda _msg: None)
    if old is not None and extends(old, new, state.step):
        if remote is None:
            remote = bool(new.get("s3"))
        if (state.checkpoint is None or _step(state.checkpoint) != state.step) and not remote:
            saved = f"its newest checkpoint is {state.checkpoint.name}" if state.checkpoint is not None else "it saved no checkpoint"
            raise UserError(
                f"training.output_dir {str(output_dir)!r}: the run there finished at step {state.step}, but {saved}, so a "
                f"longer schedule cannot continue it. Start over (the finished run moves to {output_dir}/{PREVIOUS}<time>/):\n"
                f"    {command_with(argv, 'training.resume_from_checkpoint', 'false')}")
        return None
    stopped = (state.summary or {}).get("stopped_by")
    why = f"stopped by training.stop_on: {stopped}" if stopped else "run_summary.json"
    return (f"{output_dir}: already complete at step {state.step} ({why}); nothing to do. A larger "
            f"training.max_steps continues it; training.resume_from_checkpoint=false starts over (the finished run "
            f"moves to {PREVIOUS}<time>/).")


def load_progress(checkpoint: Path | None) -> dict:
    """What the run did up to `checkpoint` (written into every checkpoint by RunSegments): its
    segments so far and the speed monitor's running totals; empty for a fresh start."""
    if checkpoint is None:
        return {"segments": []}
    try:
        progress = json.loads((checkpoint / SEGMENTS_IN_CHECKPOINT).read_text())
    except (OSError, ValueError):
        progress = None
    if not isinstance(progress, dict) or not isinstance(progress.get("segments"), list):
        return {"segments": []}
    return progress


def loss_over(records: list[dict], first: int, last: int) -> float | None:
    """The mean training loss over steps first+1..last from metrics.jsonl's records: each logged
    `loss` is the mean over the steps since the previous one, so it counts that many times."""
    total = weight = 0.0
    previous = first
    for record in sorted((r for r in records if isinstance(r.get("loss"), (int, float)) and first < r.get("step", 0) <= last),
                         key=lambda r: r["step"]):
        steps = record["step"] - previous
        total += record["loss"] * steps
        weight += steps
        previous = record["step"]
    return total / weight if weight else None


def read_records(path: Path) -> list[dict]:
    out = []
    try:
        lines = Path(path).read_text().splitlines()
    except OSError:
        return out
    for line in lines:
        try:
            record = json.loads(line) if line.strip() else None
        except ValueError:
            continue
        if isinstance(record, dict):
            out.append(record)
    return out


def whole_run(segments: list[dict], records: list[dict]) -> dict:
    """run_summary.json's whole-run fields from its segments and metrics.jsonl's records."""
    steps = sum(s["to_step"] - s["from_step"] for s in segments)
    wall = sum(s.get("wall_seconds") or 0.0 for s in segments)  # None: a segment whose time was not recorded
    for s in segments:
        loss = loss_over(records, s["from_step"], s["to_step"])
        s["train_loss"] = round(loss, 6) if loss is not None else None
    loss = loss_over(records, 0, segments[-1]["to_step"]) if segments else None
    return {"steps_trained": steps, "train_loss": loss, "wall_seconds": round(wall, 2),
            "steps_per_s": round(steps / wall, 4) if wall > 0 else None, "segments": segments}


__all__ = ["FINISHED", "INTERRUPTED", "NEW", "FolderState", "check_recipe", "command_with", "extends",
           "finished_verdict", "folder_state", "holds_a_run", "load_progress", "move_aside", "whole_run"]
