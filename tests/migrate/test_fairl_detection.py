"""An unconverted FAI-RL recipe gets one message pointing at `posttrain convert`; single FAI-RL keys get hints
that name the key of the same meaning, never a look-alike of another meaning."""

from __future__ import annotations

from pathlib import Path

import pytest

from posttrain.recipe.errors import RecipeError
from posttrain.recipe.load import load_recipe
from posttrain.recipe.migrations import MIGRATIONS

HERE = Path(__file__).parent
TRAINING = sorted((HERE / "fairl_corpus/training").glob("*.yaml"))
TASKS = sorted((HERE / "fairl_corpus").glob("inference/*.yaml")) + sorted((HERE / "fairl_corpus").glob("evaluation/*.yaml"))


def error_of(path=None, overrides=(), raw=None) -> str:
    with pytest.raises(RecipeError) as e:
        load_recipe(path, overrides, raw=raw)
    return str(e.value)


def recipe(**sections) -> dict:
    raw = {"model": {"base_model_name": "tiny:qwen2-1m"}, "data": {"datasets": [{"name": "train.jsonl"}]},
           "training": {"algorithm": "sft", "output_dir": "out"}}
    for name, value in sections.items():
        raw[name] = {**raw.get(name, {}), **value}
    return raw


@pytest.mark.parametrize("path", TRAINING + TASKS, ids=lambda p: p.name)
def test_whole_fairl_recipe_gets_one_message(path):
    text = error_of(path)
    assert text.startswith("1 problem in the recipe:")
    assert "this looks like a FAI-RL recipe" in text and f"run `posttrain convert {path}`" in text


def test_cli_validate_and_train_say_it_once_with_exit_2(cli, tmp_path):
    path = HERE / "fairl_corpus/training/grpo_lora_reward_api.yaml"
    for command in ("validate", "train"):
        result = cli(command, "--recipe", path)
        assert result.returncode == 2, result.stderr
        assert result.stderr.count("\n") == 2 and "this looks like a FAI-RL recipe" in result.stderr
        assert "Traceback" not in result.stderr


def test_one_stray_key_still_gets_the_ordinary_error_with_its_hint():
    text = error_of(raw=recipe(data={"max_length": 512}))
    assert "looks like a FAI-RL" not in text
    assert "data.max_length" in text and "training.max_length" in text and "max_prompt_length'?" not in text


def test_wandb_hint_does_not_switch_tracking_on_for_a_disabled_section():
    off = error_of(raw={**recipe(), "wandb": {"enabled": False, "project": "x"}})
    assert "this looks like a FAI-RL recipe" in off  # enabled: is FAI-RL's
    alone = error_of(raw={**recipe(), "wandb": {"project": "x"}})
    assert "tracking: {provider: wandb" in alone
    from posttrain.recipe.migrations import migration_for

    disabled = migration_for(["wandb"], {"wandb": {"enabled": False}})
    assert "delete the section" in disabled and "provider: wandb" not in disabled


def test_other_tools_algorithms_get_no_look_alike_suggestion():
    for algorithm, words in (("ppo", "no PPO"), ("sft_vlm", "vision-language")):
        from posttrain.recipe.schema import TRAINING_MODELS

        if algorithm in TRAINING_MODELS:
            continue  # this build runs it
        text = error_of(raw=recipe(training={"algorithm": algorithm}))
        assert words in text and "Did you mean" not in text


@pytest.mark.parametrize("path", sorted(p for p in MIGRATIONS if p.split(".")[0] in ("model", "data") and "*" not in p))
def test_every_fairl_key_hint_replaces_did_you_mean(path):
    section, key = path.split(".")
    text = error_of(raw=recipe(**{section: {key: 1}}))
    assert MIGRATIONS[path] in text and "Did you mean" not in text


def test_posttrain_vision_recipe_with_one_stale_key_gets_the_one_key_error(repo):
    """image_columns / video_columns are posttrain keys too: they are no sign of a FAI-RL recipe, so a
    posttrain sft_vlm recipe with video columns and one stale key is told about that key alone."""
    import yaml

    raw = yaml.safe_load((repo / "recipes/sft_vlm/tiny-cpu.yaml").read_text())
    raw["data"]["datasets"][0]["video_columns"] = ["clip"]
    raw["data"]["datasets"].append({"name": "more.jsonl", "image_columns": ["image"], "video_columns": ["clip"]})
    raw["data"]["video_num_frames"] = 8  # FAI-RL's name for data.video_max_frames
    text = error_of(raw=raw)
    assert "looks like a FAI-RL" not in text
    assert text.startswith("1 problem in the recipe:") and "data.video_num_frames" in text
