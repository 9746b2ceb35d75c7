"""Upload and download folders to S3 (or any S3-compatible server), verified, retried, atomic.

What the rest of posttrain relies on:

- **Nothing is reported uploaded that is not there.** `upload_dir` uploads every file, then lists
  the prefix and checks every file is present with its local size (each PUT also carries a CRC32
  that the server checks). Only then does it write ``.posttrain-upload.json`` (the manifest of what
  a complete upload holds), so a reader can tell a complete folder from one whose upload was cut off.
- **Failures are retried with backoff** by posttrain's one retry helper (`with_retries`), so an
  endpoint that is down for a while does not lose a run. botocore's and s3transfer's own retry
  layers are off by default (one attempt each), so the two never multiply (5 x 5 attempts) and every
  retry is logged; a wrong bucket or rejected credentials fail at once with a hint
  (see `errors.py`).
- **A download never writes outside its destination and is never seen half done**: keys are checked
  before anything is written, files land in a temporary folder next to the destination, which is
  renamed into place only when complete.

boto3 is imported inside the functions, so importing this module (and validating a recipe) stays
cheap. Credentials come from boto3's usual chain (env vars, ``AWS_PROFILE``, instance role); this
module never reads, logs or stores them. The endpoint can come from ``AWS_ENDPOINT_URL_S3`` /
``AWS_ENDPOINT_URL`` (botocore reads them) or from ``make_client(endpoint_url=...)``.
"""

from __future__ import annotations

import fnmatch
import json
import logging
import os
import re
import shutil
import tempfile
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, TypeVar

from posttrain.checkpoints import checkpoint_name, step_of
from posttrain.net.retry import RetryPolicy, call_with_retries

from .errors import (StorageError, TransientMismatch, UnsafeKeyError, UploadError, describe, error_code,
                     is_transient)
from .location import S3Location, S3URIError, is_s3_uri  # noqa: F401  (re-exported: the brief's API)

log = logging.getLogger("posttrain.storage")

MANIFEST_NAME = ".posttrain-upload.json"
MIB = 1024 * 1024
# Multipart above 8 MiB, 8 MiB parts, 4 threads: fast enough for checkpoints, gentle on a training host.
MULTIPART_THRESHOLD = 8 * MIB
MULTIPART_CHUNKSIZE = 8 * MIB
MAX_CONCURRENCY = 4
MAX_BACKOFF_S = 30.0

T = TypeVar("T")


@dataclass(frozen=True)
class UploadReport:
    """One verified folder upload: how many files and bytes, how long it took, where it went."""

    local_dir: str
    uri: str
    files: int
    bytes: int
    seconds: float

    def render(self) -> str:
        return f"uploaded {self.local_dir} -> {self.uri}: {self.files} files, {human_bytes(self.bytes)} in {self.seconds:.1f} s"


def make_client(endpoint_url: str | None = None, region: str | None = None, *, max_attempts: int = 1,
                connect_timeout: float = 10.0, read_timeout: float = 60.0):
    """A boto3 S3 client with botocore's "standard" retries and explicit timeouts.

    ``endpoint_url`` selects an S3-compatible server (MinIO, Ceph, R2, moto) and switches to
    path-style addressing, which those servers need when addressed by IP or ``localhost``.
    ``max_attempts`` counts botocore's attempts per request; the default 1 turns botocore's retries
    off, because every call here is wrapped in `with_retries` (stacking both would turn 5 retries
    into 35 attempts and hide them from the log). A fresh session per client: boto3 sessions are not thread-safe,
    clients are.
    """
    import boto3
    from botocore.config import Config

    options = dict(retries={"mode": "standard", "max_attempts": max_attempts},
                   connect_timeout=connect_timeout, read_timeout=read_timeout)
    if endpoint_url:
        options["s3"] = {"addressing_style": "path"}
    session = boto3.session.Session(botocore_session=_botocore_session())
    return session.client("s3", endpoint_url=endpoint_url, region_name=region, config=Config(**options))


_LOADER_LOCK = threading.Lock()
_shared_loader = None


def _botocore_session():
    """A new botocore session (own credentials and config) sharing one cache of parsed service
    models: building a client then takes ~15 ms instead of ~100 ms of JSON parsing."""
    import botocore.session

    global _shared_loader
    session = botocore.session.Session()
    with _LOADER_LOCK:
        if _shared_loader is None:
            _shared_loader = session.get_component("data_loader")
        else:
            session.register_component("data_loader", _shared_loader)
    return session


