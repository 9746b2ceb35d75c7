"""Tools and environments run in child processes: a tool that hangs, crashes or exits never takes
the run with it, and every failure is the tool's error message, counted.

    toolbox = Toolbox(["my_tools:calculator"], None, {}, ToolSettings(timeout=10))
    calculator = toolbox.tools()[0]          # same name, signature and docstring as the user's function
    calculator(expression="2 + 3")           # '5', computed in the worker process
    toolbox.close()

Why processes, and not threads: a thread cannot be stopped. A tool that blocks forever (a socket
read without a timeout, a deadlock) would keep its thread, and whatever it holds, for the rest of
the run; one that segfaults or calls os._exit() takes the whole process, model and optimizer state
included, with it; and C code that never releases the GIL stalls the trainer itself. A child
process is stopped by the kernel (SIGKILL after the timeout), its crash is an end-of-file on a
pipe, and sys.exit() in it is just an exception. The price is a pipe round trip per call (well
under a millisecond) and a start-up of about 0.1 s per worker plus the user's imports, paid once
(and again after a kill).

Layout: plain tools share one worker (TRL calls them one at a time); each environment instance
gets its own worker, because an environment has state: a timeout or crash loses that instance
only, the rollout's further calls are told so, and the next `reset` builds it afresh. The
proxies posttrain hands TRL have the user's names, signatures and docstrings (TRL builds the tool
schema the model sees from them), so the model cannot tell the difference.

What the model reads when a call fails: the proxy raises `ToolError(message)`, and TRL 1.16 puts
`{"error": message}` in the tool turn (the same form it uses for an unknown tool or bad arguments),
so every failure reaches the model the same way. Counts per call kind are in `ToolStats`.
"""

from __future__ import annotations

import atexit
import functools
import inspect
import os
import pickle
import select
import signal
import subprocess
import sys
import threading
import time
import weakref
from dataclasses import dataclass, field

from posttrain.errors import UserError
from posttrain.tools.worker import HEADER, write_message
from posttrain.user_code import import_object

STARTUP_TIMEOUT = 120.0  # seconds a worker may take to start and import the user's modules (not a tool call)


class ToolError(Exception):
    """A tool call failed; the message is what the model reads as the tool's answer."""


@dataclass
class ToolSettings:
    timeout: float = 10.0  # seconds per call
    max_result_chars: int = 4000  # longer results are cut (and counted); training.tool_result_max_chars
    startup_timeout: float = STARTUP_TIMEOUT


@dataclass
class ToolStats:
    """Counts since the last `take()`; thread-safe (TRL may score rewards on another thread)."""

    calls: int = 0
    errors: int = 0  # every failed call: raised, sys.exit, unserialisable, timeout, crash, lost environment
    timeouts: int = 0
    crashes: int = 0  # the worker died during the call (segfault, os._exit, killed)
    truncated: int = 0
    environment_errors: int = 0  # reset or get_reward failed, or an environment could not be built
    _lock: threading.Lock = field(default_factory=threading.Lock, repr=False, compare=False)

    KEYS = ("calls", "errors", "timeouts", "crashes", "truncated", "environment_errors")

    def add(self, **counts: int) -> None:
        with self._lock:
            for key, n in counts.items():
                setattr(self, key, getattr(self, key) + n)

    def take(self) -> dict[str, int]:
        with self._lock:
            out = {k: getattr(self, k) for k in self.KEYS}
            for k in self.KEYS:
                setattr(self, k, 0)
            return out


class WorkerTimeout(Exception):
    pass


class WorkerDied(Exception):
    def __init__(self, how: str):
        super().__init__(how)
        self.how = how


def _exit_description(code: int | None) -> str:
    if code is None:
        return "stopped"
    if code < 0:
        try:
            return f"killed by {signal.Signals(-code).name}"
        except ValueError:
            return f"killed by signal {-code}"
    return f"exited with code {code}"


_LIVE_WORKERS: "weakref.WeakSet[WorkerProcess]" = weakref.WeakSet()


@atexit.register
def _stop_all_workers() -> None:
    for worker in list(_LIVE_WORKERS):
        worker.stop()


