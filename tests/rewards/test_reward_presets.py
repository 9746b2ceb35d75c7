"""The correctness-only reward presets (training.rewards: correct_loose) resolve to the lists the GRPO guide documents."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from posttrain.recipe.errors import RecipeError
from posttrain.recipe.load import load_recipe
from posttrain.rewards.builtin import REWARD_PRESETS

REPO = Path(__file__).resolve().parents[2]
ROW = re.compile(r"^\s*\| `(correct_\w+)` \| `\[\{name: (\w+), weight: ([\d.]+)\}\]` \|", re.M)


def documented() -> dict[str, list[tuple[str, float]]]:
    """preset -> [(reward, weight)] from the table in docs/guides/grpo.md."""
    text = (REPO / "docs" / "guides" / "grpo.md").read_text()
    return {name: [(reward, float(weight))] for name, reward, weight in ROW.findall(text)}


def recipe(algorithm: str, rewards) -> dict:
    training = {"algorithm": algorithm, "output_dir": "runs/x", "rewards": rewards}
    if algorithm == "grpo":
        training.update(num_generations=4, per_device_train_batch_size=8)
    return {"model": {"base_model_name": "tiny:qwen2-1m"}, "data": {"datasets": [{"name": "examples/data/problems.jsonl",
                                                                              "template": "gsm8k"}]}, "training": training}


def test_the_guide_documents_every_preset():
    assert sorted(documented()) == sorted(REWARD_PRESETS) == ["correct_loose", "correct_math", "correct_strict"]


@pytest.mark.parametrize("algorithm", ["grpo", "gspo", "rloo", "rft"])
@pytest.mark.parametrize("preset", sorted(REWARD_PRESETS))
def test_a_preset_resolves_to_the_documented_rewards(algorithm, preset):
    if preset == "correct_math":
        pytest.importorskip("math_verify")  # math_match needs posttrain[math]; without it the recipe is refused, naming the extra
    resolved = load_recipe(None, raw=recipe(algorithm, preset)).recipe.training.rewards
    assert [(r.name, r.weight) for r in resolved] == documented()[preset]
    assert not any(r.name in ("format", "numeric_answer") for r in resolved)  # correctness only: no format bonus


def test_an_unknown_preset_names_the_key_and_the_nearest_preset():
    with pytest.raises(RecipeError) as e:
        load_recipe(None, raw=recipe("grpo", "correct_lose"))
    (problem,) = e.value.problems
    assert problem.path == "training.rewards" and "Did you mean 'correct_loose'?" in str(e.value)


def test_a_list_is_taken_as_written():
    resolved = load_recipe(None, raw=recipe("grpo", [{"name": "answer_match", "weight": 2.0}])).recipe.training.rewards
    assert [(r.name, r.weight) for r in resolved] == [("answer_match", 2.0)]
