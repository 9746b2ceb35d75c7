"""Rewards for the KL experiments' *gameable* setups (experiments/kl-ablation.yaml,
experiments/kl-real.yaml).

The standard setup pays `answer_match` + 0.2 x `format`, and posttrain's `format` pays nothing
for an empty `<think>`: there is nothing to game. These rewards open the door the reference
experiment's 0.5B model walked through (answers shrinking to an empty think block and a bare
integer): a policy without a KL anchor can earn them by dropping its reasoning. kl-ablation adds
`brevity`; kl-real uses the reference's own shape, `lenient_format` + `integer_answer`.

Referenced as `benchmarks.kl_rewards:lenient_format` (`:brevity`, `:integer_answer`) from the repository root,
where `posttrain experiment` runs every stage (experiments/kl-ablation.yaml's overrides,
recipes/demo/kl-real/grpo.yaml); the KL ablation's committed run named them `kl_rewards:...` with this folder on
PYTHONPATH (the same functions: TRL logs them by their own names).
"""

from __future__ import annotations

import re

from posttrain.rewards.answers import extract_answer

_SHAPE = re.compile(r"^\s*<think>(.*?)</think>\s*<answer>(.*?)</answer>\s*$", re.S)
_INTEGER = re.compile(r"^\s*-?\d+\s*$")


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


def integer_answer(completions, **kwargs) -> list[float]:
    """1.0 when the single `<answer>` block (posttrain's parser, as `answer_match` reads it) is a bare
    integer, right or wrong: the reference experiment's "digit" reward.

    >>> integer_answer(["<think></think><answer>12</answer>", "<answer>12.5</answer>", "<answer>twelve</answer>", "12"])
    [1.0, 0.0, 0.0, 0.0]
    """
    return [1.0 if _INTEGER.match(extract_answer(_text(c)) or "") else 0.0 for c in completions]