def transfer_config(use_threads: bool = True):
    """boto3's managed-transfer settings (multipart threshold and part size, threads).

    ``use_threads=False`` transfers in the calling thread: needed once the interpreter is shutting
    down, when thread pools refuse new work ("cannot schedule new futures after interpreter shutdown").
    """
    from boto3.s3.transfer import TransferConfig

    return TransferConfig(multipart_threshold=MULTIPART_THRESHOLD, multipart_chunksize=MULTIPART_CHUNKSIZE,
                          max_concurrency=MAX_CONCURRENCY, use_threads=use_threads,
                          num_download_attempts=1)  # our `with_retries` retries the whole file


def with_retries(what: str, fn: Callable[[], T], *, retries: int, backoff: float) -> T:
    """``fn()``, retried up to ``retries`` more times on transient errors (`is_transient`) through
    posttrain's one retry helper (`posttrain.net.retry`: about ``backoff * 2**attempt`` seconds
    with jitter, at most 30 s); other errors raise at once. Messages go through `describe`, which
    removes secrets."""
    return call_with_retries(fn, policy=RetryPolicy(retries=retries, backoff=backoff, max_delay=MAX_BACKOFF_S),
                             retryable=is_transient, what=what, describe=describe)


# ---- upload ---------------------------------------------------------------------------------------

def upload_dir(client, local_dir: str | Path, bucket: str, prefix: str, *, retries: int = 5, backoff: float = 0.5,
               exclude: tuple[str, ...] = (), write_manifest: bool = True, use_threads: bool = True) -> UploadReport:
    """Upload every file under ``local_dir`` to ``s3://bucket/prefix/<relative path>``, then verify.

    ``exclude``: glob patterns matched against the first path component (``checkpoint-*`` keeps
    checkpoints out of a final-model upload); ``use_threads``: see `transfer_config`. Each file is retried on transient errors; after all
    are sent, the prefix is listed and any file missing or of the wrong size is sent again, once
    more through the same retries. Raises `UploadError` (naming what is missing) if anything is
    still not verified, or at once on a permanent error (credentials, bucket). A local file that
    disappears during the upload is a permanent error: the caller must keep folders in place.
    """
    started = time.monotonic()
    local_dir = Path(local_dir)
    if not local_dir.is_dir():
        raise StorageError(f"cannot upload {local_dir}: not a directory")
    dest = S3Location.parse(f"s3://{bucket}/{prefix}")
    files = _local_files(local_dir, exclude)
    config = transfer_config(use_threads)

    def send(rel: str) -> None:
        with_retries(f"upload of {rel} to {dest.uri}",
                     lambda: client.upload_file(str(local_dir / rel), dest.bucket, dest.key(rel), Config=config),
                     retries=retries, backoff=backoff)

    def fail(missing: list[str], why: str) -> UploadError:
        shown = ", ".join(missing[:5]) + (f" and {len(missing) - 5} more" if len(missing) > 5 else "")
        reason = f"{len(missing)} of {len(files)} files not verified ({shown}): {why}"
        return UploadError(f"upload of {local_dir} to {dest.uri}/ is incomplete: {reason}. Nothing local was "
                           f"deleted; check the endpoint and credentials, then upload again.", missing=missing,
                           reason=reason)

    def why(exc: Exception) -> str:
        if is_transient(exc):
            return f"still failing after {retries} retries: {describe(exc)}"
        if isinstance(exc, OSError):
            return f"local file unreadable or gone ({describe(exc)}); a folder must stay in place until verified"
        return describe(exc)

    remaining = sorted(files)  # not yet verified on the server
    try:
        if write_manifest:  # a stale manifest must not vouch for a folder that is being rewritten
            with_retries(f"delete of the old manifest in {dest.uri}",
                         lambda: client.delete_object(Bucket=dest.bucket, Key=dest.key(MANIFEST_NAME)),
                         retries=retries, backoff=backoff)
        to_send = list(remaining)
        for _ in range(2):
            # A file whose retries run out stops the whole upload: the endpoint is unhealthy, and
            # waiting the full retry time once per remaining file would only delay the report.
            for rel in to_send:
                send(rel)
            remote = with_retries(f"listing of {dest.uri}", lambda: list_sizes(client, dest), retries=retries,
                                  backoff=backoff)
            remaining = [rel for rel in sorted(files) if remote.get(rel) != files[rel]]
            if not remaining:
                break
            log.warning("verification of %s: %d files missing or of the wrong size; sending them again",
                        dest.uri, len(remaining))
            to_send = remaining
        if remaining:
            raise fail(remaining, "missing or of the wrong size on the server after upload")
        if write_manifest:
            manifest = json.dumps({"format": 1, "files": files, "bytes": sum(files.values())}, indent=1,
                                  sort_keys=True)
            with_retries(f"manifest of {dest.uri}", lambda: client.put_object(
                Bucket=dest.bucket, Key=dest.key(MANIFEST_NAME), Body=manifest.encode()), retries=retries,
                backoff=backoff)
    except UploadError:
        raise
    except Exception as exc:
        raise fail(remaining or [MANIFEST_NAME], why(exc)) from exc
    return UploadReport(str(local_dir), dest.uri, len(files), sum(files.values()), time.monotonic() - started)


