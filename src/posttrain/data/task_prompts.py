"""The prompts evaluation sends, shared with GRPO training so both ask for the same format.

They live in data/, below evaluation/ and the trainers, because both use them: the data step
builds training prompts from them and evaluation tasks ask with them.

Strict scoring (and the ``answer_match`` reward) reads only the ``<answer>...</answer>`` block, so
a model is only scored fairly when the prompt asks for that block. Training imports
``math_prompt`` too: the format a model is rewarded for is the format it is evaluated on.
"""

from __future__ import annotations

import string

__all__ = ["CHOICE_SYSTEM_PROMPT", "LATEX_SYSTEM_PROMPT", "MATH_SYSTEM_PROMPT", "choice_prompt", "latex_prompt", "math_prompt"]

# The DeepSeek-R1-Zero / GSM8K-GRPO style prompt: reasoning in <think>, one number in <answer>.
MATH_SYSTEM_PROMPT = (
    "A conversation between User and Assistant. The User asks a math question and the Assistant "
    "solves it. The Assistant first thinks through the reasoning step by step, then gives the final "
    "answer. The reasoning goes inside <think> </think> tags and the final answer, a single number "
    "without units, inside <answer> </answer> tags, like this:\n"
    "<think> reasoning here </think>\n<answer> 42 </answer>"
)

# The same format for answers that are no single number (the `math` task, math_match): LaTeX in <answer>.
LATEX_SYSTEM_PROMPT = (
    "A conversation between User and Assistant. The User asks a math question and the Assistant "
    "solves it. The Assistant first thinks through the reasoning step by step, then gives the final "
    "answer. The reasoning goes inside <think> </think> tags and the final answer, in LaTeX without dollar "
    "signs (a number, fraction, expression, interval or set, simplified), inside <answer> </answer> tags, "
    "like this:\n<think> reasoning here </think>\n<answer> \\frac{3}{4} </answer>"
)

CHOICE_SYSTEM_PROMPT = (
    "A conversation between User and Assistant. The User asks a multiple-choice question and the "
    "Assistant answers it. The Assistant first thinks through the reasoning step by step, then gives "
    "the final answer. The reasoning goes inside <think> </think> tags and the final answer, only the "
    "letter of the correct choice, inside <answer> </answer> tags, like this:\n"
    "<think> reasoning here </think>\n<answer> B </answer>"
)


def math_prompt(question: str) -> list[dict]:
    """Chat messages asking ``question`` in the <think>/<answer> format.

    >>> [m["role"] for m in math_prompt("What is 2 + 3?")]
    ['system', 'user']
    """
    return [{"role": "system", "content": MATH_SYSTEM_PROMPT}, {"role": "user", "content": question}]


def latex_prompt(question: str) -> list[dict]:
    """Chat messages asking ``question`` for a LaTeX answer in the <think>/<answer> format (the `math` task)."""
    return [{"role": "system", "content": LATEX_SYSTEM_PROMPT}, {"role": "user", "content": question}]


def choice_prompt(question: str, choices: list[str]) -> list[dict]:
    """Chat messages asking a multiple-choice ``question``, choices lettered A, B, C, ...

    >>> choice_prompt("2 + 3 = ?", ["4", "5"])[1]["content"]
    '2 + 3 = ?\\n\\nA. 4\\nB. 5'
    """
    lettered = "\n".join(f"{letter}. {choice}" for letter, choice in zip(string.ascii_uppercase, choices))
    return [
        {"role": "system", "content": CHOICE_SYSTEM_PROMPT},
        {"role": "user", "content": f"{question}\n\n{lettered}"},
    ]
