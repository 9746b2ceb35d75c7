"""Trainer callbacks posttrain adds to every run."""

from __future__ import annotations

import json
import math
from pathlib import Path

from transformers import TrainerCallback

from posttrain.checkpoints import checkpoint_name


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


def _clean(value):
    if isinstance(value, float) and not math.isfinite(value):
        return str(value)
    return value