def _local_files(local_dir: Path, exclude: tuple[str, ...]) -> dict[str, int]:
    """``{relative POSIX path: size}`` of the regular files under ``local_dir`` (our manifest left out)."""
    out: dict[str, int] = {}
    for root, dirs, names in os.walk(local_dir):
        rel_root = Path(root).relative_to(local_dir)
        if rel_root == Path("."):
            dirs[:] = [d for d in dirs if not any(fnmatch.fnmatch(d, p) for p in exclude)]
            names = [n for n in names if n != MANIFEST_NAME and not any(fnmatch.fnmatch(n, p) for p in exclude)]
        for name in names:
            path = Path(root) / name
            if path.is_file():
                out[(rel_root / name).as_posix()] = path.stat().st_size
    return out


def list_sizes(client, location: S3Location) -> dict[str, int]:
    """``{key relative to location/: size}`` for every object under the folder ``location``.

    Zero-byte "folder marker" keys ending in ``/`` (made by some consoles) are skipped.
    """
    base = location.dir_prefix()
    out: dict[str, int] = {}
    for page in client.get_paginator("list_objects_v2").paginate(Bucket=location.bucket, Prefix=base):
        for obj in page.get("Contents", []):
            rel = obj["Key"][len(base):]
            if rel and not (rel.endswith("/") and obj["Size"] == 0):
                out[rel] = obj["Size"]
    return out


def read_manifest(client, location: S3Location) -> dict | None:
    """The manifest of a completed `upload_dir` at ``location``: None if there is none, ``{}`` if
    the object is not a manifest (not JSON, not an object)."""
    try:
        body = client.get_object(Bucket=location.bucket, Key=location.key(MANIFEST_NAME))["Body"].read()
    except Exception as exc:
        if error_code(exc) in ("NoSuchKey", "404"):
            return None
        raise
    try:
        manifest = json.loads(body)
    except ValueError:
        manifest = None
    return manifest if isinstance(manifest, dict) else {}


def latest_checkpoint(client, location: S3Location) -> S3Location | None:
    """The ``checkpoint-N`` folder under ``location`` with the largest N whose upload completed.

    A checkpoint without a manifest (its upload was cut off by a crash) is skipped, so resuming
    never starts from a partial checkpoint.
    """
    steps = []
    for page in client.get_paginator("list_objects_v2").paginate(
            Bucket=location.bucket, Prefix=location.dir_prefix(), Delimiter="/"):
        for common in page.get("CommonPrefixes", []):
            name = common["Prefix"][len(location.dir_prefix()):].rstrip("/")
            if (step := step_of(name)) is not None:
                steps.append(step)
    for step in sorted(steps, reverse=True):
        candidate = location.child(checkpoint_name(step))
        manifest = read_manifest(client, candidate)
        if manifest and isinstance(manifest.get("files"), dict):
            return candidate
        log.warning("%s has no upload manifest (its upload did not finish); skipping it", candidate.uri)
    return None


# ---- download -------------------------------------------------------------------------------------

