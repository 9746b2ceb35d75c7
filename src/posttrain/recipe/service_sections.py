"""The recipe's `tracking` and `s3` sections."""

from __future__ import annotations

from typing import Literal

from pydantic import Field, SecretStr, StrictBool, model_validator

from .section import Section


class TrackingSection(Section):
    provider: Literal["none", "wandb", "tensorboard", "mlflow", "trackio"] = Field("none", description="Where metrics go besides output_dir/metrics.jsonl.")
    project: str | None = Field(None, description="Project name at the provider.")
    run_name: str | None = Field(None, description="Run name (default: the output directory's name).")
    tags: list[str] = Field(default_factory=list, description="Tags for the run (wandb).")
    mode: Literal["online", "offline"] = Field("online", description="wandb only: 'offline' logs locally with no network; sync later.")
    api_key: SecretStr | None = Field(None, description="Provider API key. Prefer the environment (WANDB_API_KEY); never written to logs or files.")

    @model_validator(mode="after")
    def _key_needs_a_service(self):
        if self.api_key is not None and self.provider in ("none", "tensorboard"):
            raise ValueError(f"tracking.api_key is set but provider {self.provider!r} uses no key; remove it.")
        if self.mode == "offline" and self.provider != "wandb":
            raise ValueError("tracking.mode=offline applies to wandb only.")
        return self


# ---------------------------------------------------------------------------------- storage
class S3Section(Section):
    bucket: str = Field(min_length=1, description="Bucket that receives checkpoints and the final model.")
    prefix: str = Field("", description="Key prefix of this run: s3://bucket/prefix/checkpoint-N/ and .../final/.")
    region: str | None = Field(None, description="Region (default: the AWS environment's).")
    endpoint_url: str | None = Field(None, description="An S3-compatible server (MinIO, Ceph, R2, ...); also used for s3:// model and data sources.")
    upload_checkpoints: StrictBool = Field(True, description="Upload each checkpoint in the background as it is saved (training does not wait).")
    upload_final_model: StrictBool = Field(True, description="Upload the final model to .../final/ after it is saved; the run waits for all uploads and reports them.")
    delete_local_after_upload: StrictBool = Field(
        False, description="Delete a local checkpoint once its upload is verified complete (every file present with the right size)."
    )

    @model_validator(mode="after")
    def _delete_needs_upload(self):
        if self.delete_local_after_upload and not self.upload_checkpoints:
            raise ValueError("s3.delete_local_after_upload needs s3.upload_checkpoints=true (nothing would be uploaded before deleting).")
        return self
