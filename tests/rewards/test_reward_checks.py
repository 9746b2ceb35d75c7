"""User rewards checked before the model loads (`trial`) and while training (`guarded`): each fault names the reward,
its file and line, and the completion; None is TRL's "no reward for this completion" and passes value by value."""

import asyncio
import doctest
import inspect
from types import SimpleNamespace

import pytest

from posttrain.rewards import checks
from posttrain.rewards.checks import RewardFault, guarded, trial

ROWS = [{"prompt": [{"role": "user", "content": "What is 3 + 4?"}], "answer": "7"},
        {"prompt": [{"role": "user", "content": "What is 2 + 2?"}], "answer": "4"}]
HERE = checks._short(__file__)  # how messages write a path: relative to the working directory when under it


def line_of(fn, text: str) -> int:
    """The line in this file where `text` is, inside fn."""
    source, start = inspect.getsourcelines(fn)
    return start + next(i for i, line in enumerate(source) if text in line)


def text(completion):
    return completion if isinstance(completion, str) else completion[-1]["content"]


def per_char(completions, answer, **kwargs):
    return [1.0 / len(text(c)) for c in completions]  # ZeroDivisionError on an empty completion


def as_strings(completions, **kwargs):
    return ["1.0" for _ in completions]


def one_value(completions, **kwargs):
    return [0.0]


def not_a_list(completions, **kwargs):
    return 1.0


def nan_on_empty(completions, **kwargs):
    return [float("nan") if not text(c) else 1.0 for c in completions]


def none_without_answer_tag(completions, **kwargs):
    return [1.0 if "<answer>" in text(c) else None for c in completions]


def no_return(completions, **kwargs):
    return [print(end="") for c in completions]


def reads_every_keyword(completions, prompts, completion_ids, answer, trainer_state, log_extra, log_metric, **kwargs):
    assert len(prompts) == len(completions) == len(completion_ids) == len(answer)
    assert all(isinstance(i, int) for ids in completion_ids for i in ids) and trainer_state.global_step == 0
    log_extra("answer", answer)
    log_metric("share", 0.5)
    return [float(a == "7") for a in answer]


async def async_per_char(completions, **kwargs):
    return [1.0 / len(text(c)) for c in completions]


def test_docstring_examples():
    result = doctest.testmod(checks)
    assert result.attempted > 0 and result.failed == 0


def test_a_sound_reward_gets_the_keywords_trl_passes_and_passes():
    assert trial([("training.rewards[0]", reads_every_keyword)], ROWS, "rows.jsonl") == []


def test_a_reward_that_raises_is_named_with_the_line_that_raised_and_the_completion():
    with pytest.raises(ValueError) as caught:
        trial([("training.rewards[1]", per_char)], ROWS, "the training data (rows.jsonl)")
    message = str(caught.value)
    assert message.startswith(f"training.rewards[1] (per_char, {HERE}:{line_of(per_char, 'def ')}) raised ZeroDivisionError")
    assert f"at {HERE}:{line_of(per_char, '1.0 / len')}" in message
    # the empty completion is the second made-up one: completion 1, for row 0, with the row's columns
    assert "on completion 1 ('' (empty)) for row 0 of the training data (rows.jsonl), columns {'answer': '7'}" in message


@pytest.mark.parametrize("fn, what", [
    (as_strings, "value 0 is a str ('1.0'), not a number, for completion 0"),
    (one_value, f"returned 1 value for {2 * len(checks.TRIAL_COMPLETIONS)} completions"),
    (not_a_list, "returned a float (1.0), not a list with one float per completion"),
    (nan_on_empty, "value 1 is nan (return None for 'no reward for this completion'), for completion 1 ('' (empty))"),
    (no_return, f"returned None for all {2 * len(checks.TRIAL_COMPLETIONS)} completions: no reward scores them"),
], ids=lambda v: getattr(v, "__name__", ""))
def test_an_output_trl_cannot_use_is_named_with_the_reward_and_its_definition(fn, what):
    with pytest.raises(ValueError) as caught:
        trial([("training.rewards[0]", fn)], ROWS, "rows.jsonl")
    assert str(caught.value).startswith(f"training.rewards[0] ({fn.__name__}, {HERE}:{line_of(fn, 'def ')}) {what}")


def test_every_fault_is_listed_at_once():
    with pytest.raises(ValueError) as caught:
        trial([("training.rewards[0]", per_char), ("training.rewards[1]", as_strings)], ROWS, "rows.jsonl")
    assert "training.rewards[0] (per_char" in str(caught.value) and "\ntraining.rewards[1] (as_strings" in str(caught.value)


def test_none_for_some_completions_is_trls_no_reward_and_passes():
    assert trial([("training.rewards[0]", none_without_answer_tag)], ROWS, "rows.jsonl") == []


def test_a_reward_with_no_value_is_a_note_when_another_reward_scores_the_completions():
    notes = trial([("training.rewards[0]", no_return), ("training.rewards[1]", as_numbers)], ROWS, "rows.jsonl")
    assert len(notes) == 1 and notes[0].startswith("training.rewards[0] (no_return") and "other rewards score them" in notes[0]
    assert len(trial([("training.rewards[0]", no_return)], ROWS, "rows.jsonl", untried=1)) == 1  # a reward model scores them


def as_numbers(completions, **kwargs):
    return [0.5 for _ in completions]


def test_an_async_reward_is_awaited_and_checked():
    with pytest.raises(ValueError, match=r"async_per_char, .*\) raised ZeroDivisionError"):
        trial([("training.rewards[0]", async_per_char)], ROWS, "rows.jsonl")


def batch(texts: list[str], step: int) -> dict:
    return {"prompts": ["p"] * len(texts), "completions": texts, "completion_ids": [[1]] * len(texts), "answer": ["7"] * len(texts),
            "trainer_state": SimpleNamespace(global_step=step)}


def test_while_training_a_raise_names_the_step_the_completion_and_the_line():
    reward = guarded(per_char, "training.rewards[0]")
    assert reward(**batch(["ab", "abcd"], 0)) == [0.5, 0.25]
    with pytest.raises(RewardFault) as caught:
        reward(**batch(["ab", "", "x"], 6))
    assert str(caught.value) == (f"reward training.rewards[0] (per_char, {HERE}:{line_of(per_char, '1.0 / len')}) raised "
                                 "ZeroDivisionError: float division by zero at step 7, on completion 1 of 3 ('' (empty))")
    assert isinstance(caught.value.__cause__, ZeroDivisionError)  # the traceback --verbose prints


def test_while_training_an_unusable_output_is_named_before_torch_reads_it():
    with pytest.raises(RewardFault, match=r"^reward training.rewards\[2\] \(as_strings, .*\) value 0 is a str \('1.0'\), not a "
                                          r"number at step 1, on completion 0 of 2 \('ab'\)$"):
        guarded(as_strings, "training.rewards[2]")(**batch(["ab", "cd"], 0))


def test_while_training_an_async_reward_stays_async():
    reward = guarded(async_per_char, "training.rewards[0]")
    assert inspect.iscoroutinefunction(reward)
    with pytest.raises(RewardFault, match=r"at step 3, on its batch of 2 completions$"):
        asyncio.run(reward(**batch(["", "a"], 2)))
