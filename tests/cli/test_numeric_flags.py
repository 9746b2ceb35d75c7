"""Numeric flags are checked when the command line is parsed: a negative or zero count, timeout or
size is exit 2 at once, naming the flag (`posttrain eval --n -3` used to run for ever). Each flag's
range is the range of the recipe key it sets, so a flag and its recipe key accept the same values."""

import argparse
import time

import pytest

from posttrain.cli import build_parser, main
from posttrain.recipe.tasks import EvaluationSection, InferenceSection


def numeric_actions():
    """(command, flag, action) for every int/float-valued flag of every command."""
    parser = build_parser()
    sub = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    for command, p in sub.choices.items():
        for action in p._actions:
            if action.option_strings and (action.type in (int, float) or hasattr(action.type, "bounds")):
                yield command, action.option_strings[0], action


def bounds(field) -> dict:
    out = {"ge": None, "gt": None, "le": None, "lt": None}
    for rule in field.metadata:
        for key in out:
            if hasattr(rule, key):
                out[key] = getattr(rule, key)
    return out


def test_every_numeric_flag_is_range_checked_except_seeds():
    unchecked = [(c, f) for c, f, a in numeric_actions() if a.type in (int, float) and "seed" not in f]
    assert unchecked == []


@pytest.mark.parametrize("section", [InferenceSection, EvaluationSection])
def test_flags_accept_what_their_recipe_keys_accept(section):
    parser = build_parser()
    command = "generate" if section is InferenceSection else "eval"
    checked = 0
    for cmd, flag, action in numeric_actions():
        if cmd != command or action.dest not in section.model_fields or action.type in (int, float):
            continue
        assert action.type.bounds == bounds(section.model_fields[action.dest]), flag
        checked += 1
    assert checked >= 8


@pytest.mark.parametrize("argv", [
    ["eval", "--model", "tiny:qwen2-1m", "--task", "arithmetic", "--n", "-3"],
    ["compare", "--arm", "a=tiny:qwen2-1m", "--task", "arithmetic", "--n", "-1"],
    ["generate", "--model", "tiny:qwen2-1m", "--prompts", "p.txt", "--batch-size", "0"],
    ["eval", "--model", "tiny:qwen2-1m", "--task", "arithmetic", "--max-new-tokens", "-5"],
    ["eval", "--model", "openai:m", "--task", "arithmetic", "--concurrency", "0"],
    ["generate", "--model", "openai:m", "--prompts", "p.txt", "--timeout", "-1"],
    ["eval", "--model", "tiny:qwen2-1m", "--task", "arithmetic", "--tool-timeout", "0"],
    ["report", "run", "--bins", "-2"],
    ["train", "r.yaml", "--nproc", "0"],
], ids=lambda a: " ".join(a[:1] + a[-2:]))
def test_bad_numbers_exit_2_at_once_naming_the_flag(argv, capsys):
    started = time.perf_counter()
    with pytest.raises(SystemExit) as e:
        main(argv)
    assert e.value.code == 2
    err = capsys.readouterr().err
    assert f"argument {argv[-2]}" in err and "out of range" in err
    assert time.perf_counter() - started < 5


def test_a_word_where_a_number_belongs(capsys):
    with pytest.raises(SystemExit):
        main(["eval", "--model", "tiny:qwen2-1m", "--task", "arithmetic", "--n", "ten"])
    assert "'ten' is not a whole number (>= 1)" in capsys.readouterr().err
