"""Upload checkpoints to S3 as they are saved, and the final model at the end of a run.

Layout under the run's location ``s3://bucket/prefix``::

    checkpoint-2/ ... checkpoint-N/    each with .posttrain-upload.json once complete
    final/                              output_dir without its checkpoint-* folders

Why checkpoint rotation cannot delete a folder that is still uploading (transformers 5.24):
``Trainer._save_checkpoint`` writes ``checkpoint-N``, then calls ``rotate_checkpoints``, which
``shutil.rmtree``s the oldest ``checkpoint-*`` folders beyond ``save_total_limit``, and only then
fires ``on_save``. So the rotation at step N+k deletes ``checkpoint-N`` while its upload (queued at
step N) may still be running, and no callback event runs between the save and the rotation.

The protection: ``on_save`` hands the uploader a *hard-linked snapshot* of the folder, taken
synchronously before ``on_save`` returns (milliseconds, no copy, no extra disk): rotation removes
the checkpoint's names, the snapshot's names keep the data, and the snapshot is deleted once its
upload is verified. The alternative, waiting in ``on_step_end`` whenever ``control.should_save`` is
set until older uploads finish, would stall training on the network whenever uploads fall behind,
and would miss saves decided after that event (``save_strategy="best"``). The snapshot also covers
the Trainer's other deletion: the non-best checkpoint at the end of training when
``save_total_limit=1`` and ``load_best_model_at_end``. Disk: a checkpoint deleted by rotation
occupies space until its upload finishes (its data is still referenced by the snapshot).
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from pathlib import Path

from transformers import TrainerCallback

from posttrain.checkpoints import GLOB as CHECKPOINT_GLOB
from posttrain.checkpoints import checkpoint_name

from .background import STAGING_DIR, BackgroundUploader
from .location import S3Location
from .s3 import UploadReport, human_bytes

log = logging.getLogger("posttrain.storage")

FINAL_DIR = "final"


class S3CheckpointUploader(TrainerCallback):
    """On every save, queue ``output_dir/checkpoint-{global_step}`` for upload to ``dest/checkpoint-{step}/``.

    ``delete_local_after_upload`` removes each local checkpoint once its upload is verified (to
    save disk; a resume then downloads it from S3); it cannot be combined with
    ``load_best_model_at_end``, which reloads a local checkpoint at the end of training.

    Under torch.distributed, give the callback to the Trainer on *every* rank: ``on_save`` waits at a
    barrier so that rank 0 snapshots the folder only after all ranks wrote their files; only rank 0
    uploads.
    """

    def __init__(self, uploader: BackgroundUploader, dest: S3Location | str, *, upload_checkpoints: bool = True,
                 delete_local_after_upload: bool = False):
        self.uploader = uploader
        self.dest = S3Location.parse(dest) if isinstance(dest, str) else dest
        self.upload_checkpoints = upload_checkpoints
        self.delete_local_after_upload = delete_local_after_upload

    def on_train_begin(self, args, state, control, **kwargs):
        if self.delete_local_after_upload and args.load_best_model_at_end:
            raise ValueError("s3 delete_local_after_upload cannot be combined with load_best_model_at_end: the "
                             "Trainer reloads the best checkpoint from disk at the end. Turn one of them off.")

    def on_save(self, args, state, control, **kwargs):
        if not self.upload_checkpoints:
            return
        _wait_for_all_ranks()  # other ranks write their rng_state_<rank>.pth into the folder too
        if not state.is_world_process_zero:
            return
        folder = Path(args.output_dir) / checkpoint_name(state.global_step)
        if not folder.is_dir():
            log.warning("s3 upload: %s was not found after on_save; nothing uploaded for step %d",
                        folder, state.global_step)
            return
        self.uploader.submit(folder, self.dest.child(folder.name), snapshot=True,
                             delete_after=self.delete_local_after_upload)


@dataclass(frozen=True)
class UploadSummary:
    """Every upload a run made (checkpoints, then the final model), for the end-of-run log line."""

    reports: tuple[UploadReport, ...]

    @property
    def files(self) -> int:
        return sum(r.files for r in self.reports)

    @property
    def bytes(self) -> int:
        return sum(r.bytes for r in self.reports)

    @property
    def seconds(self) -> float:
        """Time spent uploading (uploads run one at a time, so this is the uploader's busy time)."""
        return sum(r.seconds for r in self.reports)

    def render(self) -> str:
        return (f"uploaded {len(self.reports)} folders to S3 ({', '.join(Path(r.uri).name for r in self.reports)}): "
                f"{self.files} files, {human_bytes(self.bytes)}, {self.seconds:.1f} s of upload time")


def upload_final(uploader: BackgroundUploader, output_dir: str | Path, dest: S3Location | str) -> UploadSummary:
    """Upload ``output_dir`` (after the final model was saved into it) to ``dest/final/``, then wait
    for every queued upload, checkpoints included.

    ``checkpoint-*`` folders and the upload staging folder are left out: checkpoints have their own
    prefixes. Raises `UploadError` if any upload of the run failed (with the local paths kept).
    """
    dest = S3Location.parse(dest) if isinstance(dest, str) else dest
    uploader.submit(output_dir, dest.child(FINAL_DIR), exclude=(CHECKPOINT_GLOB, STAGING_DIR, ".posttrain.lock"))
    return UploadSummary(tuple(uploader.wait()))


def _wait_for_all_ranks() -> None:
    """A barrier when torch.distributed is running, so rank 0 snapshots the checkpoint only after
    every rank has written its part (``Trainer._save_checkpoint`` has no barrier after that)."""
    import torch.distributed as dist

    if dist.is_available() and dist.is_initialized() and dist.get_world_size() > 1:
        dist.barrier()
