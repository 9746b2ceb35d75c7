"""The ``checkpoint-N`` folders transformers' Trainer writes (``PREFIX_CHECKPOINT_DIR``): one name
rule for resume, run-directory arms in compare, S3 uploads and the callbacks that write into them.

Standard library only, at the bottom of the layers (storage and the CLI use it without torch).
"""

from __future__ import annotations

import re
from pathlib import Path

__all__ = ["GLOB", "checkpoint_dirs", "checkpoint_name", "step_of"]

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
