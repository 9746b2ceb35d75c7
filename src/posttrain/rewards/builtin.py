"""Built-in GRPO reward functions and the reward registry.

Every reward has TRL's signature ``fn(completions, **kwargs) -> list[float]``:

* ``completions`` holds plain strings or chat-format message lists
  (``[{"role": "assistant", "content": "..."}]``; the last message's content is scored);
* dataset columns arrive as keyword lists (``answer=[...]``), one entry per completion;
* TRL also passes non-column keywords (``prompts``, ``trainer_state``, ...): they are ignored.

All scoring goes through :mod:`posttrain.rewards.answers`, the parser evaluation uses too, so
the ``answer_match`` reward is exactly the strict evaluation score.

Registry: ``REWARDS`` maps built-in names to functions; ``get_reward(name, **options)`` resolves a
built-in name or a ``package.module:function`` import path and binds options (for example
``answer_column="gold"``). Options must be named parameters of the function -- a misspelt option
raises instead of being silently swallowed by ``**kwargs``.
"""

from __future__ import annotations

import difflib
import functools
import inspect
from typing import Any, Callable

from posttrain.rewards.http import http_reward
from posttrain.rewards import math_answers
from posttrain.rewards.answers import (
    extract_answer,
    format_score,
    loose_correct,
    parse_number,
    strict_correct,
    text_correct,
)

__all__ = [
    "REWARDS",
    "REWARD_PRESETS",
    "answer_match",
    "completion_text",
    "expand_reward_preset",
    "format_reward",
    "get_reward",
    "loose_match",
    "math_match",
    "numeric_answer",
    "text_match",
]

RewardFn = Callable[..., list[float]]


# Built-in rewards that compare against the gold answer as a number (it must parse as one), and
# those that pay only for the <think>/<answer> format (the prompt should ask for it).
NUMERIC_GOLD_REWARDS = ("answer_match", "loose_match")


def numeric_gold_columns(specs) -> set[str]:
    """The dataset columns whose values the recipe's rewards (RewardSpecs) compare as numbers: each numeric
    built-in reads its `answer_column` option ("answer", the mapped gold column, by default)."""
    return {spec.options.get("answer_column", "answer") for spec in specs if spec.name in NUMERIC_GOLD_REWARDS}
TAG_REWARDS = ("answer_match", "text_match", "format", "numeric_answer", "math_match")
# Built-in rewards that need an optional extra: name -> the message when it is missing (None when installed).
NEEDS_EXTRA = {"math_match": lambda: math_answers.missing_extra("reward 'math_match'")}


def completion_text(completion: Any) -> str:
    """The text to score: the string itself, or the last chat message's content."""
    if isinstance(completion, str):
        return completion
    if isinstance(completion, dict):  # a single message
        completion = [completion]
    if isinstance(completion, list) and all(isinstance(m, dict) for m in completion):
        if not completion:
            return ""
        content = completion[-1].get("content")
        if content is None:  # e.g. a tool-call message with no text
            return ""
        if isinstance(content, str):
            return content
        if isinstance(content, list):  # multimodal parts: [{"type": "text", "text": "..."}]
            return "".join(part.get("text", "") for part in content if isinstance(part, dict))
    raise TypeError(
        f"a completion must be a string or a list of chat messages, got {type(completion).__name__}"
    )


def _column(kwargs: dict[str, Any], column: str, n: int, reward: str) -> list[Any]:
    if column not in kwargs:
        raise ValueError(
            f"reward {reward!r} needs the dataset column {column!r}, which is not among "
            f"the columns passed to it: {sorted(kwargs)}"
        )
    values = list(kwargs[column])
    if len(values) != n:
        raise ValueError(f"reward {reward!r}: {n} completions but {len(values)} values in {column!r}")
    return values


def answer_match(completions: list[Any], *, answer_column: str = "answer", **kwargs: Any) -> list[float]:
    """1.0 when the single ``<answer>`` block equals the gold number (strict score), else 0.0.

    Gold comes from the dataset column ``answer_column``: a bare number or a GSM8K "... #### 42".

    >>> answer_match(["<think>7*200</think><answer>$1,400</answer>", "1400"], answer=["#### 1400"] * 2)
    [1.0, 0.0]
    """
    golds = _column(kwargs, answer_column, len(completions), "answer_match")
    return [float(strict_correct(completion_text(c), gold)) for c, gold in zip(completions, golds)]


