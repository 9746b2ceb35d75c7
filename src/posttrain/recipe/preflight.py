"""Checks of a valid recipe against this machine, still without importing torch.

The schema checks what a recipe *says*; preflight checks what it *needs*: local files that
exist, a GPU for bitsandbytes quantisation, the tracking provider's package. It runs in
`posttrain validate` and before anything heavy loads in `posttrain train`.
"""

from __future__ import annotations

import importlib.util
import os
import shutil
from pathlib import Path

from .errors import Problem, RecipeError
from .schema import Recipe

DATA_SUFFIXES = (".jsonl", ".json", ".csv", ".parquet")
TRACKING_PACKAGES = {"wandb": "wandb", "tensorboard": "tensorboard", "mlflow": "mlflow", "trackio": "trackio"}


def looks_local(name: str) -> bool:
    """A data or model name that refers to the local disk rather than a hub id or s3:// URI."""
    if name.startswith("s3://"):
        return False
    return name.startswith((".", "/", "~")) or name.endswith(DATA_SUFFIXES) or Path(name).expanduser().exists()


def has_cuda() -> bool:
    """Whether an NVIDIA GPU is visible, without importing torch."""
    if os.environ.get("CUDA_VISIBLE_DEVICES", None) in ("", "-1"):
        return False
    return Path("/proc/driver/nvidia/version").exists() or shutil.which("nvidia-smi") is not None


def preflight(recipe: Recipe) -> None:
    problems: list[Problem] = []
    model = recipe.model
    name = model.base_model_name
    if name.startswith("tiny:") or name == "tiny":
        from posttrain.models.tiny import parse_tiny_spec

        try:
            parse_tiny_spec(name)
        except ValueError as e:
            problems.append(Problem("model.base_model_name", str(e)))
    elif looks_local(name) and not Path(name).expanduser().is_dir():
        problems.append(Problem("model.base_model_name", f"{name!r} looks like a local path but is not a directory; give a model or adapter directory, or a hub id."))
    if model.load_in_4bit or model.load_in_8bit:
        key = "model.load_in_4bit" if model.load_in_4bit else "model.load_in_8bit"
        if not has_cuda():
            problems.append(Problem(key, "bitsandbytes quantisation (QLoRA) needs a CUDA GPU and none is visible; set it to false (plain LoRA) or run on a GPU machine."))
        elif importlib.util.find_spec("bitsandbytes") is None:
            problems.append(Problem(key, "needs the bitsandbytes package: pip install bitsandbytes"))

    from posttrain.storage.location import S3Location, is_s3_uri

    sources = [("model.base_model_name", name)] + [(f"data.datasets[{i}].name", d.name) for i, d in enumerate(recipe.data.datasets)]
    for key, value in sources:
        if is_s3_uri(value):
            try:
                S3Location.parse(value)
            except ValueError as e:
                problems.append(Problem(key, str(e)))

    for i, ds in enumerate(recipe.data.datasets):
        if looks_local(ds.name) and not Path(ds.name).expanduser().is_file():
            problems.append(Problem(f"data.datasets[{i}].name", f"data file {ds.name!r} does not exist (relative paths are from {os.getcwd()})."))
        elif looks_local(ds.name) and not ds.name.endswith(DATA_SUFFIXES):
            problems.append(Problem(f"data.datasets[{i}].name", f"{ds.name!r}: local data must be one of {', '.join(DATA_SUFFIXES)}."))

    provider = recipe.tracking.provider
    if provider != "none" and importlib.util.find_spec(TRACKING_PACKAGES[provider]) is None:
        problems.append(Problem("tracking.provider", f"{provider!r} needs its package: pip install {TRACKING_PACKAGES[provider]} (or set tracking.provider=none)."))
    if problems:
        raise RecipeError(problems)
