"""User code imports the same way for train and validate, however posttrain is started: from the
installed packages, then the recipe's folder, then the working directory; a failure names them."""

import json
import sys

import yaml

from posttrain.cli import main

REWARD = "def digits(completions, **kwargs):\n    return [0.0 for _ in completions]\n"


def grpo_recipe(folder, reward: str) -> str:
    (folder / "problems.jsonl").write_text(json.dumps({"question": "What is 1 + 1?", "answer": "#### 2"}) + "\n")
    raw = {"model": {"base_model_name": "tiny:qwen2-1m"}, "data": {"datasets": [{"name": str(folder / "problems.jsonl"), "template": "gsm8k"}]},
           "training": {"algorithm": "grpo", "output_dir": str(folder / "out"), "max_steps": 1, "rewards": [{"name": reward}],
                        "num_generations": 2, "per_device_train_batch_size": 2, "max_completion_length": 4}}
    path = folder / "grpo.yaml"
    path.write_text(yaml.safe_dump(raw))
    return str(path)


def test_a_reward_beside_the_recipe_imports_from_another_working_directory(tmp_path, monkeypatch, capsys):
    recipes, elsewhere = tmp_path / "recipes", tmp_path / "elsewhere"
    recipes.mkdir()
    elsewhere.mkdir()
    (recipes / "beside_rewards.py").write_text(REWARD)
    recipe = grpo_recipe(recipes, "beside_rewards:digits")
    monkeypatch.chdir(elsewhere)
    monkeypatch.delitem(sys.modules, "beside_rewards", raising=False)
    assert main(["validate", recipe]) == 0, capsys.readouterr().err
    out = capsys.readouterr().out
    assert "# user code imported as train imports it" in out and str(recipes) in out


def test_a_missing_reward_module_is_refused_by_validate_naming_where_it_looked(tmp_path, monkeypatch, capsys):
    recipe = grpo_recipe(tmp_path, "nosuchmod:fn")
    monkeypatch.chdir(tmp_path)
    assert main(["validate", recipe]) == 2
    err = capsys.readouterr().err
    assert "training.rewards[0]" in err and "cannot import module 'nosuchmod'" in err and f"looked for in the installed packages and in {tmp_path}" in err
