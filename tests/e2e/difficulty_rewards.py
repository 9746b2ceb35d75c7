"""Rewards for the difficulty filter's tests (tests/e2e/test_difficulty.py), each counting the calls made outside
training (trainer_state None: the filter's scoring) in the file $DIFFICULTY_CALLS names."""

import hashlib
import os


def _count(trainer_state) -> None:
    path = os.environ.get("DIFFICULTY_CALLS")
    if path and trainer_state is None:
        with open(path, "a") as f:
            f.write("call\n")


def _unit(text: str) -> float:
    return hashlib.sha256(text.encode()).digest()[0] / 256


def graded(completions, answer, trainer_state=None, **kwargs):
    """1 for a completion whose hash falls under its prompt's own pass probability (0, 1/4, 1/2, 3/4 or 1, from the
    gold answer's hash), else 0: a random tiny model's samples get pass rates spread over every bucket."""
    _count(trainer_state)
    texts = [c if isinstance(c, str) else c[-1]["content"] for c in completions]
    return [1.0 if _unit(t) < hashlib.sha256(str(a).encode()).digest()[0] % 5 / 4 else 0.0 for t, a in zip(texts, answer)]


def always(completions, trainer_state=None, **kwargs):
    """1 for every completion: greedy solves every prompt, so sampling can find nothing more."""
    _count(trainer_state)
    return [1.0] * len(completions)


def fails_on_real_text(completions, trainer_state=None, **kwargs):
    """Scores the start-up trial's made-up completions, and raises on a completion none of them is: a fault only the
    filter's scoring (or training) meets."""
    trial = {"<think>3 + 4 = 7</think><answer>7</answer>", "", "The answer is 7.", "I do not know"}
    texts = [c if isinstance(c, str) else c[-1]["content"] for c in completions]
    if any(t not in trial for t in texts):
        raise ValueError("a completion this reward cannot read")
    return [0.0] * len(texts)
