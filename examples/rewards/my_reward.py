"""A GRPO reward of your own, in the shape posttrain and TRL call it. A recipe names it by import path:

    training:
      rewards:
        - {name: my_reward:exact_number, weight: 1.0}
        - {name: my_reward:exact_number, weight: 1.0, tag: final}   # or: an option, bound by name

posttrain imports `my_reward` from the installed packages, then the recipe's folder, then the
working directory (posttrain.user_code), so this file can sit beside the recipe. The guide:
docs/guides/own-model-data-reward.md; the test that runs it: tests/rewards/test_own_reward_example.py.

The contract (TRL 1.16's GRPOTrainer._calculate_rewards makes the call; posttrain passes it through,
adding the recipe's options):

* ``completions``: one entry per completion in the generation batch. Chat prompts (posttrain's
  default: a text prompt is wrapped as a user message) give a list holding one assistant message,
  ``[{"role": "assistant", "content": "..."}]``; text prompts (``data.use_chat_template: false``)
  give plain strings.
* every dataset column, as a keyword list aligned with ``completions`` (one value per completion);
  the gold answer, whatever its column is called, arrives as ``answer``, as text.
* TRL adds ``prompts``, ``completion_ids``, ``trainer_state``, ``log_extra`` and ``log_metric``:
  take them with ``**kwargs``.
* return one float per completion, in order. The reward is logged as ``rewards/exact_number/mean``.

Standard library only: the parse here is this example's own. posttrain's built-in ``answer_match``
pays for the same thing with the parser evaluation uses (posttrain.rewards.answers); replace the
body below with the check your task needs.
"""

from __future__ import annotations

from decimal import Decimal, InvalidOperation


def completion_text(completion) -> str:
    """The text of one completion: the string itself, or the content of its last message."""
    if isinstance(completion, str):
        return completion
    return completion[-1].get("content") or ""  # content is None on a message that only calls a tool


def block(text: str, tag: str) -> str | None:
    """The stripped content of the single <tag>...</tag> block; None when there is none, more than one, or
    they are out of order (a model must not hedge with two answers)."""
    opening, closing = f"<{tag}>", f"</{tag}>"
    if text.count(opening) != 1 or text.count(closing) != 1:
        return None
    start, end = text.index(opening) + len(opening), text.index(closing)
    return text[start:end].strip() if start <= end else None


def as_number(text: str | None) -> Decimal | None:
    """The number `text` is, ignoring thousands commas and a dollar sign ("$1,400.00" is 1400), or None."""
    if text is None:
        return None
    try:
        value = Decimal(text.replace(",", "").replace("$", "").strip())
    except InvalidOperation:
        return None
    return value if value.is_finite() else None


def exact_number(completions: list, answer: list[str], *, tag: str = "answer", **kwargs) -> list[float]:
    """1.0 when the completion's single <tag> block (default <answer>) is exactly the gold number, else 0.0.

    Numbers compare as numbers ("1,400", "$1400" and "1400.0" all equal a gold "1400"); a block with
    anything besides the number ("1400 dollars"), no block, or two blocks earn 0.0.

    >>> chat = [{"role": "assistant", "content": "<think>7 * 200 = 1400</think>\\n<answer> 1,400 </answer>"}]
    >>> exact_number([chat, "<answer>1400 dollars</answer>", "<answer>1399</answer>"], answer=["1400"] * 3)
    [1.0, 0.0, 0.0]
    """
    gold = [as_number(str(a)) for a in answer]
    return [float(g is not None and as_number(block(completion_text(c), tag)) == g) for c, g in zip(completions, gold)]
