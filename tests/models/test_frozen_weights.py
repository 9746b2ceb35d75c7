"""Frozen linear weights stored in bf16 for LoRA under bf16 autocast: the same run, less casting."""

import pytest
import torch
from peft import LoraConfig, get_peft_model
from transformers import AutoModelForCausalLM

from posttrain.models.frozen_weights import store_frozen_in_bf16


def lora_model(tiny_dir):
    model = AutoModelForCausalLM.from_pretrained(tiny_dir)
    torch.manual_seed(0)
    model = get_peft_model(model, LoraConfig(r=4, lora_alpha=8, target_modules="all-linear", lora_dropout=0.0, task_type="CAUSAL_LM"))
    with torch.no_grad():  # lora_B starts at zero: give the adapters a say in the loss
        for name, p in model.named_parameters():
            if "lora_B" in name:
                p.normal_(0, 0.05)
    return model


def loss_and_grads(model, vocab):
    torch.manual_seed(1)
    ids = torch.randint(0, vocab, (2, 24))
    model.zero_grad()
    with torch.autocast("cpu", dtype=torch.bfloat16):
        loss = model(input_ids=ids, labels=ids).loss
    loss.backward()
    return loss.detach(), {n: p.grad.clone() for n, p in model.named_parameters() if p.requires_grad}


def test_the_run_trains_the_same_with_bf16_frozen_weights(tiny_dir):
    model = lora_model(tiny_dir)
    vocab = model.config.vocab_size
    before = loss_and_grads(model, vocab)
    note = store_frozen_in_bf16(model)
    layers = sum(1 for n, m in model.named_modules() if n.endswith("base_layer"))
    assert note.startswith(f"frozen weights: {layers} linear layers stored in bf16")
    base = model.base_model.model
    assert base.model.layers[0].self_attn.q_proj.base_layer.weight.dtype == torch.bfloat16
    assert base.model.layers[0].self_attn.q_proj.base_layer.bias.dtype == torch.bfloat16  # qwen2's q bias: frozen too
    assert all(p.dtype == torch.float32 for p in model.parameters() if p.requires_grad)  # LoRA trains in float32
    assert base.get_input_embeddings().weight.dtype == base.get_output_embeddings().weight.dtype == torch.float32
    after = loss_and_grads(model, vocab)
    assert torch.equal(before[0], after[0])
    assert before[1].keys() == after[1].keys() and all(torch.equal(before[1][n], after[1][n]) for n in before[1])

    # the check can fail: embeddings are looked up outside autocast, so rounding them changes the run
    base.get_input_embeddings().weight.data = base.get_input_embeddings().weight.data.bfloat16().float()
    assert not torch.equal(loss_and_grads(model, vocab)[0], before[0])


def test_nothing_to_store_when_every_weight_trains(tiny_dir):
    model = AutoModelForCausalLM.from_pretrained(tiny_dir)
    assert store_frozen_in_bf16(model) is None  # full fine-tuning: every linear weight trains
    assert all(p.dtype == torch.float32 for p in model.parameters())


@pytest.mark.parametrize("tied", [True, False])
def test_the_output_head_stays_float32(tiny_dir, tied):
    """TRL's fused loss head multiplies the head's weight in float32 outside autocast: an untied frozen head keeps it."""
    model = AutoModelForCausalLM.from_pretrained(tiny_dir, tie_word_embeddings=tied)
    for p in model.parameters():
        p.requires_grad_(False)
    store_frozen_in_bf16(model)
    assert model.get_output_embeddings().weight.dtype == torch.float32
    assert model.model.layers[0].mlp.up_proj.weight.dtype == torch.bfloat16
