"""Upload folders on a background thread so training does not wait for the network.

One worker thread takes folders from a queue, one at a time, in order, and uploads each with
`upload_dir` (verified). Rules that keep "nothing is lost" true:

- A folder is deleted locally (``delete_after=True``) only after its upload was verified.
- A failed upload is logged when it happens, kept in `failures`, and raised by `wait()`; its local
  files stay where they are (the failure says where).
- Uploads still queued when the program ends (say, training raised) are finished before it exits.
- ``snapshot=True`` hard-links the folder's files into a private staging folder *in the caller's
  thread, before submit returns*; the upload reads the snapshot, so the original may be deleted
  (by checkpoint rotation) at once. Hard links cost no copy and no disk; where the filesystem
  refuses them the files are copied. The snapshot is removed once its upload is verified.
"""

from __future__ import annotations

import atexit
import contextlib
import logging
import os
import queue
import shutil
import tempfile
import threading
import weakref
from collections import Counter
from dataclasses import dataclass, replace
from pathlib import Path

from .errors import UploadError, UploadFailure, chain, describe
from .location import S3Location
from .s3 import UploadReport, upload_dir

log = logging.getLogger("posttrain.storage")

# Beside the checkpoints in output_dir; the leading dot keeps it out of transformers' `checkpoint-*`
# rotation and `get_last_checkpoint`, and out of `upload_final`.
STAGING_DIR = ".posttrain-upload-staging"


@dataclass(frozen=True)
class _Job:
    local_dir: Path        # what the caller submitted
    source: Path           # what is read: local_dir, or its snapshot
    dest: S3Location
    delete_after: bool
    exclude: tuple[str, ...]


class BackgroundUploader:
    """A queue of folder uploads served by one thread; see the module docstring for the guarantees.

    >>> uploader = BackgroundUploader(make_client())                          # doctest: +SKIP
    >>> uploader.submit("out/checkpoint-2", "s3://bucket/run/checkpoint-2")   # doctest: +SKIP
    >>> reports = uploader.wait()   # raises UploadError if any upload failed # doctest: +SKIP
    """

    def __init__(self, client, *, retries: int = 5, backoff: float = 0.5):
        self.client = client
        self.retries = retries
        self.backoff = backoff
        self._queue: queue.Queue[_Job | None] = queue.Queue()
        self._lock = threading.Lock()
        self._in_flight: Counter[Path] = Counter()
        self._reports: list[UploadReport] = []
        self._failures: list[UploadFailure] = []
        self._thread: threading.Thread | None = None
        self._closed = False
        self._use_threads = True  # off at exit, when thread pools no longer take work
        atexit.register(_finish_at_exit, weakref.ref(self))

    def submit(self, local_dir: str | Path, dest: S3Location | str, *, delete_after: bool = False,
               snapshot: bool = False, exclude: tuple[str, ...] = ()) -> None:
        """Queue ``local_dir`` for upload to the folder ``dest`` and return at once.

        ``delete_after``: remove ``local_dir`` once its upload is verified (never before, never on
        failure). ``snapshot``: upload a hard-linked snapshot taken now, so the caller may delete
        ``local_dir`` right away. ``exclude``: glob patterns for top-level entries to leave out.
        """
        if self._closed:
            raise RuntimeError("BackgroundUploader.submit after close()")
        local_dir = Path(local_dir).resolve()
        if not local_dir.is_dir():
            raise FileNotFoundError(f"cannot upload {local_dir}: no such directory")
        dest = S3Location.parse(dest) if isinstance(dest, str) else dest
        source = _snapshot(local_dir, exclude) if snapshot else local_dir
        with self._lock:
            self._in_flight[local_dir] += 1
            if self._thread is None:
                self._thread = threading.Thread(target=self._work, name="posttrain-s3-upload", daemon=True)
                self._thread.start()
        self._queue.put(_Job(local_dir, source, dest, delete_after, exclude))

    def in_flight(self, path: str | Path) -> bool:
        """True while an upload of ``path`` is queued or running (including its deletion afterwards)."""
        with self._lock:
            return self._in_flight[Path(path).resolve()] > 0

    @property
    def failures(self) -> list[UploadFailure]:
        """Failures so far (not yet collected by `wait`), for a progress line during training."""
        with self._lock:
            return list(self._failures)

    def wait(self) -> list[UploadReport]:
        """Block until every queued upload has finished; return their reports, in submission order.

        Raises `UploadError` listing every failed folder (with where its files are kept) if any
        failed; the error's ``reports`` holds the uploads that succeeded. Either way the results
        are collected: a second `wait` reports only uploads submitted after the first.
        """
        self._queue.join()
        with self._lock:
            reports, self._reports = self._reports, []
            failures, self._failures = self._failures, []
        if failures:
            lines = "\n  ".join(f.render() for f in failures)
            raise UploadError(f"{len(failures)} of {len(failures) + len(reports)} uploads failed; nothing of "
                              f"theirs was deleted locally:\n  {lines}", failures=failures, reports=reports)
        return reports

    def close(self) -> None:
        """Finish queued uploads and stop the thread (does not raise; call `wait` for the results)."""
        if self._closed:
            return
        self._closed = True
        if self._thread is not None:
            self._queue.put(None)
            self._thread.join()

    def __enter__(self) -> BackgroundUploader:
        return self

    def __exit__(self, exc_type, exc, tb) -> None:
        """Finish the queue; raise `UploadError` for failures no `wait` collected (unless already raising)."""
        self.close()
        if exc_type is None:
            self.wait()

    def _work(self) -> None:
        while (job := self._queue.get()) is not None:
            try:
                self._run(job)
            finally:
                with self._lock:
                    self._in_flight[job.local_dir] -= 1
                self._queue.task_done()
        self._queue.task_done()

    def _run(self, job: _Job) -> None:
        threads = self._use_threads
        try:
            report = upload_dir(self.client, job.source, job.dest.bucket, job.dest.prefix, retries=self.retries,
                                backoff=self.backoff, exclude=job.exclude, use_threads=threads)
        except Exception as exc:
            if threads and (not self._use_threads or _pools_shut_down(exc)):
                # The program began to exit mid-upload and thread pools stopped taking work: go
                # again in this thread (uploads of the same files are idempotent).
                self._use_threads = False
                log.info("program exiting: uploading %s again without threads", job.local_dir)
                return self._run(job)
            reason = exc.reason if isinstance(exc, UploadError) else describe(exc)
            failure = UploadFailure(str(job.local_dir), job.dest.uri, reason, kept=str(job.source))
            log.error("upload failed: %s", failure.render())
            with self._lock:
                self._failures.append(failure)
            return
        report = replace(report, local_dir=str(job.local_dir))
        if job.source != job.local_dir:
            shutil.rmtree(job.source, ignore_errors=True)
            with contextlib.suppress(OSError):  # the staging folder goes when its last snapshot does
                job.source.parent.rmdir()
        if job.delete_after:
            shutil.rmtree(job.local_dir, ignore_errors=True)
        log.info(report.render())
        with self._lock:
            self._reports.append(report)


