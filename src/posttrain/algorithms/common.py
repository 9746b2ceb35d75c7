"""What the orchestrator (`algorithms/run.py`) hands each trainer builder, and the helpers both use.

A builder (`algorithms/<name>.py`, `build_trainer(run)`) imports from here, never from `run.py`,
so the run imports the builders and no builder imports the run.
"""

from __future__ import annotations

import os
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path


@dataclass
class Run:
    loaded_recipe: object  # posttrain.recipe.load.LoadedRecipe
    loaded: object  # posttrain.models.loading.LoadedModel
    train_dataset: object
    eval_dataset: object  # None unless the recipe asks for evaluation
    trl_config: object
    peft_config: object
    output_dir: Path
    callbacks: list = field(default_factory=list)
    data_reports: list = field(default_factory=list)
    resume_from: Path | None = None  # the checkpoint training continues from
    storage: object = None  # NoStorage or S3RunStorage
    lock: object = None  # posttrain.algorithms.output_lock.OutputDirLock  # held by the main process for the whole run
    monitor: object = None  # posttrain.algorithms.monitor.RunMonitor  # speed + health; RL trainers attach its timers
    token_audits: list = field(default_factory=list)  # posttrain.data.token_audit.TokenAudit, filled by the trainer builder
    toolbox: object = None  # posttrain.tools.isolation.Toolbox of a GRPO/GSPO run with tools, else None
    segments: object = None  # posttrain.algorithms.callbacks.RunSegments: this run's segments, for run_summary.json
    stop: object = None  # posttrain.algorithms.interrupt.GracefulStop: Ctrl-C / SIGTERM save a checkpoint and stop
    argv: list = field(default_factory=list)  # the command's arguments after `posttrain` (secrets blanked): for the resume command
    summary: dict = field(default_factory=dict)  # what the builder adds to run_summary.json (reward: held-out pair accuracy)
    held_out: object = None  # posttrain.algorithms.held_out.HeldOutScores when the recipe has a held_out section

    def trainer_kwargs(self) -> dict:
        """What every TRL trainer takes; algorithm modules add their own (reward functions, ...)."""
        return dict(model=self.loaded.model, args=self.trl_config, train_dataset=self.train_dataset, eval_dataset=self.eval_dataset,
                    processing_class=self.loaded.processing_class, peft_config=self.peft_config, callbacks=self.callbacks)


def is_main_process() -> bool:
    return int(os.environ.get("RANK", "0")) == 0


def log(msg: str = "") -> None:
    if is_main_process():
        print(msg, flush=True)


def is_local_main_process() -> bool:
    return int(os.environ.get("LOCAL_RANK", "0")) == 0


@contextmanager
def without_autocast(model, wrapped: bool):
    """Run `model`'s float32 forward inside the block (generation: GRPO's rollouts, held-out scoring):
    accelerate keeps the forward it wrapped in autocast as `_original_forward` (set at `prepare`, so
    from the first step on); a model it did not wrap needs nothing. `wrapped`: accelerate has prepared
    the model under mixed precision by now, so a missing `_original_forward` is a renamed internal
    (posttrain/internals.py) and stops the run rather than let it generate under autocast."""
    from posttrain.internals import require

    original = require(model, "_original_forward", missing_ok=not wrapped)
    if original is None:
        yield
        return
    autocast_forward = model.forward
    model.forward = original
    try:
        yield
    finally:
        model.forward = autocast_forward
