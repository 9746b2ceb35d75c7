"""Cloud storage: verified S3 uploads, a per-machine download cache, background checkpoint upload.

Modules (importing any of them but `callback` loads neither boto3 nor transformers):

- `location`   ``s3://`` URIs (`S3Location`), pure standard library.
- `errors`     `StorageError`, `UploadError`, which failures are transient, secret-free messages.
- `s3`         `make_client`, `upload_dir` (verified, retried), `download_dir` (safe, atomic),
               `latest_checkpoint` (the newest checkpoint whose upload completed).
- `cache`      `cached_download`: an ``s3://`` model folder or data file, once per machine.
- `background` `BackgroundUploader`: one thread uploading folders while training goes on.
- `callback`   `S3CheckpointUploader` (a TrainerCallback) and `upload_final`.
"""

from .errors import StorageError, UnsafeKeyError, UploadError, UploadFailure
from .location import S3Location, S3URIError, is_s3_uri

__all__ = ["S3Location", "S3URIError", "StorageError", "UnsafeKeyError", "UploadError", "UploadFailure", "is_s3_uri"]
