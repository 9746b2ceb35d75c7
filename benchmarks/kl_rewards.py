"""Rewards for the KL ablation's *gameable* setup (benchmarks/kl_ablation.py --reward gameable).

The standard setup pays `answer_match` + 0.2 x `format`, and posttrain's `format` pays nothing
for an empty `<think>`: there is nothing to game. These two rewards open the door the reference
experiment's 0.5B model walked through (answers shrinking to an empty think block and a bare
integer): a policy without a KL anchor can earn them by dropping its reasoning.

Referenced from recipes as `kl_rewards:lenient_format` / `kl_rewards:brevity` (the script puts
this folder on PYTHONPATH).
"""

from __future__ import annotations

import re

_SHAPE = re.compile(r"^\s*<think>(.*?)</think>\s*<answer>(.*?)</answer>\s*$", re.S)


def _text(completion) -> str:
    if isinstance(completion, list):
        return "".join(m.get("content", "") for m in completion if isinstance(m, dict))
    return str(completion)


def lenient_format(completions, **kwargs) -> list[float]:
    """1.0 for `<think>...</think><answer>...</answer>`, *including an empty think block*.

    >>> lenient_format(["<think></think><answer>4</answer>", "<think>2+2</think><answer>4</answer>", "4"])
    [1.0, 1.0, 0.0]
    """
    return [1.0 if _SHAPE.match(_text(c)) else 0.0 for c in completions]


def brevity(completions, limit: int = 40, **kwargs) -> list[float]:
    """1 - characters / limit, at least 0: shorter completions earn more (length-sensitive).

    >>> brevity(["", "x" * 20, "x" * 80], limit=40)
    [1.0, 0.5, 0.0]
    """
    return [max(0.0, 1.0 - len(_text(c)) / limit) for c in completions]
