"""sft_vlm end to end on the tiny VLM: full and LoRA, freezing, and the errors users meet first."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file

from posttrain.models.checkpoint_report import read_header

RECIPE = "recipes/sft_vlm/tiny-cpu.yaml"
FAST = ("training.max_steps=3", "training.per_device_train_batch_size=4", "training.save_steps=100", "training.logging_steps=1",
        "data.datasets[0].max_samples=32")


def train(cli, out: Path, *overrides: str):
    result = cli("train", "--recipe", RECIPE, f"training.output_dir={out}", *FAST, *overrides)
    assert result.returncode == 0, result.stderr[-3000:]
    return result


def test_full_run_freezes_the_tower_and_trains_the_rest(cli, tmp_path, tiny_vlm_dir):
    out = tmp_path / "full"
    result = train(cli, out, "model.freeze_vision_tower=true")
    assert "trainable parameters: vision 0 of 264,192, projector 49,536 of 49,536, language 2,018,240 of 2,018,240" in result.stdout
    records = [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()]
    losses = [r["loss"] for r in records if "loss" in r]
    assert len(losses) == 3 and all(l == l and l > 0 for l in losses)  # finite
    before, after = load_file(tiny_vlm_dir / "model.safetensors"), load_file(out / "model.safetensors")
    changed = {k for k in before if not torch.equal(before[k], after[k])}
    assert not any("vision_tower" in k for k in changed)
    assert any("multi_modal_projector" in k for k in changed) and any("language_model" in k for k in changed)
    from transformers import AutoModelForImageTextToText, AutoProcessor

    AutoModelForImageTextToText.from_pretrained(out), AutoProcessor.from_pretrained(out)  # loads back


def test_lora_adapter_holds_only_language_model_lora(cli, tmp_path):
    out = tmp_path / "lora"
    result = train(cli, out, "model.use_lora=true", "model.freeze_vision_tower=true", "training.learning_rate=1e-2")
    assert "trainable parameters: vision 0 of 264,192, projector 0 of 49,536, language " in result.stdout
    names = list(read_header(out / "adapter_model.safetensors"))
    assert names and all("lora_" in n and "language_model" in n for n in names)
    inspected = cli("inspect", out, "--strict")
    assert inspected.returncode == 0 and "LoRA adapter" in inspected.stdout and "other" not in inspected.stdout


def test_text_only_model_with_images_is_an_error_naming_it(cli, tmp_path):
    out = tmp_path / "never"
    result = cli("train", "--recipe", RECIPE, f"training.output_dir={out}", "model.base_model_name=tiny:qwen2-1m")
    assert result.returncode == 2
    assert "'tiny:qwen2-1m' is a text-only model" in result.stderr and "Traceback" not in result.stderr
    assert not out.exists()


@pytest.mark.parametrize("overrides, message", [
    (["training.algorithm=sft"], "algorithm sft trains on text only and would ignore the images. Use training.algorithm=sft_vlm"),
    (["data.datasets[0].image_columns=[]"], "sft_vlm needs image_columns (or video_columns) on every dataset"),
    (["model.use_lora=true", "model.freeze_vision_tower=false"], "model.freeze_vision_tower=false with model.use_lora=true"),
])
def test_recipe_errors(cli, overrides, message):
    result = cli("validate", "--recipe", RECIPE, *overrides)
    assert result.returncode == 2 and message in result.stderr, result.stderr


def test_grpo_on_image_prompts_two_steps(cli, tmp_path):
    out = tmp_path / "grpo"
    result = cli("train", "--recipe", "recipes/grpo/tiny-vlm-cpu.yaml", f"training.output_dir={out}", "training.max_steps=2",
                 "training.save_steps=100", "data.datasets[0].max_samples=16")
    assert result.returncode == 0, result.stderr[-3000:]
    assert "trainable parameters: vision 0 of 264,192" in result.stdout
    records = [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()]
    steps = [r for r in records if "rewards/text_match/mean" in r or "reward" in r]
    assert len(steps) == 2 and all(0.0 <= r["reward"] <= 1.5 for r in steps)
    assert (out / "model.safetensors").is_file()


def test_text_match_reward_reads_words_and_numbers():
    from posttrain.rewards.builtin import get_reward

    reward = get_reward("text_match")
    assert reward(["<answer>Green</answer>", "<answer>blue</answer>", "<answer>3</answer>"], answer=["green", "green", "3.0"]) == [1.0, 0.0, 1.0]
