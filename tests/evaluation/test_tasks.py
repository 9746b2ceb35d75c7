"""Evaluation tasks: local files for every task, the offline arithmetic set, item selection, errors."""

from __future__ import annotations

import csv
import json

import pytest

from posttrain.data.synthetic import is_held_out, problems
from posttrain.errors import UserError
from posttrain.data.task_prompts import CHOICE_SYSTEM_PROMPT, MATH_SYSTEM_PROMPT, math_prompt
from posttrain.evaluation.tasks import get_task, load_task, select_items


def write_jsonl(path, rows):
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return str(path)


def write_csv(path, rows):
    with path.open("w", newline="") as f:
        writer = csv.DictWriter(f, fieldnames=list(rows[0]))
        writer.writeheader()
        writer.writerows(rows)
    return str(path)


GSM8K_ROWS = [
    {"question": "Ann has 3 boxes of 400 pens. How many pens?", "answer": "3 * 400 = 1,200\n#### 1,200"},
    {"question": "Tom had 10 apples and ate 3. How many are left?", "answer": "10 - 3 = 7\n#### 7"},
    {"question": "A shirt costs $12.50. What do 2 cost?", "answer": "2 * 12.5 = 25\n#### 25"},
]


def test_gsm8k_local_file_gives_gold_after_hashes_and_the_training_prompt(tmp_path):
    items = load_task("gsm8k", data=write_jsonl(tmp_path / "gsm8k.jsonl", GSM8K_ROWS))
    by_id = {item["id"]: item for item in items}
    assert sorted(by_id) == ["gsm8k-0", "gsm8k-1", "gsm8k-2"]
    assert [by_id[f"gsm8k-{i}"]["gold"] for i in range(3)] == ["1,200", "7", "25"]
    first = by_id["gsm8k-0"]
    assert first["prompt"] == math_prompt(GSM8K_ROWS[0]["question"])
    assert first["prompt"][0] == {"role": "system", "content": MATH_SYSTEM_PROMPT}
    assert "<think>" in MATH_SYSTEM_PROMPT and "<answer>" in MATH_SYSTEM_PROMPT
    assert first["scorer"] == "number" and first["task"] == "gsm8k"


def test_gsm8k_file_errors_name_the_row_and_column(tmp_path):
    renamed = [{"questoin": r["question"], "answer": r["answer"]} for r in GSM8K_ROWS]
    with pytest.raises(UserError, match=r"row 0 has no 'question' column.*Did you mean 'questoin'"):
        load_task("gsm8k", data=write_jsonl(tmp_path / "a.jsonl", renamed))
    bad_gold = GSM8K_ROWS[:1] + [{"question": "q", "answer": "#### three"}]
    with pytest.raises(UserError, match=r"row 1: answer '#### three' does not end in a single number"):
        load_task("gsm8k", data=write_jsonl(tmp_path / "b.jsonl", bad_gold))
    with pytest.raises(UserError, match=r"--data: data file '.*missing.jsonl' does not exist"):
        load_task("gsm8k", data=str(tmp_path / "missing.jsonl"))
    (tmp_path / "broken.jsonl").write_text('{"question": "q", "answer": "1"}\n{not json\n')
    with pytest.raises(UserError, match=r"--data: cannot read '.*broken.jsonl': line 2 is not valid JSON"):
        load_task("gsm8k", data=str(tmp_path / "broken.jsonl"))


def test_mmlu_local_files_letter_the_choices_and_take_index_or_letter_gold(tmp_path):
    rows = [
        {"question": "2 + 3 = ?", "choices": ["4", "5", "6", "7"], "answer": 1, "subject": "math"},
        {"question": "Capital of France?", "choices": ["Rome", "Madrid", "Paris", "Oslo"], "answer": 2, "subject": "geo"},
    ]
    items = {i["id"]: i for i in load_task("mmlu", data=write_jsonl(tmp_path / "mmlu.jsonl", rows))}
    assert items["mmlu-0"]["gold"] == "B" and items["mmlu-1"]["gold"] == "C"
    assert items["mmlu-0"]["prompt"][0]["content"] == CHOICE_SYSTEM_PROMPT
    assert items["mmlu-0"]["prompt"][1]["content"] == "2 + 3 = ?\n\nA. 4\nB. 5\nC. 6\nD. 7"
    assert items["mmlu-1"]["scorer"] == "choice" and items["mmlu-1"]["subject"] == "geo"

    # CSV: choices as JSON text, answer as a letter (any case)
    csv_rows = [{"question": "2 + 3 = ?", "choices": json.dumps(["4", "5", "6"]), "answer": "b"}]
    (item,) = load_task("mmlu", data=write_csv(tmp_path / "mmlu.csv", csv_rows))
    assert item["gold"] == "B" and item["choices"] == ["4", "5", "6"]

    with pytest.raises(UserError, match=r"answer 'E' is neither a choice index 0-2 nor a letter A-C"):
        load_task("mmlu", data=write_csv(tmp_path / "bad.csv", [{**csv_rows[0], "answer": "E"}]))


