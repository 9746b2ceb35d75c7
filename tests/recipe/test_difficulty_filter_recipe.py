"""training.difficulty_filter in the recipe: GRPO, GSPO and RLOO take it; what it cannot score yet is refused naming it."""

import pytest

from posttrain.recipe.errors import RecipeError
from posttrain.recipe.load import load_recipe


def raw(training=None, data=None, model=None) -> dict:
    return {"model": {"base_model_name": "tiny:qwen2", **(model or {})},
            "data": {"datasets": [{"name": "train.jsonl"}], **(data or {})},
            "training": {"algorithm": "grpo", "output_dir": "out", "rewards": [{"name": "answer_match"}], **(training or {})}}


def error_of(recipe: dict) -> str:
    with pytest.raises(RecipeError) as e:
        load_recipe(None, (), raw=recipe)
    return str(e.value)


@pytest.mark.parametrize("algorithm", ["grpo", "gspo", "rloo"])
def test_off_by_default_and_its_defaults_when_on(algorithm):
    assert load_recipe(None, (), raw=raw({"algorithm": algorithm})).recipe.training.difficulty_filter is None
    spec = load_recipe(None, ("training.difficulty_filter.samples=4",), raw=raw({"algorithm": algorithm})).recipe.training.difficulty_filter
    assert (spec.samples, spec.min_pass_rate, spec.max_pass_rate, spec.pass_threshold) == (4, 0.01, 0.99, 1.0)


@pytest.mark.parametrize("recipe, message", [
    (raw({"difficulty_filter": {"min_pass_rate": 0.6, "max_pass_rate": 0.4}}), "max_pass_rate=0.4 is below min_pass_rate=0.6"),
    (raw({"difficulty_filter": {}, "tools": ["tools_pkg:add"]}), "scoring prompts with training.tools (multi-turn rollouts) is not supported yet"),
    (raw({"difficulty_filter": {}, "rewards": [{"model": "runs/rm"}]}), "training.rewards[0] is a reward model"),
    (raw({"difficulty_filter": {}}, data={"datasets": [{"name": "train.jsonl", "image_columns": ["image"]}]}, model={"base_model_name": "tiny:llava"}),
     "scoring image prompts is not supported yet"),
    (raw({"difficulty_filter": {"sample": 4}}), "Did you mean 'samples'?"),
    (raw({"difficulty_filter": {}, "distributed": "zero3"}), "loads the weights sharded"),
])
def test_what_it_cannot_score_is_refused_naming_the_key(recipe, message):
    text = error_of(recipe)
    assert "training.difficulty_filter" in text and message in text, text


def test_algorithms_without_rollouts_do_not_take_it():
    text = error_of({**raw(), "training": {"algorithm": "sft", "output_dir": "out", "difficulty_filter": {}}})
    assert "training.difficulty_filter" in text and "unknown key" in text
