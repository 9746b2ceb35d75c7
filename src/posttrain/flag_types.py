"""argparse types for numeric flags: a value out of range is exit 2 at parse time, naming the flag.

    p.add_argument("--n", type=COUNT)        # "argument --n: -3 is out of range: give a whole number >= 1"

The ranges are those of the recipe keys the flags set (posttrain.recipe.tasks: `n` is ge=1,
`timeout` gt=0, ...); tests/cli/test_numeric_flags.py checks that the two agree. Standard library only.
"""

from __future__ import annotations

import argparse
import math


def number(kind: type, *, ge: float | None = None, gt: float | None = None, le: float | None = None, lt: float | None = None):
    """An argparse `type=` that parses `kind` (int or float) and checks the bounds given."""
    word = "a whole number" if kind is int else "a number"
    rules = [f">= {ge:g}" if ge is not None else "", f"> {gt:g}" if gt is not None else "",
             f"<= {le:g}" if le is not None else "", f"< {lt:g}" if lt is not None else ""]
    rule = " and ".join(r for r in rules if r)

    def parse(text: str):
        try:
            value = kind(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"{text!r} is not {word}" + (f" ({rule})" if rule else "")) from None
        if isinstance(value, float) and not math.isfinite(value):
            raise argparse.ArgumentTypeError(f"{text!r} is not a finite number")
        if (ge is not None and value < ge) or (gt is not None and value <= gt) or (le is not None and value > le) \
                or (lt is not None and value >= lt):
            raise argparse.ArgumentTypeError(f"{text} is out of range: give {word} {rule}")
        return value

    parse.bounds = {"ge": ge, "gt": gt, "le": le, "lt": lt}  # for the agreement test
    parse.__name__ = f"{kind.__name__} {rule}".strip()
    return parse


COUNT = number(int, ge=1)  # --n, --batch-size, --max-new-tokens, --concurrency, ...
NONNEGATIVE = number(int, ge=0)  # --retries, --media-retries, --max-tool-turns, --node-rank
SECONDS = number(float, gt=0)  # --timeout, --tool-timeout, --media-timeout
TEMPERATURE = number(float, ge=0)
TOP_P = number(float, gt=0, le=1)
SHARE = number(float, ge=0, lt=1)  # --max-error-share
ALPHA = number(float, gt=0, lt=1)
PORT = number(int, ge=1, le=65535)
FRACTION = number(float, gt=0, le=1)  # --gpu-memory-utilization
