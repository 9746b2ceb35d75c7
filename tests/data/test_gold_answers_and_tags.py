"""GRPO data: gold answers the numeric rewards cannot compare are dropped and counted when the data
loads (before: the reward raised at the first batch holding one, mid-run); tag rewards with prompts
that never ask for the tags get a warning."""

import json

import pytest

from posttrain.data.prompts import read_prompt_data, untagged_prompt_warning
from posttrain.errors import UserError
from posttrain.recipe.load import load_recipe


def write(path, rows):
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


def openmath_recipe(data_file, *overrides):
    """The shipped GSPO OpenMathInstruct-2 recipe, reading a local file in the hub dataset's columns."""
    return load_recipe("recipes/gspo/qwen2.5-3b-openmath-lora.yaml",
                       [f"data.datasets[0].name={data_file}", "data.datasets[0].split=train", *overrides]).recipe


def test_the_openmath_recipe_drops_latex_golds_and_counts_them(repo, monkeypatch, tmp_path):
    monkeypatch.chdir(repo)
    rows = [{"problem": "What is 6*7?", "expected_answer": "42"},
            {"problem": "Half of one?", "expected_answer": "\\frac{1}{2}"},
            {"problem": "A point?", "expected_answer": "(1, 2)"},
            {"problem": "Roots?", "expected_answer": "2\\sqrt{3}"},
            {"problem": "Price?", "expected_answer": "$1,400"}]
    recipe = openmath_recipe(write(tmp_path / "om.jsonl", rows))
    train, reports, _ = read_prompt_data(recipe.data, 0, numeric_columns={"answer"})
    assert sorted(train["answer"]) == ["$1,400", "42"]
    line = reports[0].render()
    assert "kept 2 of 5 rows" in line and "3 'expected_answer' not a number the rewards can compare (e.g. '\\\\frac{1}{2}')" in line


def test_every_column_a_numeric_reward_reads_is_checked_and_counts_as_dropped(repo, monkeypatch, tmp_path):
    """A reward reading another column (answer_column: gold) has its golds checked too, scientific notation is no
    number the rewards read (it would be read as its mantissa), and the drops are what max_drop_fraction limits."""
    from posttrain.data.drops import DropLedger
    from posttrain.rewards.builtin import numeric_gold_columns

    monkeypatch.chdir(repo)
    rows = [{"problem": "6*7?", "expected_answer": "42", "gold": "42"},
            {"problem": "big?", "expected_answer": "3.5e2", "gold": "350"},
            {"problem": "half?", "expected_answer": "7", "gold": "1/2"},
            {"problem": "sum?", "expected_answer": "5", "gold": "5"}]
    data = write(tmp_path / "om.jsonl", rows)
    recipe = openmath_recipe(data, "training.rewards=[{name: answer_match}, {name: loose_match, answer_column: gold}]")
    columns = numeric_gold_columns(recipe.training.rewards)
    assert columns == {"answer", "gold"}
    train, reports, _ = read_prompt_data(recipe.data, 0, numeric_columns=columns)
    assert sorted(train["answer"]) == ["42", "5"]
    line = reports[0].render()
    assert "1 'expected_answer' not a number the rewards can compare (e.g. '3.5e2')" in line and "1 'gold' not a number" in line
    ledger = DropLedger(0.25)
    ledger.add_report(reports[0])
    with pytest.raises(UserError, match="max_drop_fraction"):
        ledger.check()


def test_no_comparable_gold_at_all_is_an_error_naming_the_file(repo, monkeypatch, tmp_path):
    monkeypatch.chdir(repo)
    data = write(tmp_path / "om.jsonl", [{"problem": "p", "expected_answer": "\\frac{1}{2}"}])
    with pytest.raises(UserError, match=r"data.datasets\[0\] \(.*om.jsonl\): no usable rows \(1 'expected_answer' not a number"):
        read_prompt_data(openmath_recipe(data).data, 0, numeric_columns={"answer"})


def test_rewards_that_do_not_compare_numbers_keep_every_row(repo, monkeypatch, tmp_path):
    monkeypatch.chdir(repo)
    data = write(tmp_path / "om.jsonl", [{"problem": "p", "expected_answer": "\\frac{1}{2}"}, {"problem": "q", "expected_answer": "3"}])
    train, _, _ = read_prompt_data(openmath_recipe(data).data, 0)
    assert len(train) == 2


def test_tag_rewards_with_untagged_prompts_warn(repo, monkeypatch, tmp_path, data_dir):
    monkeypatch.chdir(repo)
    recipe = load_recipe("recipes/grpo/tiny-cpu.yaml", [f"data.datasets[0].name={data_dir / 'problems.jsonl'}"]).recipe
    plain = recipe.data.model_copy(update={"datasets": [recipe.data.datasets[0].model_copy(update={"template": "none"})],
                                           "system_prompt": None})
    train, _, _ = read_prompt_data(plain, 0)
    assert "pay only for a <think>...</think><answer>...</answer> reply" in untagged_prompt_warning(train, ["answer_match", "format"])
    assert untagged_prompt_warning(train, ["user_rewards:digit_share"]) is None  # no tag reward: nothing to say
    asked = plain.model_copy(update={"system_prompt": "Reply as <think>...</think><answer>N</answer>."})
    train, _, _ = read_prompt_data(asked, 0)
    assert untagged_prompt_warning(train, ["answer_match"]) is None
