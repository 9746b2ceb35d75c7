"""Resume after a crash: find the newest checkpoint that was written completely.

transformers writes a checkpoint's weights, optimizer, scheduler and RNG state first and
`trainer_state.json` last, so a folder whose trainer state is missing or unreadable, or whose
weights are missing, was cut off mid-write (a SIGKILL, a full disk) and is skipped.
"""

from __future__ import annotations

import json
from pathlib import Path

from posttrain.checkpoints import checkpoint_dirs

WEIGHTS = ("model.safetensors", "model.safetensors.index.json", "adapter_model.safetensors", "pytorch_model.bin")


def checkpoint_problem(folder: Path) -> str | None:
    """Why a checkpoint folder cannot be resumed from, or None if it is complete."""
    state = folder / "trainer_state.json"
    if not state.is_file():
        return "no trainer_state.json (written last: the save was cut off)"
    try:
        json.loads(state.read_text())
    except ValueError:
        return "unreadable trainer_state.json"
    if not any((folder / name).is_file() for name in WEIGHTS):
        return "no model weights"
    return None


def newest_complete_checkpoint(output_dir: Path) -> tuple[Path | None, list[str]]:
    """(the newest complete checkpoint or None, notes on the incomplete ones skipped)."""
    if not output_dir.is_dir():
        return None, []
    notes = []
    for _, folder in reversed(checkpoint_dirs(output_dir)):
        problem = checkpoint_problem(folder)
        if problem is None:
            return folder, notes
        notes.append(f"skipping {folder.name}: {problem}")
    return None, notes


def checkpoint_step(folder: Path) -> int:
    return json.loads((folder / "trainer_state.json").read_text())["global_step"]