def text_match(completions: list[Any], *, answer_column: str = "answer", **kwargs: Any) -> list[float]:
    """1.0 when the single ``<answer>`` block holds the gold answer, else 0.0: text compared
    case-insensitively ("red"), numbers as numbers. For free-text golds (image questions); it is
    the strict score `posttrain eval` gives such answers.

    >>> text_match(["<answer>Red</answer>", "red", "<answer>2.0</answer>"], answer=["red", "red", "2"])
    [1.0, 0.0, 1.0]
    """
    golds = _column(kwargs, answer_column, len(completions), "text_match")
    return [float(text_correct(completion_text(c), gold)) for c, gold in zip(completions, golds)]


def format_reward(completions: list[Any], **kwargs: Any) -> list[float]:
    """``format_score``: 1.0 for one non-empty ``<think>`` block then one non-empty ``<answer>`` block,
    right or wrong. Duplicated, nested or empty blocks (an empty ``<think></think>`` too) score 0; text
    outside the blocks costs up to 0.5. Keep its weight small beside a correctness reward: it pays the
    shape, not the answer.

    >>> format_reward(["<think>x</think><answer>4</answer>", "<answer>4</answer>", "<think></think><answer>4</answer>"])
    [1.0, 0.0, 0.0]
    """
    return [format_score(completion_text(c)) for c in completions]


def numeric_answer(completions: list[Any], **kwargs: Any) -> list[float]:
    """1.0 when the single ``<answer>`` block holds exactly one number (e.g. -3.5), right or wrong,
    else 0.0: it pays the format of a numeric answer, so a wrong number in the tags earns as much as
    a right one. Beside a correctness reward, prefer ``loose_match`` (credit for a right number only).

    >>> numeric_answer(["<answer>-3.5</answer>", "<answer>three</answer>"])
    [1.0, 0.0]
    """
    return [float(parse_number(extract_answer(completion_text(c))) is not None) for c in completions]


def loose_match(completions: list[Any], *, answer_column: str = "answer", **kwargs: Any) -> list[float]:
    """1.0 when the LAST number anywhere in the completion equals gold (loose score), else 0.0.

    It ignores the output format. Alone it pays answers the strict score counts as wrong; beside
    ``answer_match`` it makes the format's credit depend on correctness: with answer_match 1.0 and
    loose_match 0.5, a right answer in the tags earns 1.5, a right one outside them 0.5, any wrong
    answer 0 (recipes/demo-real/grpo.yaml).

    >>> loose_match(["so the total is 1,400.", "<answer>1400</answer> not 7"], answer=[1400, 1400])
    [1.0, 0.0]
    """
    golds = _column(kwargs, answer_column, len(completions), "loose_match")
    return [float(loose_correct(completion_text(c), gold)) for c, gold in zip(completions, golds)]


def math_match(completions: list[Any], *, answer_column: str = "answer", **kwargs: Any) -> list[float]:
    """1.0 when the single ``<answer>`` block is mathematically the gold answer, else 0.0: LaTeX compared
    by math-verify (``\\frac12`` = ``1/2`` = ``0.5``, ``(-\\infty, 3]``, ``\\{1, 2\\}``, ``\\frac{5}{x}``), plain
    numbers as ``answer_match`` compares them. For MATH-style golds; needs ``pip install 'posttrain[math]'``.

    >>> math_match(["<answer>\\\\dfrac{2}{4}</answer>", "1/2", "<answer>1/3</answer>"], answer=["\\\\frac{1}{2}"] * 3)
    [1.0, 0.0, 0.0]
    """
    golds = _column(kwargs, answer_column, len(completions), "math_match")
    return [float(math_answers.math_strict(completion_text(c), str(gold))) for c, gold in zip(completions, golds)]


REWARDS: dict[str, RewardFn] = {
    "answer_match": answer_match,
    "text_match": text_match,
    "format": format_reward,
    "numeric_answer": numeric_answer,
    "loose_match": loose_match,
    "math_match": math_match,
    "http": http_reward,
}


# Named reward lists (`training.rewards: correct_loose`) for a policy that already writes the requested
# format: correctness only, with no reward for the format on its own. A format bonus (`format`,
# `numeric_answer`, the tags' extra in answer_match + loose_match) teaches the shape; once the shape is
# there, its credit is what the policy can still collect without getting anything more right, and on
# recipes/demo-real it was 89% of GRPO's training-reward rise (issue 47). docs/guides/grpo.md says
# when to use each.
REWARD_PRESETS: dict[str, tuple[dict[str, Any], ...]] = {
    # the right number inside the <answer> tags: the strict score; for a policy that tags (nearly) every answer
    "correct_strict": ({"name": "answer_match", "weight": 1.0},),
    # the last number of the completion is right, tags or not: the loose score; the format is left alone
    "correct_loose": ({"name": "loose_match", "weight": 1.0},),
    # LaTeX golds (MATH-style) compared by math-verify in the <answer> tags; needs posttrain[math]
    "correct_math": ({"name": "math_match", "weight": 1.0},),
}


