"""RLOO: GRPO's rewards and rules through TRL's RLOOTrainer; in-process, no training."""

from __future__ import annotations

import pytest

from posttrain.recipe.load import load_recipe

RECIPE = "recipes/rloo/tiny-cpu.yaml"



def test_rloo_takes_grpo_rewards_and_keeps_trls_beta(repo):
    training = load_recipe(repo / RECIPE, ["training.rewards=[{name: answer_match}, {model: runs/rm, weight: 0.5}]"]).recipe.training
    kwargs = training.trl_kwargs()
    assert kwargs["reward_weights"] == [1.0, 0.5] and "beta" not in kwargs  # TRL's 0.05 stays: RLOO's row states no default


@pytest.mark.parametrize("override,key,needle", [
    ("training.tools=[posttrain.tools.calculator:calculate]", "training.tools", "RLOOTrainer has no tool calling"),
    ("training.rewards=[]", "training.rewards", "at least one item"),
    ("training.num_generations=3", "training.num_generations", "whole groups"),
    ("training.train_sampling_strategy=sequential", "training.train_sampling_strategy", "RLOOTrainer"),
    ("data.datasets[0].chosen_column=x", "data.datasets[0].chosen_column", "never reads"),
    ("training.vllm_mode=colocate", "training.vllm_mode", "use_vllm"),
])
def test_rloo_rules(recipe_problems, override, key, needle):
    message = recipe_problems(RECIPE, override)
    assert key in message and needle in message


def test_rloo_reaches_the_rl_machinery():
    from posttrain.internals import INTERNALS
    from posttrain.recipe.algorithms import ALGORITHMS, RL_ALGORITHMS

    assert "rloo" in RL_ALGORITHMS and ALGORITHMS["rloo"].data == "prompt"
    # all of GRPO's but the tool loop (RLOO has no tools); _generate_and_score_completions is wrapped by refill on both
    assert {i.name for i in INTERNALS if "rloo" in i.families} == {i.name for i in INTERNALS if "grpo" in i.families} - {
        "_tool_call_loop"}
