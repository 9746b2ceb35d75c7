"""The run card's parts that the e2e run does not reach: a hub base model, health flags, a reward model."""

from pathlib import Path

from huggingface_hub import ModelCard

from posttrain.algorithms.run_card import render
from posttrain.recipe.load import load_recipe

REPO = Path(__file__).resolve().parents[2]


def test_card_metadata_and_health(tmp_path):
    recipe = load_recipe(REPO / "recipes/sft/tiny-cpu.yaml", ["model.base_model_name=Qwen/Qwen2.5-0.5B", "model.use_lora=true"]).recipe
    summary = {"global_step": 12, "segments": [{}, {}], "wall_seconds": 3.5, "train_loss": 1.25, "data": ["data.datasets[0] (x.jsonl): kept 9 of 10 rows"],
               "health": [{"name": "loss_spike", "first_step": 3, "last_step": 5, "detail": "loss rose 4x"}], "stopped_by": "loss_spike"}
    records = [{"step": 10, "loss": 1.5, "learning_rate": 1e-4}, {"step": 12, "loss": 1.1}, {"step": 12, "train_runtime": 3.0}]
    text = render(summary, recipe, records, {"command": "posttrain train r.yaml", "posttrain": "0.1", "git_commit": "abc"}, adapter=True)
    path = tmp_path / "README.md"
    path.write_text(text)
    card = ModelCard.load(path)
    assert card.data.base_model == "Qwen/Qwen2.5-0.5B" and card.data.library_name == "peft" and "lora" in card.data.tags
    assert card.data.pipeline_tag == "text-generation"
    assert "**loss_spike** (steps 3-5): loss rose 4x" in text and "stopped early by training.stop_on: loss_spike" in text
    assert "| loss | 1.1 | 12 |" in text and "| steps | 12 (2 segment(s)" in text and "kept 9 of 10 rows" in text
    assert "posttrain train r.yaml" in text and "git commit abc" in text
    assert "A LoRA adapter trained by posttrain 0.1 with SFT" in text and "](http" not in text  # no link to a placeholder
