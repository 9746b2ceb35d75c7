"""One run owns its output_dir: an exclusive lock, and who holds it.

Two `posttrain train` runs with the same `training.output_dir` would interleave checkpoints and
overwrite each other's files. The first run takes an `flock` on `output_dir/.posttrain.lock` and
writes its pid, host, start time and command there; a second run finds the lock taken and exits
with code 2 naming the holder.

The kernel drops an flock when its process dies, however it dies (SIGKILL, OOM, power loss of a
local disk), so a dead run never blocks the next one. A lock file that still names a holder when
the lock is free is such a stale lock: the new run says so and takes over. On a clean exit the
file is emptied (not deleted: deleting it while another process waits on the same path would let
two processes lock two different files).
"""

from __future__ import annotations

import datetime
import fcntl
import json
import os
import socket
import sys
from pathlib import Path

from posttrain.errors import UserError

LOCK_NAME = ".posttrain.lock"


class OutputDirLock:
    def __init__(self, output_dir: Path):
        self.path = Path(output_dir) / LOCK_NAME
        self.fd: int | None = None
        self.stale: dict | None = None  # the previous holder's record, when it died holding the lock

    def acquire(self) -> "OutputDirLock":
        try:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o644)
        except OSError as e:  # output_dir is a file, or not writable
            raise UserError(f"training.output_dir {str(self.path.parent)!r}: cannot use it as the run's folder "
                            f"({e.strerror or e}); give a directory this user can write.") from None
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            os.close(fd)
            record = _read(self.path)
            holder = _describe(record)
            stop = (f"stop it with `kill -INT {record['pid']}` (it saves a checkpoint at the step in progress; this command "
                    "then continues it)" if record.get("host") == socket.gethostname() and record.get("pid") else "stop it")
            raise UserError(f"training.output_dir {str(self.path.parent)!r} is in use by another run ({holder}). Two runs in "
                            f"one folder would mix their checkpoints: wait for it to finish, {stop}, or set another "
                            "training.output_dir.") from None
        self.stale = _read(self.path) or None
        record = {"pid": os.getpid(), "host": socket.gethostname(), "started": datetime.datetime.now().isoformat(timespec="seconds"),
                  "command": " ".join(["posttrain", *sys.argv[1:]])}
        os.ftruncate(fd, 0)
        os.pwrite(fd, (json.dumps(record) + "\n").encode(), 0)
        os.fsync(fd)
        self.fd = fd
        return self

    def release(self) -> None:
        if self.fd is None:
            return
        os.ftruncate(self.fd, 0)
        os.close(self.fd)  # closing drops the flock
        self.fd = None

    def stale_note(self) -> str | None:
        if not self.stale:
            return None
        return f"note: the previous run in this folder ({_describe(self.stale)}) ended without releasing it (killed?); taking over"


def _read(path: Path) -> dict:
    try:
        return json.loads(path.read_text() or "{}")
    except (OSError, ValueError):
        return {}


def _describe(record: dict) -> str:
    if not record:
        return "holder unknown"
    return f"pid {record.get('pid')} on host {record.get('host')}, started {record.get('started')}: {record.get('command')}"
