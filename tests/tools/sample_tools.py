"""Tools that behave, and tools that misbehave in every way the tool isolation must survive.

Imported by name (`sample_tools:calculator`) in the worker processes, with the tests' sys.path."""

from __future__ import annotations

import ctypes
import os
import sys
import threading


def calculator(expression: str) -> str:
    """Evaluate an arithmetic expression.

    Args:
        expression: The expression, e.g. "3 * (4 + 5)".
    """
    allowed = set("0123456789+-*/(). ")
    if not set(expression) <= allowed:
        raise ValueError(f"only numbers and + - * / ( ) are allowed, got {expression!r}")
    return str(eval(expression, {"__builtins__": {}}))  # noqa: S307 - checked characters only


def add(a: int, b: int) -> int:
    """Add two integers.

    Args:
        a: The first number.
        b: The second number.
    """
    return a + b


def hang(seconds: float) -> str:
    """Block forever, whatever it is asked.

    Args:
        seconds: Ignored.
    """
    threading.Event().wait()
    return "never"


def segfault(x: int) -> str:
    """Read address 0: a real segmentation fault.

    Args:
        x: Ignored.
    """
    ctypes.string_at(0)
    return "never"


def exits(code: int) -> str:
    """Call sys.exit.

    Args:
        code: The exit code.
    """
    sys.exit(code)


def hard_exit(code: int) -> str:
    """Leave the process without cleanup (os._exit), as some C extensions do.

    Args:
        code: The exit code.
    """
    os._exit(code)


def huge(megabytes: int) -> str:
    """Return a very long text.

    Args:
        megabytes: How many million characters.
    """
    return "7" * (megabytes * 1_000_000)


def unserialisable(x: int) -> object:
    """Return an object that is neither text nor JSON.

    Args:
        x: Ignored.
    """
    return threading.Lock()


def chatty(x: int) -> str:
    """Print to stdout before answering (must not corrupt the reply).

    Args:
        x: A number.
    """
    print("noise on stdout " * 100)
    return f"x={x}"


def no_docstring(x: int) -> int:
    return x


def no_hints(x) -> int:
    """Missing a type hint.

    Args:
        x: A number.
    """
    return x


class Counter:
    """A stateful environment: the model counts up, the reward is how close it got to the target."""

    def __init__(self, target: int = 3):
        self.target = target
        self.count = 0

    def reset(self, **row) -> str | None:
        self.count = 0
        return f"Count to {self.target}."

    def increment(self, by: int) -> str:
        """Add to the counter.

        Args:
            by: How much to add.
        """
        self.count += by
        return str(self.count)

    def crash(self, x: int) -> str:
        """Segfault the environment's process.

        Args:
            x: Ignored.
        """
        ctypes.string_at(0)
        return "never"

    def stall(self, x: int) -> str:
        """Never return.

        Args:
            x: Ignored.
        """
        threading.Event().wait()
        return "never"

    def get_reward(self) -> float:
        return 1.0 if self.count == self.target else 0.0


class NoReset:
    def act(self, x: int) -> str:
        """Act.

        Args:
            x: A number.
        """
        return str(x)
