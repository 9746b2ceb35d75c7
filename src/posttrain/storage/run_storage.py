"""What a training run does with cloud storage, behind one interface so run.py has no `if s3:`.

`NoStorage` (no `s3` section) does nothing; `S3RunStorage` uploads each checkpoint in the
background as it is saved and the final model after it is saved, then waits and reports.
"""

from __future__ import annotations

import os

from .location import S3Location


class NoStorage:
    def callbacks(self) -> list:
        return []

    def fetch_checkpoint(self, output_dir, newer_than: int):
        return None

    def finish(self, output_dir, final: bool = True) -> str | None:
        return None


class S3RunStorage:
    def __init__(self, s3):
        from .background import BackgroundUploader
        from .s3 import make_client

        self.settings = s3
        self.dest = S3Location.parse(f"s3://{s3.bucket}/{s3.prefix.strip('/')}".rstrip("/"))
        self.client = make_client(s3.endpoint_url, s3.region)
        self.uploader = BackgroundUploader(self.client)

    def fetch_checkpoint(self, output_dir, newer_than: int):
        """Download the newest completely uploaded checkpoint into output_dir if it is newer than
        step `newer_than` (local checkpoints deleted after upload, or a run moved to a new machine)."""
        import re
        import shutil
        from pathlib import Path

        from .s3 import download_dir, latest_checkpoint, with_retries

        remote = with_retries(f"checkpoint lookup in {self.dest.uri}", lambda: latest_checkpoint(self.client, self.dest),
                              retries=5, backoff=0.5)
        if remote is None or int(re.search(r"(\d+)$", remote.name).group(1)) <= newer_than:
            return None
        local = Path(output_dir) / remote.name
        if local.exists():  # an incomplete local copy: the uploaded one is complete
            shutil.rmtree(local)
        return download_dir(self.client, remote.bucket, remote.prefix, local)

    def callbacks(self) -> list:
        from .callback import S3CheckpointUploader

        s3 = self.settings
        return [S3CheckpointUploader(self.uploader, self.dest, upload_checkpoints=s3.upload_checkpoints,
                                     delete_local_after_upload=s3.delete_local_after_upload)]

    def finish(self, output_dir, final: bool = True) -> str:
        """Upload the final model (already saved in output_dir), wait for every upload, summarise.
        final=False (a run stopped by Ctrl-C / SIGTERM): no final model; wait for the checkpoints' uploads."""
        from .callback import UploadSummary, upload_final

        if final and self.settings.upload_final_model:
            summary = upload_final(self.uploader, output_dir, self.dest)
        else:
            summary = UploadSummary(tuple(self.uploader.wait()))
        self.uploader.close()
        return summary.render()


def run_storage(s3) -> NoStorage | S3RunStorage:
    return NoStorage() if s3 is None else S3RunStorage(s3)


def use_s3_settings_for_sources(s3) -> None:
    """Let s3:// model and data sources reach the same endpoint/region as the recipe's s3 section
    (boto3 reads these variables; settings already in the environment win)."""
    if s3 is None:
        return
    if s3.endpoint_url:
        os.environ.setdefault("AWS_ENDPOINT_URL_S3", s3.endpoint_url)
    if s3.region:
        os.environ.setdefault("AWS_DEFAULT_REGION", s3.region)
