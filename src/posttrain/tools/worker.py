"""The tool worker: a child process that imports the user's tools (or one environment) and runs calls.

    python -m posttrain.tools.worker        (started by posttrain.tools.isolation, never by hand)

Messages are pickled tuples, each preceded by its length (4 bytes, big-endian): requests arrive on
stdin, replies leave on the process's original stdout. What the user's code prints goes to stderr
(fd 1 is pointed there at start-up), so a tool that prints cannot corrupt a reply.

Requests and replies (every reply is ("ok", ...) or ("error", message)):
    ("init", sys_path, max_chars)           -> ("ok", pid)          the parent's sys.path: one import rule
    ("import", [spec, ...])                 -> ("ok", None)         import tools now, not during a timed call
    ("call", spec, kwargs)                  -> ("ok", text, info)   run a tool; its result as text
    ("env_new", spec, kwargs)               -> ("ok", None)         build this worker's environment
    ("env_call", method, kwargs, kind)      -> ("ok", value[, info]) kind: "text" (a tool), "observation"
                                                                     (reset), "reward" (get_reward)
    ("env_get", name)                       -> ("ok", value)        read the environment's state (rewards do)
    ("probe", [item, ...])                  -> ("ok", problems)     posttrain.tools.checks

A tool's result becomes text here: a string as it is, any other JSON value as JSON; anything else
is an error ("not JSON-serialisable"), never a silent str() of an object. Text longer than the
limit is cut, with a note saying how long it was, before it crosses the pipe (a 10 MB result costs
the parent nothing). An exception, and sys.exit(), become an error message; what kills the
process (a segfault, os._exit) or never returns is the parent's to notice.

Standard library only, and nothing of posttrain but `posttrain.user_code`: a worker starts in a
fraction of a second and holds no torch.
"""

from __future__ import annotations

import asyncio
import json
import os
import pickle
import signal
import struct
import sys
import threading
import time

HEADER = struct.Struct(">I")


def write_message(stream, message) -> None:
    data = pickle.dumps(message, protocol=pickle.HIGHEST_PROTOCOL)
    stream.write(HEADER.pack(len(data)) + data)
    stream.flush()


def read_exactly(stream, n: int) -> bytes | None:
    chunks, got = [], 0
    while got < n:
        chunk = stream.read(n - got)
        if not chunk:
            return None
        chunks.append(chunk)
        got += len(chunk)
    return b"".join(chunks)


def read_message(stream):
    """The next message, or None at end of input (the parent closed the pipe or died)."""
    header = read_exactly(stream, HEADER.size)
    if header is None:
        return None
    body = read_exactly(stream, HEADER.unpack(header)[0])
    return None if body is None else pickle.loads(body)


def as_text(value, max_chars: int) -> tuple[str, dict]:
    """A tool's result as the text the model reads, and {"truncated": original length} when it was cut.

    >>> as_text({"sum": 3}, 100)
    ('{"sum": 3}', {})
    >>> as_text("x" * 10, 4)[0].splitlines()[0]
    'xxxx'
    """
    if isinstance(value, str):
        text = value
    else:
        try:
            text = json.dumps(value, ensure_ascii=False)
        except (TypeError, ValueError) as e:
            raise Unserialisable(f"the tool returned a {type(value).__name__}, which is not JSON-serialisable ({e}); "
                                 "return a str or a JSON value (numbers, lists, dicts of them)") from None
    if len(text) <= max_chars:
        return text, {}
    return (text[:max_chars] + f"\n[truncated: the tool returned {len(text):,} characters; only the first {max_chars:,} are shown]",
            {"truncated": len(text)})


class Unserialisable(ValueError):
    pass


def describe_exception(e: BaseException) -> str:
    if isinstance(e, SystemExit):
        return f"the tool called sys.exit({e.code!r}); tools must return a result or raise"
    if isinstance(e, Unserialisable):
        return str(e)
    text = str(e)
    return f"{type(e).__name__}: {text}" if text else type(e).__name__


def _resolve(value):
    """Await a coroutine a tool (or environment method) returned: async tools run here too."""
    if asyncio.iscoroutine(value):
        return asyncio.run(value)
    return value


class Worker:
    def __init__(self):
        self.functions: dict[str, object] = {}
        self.environment = None
        self.max_chars = 10_000

    def function(self, spec: str):
        if spec not in self.functions:
            from posttrain.user_code import import_object

            self.functions[spec] = import_object(spec, "tool")
        return self.functions[spec]

    def handle(self, message):
        kind = message[0]
        if kind == "init":
            sys.path[:] = message[1]
            self.max_chars = message[2]
            return ("ok", os.getpid())
        if kind == "import":
            for spec in message[1]:
                self.function(spec)
            return ("ok", None)
        if kind == "call":
            _, spec, kwargs = message
            text, info = as_text(_resolve(self.function(spec)(**kwargs)), self.max_chars)
            return ("ok", text, info)
        if kind == "env_new":
            from posttrain.user_code import import_object

            _, spec, kwargs = message
            self.environment = import_object(spec, "environment")(**kwargs)
            return ("ok", None)
        if kind == "env_call":
            _, method, kwargs, result_kind = message
            value = _resolve(getattr(self.environment, method)(**kwargs))
            if result_kind == "text":
                text, info = as_text(value, self.max_chars)
                return ("ok", text, info)
            return ("ok", value)
        if kind == "env_get":
            return ("ok", getattr(self.environment, message[1]))
        if kind == "probe":
            from posttrain.tools.checks import check_items

            return ("ok", check_items(message[1]))
        return ("error", f"unknown request {kind!r}")


def _die_with_parent() -> None:
    """Stop when the parent does: the kernel's parent-death signal (Linux), and a watchdog thread
    elsewhere. A tool blocked forever must not outlive the run that called it."""
    parent = os.getppid()
    try:
        import ctypes

        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG
    except (OSError, AttributeError):
        pass

    def watch():
        while True:
            time.sleep(1.0)
            if os.getppid() != parent:
                os._exit(0)

    threading.Thread(target=watch, daemon=True).start()


def main() -> None:
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # Ctrl-C is the parent's to handle; it stops us
    _die_with_parent()
    replies = os.fdopen(os.dup(1), "wb")
    os.dup2(2, 1)  # the user's prints go to stderr, never into a reply
    requests = sys.stdin.buffer
    worker = Worker()
    while True:
        message = read_message(requests)
        if message is None:
            return
        try:
            reply = worker.handle(message)
        except BaseException as e:  # noqa: BLE001 - the user's code: every failure is the tool's error message
            reply = ("error", describe_exception(e))
        try:
            write_message(replies, reply)
        except (pickle.PicklingError, TypeError, AttributeError) as e:  # env_get of a value that cannot cross
            write_message(replies, ("error", f"the value cannot be sent to the trainer ({type(e).__name__}: {e})"))


if __name__ == "__main__":
    main()
