"""Prompt datasets for GRPO: templates, gold answers, and data.max_prompt_length enforced by posttrain."""

import datasets
import pytest
from transformers import AutoTokenizer

from posttrain.data.prompts import enforce_prompt_length, prompt_token_count, read_prompt_data
from posttrain.data.templates import build_prompt
from posttrain.errors import UserError
from posttrain.data.task_prompts import MATH_SYSTEM_PROMPT
from posttrain.recipe.schema import DataSection


@pytest.fixture(scope="module")
def tok(tiny_dir):
    return AutoTokenizer.from_pretrained(tiny_dir)


def test_gsm8k_template_maps_columns_gold_and_system_prompt(data_dir):
    data = DataSection(datasets=[{"name": str(data_dir / "problems.jsonl"), "template": "gsm8k"}], few_shot=True)
    ds, reports, evaluation = read_prompt_data(data, seed=0)
    assert evaluation is None  # nothing held out unless asked
    row = ds[0]
    assert row["prompt"][0] == {"role": "system", "content": MATH_SYSTEM_PROMPT}
    assert row["prompt"][1]["role"] == "user" and row["prompt"][2]["role"] == "assistant"  # the worked example
    assert row["prompt"][-1]["content"].endswith("?") and row["answer"].isdigit()
    assert reports[0].rows_kept == 64


def test_plain_prompts_without_chat_template():
    assert build_prompt("2+2?", template="none", system_prompt=None, few_shot=False, use_chat_template=False) == "2+2?"
    assert build_prompt("2+2?", template="none", system_prompt=None, few_shot=False, use_chat_template=True) == [{"role": "user", "content": "2+2?"}]


def test_missing_column_names_it(data_dir):
    data = DataSection(datasets=[{"name": str(data_dir / "problems.jsonl"), "answer_column": "gold"}], )
    with pytest.raises(UserError, match="column 'prompt' not found"):
        read_prompt_data(data, seed=0)


def _prompts(n_words):
    return datasets.Dataset.from_list([{"prompt": [{"role": "user", "content": " ".join(["apples"] * n)}], "answer": "1"} for n in n_words])


def test_drop_mode_removes_long_prompts_and_says_how_many(tok):
    ds = _prompts([2, 5, 40, 80])
    limit = len(prompt_token_count(ds[1]["prompt"], tok))
    kept, note = enforce_prompt_length(ds, tok, limit, "drop")
    assert len(kept) == 2 and "dropped 2 of 4 prompts" in note


def test_left_mode_keeps_the_last_tokens(tok):
    ds = _prompts([2, 80])
    cut, note = enforce_prompt_length(ds, tok, 12, "left")
    assert "left-truncated 1 of 2" in note
    assert all(len(tok(p, add_special_tokens=False)["input_ids"]) <= 12 for p in cut["prompt"])
    assert cut["prompt"][1].endswith("<|im_start|>assistant\n")  # the generation prompt survives


def test_every_prompt_too_long_is_an_error(tok):
    with pytest.raises(UserError, match="every prompt is longer"):
        enforce_prompt_length(_prompts([50]), tok, 3, "drop")


def test_eval_fraction_holds_out_disjoint_rows(data_dir):
    data = DataSection(datasets=[{"name": str(data_dir / "problems.jsonl"), "template": "gsm8k"}], eval_fraction=0.25)
    train, _, evaluation = read_prompt_data(data, seed=0)
    assert (len(train), len(evaluation)) == (48, 16)
    assert not {q for q in train["question"]} & {q for q in evaluation["question"]}
