"""LaTeX answers compared as mathematics, by math-verify: the ``math`` scorer and the ``math_match`` reward.

MATH-style gold answers (``\\frac{1}{2}``, ``2\\sqrt{3}``, ``(-\\infty, 3]``, ``\\{1, 2\\}``, ``\\pi/4``)
are no single number, so the numeric rules of :mod:`posttrain.rewards.answers` refuse them. Here they
are parsed by `math-verify <https://github.com/huggingface/Math-Verify>`_ (the checker TRL's
``accuracy_reward`` and verl use) into SymPy objects and compared for equality: ``\\frac12``,
``1/2`` and ``0.5`` are one answer; ``[1, 2)`` and ``[1, 2]`` are two. Where gold and answer both
state a plain number, they are compared by the numeric parser first, so the ``math`` scorer never
rejects what ``answer_match`` pays for (``\\$1{,}400`` and ``1400 dollars`` are 1400; math-verify
reads neither).

* **strict** (``math_strict``, what ``math_match`` rewards): the single ``<answer>`` block
  (``answers.extract_answer``, the same tag rule as every strict score) equals gold.
* **loose** (``math_loose``): format-blind, the completion's final answer equals gold: the last
  ``<answer>`` block however the tags are placed, else math-verify's own pick (the last ``\\boxed{}``,
  else the last LaTeX or plain expression).

math-verify is an optional extra (``pip install 'posttrain[math]'``); ``missing_extra`` says so
before anything runs. It is imported on first use: it pulls in SymPy and an ANTLR parser (~1 s).
"""

from __future__ import annotations

import functools
import importlib.util
import threading

from posttrain.rewards.answers import extract_answer, numbers_equal, parse_number

__all__ = ["EXTRA_HINT", "math_equal", "math_loose", "math_strict", "missing_extra", "parse_gold"]

EXTRA_HINT = "pip install 'posttrain[math]' (math-verify)"
_DELIMITED = ("$", "\\(", "\\[", "\\boxed")
_ANSWER_OPEN, _ANSWER_CLOSE = "<answer>", "</answer>"
TIMEOUT_S = 5  # math-verify's own default: a pathological expression (huge powers) counts as unreadable or unequal


def _timeout() -> int | None:
    """math-verify times out with SIGALRM, which only the main thread may set; elsewhere it runs unbounded (and its
    warning that it does is silenced, as TRL's accuracy_reward silences it)."""
    if threading.current_thread() is threading.main_thread():
        return TIMEOUT_S
    import logging

    for name in ("math_verify.parser", "math_verify.grader"):
        logging.getLogger(name).setLevel(logging.ERROR)
    return None


def missing_extra(what: str) -> str | None:
    """The message for ``what`` (a reward, a task) when math-verify is not installed, else None."""
    if importlib.util.find_spec("math_verify") is not None:
        return None
    return f"{what} compares LaTeX answers with math-verify, which is not installed: {EXTRA_HINT}"


@functools.lru_cache(maxsize=1)
def _math_verify():
    """math-verify's parse and verify, and its extraction configs (imported once, on first use)."""
    import math_verify

    latex_and_expr = [math_verify.LatexExtractionConfig(), math_verify.ExprExtractionConfig()]
    return math_verify.parse, math_verify.verify, latex_and_expr


def _parse(text: str) -> list:
    """``text`` as math-verify's parsed answers ([] when it finds none). Bare LaTeX (``\\frac{1}{2}``,
    how golds and <answer> blocks hold it) is put in math mode first: math-verify reads LaTeX only there."""
    parse, _, configs = _math_verify()
    if not any(mark in text for mark in _DELIMITED):
        text = f"${text}$"
    return parse(text, extraction_config=configs, parsing_timeout=_timeout())


@functools.lru_cache(maxsize=4096)
def parse_gold(gold: str) -> tuple:
    """Gold as math-verify's parsed answers; ValueError when it reads nothing (a data bug, not a wrong answer).
    Cached: a GRPO group compares many completions with one gold."""
    parsed = _parse(str(gold).strip())
    if not any(not isinstance(answer, str) for answer in parsed):  # only math-verify's fallback, the raw text
        raise ValueError(f"gold answer {gold!r} is no mathematical answer math-verify can read")
    return tuple(parsed)


def math_equal(answer: str | None, gold: str) -> bool:
    """``answer`` (bare LaTeX or plain text) is mathematically gold (``\\frac12`` = ``0.5`` = ``1/2``).

    >>> math_equal("0.5", "\\\\frac{1}{2}"), math_equal("\\\\sqrt{4}", "2"), math_equal("3", "\\\\pi")
    (True, True, False)
    """
    gold_parsed = parse_gold(gold)
    if answer is None or not answer.strip():
        return False
    if numbers_equal(parse_number(answer), parse_number(str(gold))):
        return True
    _, verify, _ = _math_verify()
    return bool(verify(list(gold_parsed), _parse(answer.strip()), timeout_seconds=_timeout()))


def math_strict(completion: str, gold: str) -> bool:
    """The single ``<answer>`` block is mathematically gold (what the ``math_match`` reward pays)."""
    return math_equal(extract_answer(completion), gold)


def math_loose(completion: str, gold: str) -> bool:
    """Format-blind: the completion's final answer is mathematically gold. The final answer is the last
    ``<answer>`` block's content when there is one (however many, closed or not), else math-verify's own
    pick of the text (the last ``\\boxed{}``, else the last LaTeX or plain expression).

    >>> math_loose("so it is $\\\\boxed{\\\\frac{1}{2}}$", "0.5"), math_loose("<answer>1/2</answer><answer>1/3", "1/3")
    (True, True)
    """
    parse_gold(gold)  # an unreadable gold raises here too
    if _ANSWER_OPEN in completion:
        return math_equal(completion.rpartition(_ANSWER_OPEN)[2].partition(_ANSWER_CLOSE)[0], gold)
    parse, verify, configs = _math_verify()
    return bool(verify(list(parse_gold(gold)), parse(completion, extraction_config=configs, parsing_timeout=_timeout()),
                       timeout_seconds=_timeout()))
