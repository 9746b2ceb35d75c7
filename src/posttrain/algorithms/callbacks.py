"""Trainer callbacks posttrain adds to every run."""

from __future__ import annotations

import json
import math
import time
from pathlib import Path

from transformers import TrainerCallback

from posttrain.checkpoints import checkpoint_name
from posttrain.internals import require


class MetricsFile(TrainerCallback):
    """Append every log record to output_dir/metrics.jsonl as it happens (survives a crash)."""

    def __init__(self, path: Path):
        self.path = path

    def on_log(self, args, state, control, logs=None, **kwargs):
        if not state.is_world_process_zero or not logs:
            return
        record = {"step": state.global_step, **{k: _clean(v) for k, v in logs.items()}}
        with self.path.open("a") as f:
            f.write(json.dumps(record) + "\n")


class RecipeInCheckpoints(TrainerCallback):
    """Write the run's resolved recipe into every checkpoint, so a resume can compare against it.

    Listed before the S3 uploader so the upload's snapshot of the checkpoint includes it.
    """

    def __init__(self, output_dir: Path, text: str):
        self.output_dir, self.text = output_dir, text

    def on_save(self, args, state, control, **kwargs):
        folder = self.output_dir / checkpoint_name(state.global_step)
        if state.is_world_process_zero and folder.is_dir():
            from .recipe_history import RECIPE_IN_CHECKPOINT

            (folder / RECIPE_IN_CHECKPOINT).write_text(self.text)


class RunSegments(TrainerCallback):
    """The run's segments: one per process that trained it (a resume starts a new one), kept in every
    checkpoint (`posttrain_segments.json`) with the speed monitor's running totals, so the final
    run_summary.json covers the whole run, even after a SIGKILL (its segment then ends at the
    checkpoint the next one resumed from).
    """

    def __init__(self, output_dir: Path, progress: dict, from_step: int, monitor=None, stop=None):
        import datetime

        self.output_dir, self.monitor, self.stop = output_dir, monitor, stop
        self.previous = list(progress.get("segments", []))
        if from_step > 0 and not self.previous:  # a checkpoint written before segments were recorded
            self.previous = [{"from_step": 0, "to_step": from_step, "started": None, "wall_seconds": None, "ended": "checkpoint (not recorded)"}]
        self.from_step = from_step
        self.started = datetime.datetime.now().isoformat(timespec="seconds")
        self.t0: float | None = None
        if monitor is not None:  # speed over the whole run: continue the totals where the checkpoint left them
            for key, value in (progress.get("totals") or {}).items():
                if key in monitor.totals and isinstance(value, (int, float)):
                    monitor.totals[key] = value
            monitor.tool_totals.update(progress.get("tool_totals") or {})

    def on_train_begin(self, args, state, control, **kwargs):
        self.t0 = time.time()

    def segment(self, step: int, ended: str) -> dict:
        wall = time.time() - self.t0 if self.t0 is not None else 0.0
        return {"from_step": self.from_step, "to_step": step, "started": self.started, "wall_seconds": round(wall, 2), "ended": ended}

    def segments(self, step: int, ended: str) -> list[dict]:
        return [*self.previous, self.segment(step, ended)]

    def on_save(self, args, state, control, **kwargs):
        folder = self.output_dir / checkpoint_name(state.global_step)
        if not (state.is_world_process_zero and folder.is_dir()):
            return
        from .run_folder import SEGMENTS_IN_CHECKPOINT

        signal_name = getattr(self.stop, "signal_name", None)
        ended = "finished" if state.global_step >= state.max_steps else f"interrupted ({signal_name})" if signal_name else "checkpoint"
        progress = {"segments": self.segments(state.global_step, ended)}
        if self.monitor is not None:
            progress["totals"] = dict(self.monitor.totals)
            progress["tool_totals"] = dict(self.monitor.tool_totals)
        (folder / SEGMENTS_IN_CHECKPOINT).write_text(json.dumps(progress, indent=1) + "\n")
        from .run_card import readable_like_the_rest

        readable_like_the_rest(folder)  # safetensors writes weights 0600


class ScheduleOnResume(TrainerCallback):
    """A resumed run follows its own recipe's learning-rate schedule from the checkpoint's step on.

    transformers restores the optimizer's learning rate from the checkpoint and the scheduler's step
    count, then builds the schedule for the new run's max_steps. The first resumed step would train at
    the learning rate the *old* schedule had reached (0 at the end of a finished linear-decay run: a
    wasted step, flagged zero_learning_rate) and only then jump to the new schedule. Before that first
    step this sets every parameter group to the new schedule's value at the checkpoint's step: with the
    same max_steps that is the value restored (nothing changes), with a larger one it is what a run
    planned for the new max_steps has at that step (warmup is not repeated).

    The peak learning rate is the recipe's too: the checkpoint's optimizer and scheduler state carry
    the old one (torch restores each group's `lr`/`initial_lr` and the scheduler's `base_lrs`), so a
    learning_rate changed under `resume_from_checkpoint: force` never applied. The groups' base rates
    are scaled by new/old, which keeps any ratio between groups.
    """

    def __init__(self):
        self.done = False

    def on_step_begin(self, args, state, control, optimizer=None, lr_scheduler=None, **kwargs):
        if self.done:
            return
        self.done = True
        scheduler = getattr(lr_scheduler, "scheduler", lr_scheduler)  # accelerate wraps it
        lambdas, bases = getattr(scheduler, "lr_lambdas", None), getattr(scheduler, "base_lrs", None)
        if optimizer is None or not lambdas or not bases:  # not a LambdaLR (reduce_lr_on_plateau): left as restored
            return
        if bases[0] and args.learning_rate and abs(args.learning_rate - bases[0]) > 1e-12 * abs(bases[0]):
            ratio = args.learning_rate / bases[0]
            bases = scheduler.base_lrs = [base * ratio for base in bases]
            for group, base in zip(optimizer.param_groups, bases):
                group["initial_lr"] = base
        values = [base * fn(scheduler.last_epoch) for base, fn in zip(bases, lambdas)]
        for group, value in zip(optimizer.param_groups, values):
            group["lr"] = value
        require(scheduler, "_last_lr")  # what get_last_lr() returns: set as step() would have
        scheduler._last_lr = values


def _clean(value):
    if isinstance(value, float) and not math.isfinite(value):
        return str(value)
    return value