class WorkerProcess:
    """One `python -m posttrain.tools.worker` child, started on first use and after it died or was stopped."""

    def __init__(self, settings: ToolSettings, label: str):
        self.settings, self.label = settings, label
        self.proc: subprocess.Popen | None = None

    @property
    def alive(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def start(self) -> None:
        self.stop()
        env = {**os.environ, "PYTHONPATH": os.pathsep.join(p for p in sys.path if p)}  # posttrain itself, as the parent has it
        self.proc = subprocess.Popen([sys.executable, "-m", "posttrain.tools.worker"], stdin=subprocess.PIPE,
                                     stdout=subprocess.PIPE, env=env, close_fds=True)
        _LIVE_WORKERS.add(self)
        self._exchange(("init", list(sys.path), self.settings.max_result_chars), self.settings.startup_timeout)

    def request(self, message, timeout: float):
        """Send one request and wait up to `timeout` seconds for its reply. A worker that does not
        answer in time is killed (WorkerTimeout); one that dies first, or had died, raises WorkerDied."""
        if not self.alive:
            raise self._died() if self.proc is not None else WorkerDied("the process had stopped")
        return self._exchange(message, timeout)

    def _exchange(self, message, timeout: float):
        proc = self.proc
        try:
            write_message(proc.stdin, message)
        except OSError:  # a broken pipe: the worker is gone
            raise self._died() from None
        deadline = time.monotonic() + timeout
        fd = proc.stdout.fileno()
        header = self._read(fd, HEADER.size, deadline)
        return pickle.loads(self._read(fd, HEADER.unpack(header)[0], deadline))

    def _read(self, fd: int, n: int, deadline: float) -> bytes:
        chunks, got = [], 0
        while got < n:
            remaining = deadline - time.monotonic()
            if remaining <= 0 or not select.select([fd], [], [], remaining)[0]:
                self.stop()
                raise WorkerTimeout()
            chunk = os.read(fd, n - got)
            if not chunk:
                raise self._died()
            chunks.append(chunk)
            got += len(chunk)
        return b"".join(chunks)

    def _died(self) -> WorkerDied:
        proc = self.proc
        try:
            code = proc.wait(timeout=5)
        except subprocess.TimeoutExpired:
            self.stop()
            code = None
        self._close_pipes()
        self.proc = None
        _LIVE_WORKERS.discard(self)
        return WorkerDied(_exit_description(code))

    def stop(self) -> None:
        proc = self.proc
        if proc is None:
            return
        if proc.poll() is None:
            proc.kill()
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            pass
        self._close_pipes()
        self.proc = None
        _LIVE_WORKERS.discard(self)

    def _close_pipes(self) -> None:
        for stream in (self.proc.stdin, self.proc.stdout) if self.proc else ():
            try:
                stream.close()
            except OSError:
                pass


class Toolbox:
    """The tools and environment of one run or evaluation, isolated (see the module docstring).

    tool_specs: 'module:function' strings; environment: 'module:Class' or None, built with
    environment_kwargs. Importing happens here, in this process too (the proxies copy each tool's
    signature and docstring), after `posttrain.tools.probe` has checked the specs in a worker.
    """

    def __init__(self, tool_specs: list[str], environment: str | None = None, environment_kwargs: dict | None = None,
                 settings: ToolSettings | None = None, stats: ToolStats | None = None):
        self.settings = settings or ToolSettings()
        self.stats = stats or ToolStats()
        self.tool_specs = list(tool_specs)
        self.environment_spec = environment
        self.environment_kwargs = dict(environment_kwargs or {})
        self._functions = [(spec, import_object(spec, "tool")) for spec in self.tool_specs]
        self._environment_class = import_object(environment, "environment") if environment else None
        self._tools_worker = WorkerProcess(self.settings, "tools")
        self._environments: list[EnvironmentProxy] = []
        self._proxy_class = _proxy_class(self._environment_class) if self._environment_class else None

    # -- plain tools ------------------------------------------------------------------------------
    def tools(self) -> list:
        """Callables for TRL's `tools=` (and the evaluation loop): the user's functions' names,
        signatures and docstrings, each call run in the tools worker."""
        return [_forwarding_function(fn, functools.partial(self.call_tool, spec, fn.__name__)) for spec, fn in self._functions]

    def schemas(self) -> list[dict]:
        """The JSON schemas TRL shows the model (transformers' get_json_schema, as TRL builds them):
        the plain tools, then the environment's methods."""
        from transformers.utils import get_json_schema

        out = [get_json_schema(tool) for tool in self.tools()]
        if self._proxy_class is not None:
            out += [get_json_schema(method) for name, method in inspect.getmembers(self._proxy_class, inspect.isfunction)
                    if not name.startswith("_") and name not in ("reset", "get_reward")]
        return out

    def identity(self) -> dict:
        """What the tools' answers depend on, for caching generations made with them: the specs, the
        schemas, the settings and the source files (name, size, modification time) of their modules."""
        files = set()
        for obj in [fn for _, fn in self._functions] + ([self._environment_class] if self._environment_class else []):
            try:
                path = inspect.getsourcefile(obj)
            except TypeError:
                path = None
            if path and os.path.isfile(path):
                files.add((path, os.path.getsize(path), os.stat(path).st_mtime_ns))
        return {"tools": self.tool_specs, "environment": self.environment_spec, "environment_kwargs": self.environment_kwargs,
                "schemas": self.schemas(), "timeout": self.settings.timeout, "max_result_chars": self.settings.max_result_chars,
                "files": sorted(files)}

    def call_tool(self, spec: str, name: str, kwargs: dict) -> str:
        self.stats.add(calls=1)
        if not self._tools_worker.alive:
            self._start_tools_worker(name)
        reply = self._request(self._tools_worker, ("call", spec, kwargs), name, "the tool's process was restarted")
        return self._text(reply)

    def _start_tools_worker(self, name: str) -> None:
        try:
            self._tools_worker.start()
            self._tools_worker.request(("import", self.tool_specs), self.settings.startup_timeout)
        except (WorkerTimeout, WorkerDied) as e:
            self.stats.add(errors=1, crashes=1)
            raise ToolError(f"{name}: the tool's process could not start ({_failure(e, self.settings.startup_timeout)})") from None

    def _request(self, worker: WorkerProcess, message, name: str, after: str):
        try:
            reply = worker.request(message, self.settings.timeout)
        except WorkerTimeout:
            self.stats.add(errors=1, timeouts=1)
            raise ToolError(f"{name} did not return within {self.settings.timeout:g} s and was stopped") from None
        except WorkerDied as e:
            self.stats.add(errors=1, crashes=1)
            raise ToolError(f"{name} crashed ({e.how}); {after}") from None
        if reply[0] == "error":
            self.stats.add(errors=1)
            raise ToolError(reply[1])
        return reply

    def _text(self, reply) -> str:
        _, text, info = reply
        if info.get("truncated"):
            self.stats.add(truncated=1)
        return text

    # -- environments -----------------------------------------------------------------------------
    @property
    def environment_class(self):
        return self._environment_class

    def environment_factory(self):
        """A zero-argument factory for TRL's `environment_factory=`, or None. The first instance is
        built now, so an environment that cannot be built stops the run before training (exit 2)."""
        if self._proxy_class is None:
            return None
        first = self.new_environment()
        if first._lost:
            raise UserError(f"training.environment: {self.environment_spec} could not be built with environment_kwargs "
                            f"{self.environment_kwargs}: {first._lost}")
        spare = [first]

        def factory():
            return spare.pop() if spare else self.new_environment()

        return factory

    def new_environment(self) -> "EnvironmentProxy":
        env = self._proxy_class(self)
        self._environments.append(env)
        return env

    def close(self) -> None:
        """Stop every worker (they also stop when this process exits, however it exits)."""
        self._tools_worker.stop()
        for env in self._environments:
            env._worker.stop()


def _failure(e: Exception, timeout: float) -> str:
    return f"no answer within {timeout:g} s" if isinstance(e, WorkerTimeout) else e.how


def _forwarding_function(original, call):
    """A function that looks like `original` to inspect/typing (name, signature, docstring, type
    hints: TRL and transformers build the tool's JSON schema from those) and runs `call(kwargs)`."""
    def tool(**kwargs):  # TRL and the evaluation loop pass the model's arguments as keywords
        return call(kwargs)

    return functools.update_wrapper(tool, original)


class EnvironmentLost(RuntimeError):
    """This rollout's environment timed out or crashed: its state is gone. A reward that reads the
    environment's state gets this; it can return None for the rollout (TRL leaves it out)."""


class EnvironmentProxy:
    """Stands in for one environment instance; the instance itself lives in this proxy's worker.

    Only dunder/underscore names live here: TRL treats every public method of the environment's
    class as a tool. Public methods are added per user class by `_proxy_class`; other public
    attributes (the environment's state) are read from the worker on access.
    """

    def __init__(self, toolbox: Toolbox):
        self._toolbox = toolbox
        self._worker = WorkerProcess(toolbox.settings, f"environment {toolbox.environment_spec}")
        self._lost: str | None = None
        self._build()

    def _build(self) -> None:
        toolbox = self._toolbox
        try:
            self._worker.start()
            reply = self._worker.request(("env_new", toolbox.environment_spec, toolbox.environment_kwargs), toolbox.settings.startup_timeout)
        except (WorkerTimeout, WorkerDied) as e:
            reply = ("error", _failure(e, toolbox.settings.startup_timeout))
        if reply[0] == "error":
            self._lose(f"building it failed: {reply[1]}")
            toolbox.stats.add(environment_errors=1)
        else:
            self._lost = None

    def _lose(self, why: str) -> None:
        self._lost = why
        self._worker.stop()

    def _call(self, name: str, kwargs: dict, kind: str):
        toolbox = self._toolbox
        try:
            reply = self._worker.request(("env_call", name, kwargs, kind), toolbox.settings.timeout)
        except WorkerTimeout:
            self._lose(f"{name} did not return within {toolbox.settings.timeout:g} s")
            raise
        except WorkerDied as e:
            self._lose(f"{name} crashed it ({e.how})")
            raise
        return reply

    # what TRL calls -------------------------------------------------------------------------------
    def _reset(self, **kwargs):
        stats = self._toolbox.stats
        if self._lost:
            self._build()  # a fresh instance for the new rollout
            if self._lost:
                return None
        try:
            reply = self._call("reset", kwargs, "observation")
        except (WorkerTimeout, WorkerDied):
            stats.add(environment_errors=1)
            return None
        if reply[0] == "error":
            stats.add(environment_errors=1)
            self._lose(f"reset failed: {reply[1]}")
            return None
        observation = reply[1]
        if observation is not None and not isinstance(observation, (str, list)):
            stats.add(environment_errors=1)
            self._lose(f"reset returned a {type(observation).__name__}; it must return a str, a list of content parts, or None")
            return None
        return observation

    def _tool(self, name: str, kwargs: dict) -> str:
        toolbox = self._toolbox
        toolbox.stats.add(calls=1)
        if self._lost:
            toolbox.stats.add(errors=1)
            raise ToolError(f"{name}: the environment of this rollout is gone ({self._lost}); nothing can be done in it")
        try:
            reply = self._call(name, kwargs, "text")
        except WorkerTimeout:
            toolbox.stats.add(errors=1, timeouts=1)
            raise ToolError(f"{name} did not return within {toolbox.settings.timeout:g} s and was stopped; the environment "
                            "is lost for this rollout") from None
        except WorkerDied as e:
            toolbox.stats.add(errors=1, crashes=1)
            raise ToolError(f"{name} crashed ({e.how}); the environment is lost for this rollout") from None
        if reply[0] == "error":
            toolbox.stats.add(errors=1)
            raise ToolError(reply[1])
        return toolbox._text(reply)

    def _get_reward(self):
        stats = self._toolbox.stats
        if self._lost:
            stats.add(environment_errors=1)
            return None  # TRL: not scored by this reward (NaN), never a silent 0
        try:
            reply = self._call("get_reward", {}, "reward")
        except (WorkerTimeout, WorkerDied):
            stats.add(environment_errors=1)
            return None
        value = reply[1] if reply[0] == "ok" else None
        if reply[0] == "error" or not (value is None or isinstance(value, (int, float)) and not isinstance(value, bool)):
            stats.add(environment_errors=1)
            return None
        return float(value) if value is not None else None

    def __getattr__(self, name: str):
        if name.startswith("_"):
            raise AttributeError(name)
        if self._lost:
            raise EnvironmentLost(f"the environment's state is gone ({self._lost})")
        try:
            reply = self._call_get(name)
        except (WorkerTimeout, WorkerDied):
            raise EnvironmentLost(f"the environment's state is gone ({self._lost})") from None
        if reply[0] == "error":
            raise AttributeError(f"environment attribute {name!r}: {reply[1]}")
        return reply[1]

    def _call_get(self, name: str):
        try:
            return self._worker.request(("env_get", name), self._toolbox.settings.timeout)
        except (WorkerTimeout, WorkerDied) as e:
            self._lose(f"reading {name} failed ({_failure(e, self._toolbox.settings.timeout)})")
            raise


def _proxy_class(cls) -> type:
    """A subclass of EnvironmentProxy with `cls`'s name and one forwarding method per public method
    of `cls` (same signature and docstring), plus `reset` and, if `cls` has it, `get_reward`."""
    namespace: dict = {"__module__": cls.__module__, "__doc__": cls.__doc__}
    for name, method in inspect.getmembers(cls, predicate=inspect.isfunction):
        if name.startswith("_"):
            continue
        if name == "reset":
            forward = lambda self, **kwargs: self._reset(**kwargs)  # noqa: E731
        elif name == "get_reward":
            forward = lambda self: self._get_reward()  # noqa: E731
        else:
            forward = _forwarding_method(name)
        namespace[name] = functools.update_wrapper(forward, method)
    return type(cls.__name__, (EnvironmentProxy,), namespace)


def _forwarding_method(name: str):
    def method(self, **kwargs):  # the model's arguments, as keywords
        return self._tool(name, kwargs)

    return method