def expand_reward_preset(value: Any) -> Any:
    """A recipe's `rewards` with a preset's name replaced by its list; a list (or anything else) is returned as given.

    >>> expand_reward_preset("correct_loose")
    [{'name': 'loose_match', 'weight': 1.0}]
    """
    if not isinstance(value, str):
        return value
    if value in REWARD_PRESETS:
        return [dict(spec) for spec in REWARD_PRESETS[value]]
    close = difflib.get_close_matches(value, REWARD_PRESETS, n=1)
    hint = f" Did you mean {close[0]!r}?" if close else ""
    raise ValueError(f"unknown reward preset {value!r}.{hint} Presets: {', '.join(REWARD_PRESETS)} (correctness only, "
                     "no format bonus); or a list of rewards such as [{name: answer_match, weight: 1.0}].")


def _import_reward(path: str) -> RewardFn:
    """A reward named by import path, through the one import rule (posttrain.user_code)."""
    from posttrain.user_code import import_object

    return import_object(path, "reward")


def _check_options(fn: RewardFn, name: str, options: dict[str, Any]) -> None:
    if not options:
        return
    try:
        params = list(inspect.signature(fn).parameters.values())
    except (TypeError, ValueError):  # signature not introspectable: let the call decide
        return
    named = {p.name for p in params[1:] if p.kind in (p.POSITIONAL_OR_KEYWORD, p.KEYWORD_ONLY)}
    unknown = sorted(set(options) - named)
    if unknown:
        raise ValueError(
            f"reward {name!r} has no option(s) {unknown}; its options are {sorted(named) or 'none'}"
        )


# TRL's reward functions (trl.rewards) and the built-in that does the same job here, with what sets them apart.
_TRL_EQUIVALENTS = {
    "accuracy_reward": ("math_match", "math-verify on the <answer> block, gold from the 'answer' column; TRL's reads a \\boxed{} "
                        "answer and its gold from a 'solution' column"),
    "think_format_reward": ("format", "<think> then <answer>, neither empty"),
}


def _dotted_hint(name: str) -> str:
    """A did-you-mean for a function named in dotted form, as TRL's docs write them (``trl.rewards.accuracy_reward``):
    an import path puts a colon before the function, and TRL's rewards have built-in counterparts.

    >>> _dotted_hint("trl.rewards.accuracy_reward")[:50]
    " Did you mean 'trl.rewards:accuracy_reward' (an im"
    """
    module, _, function = name.rpartition(".")
    if not module or not function.isidentifier():
        return ""
    hint = f" Did you mean '{module}:{function}' (an import path puts ':' before the function)?"
    if function in _TRL_EQUIVALENTS:
        builtin, how = _TRL_EQUIVALENTS[function]
        hint += f" Or the built-in {builtin!r}, which does the same job ({how})."
    return hint


def get_reward(name: str, **options: Any) -> RewardFn:
    """Resolve a built-in reward name or a ``package.module:function`` path, binding ``options``.

    The returned function's ``__name__`` (what TRL logs) is the registered name for built-ins and
    the function's own name for import paths. Options override same-named keywords at call time.

    >>> reward = get_reward("answer_match", answer_column="gold")
    >>> reward.__name__, reward(["<answer>7</answer>"], gold=["7"])
    ('answer_match', [1.0])
    """
    if ":" in name:
        fn = _import_reward(name)
        label = getattr(fn, "__name__", name.rpartition(":")[2])
    elif name in REWARDS:
        fn, label = REWARDS[name], name
        missing = NEEDS_EXTRA[name]() if name in NEEDS_EXTRA else None
        if missing:
            raise ValueError(missing)
    else:
        close = difflib.get_close_matches(name, REWARDS, n=1)
        hint = f" Did you mean {close[0]!r}?" if close else _dotted_hint(name)
        raise ValueError(
            f"unknown reward {name!r}.{hint} Built-in rewards: {', '.join(sorted(REWARDS))}; "
            "or give an import path 'package.module:function'."
        )
    _check_options(fn, label, options)
    if name == "http":
        from posttrain.rewards.http import check_options

        check_options(**options)

    if inspect.iscoroutinefunction(fn):  # keep async rewards async: TRL awaits those

        @functools.wraps(fn)
        async def reward(completions: list[Any], **kwargs: Any) -> list[float]:
            return await fn(completions, **{**kwargs, **options})

    else:

        @functools.wraps(fn)
        def reward(completions: list[Any], **kwargs: Any) -> list[float]:
            return fn(completions, **{**kwargs, **options})

    reward.__name__ = reward.__qualname__ = label
    return reward