def _pools_shut_down(exc: BaseException) -> bool:
    """True if ``exc`` comes from a thread pool refusing work because the interpreter is exiting."""
    return any(isinstance(e, RuntimeError) and "interpreter shutdown" in str(e) for e in chain(exc))


def _finish_at_exit(ref: weakref.ref) -> None:
    """If the program ends (a crash included) with uploads still queued, finish them first.

    The worker is a daemon thread, so a forgotten `close` can never hang the interpreter; daemon
    threads keep running while atexit handlers run, so this is where queued checkpoints still get
    out. Failures are logged by the worker as they happen.
    """
    uploader = ref()
    if uploader is None or uploader._closed:
        return
    pending = sum(uploader._in_flight.values())
    if pending:
        log.warning("finishing %d queued S3 uploads before exit", pending)
    uploader._use_threads = False
    uploader.close()


def _snapshot(local_dir: Path, exclude: tuple[str, ...]) -> Path:
    """Hard-link (or, across filesystems, copy) the files of ``local_dir`` into a new staging folder.

    Hard links make rotation harmless: deleting ``local_dir`` removes its names, not the data the
    snapshot's names still point to. Writers that replace files (save to a new name, then rename)
    leave the snapshot untouched too; only in-place rewrites of the same inode would show through.
    """
    import fnmatch

    staging = local_dir.parent / STAGING_DIR
    for attempt in range(3):  # the worker removes the staging folder when it empties: make it again
        staging.mkdir(exist_ok=True)
        try:
            snap = Path(tempfile.mkdtemp(prefix=f"{local_dir.name}.", dir=staging))
            break
        except FileNotFoundError:
            if attempt == 2:
                raise
    try:
        for root, dirs, names in os.walk(local_dir):
            rel = Path(root).relative_to(local_dir)
            if rel == Path("."):
                dirs[:] = [d for d in dirs if not any(fnmatch.fnmatch(d, p) for p in exclude)]
                names = [n for n in names if not any(fnmatch.fnmatch(n, p) for p in exclude)]
            for d in dirs:
                (snap / rel / d).mkdir()
            for name in names:
                src, dst = Path(root) / name, snap / rel / name
                try:
                    os.link(src, dst)
                except OSError:
                    shutil.copy2(src, dst)
    except BaseException:
        shutil.rmtree(snap, ignore_errors=True)
        raise
    return snap
