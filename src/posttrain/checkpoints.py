"""The ``checkpoint-N`` folders transformers' Trainer writes (``PREFIX_CHECKPOINT_DIR``): one name
rule for resume, run-directory arms in compare, S3 uploads and the callbacks that write into them.

Standard library only, at the bottom of the layers (storage and the CLI use it without torch).
"""

from __future__ import annotations

import re
from pathlib import Path

__all__ = ["GLOB", "checkpoint_dirs", "checkpoint_name", "step_of", "weight_files", "weights_digest"]

GLOB = "checkpoint-*"  # for shutil/fnmatch-style exclusions; step_of is the exact rule
_NAME = re.compile(r"checkpoint-(\d+)")


def checkpoint_name(step: int) -> str:
    """``checkpoint-12`` for step 12."""
    return f"checkpoint-{step}"


def step_of(name: str) -> int | None:
    """The step of a ``checkpoint-N`` folder name, or None for any other name (``checkpoint-x``,
    ``checkpoint-3.tmp``)."""
    match = _NAME.fullmatch(name)
    return int(match[1]) if match else None


def checkpoint_dirs(folder: Path) -> list[tuple[int, Path]]:
    """(step, path) of every ``checkpoint-N`` directory directly in ``folder``, by step; [] when
    ``folder`` is not a directory."""
    folder = Path(folder)
    if not folder.is_dir():
        return []
    found = [(step, d) for d in folder.iterdir() if d.is_dir() and (step := step_of(d.name)) is not None]
    return sorted(found)


# Files that decide what a saved model computes: its weights and the configs that say how to read
# them. Trainer state (optimizer.pt, scheduler.pt, rng_state.pth, training_args.bin) does not.
_CONFIGS = ("config.json", "adapter_config.json")


def weight_files(folder: Path) -> list[Path]:
    """The weight and config files of a saved model (or adapter) folder, by name; [] for anything else."""
    folder = Path(folder)
    if not folder.is_dir():
        return []
    weights = [f for f in folder.iterdir() if f.is_file() and (f.suffix == ".safetensors" or
               (f.suffix == ".bin" and f.name.startswith(("pytorch_model", "adapter_model"))))]
    if not weights:
        return []
    return sorted(weights + [folder / name for name in _CONFIGS if (folder / name).is_file()])


def weights_digest(folder: Path) -> str | None:
    """sha256 over a model folder's weight and config files (names and bytes): equal digests, equal
    models. None when the folder holds no weights."""
    import hashlib

    files = weight_files(folder)
    if not files:
        return None
    digest = hashlib.sha256()
    for f in files:
        digest.update(f.name.encode() + b"\0")
        with f.open("rb") as handle:
            for block in iter(lambda: handle.read(1 << 20), b""):
                digest.update(block)
    return digest.hexdigest()
