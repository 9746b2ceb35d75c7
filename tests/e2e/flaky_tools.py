"""A calculator that misbehaves on cue, and an environment with state, for the GRPO tool-loop tests.

`calculator` answers like posttrain.tools.calculator, except for the expressions "hang" (blocks
forever), "crash" (a real segfault), "exit" (sys.exit(3)) and "huge" (a 10 MB result)."""

from __future__ import annotations

import ctypes
import json
import os
import sys
import threading


def calculator(expression: str):
    """Evaluate an arithmetic expression.

    Args:
        expression: An arithmetic expression such as '12 * 7 + 5'.
    """
    if expression == "hang":
        threading.Event().wait()
    if expression == "crash":
        ctypes.string_at(0)
    if expression == "exit":
        sys.exit(3)
    if expression == "huge":
        return "7" * 10_000_000
    from posttrain.tools.calculator import calculator as real

    return real(expression)


class Counter:
    """Count up to a target; the reward is 1 when the count hits it."""

    def __init__(self, target: int = 2):
        self.target = target
        self.count = 0

    def reset(self, **row) -> str | None:
        self.count = 0
        return None

    def increment(self, by: int) -> str:
        """Add to the counter.

        Args:
            by: How much to add.
        """
        if by == 99:
            ctypes.string_at(0)  # a real crash, in the middle of a rollout
        self.count += by
        return str(self.count)

    def get_reward(self) -> float:
        return 1.0 if self.count == self.target else 0.0


def record(completions, environments=None, **kwargs):
    """A reward that logs what it received (TOOL_LOG): the rollouts' messages and the environments'
    state it can read; it pays 1 for a final turn that says 'The answer is'."""
    path = os.environ.get("TOOL_LOG")
    if path:
        states = []
        for env in environments or []:
            try:
                states.append(env.count)
            except Exception as e:  # noqa: BLE001 - a lost environment says so
                states.append(type(e).__name__)
        with open(path, "a") as f:
            f.write(json.dumps({"completions": completions, "states": states}, default=str) + "\n")
    return [float("The answer is" in (c[-1].get("content") or "")) for c in completions]
