"""Resume after a crash: find the newest checkpoint that was written completely.

transformers writes a checkpoint's weights, optimizer, scheduler and RNG state first and
`trainer_state.json` last, so a folder whose trainer state is missing or unreadable, or whose
weights are missing, was cut off mid-write (a SIGKILL, a full disk) and is skipped.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

from posttrain.checkpoints import checkpoint_dirs

from .common import log

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


def machine_lock(name: str):
    """An exclusive flock shared by this machine's processes (in the posttrain cache; the kernel drops it if we die)."""
    import hashlib

    from posttrain.locks import exclusive
    from posttrain.storage.cache import default_cache_root

    return exclusive(default_cache_root() / "locks" / (hashlib.sha256(name.encode()).hexdigest()[:32] + ".lock"))


def same_checkpoint_everywhere(resume_from: Path | None, world: int) -> None:
    """Every rank must continue from the same step; they would not if nodes see different output_dirs."""
    if world <= 1:
        return
    import torch.distributed as dist

    from posttrain.errors import UserError

    mine = checkpoint_step(resume_from) if resume_from else 0
    steps = [None] * world
    dist.all_gather_object(steps, mine)
    if len(set(steps)) > 1:
        raise UserError(f"the ranks found different checkpoints to resume from (steps by rank: {steps}): output_dir must be "
                        "on a filesystem every node shares, or give the run an s3 section so each node fetches the same one.")


def resume_point(value, output_dir: Path, storage) -> Path | None:
    """training.resume_from_checkpoint: 'auto' (default) -> the newest complete checkpoint, local or
    (with an s3 section) uploaded, if any; false/null -> start fresh; a path -> that checkpoint.

    Every rank runs this before the process group exists, so the processes of one machine take
    turns through a file lock: the first downloads a newer uploaded checkpoint into output_dir,
    the others then find it there complete (one download per node, never two into one folder).
    """
    if value in (None, False, "false"):
        return None
    if value in ("auto", "force"):
        with machine_lock(f"resume {output_dir.resolve()}"):
            found, notes = newest_complete_checkpoint(output_dir)
            remote = storage.fetch_checkpoint(output_dir, checkpoint_step(found) if found else 0)
        for note in notes:
            log(note)
        if remote is not None:
            # printed by every process that downloads (local rank 0 of each node), not only rank 0
            print(f"rank {os.environ.get('RANK', '0')}: downloaded {remote.name} from S3: newer than any complete local checkpoint", flush=True)
            found = remote
        if found is not None:
            log(f"resuming from {found} (training.resume_from_checkpoint={value}; set it to false to start over)")
        return found
    return explicit_checkpoint(value)


def explicit_checkpoint(value) -> Path:
    """training.resume_from_checkpoint given as a path: that folder, or UserError when it is no complete checkpoint."""
    from posttrain.errors import UserError

    path = Path(value)
    problem = checkpoint_problem(path) if path.is_dir() else "not a directory"
    if problem:
        raise UserError(f"training.resume_from_checkpoint: cannot resume from {value}: {problem}. Set "
                        "training.resume_from_checkpoint=auto (the newest complete checkpoint in training.output_dir) or a "
                        "complete checkpoint-N folder.")
    return path
