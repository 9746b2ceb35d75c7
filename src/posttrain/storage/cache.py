"""Download an ``s3://`` model, adapter or data file once per machine, and reuse it.

Used for ``model.base_model_name: s3://bucket/models/my-sft`` (a folder) and
``data.datasets[i].name: s3://bucket/data/train.jsonl`` (one object). Layout::

    $POSTTRAIN_CACHE/s3/<sha256 of the URI>/            one entry, present only when complete
        .source.json                                    {"uri": ..., "kind": "file" | "dir", "name": ...}
        <name>                                          the file (train.jsonl) or the folder (my-sft/)
    $POSTTRAIN_CACHE/s3/<sha256>.lock                   taken with flock while downloading

Why it is safe:

- **Complete or absent.** An entry is built in a temporary sibling folder and renamed into place
  (atomic on one filesystem) only when every file has arrived with its listed size; a crashed
  download leaves only a ``.<sha>.partial-*`` folder, removed by the next download of that URI.
- **One download per machine.** Processes (e.g. the ranks of `accelerate launch`) take an exclusive
  ``flock`` on the entry's lock file; those that wait find the finished entry when they get the
  lock. The kernel drops the lock if the holder dies, so a crash never blocks later runs.
- **A hit costs no network**: the entry is checked before any client is created.

Assumption: an S3 URI names immutable content (a training output, a data snapshot). If the object
changes, delete the cache entry (its path is logged) to fetch it again.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import shutil
from pathlib import Path

from posttrain.locks import exclusive

from .errors import StorageError, error_code
from .location import S3Location
from .s3 import download_dir, download_file, list_sizes, make_client, make_temp_dir, with_retries

log = logging.getLogger("posttrain.storage")

SOURCE_FILE = ".source.json"


def default_cache_root() -> Path:
    """``$POSTTRAIN_CACHE`` (default ``~/.cache/posttrain``), shared with the tiny-model cache."""
    return Path(os.environ.get("POSTTRAIN_CACHE") or "~/.cache/posttrain").expanduser()


def cache_entry(uri: str, cache_root: str | Path | None = None) -> Path:
    """Where ``uri`` is (or will be) cached; the URI is normalised first, so ``s3://b/p/`` == ``s3://b/p``."""
    location = S3Location.parse(uri)
    root = Path(cache_root) if cache_root is not None else default_cache_root()
    return root / "s3" / hashlib.sha256(location.uri.encode()).hexdigest()


def cached_download(uri: str, *, cache_root: str | Path | None = None, client=None, retries: int = 5,
                    backoff: float = 0.5) -> Path:
    """The local path of ``uri``: a file for a single object, a folder for a prefix; downloaded once.

    ``client`` defaults to `make_client()` (endpoint and credentials from the environment) and is
    created only on a cache miss. Raises `StorageError` when nothing exists at ``uri``.
    """
    location = S3Location.parse(uri)
    entry = cache_entry(uri, cache_root)
    if entry.is_dir():
        return _payload(entry)
    entry.parent.mkdir(parents=True, exist_ok=True)
    with exclusive(entry.parent / f"{entry.name}.lock", f"waiting for another process downloading {location.uri}", log):
        if entry.is_dir():  # another process finished it while we waited
            return _payload(entry)
        for stale in entry.parent.glob(f".{entry.name}.partial-*"):
            shutil.rmtree(stale, ignore_errors=True)
        client = client if client is not None else make_client()
        tmp = make_temp_dir(entry.parent, f".{entry.name}.partial-")
        try:
            kind = _fetch(client, location, tmp / location.name, retries=retries, backoff=backoff)
            (tmp / SOURCE_FILE).write_text(json.dumps({"uri": location.uri, "kind": kind, "name": location.name}))
            os.rename(tmp, entry)
        except BaseException:
            shutil.rmtree(tmp, ignore_errors=True)
            raise
    log.info("downloaded %s to %s", location.uri, entry)
    return _payload(entry)


def _payload(entry: Path) -> Path:
    return entry / json.loads((entry / SOURCE_FILE).read_text())["name"]


def _fetch(client, location: S3Location, target: Path, *, retries: int, backoff: float) -> str:
    """Download ``location`` to ``target``: as one object if a key of exactly that name exists,
    else as the folder of keys under ``location/``. Returns ``"file"`` or ``"dir"``."""
    if location.prefix:
        def head():
            try:
                return client.head_object(Bucket=location.bucket, Key=location.prefix)
            except Exception as exc:
                if error_code(exc) in ("404", "NoSuchKey"):
                    return None
                raise

        found = with_retries(f"lookup of {location.uri}", head, retries=retries, backoff=backoff)
        if found is not None:
            download_file(client, location.bucket, location.prefix, target, found["ContentLength"],
                          retries=retries, backoff=backoff)
            return "file"
    if not with_retries(f"listing of {location.uri}", lambda: list_sizes(client, location), retries=retries,
                        backoff=backoff):
        raise StorageError(f"nothing at {location.uri}: no object with that key and no objects under "
                           f"{location.uri}/; check the URI, the endpoint and that the credentials may list the bucket")
    download_dir(client, location.bucket, location.prefix, target, retries=retries, backoff=backoff)
    return "dir"
