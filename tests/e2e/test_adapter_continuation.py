"""Continuing a LoRA adapter with model.use_lora=true trains that adapter, and nothing else.

Before: TRL raised "PeftModel together with a peft_config" from deep inside the trainer.
"""

import hashlib
import json
from pathlib import Path

import pytest
from safetensors.torch import load_file

pytestmark = pytest.mark.e2e


def digest(folder: Path) -> dict:
    return {p.name: hashlib.sha256(p.read_bytes()).hexdigest() for p in sorted(folder.glob("*.safetensors"))}


@pytest.fixture(scope="module")
def adapter(tmp_path_factory, tiny_dir) -> Path:
    """A LoRA adapter of the tiny base with non-zero B matrices (as if trained), saved by bare PEFT."""
    import torch
    from peft import LoraConfig, get_peft_model
    from transformers import AutoModelForCausalLM

    torch.manual_seed(0)
    model = get_peft_model(AutoModelForCausalLM.from_pretrained(tiny_dir),
                           LoraConfig(r=4, lora_alpha=8, target_modules=["q_proj", "v_proj"], init_lora_weights=False, task_type="CAUSAL_LM"))
    out = tmp_path_factory.mktemp("adapter")
    model.save_pretrained(out)
    return out


def test_training_on_top_of_an_adapter_changes_only_the_adapter(cli, tmp_path, data_dir, adapter, tiny_dir):
    base_before = digest(tiny_dir)
    out = tmp_path / "continued"
    result = cli("train", "recipes/sft/tiny-cpu.yaml", f"model.base_model_name={adapter}", "model.use_lora=true", "model.lora_r=4",
                 f"data.datasets[0].name={data_dir / 'sft.jsonl'}", f"training.output_dir={out}", "training.max_steps=3",
                 "training.learning_rate=0.01", "training.save_steps=100")
    assert result.returncode == 0, result.stderr[-3000:]
    assert f"adapter: continuing {adapter}" in result.stdout

    assert not (out / "model.safetensors").exists()  # an adapter, not a full model
    before, after = load_file(adapter / "adapter_model.safetensors"), load_file(out / "adapter_model.safetensors")
    assert before.keys() == after.keys()  # the same adapter (no second one stacked on top)
    changed = [k for k in before if not (before[k] == after[k]).all()]
    assert changed, "the adapter did not train"
    assert json.loads((out / "adapter_config.json").read_text())["r"] == 4
    assert digest(tiny_dir) == base_before  # the base model's weights are untouched


def test_a_lora_key_that_contradicts_the_adapter_is_an_error(cli, tmp_path, data_dir, adapter):
    result = cli("validate", "recipes/sft/tiny-cpu.yaml", f"model.base_model_name={adapter}", "model.use_lora=true", "model.lora_r=16",
                 f"data.datasets[0].name={data_dir / 'sft.jsonl'}")
    assert result.returncode == 2
    assert "model.lora_r: 16 differs from the adapter being continued" in result.stderr and "r=4" in result.stderr
