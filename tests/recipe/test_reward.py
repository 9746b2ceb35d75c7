"""Reward models: the recipe's rules and a reward model given as a GRPO reward (`model:`); in-process, no training."""

from __future__ import annotations

import json

import pytest

from posttrain.recipe.errors import RecipeError
from posttrain.recipe.load import load_recipe
from posttrain.recipe.preflight import preflight, reward_model_problem

RECIPE = "recipes/reward/tiny-cpu.yaml"
GRPO_RM = "recipes/grpo/tiny-reward-model-cpu.yaml"



def test_reward_recipe_reads_preference_pairs(repo):
    recipe = load_recipe(repo / RECIPE, ["training.center_rewards_coefficient=0.01"]).recipe
    assert recipe.training.trl_kwargs()["center_rewards_coefficient"] == 0.01


@pytest.mark.parametrize("override,key,needle", [
    ("data.datasets[0].completion_column=x", "data.datasets[0].completion_column", "never reads"),
    ("data.datasets[0].format=unpaired", "data.datasets[0].format", "always reads 'preference'"),
    ("training.rewards=[{name: format}]", "training.rewards", "no rewards"),
    ("training.average_tokens_across_devices=false", "training.average_tokens_across_devices", "RewardTrainer"),
    ("training.train_sampling_strategy=group_by_length", "training.train_sampling_strategy", "infer lengths"),
    ("training.center_rewards_coefficient=-0.1", "training.center_rewards_coefficient", "positive"),
])
def test_reward_recipe_rules(recipe_problems, override, key, needle):
    message = recipe_problems(RECIPE, override)
    assert key in message and needle in message


@pytest.mark.parametrize("rewards,needle", [
    ("[{name: format, model: runs/rm}]", "one of the two"),
    ("[{weight: 2.0}]", "one of the two"),
    ("[{model: runs/rm, answer_column: gold}]", "takes no options"),
])
def test_a_reward_is_a_function_or_a_model(recipe_problems, rewards, needle):
    assert needle in recipe_problems(GRPO_RM, f"training.rewards={rewards}")


def test_a_reward_model_reaches_trl_with_its_weight(repo):
    training = load_recipe(repo / GRPO_RM, ["training.rewards=[{model: runs/rm, weight: 0.5}, {name: format}]"]).recipe.training
    assert training.rewards[0].model == "runs/rm" and training.trl_kwargs()["reward_weights"] == [0.5, 1.0]


def _folder(tmp_path, name, **files):
    folder = tmp_path / name
    folder.mkdir()
    for file, content in files.items():
        (folder / file).write_text(json.dumps(content))
    return folder


def test_a_causal_lm_or_a_tiny_spec_is_not_a_reward_model(repo, tmp_path, monkeypatch):
    monkeypatch.chdir(repo)
    causal = _folder(tmp_path, "sft", **{"config.json": {"architectures": ["Qwen2ForCausalLM"]}})
    two = _folder(tmp_path, "cls", **{"config.json": {"architectures": ["Qwen2ForSequenceClassification"], "id2label": {"0": "a", "1": "b"}}})
    lora = _folder(tmp_path, "lora", **{"adapter_config.json": {"task_type": "CAUSAL_LM", "base_model_name_or_path": "x"}})
    empty = _folder(tmp_path, "empty")
    good = _folder(tmp_path, "rm", **{"adapter_config.json": {"task_type": "SEQ_CLS", "base_model_name_or_path": "x"}})
    rewards = ", ".join(f"{{model: {p}}}" for p in ("tiny:qwen2-1m", causal, two, lora, empty, good))
    with pytest.raises(RecipeError) as e:
        preflight(load_recipe(repo / GRPO_RM, [f"training.rewards=[{rewards}]"]).recipe)
    message = str(e.value)
    for i, needle in enumerate(["a tiny causal language model", "a causal language model (Qwen2ForCausalLM)", "2 outputs",
                                "task 'CAUSAL_LM'", "holds neither a model"]):
        assert f"training.rewards[{i}].model" in message and needle in message
    assert "training.rewards[5]" not in message and "algorithm=reward" in message


def test_reward_model_problem_reads_the_saved_config():
    assert reward_model_problem({"architectures": ["LlamaForSequenceClassification"], "num_labels": 1}) is None
    assert "not a reward model" in reward_model_problem({"architectures": ["BertModel"]})
