"""Score one completion against its item's gold answer: the per-sample record of every evaluation.

Numeric tasks (arithmetic, gsm8k, custom) use exactly the functions of
:mod:`posttrain.rewards.answers` that the GRPO rewards use -- ``strict_correct`` *is* what
``answer_match`` rewards, so training reward and evaluation score cannot disagree
(tests/evaluation/test_scoring.py runs both over one table of cases).

Multiple-choice tasks (mmlu) compare letters, not numbers, with the same tag parser:

* strict -- the single ``<answer>`` block (``extract_answer``), stripped of surrounding whitespace
  and punctuation, equals the gold letter, case-insensitively: ``<answer>(b)</answer>`` counts,
  ``<answer>B. Paris</answer>`` does not.
* loose  -- format-blind: the LAST standalone capital letter among the item's choices (A-D for
  MMLU) anywhere in the completion equals gold. Standalone means not part of a word ("Because"
  holds no B). Only capitals count, so the article "a" is never read as choice A; a sentence
  starting with the article "A" still is -- loose is a diagnostic, strict is the score.

Free-text answers (custom tasks whose gold is not a number, e.g. "red" for an image question):

* strict -- the single ``<answer>`` block equals the gold, case-insensitively, with surrounding
  whitespace and punctuation stripped.
* loose  -- the completion, tags removed, ends with the gold as whole words ("The square is red.").

LaTeX answers (the ``math`` task: MATH-style golds such as ``\\frac{1}{2}``, ``(-\\infty, 3]``):

* strict -- the single ``<answer>`` block is mathematically the gold (math-verify; what the
  ``math_match`` reward pays): ``posttrain.rewards.math_answers.math_strict``.
* loose  -- the completion's final answer (its last ``<answer>`` block, else the last ``\\boxed{}`` or
  expression) is mathematically the gold: ``math_loose``.

``format`` is ``format_score`` (the format reward) for every task.
"""

from __future__ import annotations

import re
import string
from typing import Any

from posttrain.rewards.answers import extract_answer, format_score, loose_correct, strict_correct, text_correct

__all__ = ["SCORERS", "choice_loose", "choice_strict", "score_completion", "text_loose", "text_strict"]

SCORERS = ("number", "choice", "text", "math")  # an item's "scorer": numbers, choice letters, free text, LaTeX
_STRIP = string.whitespace + string.punctuation


def choice_strict(completion: str, gold: str) -> bool:
    """The ``<answer>`` block holds just the gold letter (case-insensitive, punctuation stripped).

    >>> choice_strict("<think>...</think><answer> (b) </answer>", "B"), choice_strict("<answer>B. 5</answer>", "B")
    (True, False)
    """
    answer = extract_answer(completion)
    return answer is not None and answer.strip(_STRIP).upper() == gold.upper()


def choice_loose(completion: str, gold: str, letters: str = "ABCD") -> bool:
    """The last standalone capital letter among ``letters`` anywhere in the completion is gold.

    >>> choice_loose("Because of that, it is C.", "C"), choice_loose("C or maybe D", "C")
    (True, False)
    """
    found = re.findall(rf"(?<![A-Za-z])[{re.escape(letters)}](?![A-Za-z])", completion)
    return bool(found) and found[-1] == gold.upper()


def _normal(text: str) -> str:
    return " ".join(re.sub(r"[^\w\s]", " ", text.lower()).split())


def text_strict(completion: str, gold: str) -> bool:
    """The ``<answer>`` block holds just the gold text: ``answers.text_correct``, what the
    ``text_match`` reward pays for.

    >>> text_strict("<answer> Red. </answer>", "red"), text_strict("<answer>dark red</answer>", "red")
    (True, False)
    """
    return text_correct(completion, gold)


def text_loose(completion: str, gold: str) -> bool:
    """The completion (tags removed) ends with the gold as whole words.

    >>> text_loose("The square is red.", "red"), text_loose("red or blue", "red")
    (True, False)
    """
    said, want = _normal(re.sub(r"<[^>]*>", " ", completion)), _normal(gold)
    return bool(want) and (said == want or said.endswith(" " + want))


def _score(item: dict, text: str) -> tuple[bool, bool]:
    if item["scorer"] == "text":
        return text_strict(text, item["gold"]), text_loose(text, item["gold"])
    if item["scorer"] == "number":
        return strict_correct(text, item["gold"]), loose_correct(text, item["gold"])
    if item["scorer"] == "math":
        from posttrain.rewards.math_answers import math_loose, math_strict

        return math_strict(text, item["gold"]), math_loose(text, item["gold"])
    if item["scorer"] == "choice":
        letters = string.ascii_uppercase[: len(item["choices"])]
        return choice_strict(text, item["gold"]), choice_loose(text, item["gold"], letters)
    raise ValueError(f"item {item['id']!r}: unknown scorer {item['scorer']!r}; expected one of {SCORERS}")



def score_completion(item: dict, arm: str, completion: Any, *, cached: bool = False) -> dict:
    """The record for ``item`` answered by ``arm``: what was asked and answered, and its scores.

    ``completion`` is a ``posttrain.generation.base.Completion`` (or anything with its fields).
    A failed request (``completion.error``) scores as wrong; the error stays in the record so a
    report can count it instead of mistaking an outage for a bad model.
    """
    text = completion.text or ""
    strict, loose = _score(item, text)
    return {
        "id": item["id"],
        "arm": arm,
        "prompt": item["prompt"],
        "completion": text,
        "gold": item["gold"],
        "strict": strict,
        "loose": loose,
        "format": format_score(text),
        "completion_tokens": completion.completion_tokens,
        "finish_reason": "error" if completion.error else completion.finish_reason,
        "error": completion.error,
        "cached": cached,
        # with tools: every turn after the prompt (calls and results), the counts, an environment's reward;
        # without a chat template: prompt_form "plain" (generation/plain_prompts.py)
        **{k: completion.extra[k] for k in ("turns", "tools", "environment_reward", "prompt_form") if k in (completion.extra or {})},
    }
