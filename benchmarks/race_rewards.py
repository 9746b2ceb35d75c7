"""The GRPO reward of defaults_race.py, the same function for all three contestants.

posttrain loads it as `race_rewards:answer_reward` (benchmarks/ on PYTHONPATH); the TRL and FAI-RL
scripts import it. Verifiable: 1.0 when the last number in the completion equals the gold answer;
otherwise partial credit, a tenth of the share of digits in the completion, so that a random tiny
model earns a reward that varies within a group and GRPO has a signal to follow.
"""

from __future__ import annotations

import re

_NUMBER = re.compile(r"-?\d+")


def answer_reward(completions, answer, **kwargs) -> list[float]:
    """>>> answer_reward(["so 12", "x"], ["12", "3"])
    [1.0, 0.0]
    """
    out = []
    for completion, gold in zip(completions, answer):
        text = completion if isinstance(completion, str) else completion[-1]["content"]
        numbers = _NUMBER.findall(text)
        if numbers and numbers[-1] == str(gold).strip():
            out.append(1.0)
        else:
            out.append(0.1 * sum(c.isdigit() for c in text) / max(1, len(text)))
    return out
