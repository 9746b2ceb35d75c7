"""Rewards referenced by import path (`user_rewards:digit_share`) in the GRPO end-to-end tests."""

import json
import os


def digit_share(completions, answer, **kwargs):
    """Share of digits in the completion: varies within a group, so GRPO gets a gradient from a random model.
    Records which keyword arguments it received (REWARD_LOG) so a test can check the columns arrived."""
    if os.environ.get("REWARD_LOG"):
        with open(os.environ["REWARD_LOG"], "a") as f:
            f.write(json.dumps({"keys": sorted(kwargs), "answer": answer}) + "\n")
    texts = [c if isinstance(c, str) else c[-1]["content"] for c in completions]
    return [sum(ch.isdigit() for ch in t) / max(1, len(t)) for t in texts]


def letter_share(completions, **kwargs):
    """Share of ASCII letters in the completion: about half of a random tiny model's samples pass 0.5, so the RFT
    end-to-end tests (test_rft.py) keep some completions and reject others."""
    texts = [c if isinstance(c, str) else c[-1]["content"] for c in completions]
    return [sum(ch.isascii() and ch.isalpha() for ch in t) / max(1, len(t)) for t in texts]
