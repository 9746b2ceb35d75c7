"""Bad input: exit code 2, a message naming the key or file, no traceback, nothing in output_dir."""

import json
from pathlib import Path

import pytest
import yaml

from posttrain.cli import main


def write_recipe(tmp_path: Path, data_file: Path, **training) -> Path:
    raw = {
        "model": {"base_model_name": "tiny:qwen2"},
        "data": {"datasets": [{"name": str(data_file)}]},
        "training": {"algorithm": "sft", "output_dir": str(tmp_path / "out"), "max_steps": 1, **training},
    }
    path = tmp_path / "recipe.yaml"
    path.write_text(yaml.safe_dump(raw))
    return path


def jsonl(path: Path, rows) -> Path:
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


CASES = {
    # name: (overrides, data rows or None for the good file, expected text in the error)
    "typo top level": (["modle.x=1"], None, "unknown key 'modle'"),
    "typo in model": (["model.lora_rr=8"], None, "model.lora_rr"),
    "typo in a dataset": (["data.datasets[0].promt_column=q"], None, "Did you mean 'prompt_column'"),
    "typo in training": (["training.learning_rat=1e-5"], None, "Did you mean 'learning_rate'"),
    "wrong type": (["training.max_steps=ten"], None, "training.max_steps"),
    "missing required key": (["model.base_model_name="], None, "model.base_model_name"),
    "bad list index": (["data.datasets[3].name=x.jsonl"], None, "index 3 is out of range"),
    "unknown algorithm": (["training.algorithm=ppo"], None, "'ppo' is not one posttrain runs"),
    "missing data file": (["data.datasets[0].name=nowhere/missing.jsonl"], None, "does not exist"),
    "qlora without lora": (["model.load_in_4bit=true"], None, "set model.use_lora=true"),
    "qlora without cuda": (["model.load_in_4bit=true", "model.use_lora=true"], None, "needs a CUDA GPU"),
    "4 and 8 bit": (["model.load_in_4bit=true", "model.load_in_8bit=true", "model.use_lora=true"], None, "choose one"),
    "removed upstream field": (["training.max_prompt_length=64"], None, "data.max_prompt_length"),
    "malformed override": (["training.learning_rate"], None, "expected key.path=value overrides"),
    "bad tiny spec": (["model.base_model_name=tiny:gpt9"], None, "valid forms"),
    "empty dataset": ([], [], "is empty"),
    "all rows unusable": ([], [{"prompt": "", "completion": "x"}, {"prompt": "q", "completion": "  "}], "no usable rows"),
    "missing column": (["data.datasets[0].format=prompt_completion"], [{"question": "q", "completion": "a"}], "column 'prompt' not found"),
}


@pytest.mark.parametrize("name", CASES)
def test_bad_input_exits_2_and_writes_nothing(name, tmp_path, data_dir, capsys):
    overrides, rows, expected = CASES[name]
    data = data_dir / "sft.jsonl" if rows is None else jsonl(tmp_path / "data.jsonl", rows)
    recipe = write_recipe(tmp_path, data)
    code = main(["train", "--recipe", str(recipe), *overrides])
    err = capsys.readouterr().err
    assert code == 2
    assert expected in err, err
    assert "Traceback" not in err
    assert not (tmp_path / "out").exists()


def test_missing_recipe_file(capsys):
    assert main(["validate", "no/such/recipe.yaml"]) == 2
    assert "recipe file 'no/such/recipe.yaml' does not exist" in capsys.readouterr().err


def test_yaml_syntax_error(tmp_path, capsys):
    bad = tmp_path / "bad.yaml"
    bad.write_text("model:\n  base_model_name: [unclosed\n")
    assert main(["validate", str(bad)]) == 2
    assert "is not valid YAML" in capsys.readouterr().err


def test_exit_code_2_from_the_real_process(cli, tmp_path):
    result = cli("validate", "recipes/sft/tiny-cpu.yaml", "training.lerning_rate=1")
    assert result.returncode == 2
    assert "Did you mean 'learning_rate'" in result.stderr and "Traceback" not in result.stderr