def test_custom_task_maps_columns_and_keeps_chat_prompts(tmp_path):
    rows = [{"q": "What is 6 * 7?", "a": 42, "id": "six-seven"}, {"q": "What is 1 + 1?", "a": "2", "id": "one-one"}]
    items = {i["id"]: i for i in load_task("custom", data=write_jsonl(tmp_path / "c.jsonl", rows),
                                           prompt_column="q", answer_column="a")}
    assert items["six-seven"]["gold"] == "42" and items["one-one"]["gold"] == "2"
    assert items["six-seven"]["prompt"] == math_prompt("What is 6 * 7?")

    chat = [{"role": "user", "content": "Give 5 in tags."}]
    import pyarrow
    import pyarrow.parquet

    pyarrow.parquet.write_table(pyarrow.Table.from_pylist([{"prompt": chat, "answer": "5"}]), tmp_path / "c.parquet")
    (item,) = load_task("custom", data=str(tmp_path / "c.parquet"))
    assert item["prompt"] == chat and item["gold"] == "5" and item["id"] == "custom-0"

    with pytest.raises(UserError, match=r"row 0 has no 'prompt' column \(it has \['a', 'id', 'q'\]\)\. Name the column with --prompt-column"):
        load_task("custom", data=write_jsonl(tmp_path / "d.jsonl", rows))
    with pytest.raises(UserError, match="--task custom needs --data"):
        load_task("custom")


def test_arithmetic_is_deterministic_nested_and_disjoint_from_training_seed_0():
    a, b = load_task("arithmetic", n=40), load_task("arithmetic", n=40)
    assert a == b
    assert len({i["id"] for i in a}) == 40 and len({i["question"] for i in a}) == 40
    small = load_task("arithmetic", n=10)
    assert {i["id"] for i in small} <= {i["id"] for i in a}  # a smaller n is a subset
    assert {i["question"] for i in load_task("arithmetic", n=40, data_seed=99)} != {i["question"] for i in a}
    answers = {p["question"]: str(p["answer"]) for p in problems(200, 1234, held_out=True)}
    assert all(answers[i["question"]] == i["gold"] for i in a)


def test_arithmetic_never_overlaps_training_problems_at_30000_or_from_other_seeds():
    """Before the reserved share, 14 of 500 held-out questions were among 30,000 seed-0 problems."""
    training = {p["question"] for p in problems(30_000, 0)}
    for data_seed in (1234, 99, 0):
        held_out = {i["question"] for i in load_task("arithmetic", n=500, data_seed=data_seed)}
        assert len(held_out) == 500 and not training & held_out, data_seed
    assert not any(is_held_out(q) for q in training)
    assert not {p["question"] for p in problems(5_000, 7)} & {i["question"] for i in load_task("arithmetic", n=500)}
    # the training stream is still one stream: a shorter list is a prefix of a longer one
    assert problems(100, 0) == problems(30_000, 0)[:100]


def test_n_selects_the_same_seeded_shuffle_and_rejects_impossible_sizes():
    items = [{"id": str(i)} for i in range(20)]
    first = select_items(items, 5, seed=0)
    assert first == select_items(items, 5, seed=0)
    assert first != select_items(items, 5, seed=1)
    assert first == select_items(items, 10, seed=0)[:5]
    assert first != items[:5]  # shuffled, not the file's head
    with pytest.raises(UserError, match="--n 21: the task has only 20 items"):
        select_items(items, 21, seed=0)
    with pytest.raises(UserError, match="--n 0: must be at least 1"):
        select_items(items, 0, seed=0)


def test_unknown_task_suggests_the_closest_and_duplicate_ids_are_refused(tmp_path):
    with pytest.raises(UserError, match=r"unknown task\. Did you mean 'gsm8k'\? Tasks: arithmetic, gsm8k, mmlu, math, custom"):
        get_task("gsm8")
    rows = [{"prompt": "1?", "answer": 1, "id": "x"}, {"prompt": "2?", "answer": 2, "id": "x"}]
    with pytest.raises(UserError, match="id 'x' appears more than once"):
        load_task("custom", data=write_jsonl(tmp_path / "dup.jsonl", rows))
