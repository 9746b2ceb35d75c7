"""Every recipe shipped under recipes/ (searched recursively) is valid; those for this machine pass preflight too."""

from pathlib import Path

import pytest

from posttrain.recipe.errors import RecipeError
from posttrain.recipe.load import load_recipe
from posttrain.recipe.preflight import has_cuda, local_looking_model, preflight

REPO = Path(__file__).resolve().parents[2]
RECIPES = sorted((REPO / "recipes").rglob("*.yaml"))


def test_recipes_exist():
    assert len(RECIPES) >= 6


@pytest.mark.parametrize("path", RECIPES, ids=lambda p: str(p.relative_to(REPO / "recipes")))
def test_recipe_is_valid(path, monkeypatch):
    monkeypatch.chdir(REPO)  # recipes name their data relative to the repository root
    monkeypatch.syspath_prepend(str(REPO / "benchmarks"))  # kl_rewards: the kl benchmarks run these recipes with it on PYTHONPATH
    recipe = load_recipe(path).recipe
    assert recipe.training.output_dir
    if has_cuda() or not needs_a_gpu(recipe):
        # a later stage of a pipeline (make demo; a reward model then GRPO; an SFT teacher then distillation): the earlier one writes the model it names
        # (a one-slash runs/x is a hub id's shape until runs/ exists here: then it is checked on disk)
        later = [("model.base_model_name", recipe.model.base_model_name)] + [
            (f"training.rewards[{i}].model", r.model) for i, r in enumerate(getattr(recipe.training, "rewards", None) or []) if r.model] + [
            ("training.teacher_model_name_or_path", t) for t in [getattr(recipe.training, "teacher_model_name_or_path", None)] if t]
        later = [key for key, name in later if name.startswith("runs/") and not Path(name).is_dir()
                 and (key == "model.base_model_name" or local_looking_model(name))]
        if later:
            with pytest.raises(RecipeError) as e:
                preflight(recipe)
            assert [p.path for p in e.value.problems] == later and "does not exist" in str(e.value)
        else:
            preflight(recipe)


def needs_a_gpu(recipe) -> bool:
    """Recipes for GPU machines (QLoRA, FlashAttention, Liger, FSDP) fail preflight elsewhere, as they should."""
    model = recipe.model
    return bool(model.load_in_4bit or model.load_in_8bit or (model.attn_implementation or "").startswith("flash_attention")
                or getattr(recipe.training, "use_liger_kernel", False) or getattr(recipe.training, "distributed", None) == "fsdp")


def test_the_recipes_index_lists_every_recipe_and_nothing_else():
    """recipes/README.md links each shipped recipe once; a new recipe without its row (or a row for a deleted one) fails."""
    import re

    index = (REPO / "recipes" / "README.md").read_text()
    linked = re.findall(r"\]\(([^)]+\.yaml)\)", index)
    assert sorted(linked) == sorted(str(p.relative_to(REPO / "recipes")) for p in RECIPES)


def test_the_families_users_bring_have_sft_dpo_and_grpo_recipes():
    families = {"qwen3": ("Qwen/Qwen3-",), "llama-3.1": ("meta-llama/Llama-3.1-",), "gemma-3": ("google/gemma-3-",),
                "mistral": ("mistralai/Mistral-",)}
    shipped = [(p.relative_to(REPO / "recipes").parts[0], load_recipe(p).recipe) for p in RECIPES]
    for family, prefixes in families.items():
        for algorithm in ("sft", "dpo", "grpo"):
            found = [r for top, r in shipped if top == algorithm and r.model.base_model_name.startswith(prefixes)]
            assert found, f"no {algorithm} recipe for {family}"
    several = [r for _, r in shipped if getattr(r.training, "distributed", None) in ("zero2", "zero3", "fsdp")]
    assert {r.training.algorithm for r in several} >= {"sft", "dpo", "grpo"}  # multi-GPU variants, one consistent way
    assert not any("accelerate launch --config_file" in p.read_text() for p in RECIPES)


def test_the_wheel_carries_every_recipe_template_example_and_guide_file():
    """The package posttrain.shipped links to recipes/, examples/ and docs/, and pyproject.toml's package-data takes
    every file under each link, so a new folder or file kind ships without a new line; tests/e2e/test_wheel.py checks
    the built wheel's own list against these folders."""
    import tomllib

    package = REPO / "src" / "posttrain" / "shipped"
    patterns = tomllib.loads((REPO / "pyproject.toml").read_text())["tool"]["setuptools"]["package-data"]["posttrain"]
    for folder in ("recipes", "examples", "docs"):
        assert (package / folder).is_symlink() and (package / folder).resolve() == REPO / folder, folder
        assert f"shipped/{folder}/**/*" in patterns, folder