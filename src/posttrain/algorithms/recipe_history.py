"""A resumed run continues the recipe its checkpoint was trained with; every start is kept.

Each checkpoint carries the resolved recipe it was written under (`posttrain_recipe.yaml`, put
there by `RecipeInCheckpoints`). On resume the new recipe is compared with it, key by key:

- a longer (or otherwise changed) schedule and bookkeeping -- `max_steps`, `num_train_epochs` (RFT's `rounds`),
  save/logging/eval cadence, tracking, s3 uploads -- may change; the changes are printed;
- any other difference (learning rate, data, algorithm, model, LoRA shape...) is an error that
  lists the keys, because the optimizer state and weights in the checkpoint belong to the old
  recipe; `training.resume_from_checkpoint: force` resumes anyway and prints them.

`output_dir/recipe_history/` keeps the resolved recipe of every start (`resolved_recipe.yaml` is the
latest), so a run that was continued with changes still says what each part was trained with.
"""

from __future__ import annotations

import datetime
import fnmatch
from pathlib import Path

import yaml

RECIPE_IN_CHECKPOINT = "posttrain_recipe.yaml"
HISTORY_DIR = "recipe_history"

# Keys that may differ between a checkpoint's recipe and the one resuming it (fnmatch patterns).
MAY_CHANGE = (
    "training.max_steps", "training.num_train_epochs", "training.rounds", "training.save_*", "training.logging_*", "training.eval_steps",
    "training.resume_from_checkpoint", "training.output_dir", "training.push_to_hub", "training.hub_*",
    "tracking.*", "s3.*", "s3",
    # Recomputing activations changes memory and speed, not the step; runs started before posttrain
    # chose it per device resolved it to true, and resuming them on a CPU must not be refused for that.
    "training.activation_checkpointing",
)


def flatten(node, prefix: str = "") -> dict:
    """{'training.learning_rate': 1e-5, 'data.datasets[0].name': ...} for a resolved recipe mapping."""
    out: dict = {}
    if isinstance(node, dict) and node:
        for key, value in node.items():
            out.update(flatten(value, f"{prefix}.{key}" if prefix else str(key)))
    elif isinstance(node, list) and node and all(isinstance(v, dict) for v in node):
        for i, value in enumerate(node):
            out.update(flatten(value, f"{prefix}[{i}]"))
    else:
        out[prefix] = node
    return out


def recipe_changes(old: dict, new: dict) -> tuple[list[tuple[str, object, object]], list[tuple[str, object, object]]]:
    """(changes that may happen on resume, changes that may not), each as (key, old, new)."""
    a, b = flatten(old), flatten(new)
    allowed, refused = [], []
    for key in sorted(set(a) | set(b)):
        if a.get(key, "<unset>") == b.get(key, "<unset>"):
            continue
        row = (key, a.get(key, "<unset>"), b.get(key, "<unset>"))
        (allowed if any(fnmatch.fnmatch(key, p) for p in MAY_CHANGE) else refused).append(row)
    return allowed, refused


def checkpoint_recipe(checkpoint: Path, output_dir: Path) -> tuple[dict | None, str]:
    """The resolved recipe a checkpoint was trained with, and where it was read from."""
    for path in (checkpoint / RECIPE_IN_CHECKPOINT, output_dir / "resolved_recipe.yaml"):
        if path.is_file():
            try:
                return yaml.safe_load(path.read_text()), str(path)
            except yaml.YAMLError:
                continue
    return None, ""


def render(rows) -> str:
    return "\n".join(f"  {key}: {old!r} -> {new!r}" for key, old, new in rows)


def write_history(output_dir: Path, text: str, step: int, trl_config_json: str | None = None) -> Path:
    """Keep this start's resolved recipe (and the TRL config it produced) beside the earlier ones."""
    folder = output_dir / HISTORY_DIR
    folder.mkdir(exist_ok=True)
    n = len(list(folder.glob("*.yaml"))) + 1
    stamp = datetime.datetime.now().strftime("%Y%m%dT%H%M%S")
    path = folder / f"{n:03d}-{stamp}-from-step-{step}.yaml"
    path.write_text(text)
    if trl_config_json is not None:
        path.with_suffix(".trl_config.json").write_text(trl_config_json)
    return path
