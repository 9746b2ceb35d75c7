"""Trainer callbacks posttrain adds to every run."""

from __future__ import annotations

import json
import math
from pathlib import Path

from transformers import TrainerCallback


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


def _clean(value):
    if isinstance(value, float) and not math.isfinite(value):
        return str(value)
    return value
