"""Data of any JSON shape trains or is refused with exit 2 and a one-line reason, never a traceback
(issue 49): every algorithm's data path, through the real `validate` and `train`, on files whose
columns mix JSON types (int and text, float and null, lists, objects, empty strings, chats with odd
fields). Rows that are bad on their own are dropped and counted (data.max_drop_fraction=1 here, so
every such file trains); a file whose rows disagree in a way TRL cannot train (a chat among text
rows) is refused, naming the file, row and column."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from types import SimpleNamespace

import pytest
import yaml

pytestmark = pytest.mark.e2e

CHAT = [{"role": "user", "content": "What is 2 + 2?"}, {"role": "assistant", "content": "4"}]
ODD = [12, "1,400", "twelve", 2.5, None, [1, 2], {"k": 1}, "", True, CHAT, CHAT[:1],
       [{"role": "user", "content": [{"type": "text", "text": "hi"}]}, {"role": "assistant", "content": 5}],  # content not text
       [{"content": "no role"}],
       [{"role": "user", "content": "hi", "name": 1}, {"role": "assistant", "content": "ok", "name": "x"}]]  # a field of two types


def user(text):
    return [{"role": "user", "content": text}]


def assistant(text):
    return [{"role": "assistant", "content": text}]


def good_row(shape: str, i: int) -> dict:
    question, right, wrong = f"What is {i} + {i}?", f"{2 * i}", f"{2 * i + 1}"
    return {
        "sft-text": {"prompt": question, "completion": f" {right}"},
        "sft-chat": {"messages": user(question) + assistant(right)},
        "preference-text": {"prompt": question, "chosen": right, "rejected": wrong},
        "preference-chat": {"prompt": user(question), "chosen": assistant(right), "rejected": assistant(wrong)},
        "unpaired-text": {"prompt": question, "completion": right if i % 2 else wrong, "label": bool(i % 2)},
        "unpaired-chat": {"prompt": user(question), "completion": assistant(right if i % 2 else wrong), "label": bool(i % 2)},
        "prompt-text": {"question": question, "answer": f"{i} + {i} = {2 * i}\n#### {2 * i}"},
        "prompt-chat": {"question": user(question), "answer": 2 * i},
    }[shape]


def fuzzed_rows(shape: str, n_good: int = 12) -> list[dict]:
    """Good rows, then one row per (column read, odd value); an unread column `meta` holds every odd
    value in turn, in good rows too, so it must reach the trainer (and the rewards) whatever it holds."""
    rows = [good_row(shape, i) for i in range(1, n_good + 1)]
    for column in list(rows[0]):
        for value in ODD:
            rows.append({**good_row(shape, len(rows) + 1), column: value})
    for i, row in enumerate(rows):
        row["meta"] = ODD[i % len(ODD)]
    return rows


TRAIN = {"max_steps": 1, "per_device_train_batch_size": 2, "learning_rate": 1e-3, "logging_steps": 1,
         "activation_checkpointing": False, "seed": 0}
RL = {"num_generations": 2, "max_completion_length": 4, "rewards": [{"name": "answer_match"}, {"name": "format", "weight": 0.5}]}
ALGORITHMS = {  # algorithm -> (data shapes, training keys); reward = a reward model's training
    "sft": (["sft-text", "sft-chat"], {"max_length": 64}),
    "dpo": (["preference-text", "preference-chat"], {"max_length": 64}),
    "reward": (["preference-text", "preference-chat"], {"max_length": 64}),
    "kto": (["unpaired-text", "unpaired-chat"], {"max_length": 64, "per_device_train_batch_size": 4}),
    "grpo": (["prompt-text", "prompt-chat"], RL),
    "rloo": (["prompt-text"], {**RL, "rewards": [{"name": "answer_match"}]}),
}
# Every shape is validated under every algorithm that reads it (cheap) and trained under one of them, and every
# algorithm trains once (a 1-step run is the slow part): the readers are shared per shape, the trainers per algorithm.
TRAINED = {("sft", "sft-text"), ("sft", "sft-chat"), ("dpo", "preference-text"), ("reward", "preference-chat"),
           ("kto", "unpaired-chat"), ("grpo", "prompt-chat"), ("rloo", "prompt-text")}
CASES = [(algorithm, shape) for algorithm, (shapes, _) in ALGORITHMS.items() for shape in shapes]


def write_jsonl(path: Path, rows: list[dict]) -> Path:
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


def recipe(tmp_path: Path, algorithm: str, data: Path, **data_keys) -> Path:
    training = {"algorithm": algorithm, "output_dir": str(tmp_path / "run"), **TRAIN, **ALGORITHMS[algorithm][1]}
    spec = {"name": str(data), **({"template": "gsm8k"} if algorithm in ("grpo", "rloo") else {})}
    raw = {"model": {"base_model_name": "tiny:qwen2-1m"}, "data": {"datasets": [spec], "max_drop_fraction": 1, **data_keys},
           "training": training}
    path = tmp_path / "recipe.yaml"
    path.write_text(yaml.safe_dump(raw))
    return path


@pytest.fixture(autouse=True)
def _own_import_path(monkeypatch):
    """`validate` run in this process adds the recipe's folder to sys.path (as tests/cli/conftest.py says)."""
    import posttrain.user_code as user_code

    monkeypatch.setattr(sys, "path", list(sys.path))
    monkeypatch.setattr(user_code, "_SEARCHED", [])


def validate(recipe_path: Path, capsys) -> SimpleNamespace:
    """`posttrain validate RECIPE` in this process (the CLI's own `main`, as tests/cli/test_bad_input.py runs it):
    validate loads no model, and a fork per case would cost more than the command. An exception that escapes
    `main` fails the test, as a traceback would."""
    from posttrain.cli import main

    code = main(["validate", str(recipe_path)])
    out = capsys.readouterr()
    return SimpleNamespace(returncode=code, stdout=out.out, stderr=out.err)


