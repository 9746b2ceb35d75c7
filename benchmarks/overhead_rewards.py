"""The GRPO reward of benchmarks/trl_overhead.py, imported by both runs (posttrain by import path
`overhead_rewards:digit_share`, the plain-TRL baseline directly), so both optimise the same thing.

Why not answer_match: a random tiny model never earns it, every reward is 0, the advantages are 0
and neither policy moves -- "the metrics are equal" would then prove nothing. The share of digits
in a completion varies within every group from the first step, so the policy moves within a few
steps (KL 0.02-0.04 by step 4 at lr 1e-3, NOTES.md), and equal metrics mean equal training.
"""


def digit_share(completions, **kwargs):
    """Share of characters that are digits, in [0, 1]; chats are scored on their last message."""
    texts = [c if isinstance(c, str) else c[-1]["content"] for c in completions]
    return [sum(ch.isdigit() for ch in t) / max(1, len(t)) for t in texts]
