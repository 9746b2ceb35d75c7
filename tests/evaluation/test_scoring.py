"""Per-sample scoring: strict is exactly the GRPO answer_match reward; mmlu letters; the record."""

from __future__ import annotations

import pytest

from posttrain.data.task_prompts import choice_prompt, math_prompt
from posttrain.evaluation.scoring import choice_loose, choice_strict, score_completion
from posttrain.generation.base import Completion
from posttrain.rewards.builtin import answer_match

# (completion, gold, strict, loose) -- strict and loose worked out by hand.
NUMERIC_CASES = [
    ("<think>7*200</think><answer>1400</answer>", "1400", True, True),
    ("<think>7*200</think><answer>$1,400.00</answer>", "1400", True, True),
    ("<answer>1400</answer>", "#### 1,400", True, True),  # raw GSM8K gold field
    ("<answer> 1400 dollars </answer>", "1400", True, True),  # units are ignored
    ("The answer is 1400.", "1400", False, True),  # no tags: loose only
    ("<answer>1400</answer> but maybe 7", "1400", True, False),  # strict reads the block; loose the last number
    ("<answer>1400</answer><answer>1400</answer>", "1400", False, True),  # two blocks: hedging
    ("<answer>1400", "1400", False, True),  # unclosed
    ("</answer>1400<answer>", "1400", False, True),  # out of order
    ("<answer></answer>", "0", False, False),
    ("<answer>3 or 4</answer>", "4", False, True),
    ("<answer>-5</answer>", "-5", True, True),
    ("<answer>\u22125</answer>", "-5", True, True),  # unicode minus
    ("<answer>5</answer>", "-5", False, False),
    ("<answer>0.5</answer>", "0.50", True, True),
    ("<answer>.5</answer>", "0.5", True, True),
    ("<answer>1,40</answer>", "140", False, False),  # malformed grouping is no number
    ("<answer>x2</answer>", "2", False, False),
    ("<answer>42%</answer>", "42", True, True),
    ("<answer>答案是1400元</answer>", "1400", True, True),
    ("<think>2+3=5</think><answer>5</answer>", "5", True, True),
    ("<think>2+3=5</think><answer>6</answer>", "5", False, False),
    ("<ANSWER>5</ANSWER>", "5", False, True),  # tags are case-sensitive
    ("", "5", False, False),
]


def number_item(gold):
    return {"id": "q", "prompt": math_prompt("q?"), "gold": gold, "scorer": "number"}


@pytest.mark.parametrize("completion,gold,strict,loose", NUMERIC_CASES)
def test_strict_score_is_the_answer_match_reward(completion, gold, strict, loose):
    record = score_completion(number_item(gold), "arm", Completion(text=completion))
    assert answer_match([completion], answer=[gold])[0] == float(record["strict"])
    assert (record["strict"], record["loose"]) == (strict, loose)


def test_the_reward_table_is_large_and_exercises_both_outcomes():
    assert len(NUMERIC_CASES) >= 20
    assert {strict for _, _, strict, _ in NUMERIC_CASES} == {True, False}
    assert any(loose and not strict for _, _, strict, loose in NUMERIC_CASES)


@pytest.mark.parametrize("completion,gold,strict,loose", [
    ("<think>it is 5</think><answer>B</answer>", "B", True, True),
    ("<answer> (b) </answer>", "B", True, False),  # strict is case-blind; loose counts capitals only
    ("<answer>**B**.</answer>", "B", True, True),
    ("<answer>B. 5</answer>", "B", False, True),  # strict wants the letter alone
    ("<answer>C</answer>", "B", False, False),
    ("I think B, no wait, C.", "C", False, True),  # loose: the last standalone letter
    ("Because Done", "B", False, False),  # letters inside words do not count
    ("the answer is a", "A", False, False),  # only capitals: the article 'a' is no choice
    ("<answer>B</answer><answer>B</answer>", "B", False, True),
    ("E is my answer", "A", False, False),  # E is not among A-D
])
def test_choice_scoring(completion, gold, strict, loose):
    assert choice_strict(completion, gold) is strict
    assert choice_loose(completion, gold) is loose
    item = {"id": "m", "prompt": choice_prompt("?", list("1234")), "gold": gold, "scorer": "choice", "choices": list("1234")}
    record = score_completion(item, "arm", Completion(text=completion))
    assert (record["strict"], record["loose"]) == (strict, loose)


def test_choice_loose_uses_the_items_own_letters():
    item = {"id": "m", "prompt": [], "gold": "E", "scorer": "choice", "choices": list("12345")}
    assert score_completion(item, "arm", Completion(text="so E"))["loose"] is True


def test_record_carries_the_generation_facts_and_marks_failed_requests():
    item = number_item("4")
    ok = score_completion(item, "sft", Completion(text="<think>2+2</think><answer>4</answer>", completion_tokens=9,
                                                  finish_reason="stop"), cached=True)
    assert ok == {"id": "q", "arm": "sft", "prompt": item["prompt"], "completion": "<think>2+2</think><answer>4</answer>",
                  "gold": "4", "strict": True, "loose": True, "format": 1.0, "completion_tokens": 9,
                  "finish_reason": "stop", "error": None, "cached": True}
    failed = score_completion(item, "api", Completion(text="", error="HTTP 503", finish_reason=None))
    assert (failed["strict"], failed["loose"], failed["format"], failed["finish_reason"], failed["error"]) == \
        (False, False, 0.0, "error", "HTTP 503")
