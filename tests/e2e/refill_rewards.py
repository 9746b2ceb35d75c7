"""A reward for the refill tests (tests/e2e/test_refill_runs.py): signal on about half of the prompts only."""

import hashlib


def half_the_prompts(completions, answer, **kwargs):
    """Share of digits in the completion for prompts whose gold answer hashes even, 0 for the others: about half
    of all groups have identical rewards, as in a real run where the policy solves none of a prompt's samples."""
    texts = [c if isinstance(c, str) else c[-1]["content"] for c in completions]
    odd = [hashlib.sha256(str(a).encode()).digest()[0] % 2 for a in answer]
    return [0.0 if o else sum(ch.isdigit() for ch in t) / max(1, len(t)) for t, o in zip(texts, odd)]