def trains_or_refuses(result) -> bool:
    """Exit 0, or exit 2 with one `error:` line; never a traceback."""
    out = result.stdout[-3000:] + result.stderr[-3000:]
    assert "Traceback" not in result.stderr, out
    assert result.returncode in (0, 2), out
    if result.returncode == 2:
        errors = [line for line in result.stderr.splitlines() if line.startswith("error:")]
        assert len(errors) == 1 and result.stderr.rstrip().endswith(errors[0]), out
    return result.returncode == 0


@pytest.mark.parametrize(("algorithm", "shape"), CASES, ids=[f"{a}-{s}" for a, s in CASES])
def test_fuzzed_data_trains_or_is_refused_in_validate_and_train(cli, capsys, tmp_path, algorithm, shape):
    rows = fuzzed_rows(shape)
    path = recipe(tmp_path, algorithm, write_jsonl(tmp_path / "fuzz.jsonl", rows))
    validated = validate(path, capsys)
    assert trains_or_refuses(validated), validated.stderr[-2000:]  # every file here has good rows to train on
    line = next(line for line in validated.stdout.splitlines() if line.startswith("# data: data.datasets[0]"))
    kept, total = map(int, line.split(": kept ")[1].split(" rows")[0].split(" of "))
    assert total == len(rows) and 12 <= kept < total, line  # the good rows kept, the broken ones dropped ...
    assert "(row " in line or "(rows " in line, line  # ... and named by row
    if (algorithm, shape) in TRAINED:
        trained = cli("train", "--recipe", path)
        assert trains_or_refuses(trained)
        assert json.loads((tmp_path / "run" / "run_summary.json").read_text())["global_step"] == 1


@pytest.mark.parametrize(("algorithm", "shape", "column"), [
    ("dpo", "preference-text", "chosen"), ("kto", "unpaired-text", "completion"), ("grpo", "prompt-text", "question")])
def test_a_chat_among_text_rows_is_refused_naming_file_row_and_column(cli, capsys, tmp_path, algorithm, shape, column):
    rows = [good_row(shape, i) for i in range(1, 9)]
    rows[5] = good_row(shape.replace("text", "chat"), 6)
    data = write_jsonl(tmp_path / "mixed.jsonl", rows)
    path = recipe(tmp_path, algorithm, data, **({"use_chat_template": False} if algorithm == "grpo" else {}))  # else GRPO sends text as chats
    for result in (validate(path, capsys), cli("train", "--recipe", path)):
        assert result.returncode == 2 and not trains_or_refuses(result)
        assert f"data.datasets[0] ({data}): row 5 column {column!r} is a chat but the rows before it are text" in result.stderr
    assert not (tmp_path / "run").exists()


def test_a_gold_column_mixing_numbers_and_text_trains_as_eval_reads_it(cli, capsys, tmp_path):
    """The issue's file: `num` is 12 in most rows, "1,400" in one and "twelve" in another. The reward compares
    `num` as numbers: "1,400" trains (as `posttrain eval` reads it), "twelve" is dropped and named by row."""
    rows = [{"question": f"What is {i} + {i}?", "num": 2 * i} for i in range(1, 21)]
    rows[3]["num"], rows[5]["num"] = "1,400", "twelve"
    data = write_jsonl(tmp_path / "gold.jsonl", rows)
    path = tmp_path / "recipe.yaml"
    path.write_text(yaml.safe_dump({
        "model": {"base_model_name": "tiny:qwen2-1m"},
        "data": {"datasets": [{"name": str(data), "prompt_column": "question", "answer_column": "num"}]},
        "training": {"algorithm": "grpo", "output_dir": str(tmp_path / "run"), **TRAIN, **RL,
                     "rewards": [{"name": "answer_match"}, {"name": "loose_match", "answer_column": "num"}]}}))
    validated = validate(path, capsys)
    assert validated.returncode == 0, validated.stderr[-3000:]
    assert (f"# data: data.datasets[0] ({data}, prompt): kept 19 of 20 rows; dropped 1 'num' not a number the rewards can "
            "compare (e.g. 'twelve') (row 5)") in validated.stdout
    trained = cli("train", "--recipe", path)
    assert trained.returncode == 0, trained.stdout[-3000:] + trained.stderr[-3000:]
    assert json.loads((tmp_path / "run" / "run_summary.json").read_text())["global_step"] == 1


def test_gold_columns_are_read_as_eval_reads_them_and_other_columns_as_the_file_holds_them(tmp_path):
    from posttrain.data.prompts import read_prompt_rows
    from posttrain.evaluation.tasks import TaskOptions, TASKS

    rows = [{"question": "a?", "answer": 12, "meta": 1}, {"question": "b?", "answer": "1,400", "meta": [1, "x"]},
            {"question": "c?", "answer": "#### 7", "meta": None}]
    data = write_jsonl(tmp_path / "gold.jsonl", rows)
    spec = SimpleNamespace(name=str(data), subset=None, split="train", prompt_column="question", answer_column="answer",
                           template="gsm8k", max_samples=None, weight=None)
    config = SimpleNamespace(system_prompt=None, few_shot=False, use_chat_template=True)
    ds, _ = read_prompt_rows(config, [spec], "data.datasets", seed=0, numeric_columns={"answer"})
    items = TASKS["custom"].load(TaskOptions(data=str(data), prompt_column="question"))
    assert ds["answer"] == [item["gold"] for item in items] == ["12", "1,400", "7"]
    assert ds["meta"] == [1, [1, "x"], None]
