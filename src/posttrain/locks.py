"""One machine-wide exclusive lock: ``flock`` on a file, so the kernel releases it if the holder dies.

Used wherever several processes of one machine (the ranks of a launch, two runs started at once)
must not do the same expensive work twice: an s3:// download, a GGUF conversion, a resume lookup.
"""

from __future__ import annotations

import contextlib
import fcntl
import logging
from pathlib import Path


@contextlib.contextmanager
def exclusive(lock_path: Path, waiting: str | None = None, log: logging.Logger | None = None):
    """Hold an exclusive flock on ``lock_path`` (created if missing); log ``waiting`` (at INFO, on ``log``)
    if another process holds it first."""
    lock_path.parent.mkdir(parents=True, exist_ok=True)
    with open(lock_path, "a+") as f:
        try:
            fcntl.flock(f, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            if waiting and log is not None:
                log.info("%s (lock %s)", waiting, lock_path)
            fcntl.flock(f, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(f, fcntl.LOCK_UN)