def download_dir(client, bucket: str, prefix: str, dest: str | Path, *, retries: int = 5,
                 backoff: float = 0.5) -> Path:
    """Download every object under ``s3://bucket/prefix/`` into the new folder ``dest``; returns ``dest``.

    All keys are checked first: one that would land outside ``dest`` (a ``..``, ``.`` or empty
    component, a leading ``/``, a backslash) raises `UnsafeKeyError` before anything is written.
    Files go to a temporary sibling of ``dest`` that is renamed to ``dest`` only when every file has
    arrived with its listed size, so an interrupted download leaves no ``dest`` behind. If the
    prefix has a manifest (written by `upload_dir`), exactly the files it lists are downloaded, and
    a prefix whose listing disagrees with its manifest is refused as incomplete.
    """
    source = S3Location.parse(f"s3://{bucket}/{prefix}")
    dest = Path(dest)
    if dest.exists():
        raise StorageError(f"cannot download {source.uri}/ to {dest}: it already exists (downloads never overwrite); "
                           f"remove it or choose another destination")
    objects = with_retries(f"listing of {source.uri}", lambda: list_sizes(client, source), retries=retries,
                           backoff=backoff)
    for rel in objects:
        check_relative_key(rel, source, dest)
    objects.pop(MANIFEST_NAME, None)
    manifest = with_retries(f"manifest of {source.uri}", lambda: read_manifest(client, source), retries=retries,
                            backoff=backoff)
    if manifest is not None:
        if not isinstance(manifest.get("files"), dict):
            raise StorageError(f"{source.uri}/{MANIFEST_NAME} is not a posttrain upload manifest; delete it to "
                               f"download the folder as listed")
        wrong = sorted(rel for rel, size in manifest["files"].items() if objects.get(rel) != size)
        if wrong:
            raise StorageError(f"{source.uri}/ is incomplete: {len(wrong)} files listed in its upload manifest are "
                               f"missing or of the wrong size ({', '.join(wrong[:5])}); upload it again")
        objects = {rel: objects[rel] for rel in manifest["files"]}
    if not objects:
        raise StorageError(f"nothing to download: no objects under {source.uri}/; check the URI and the endpoint")
    return _download_objects(client, source, objects, dest, retries=retries, backoff=backoff)


def check_relative_key(rel: str, source: S3Location, dest: Path) -> None:
    """Raise `UnsafeKeyError` if ``rel`` (a key relative to ``source``) could leave ``dest``."""
    parts = rel.split("/")
    bad = (not rel or rel.startswith("/") or "\\" in rel or "\x00" in rel
           or any(p in ("", ".", "..") for p in parts))
    if bad or not (dest / rel).resolve().is_relative_to(dest.resolve()):
        raise UnsafeKeyError(
            f"refusing to download {source.uri}/: the key {source.key(rel)!r} would be written outside {dest} "
            f"(it has a '..', '.' or empty path component, a leading '/' or a backslash). Nothing was downloaded; "
            f"rename or delete that object")


def _download_objects(client, source: S3Location, objects: dict[str, int], dest: Path, *, retries: int,
                      backoff: float) -> Path:
    """Download ``objects`` ({relative key: size}) into a temporary sibling of ``dest``, then rename it."""
    dest.parent.mkdir(parents=True, exist_ok=True)
    tmp = make_temp_dir(dest.parent, f".{dest.name}.partial-")
    config = transfer_config()
    try:
        for rel, size in sorted(objects.items()):
            target = tmp / rel
            target.parent.mkdir(parents=True, exist_ok=True)
            download_file(client, source.bucket, source.key(rel), target, size, config=config, retries=retries,
                          backoff=backoff)
        os.rename(tmp, dest)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    return dest


def download_file(client, bucket: str, key: str, target: Path, size: int, *, config=None, retries: int = 5,
                  backoff: float = 0.5) -> None:
    """Download one object to ``target`` (overwritten), retried until it arrives with ``size`` bytes."""
    config = config or transfer_config()

    def once() -> None:
        client.download_file(bucket, key, str(target), Config=config)
        got = target.stat().st_size
        if got != size:
            raise TransientMismatch(f"s3://{bucket}/{key}: got {got} bytes, expected {size}")

    with_retries(f"download of s3://{bucket}/{key}", once, retries=retries, backoff=backoff)


def make_temp_dir(parent: Path, prefix: str) -> Path:
    """A new folder in ``parent`` for a download in progress, readable like any folder once renamed
    (``tempfile.mkdtemp`` alone makes it private to the user: mode 0700)."""
    tmp = Path(tempfile.mkdtemp(prefix=prefix, dir=parent))
    tmp.chmod(0o755)
    return tmp


def human_bytes(n: int) -> str:
    for unit in ("B", "KB", "MB", "GB"):
        if n < 1000 or unit == "GB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1000
    return f"{n} B"
