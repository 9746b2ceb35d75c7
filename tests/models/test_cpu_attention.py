"""posttrain_cpu attention: the model's eager attention for short bf16 passes, sdpa for the rest."""

import json

import pytest
import torch
from transformers import AutoModelForCausalLM

from posttrain.models.cpu_attention import NAME, SHORT_KEYS, use_on_cpu


def model_with(tiny_dir, implementation: str):
    model = AutoModelForCausalLM.from_pretrained(tiny_dir, attn_implementation=implementation)
    torch.manual_seed(0)
    with torch.no_grad():  # the tiny model's random weights, made larger so the kernels' results differ visibly
        for p in model.parameters():
            p.mul_(4)
    return model


def padded_batch(vocab: int, length: int):
    torch.manual_seed(1)
    ids = torch.randint(0, vocab, (3, length))
    mask = torch.ones_like(ids)
    mask[1, length // 2:] = 0  # right padding
    mask[2, : length // 3] = 0  # left padding
    return dict(input_ids=ids, attention_mask=mask, labels=ids.masked_fill(mask == 0, -100))


def loss_and_grad(model, batch, *, grad: bool = True):
    model.zero_grad()
    with torch.set_grad_enabled(grad), torch.autocast("cpu", dtype=torch.bfloat16):
        loss = model(**batch).loss
    if not grad:
        return loss, None
    loss.backward()
    return loss, model.model.layers[0].self_attn.q_proj.weight.grad.clone()


@pytest.mark.parametrize("padding", ["padded", "unpadded"])
def test_short_training_passes_compute_what_eager_attention_computes(tiny_dir, padding):
    ours, eager, sdpa = (model_with(tiny_dir, impl) for impl in (NAME, "eager", "sdpa"))
    batch = padded_batch(ours.config.vocab_size, 40)
    if padding == "unpadded":  # no mask at all: sdpa's mask is None (plain causal), rebuilt for eager
        batch = dict(input_ids=batch["input_ids"], labels=batch["input_ids"])
    loss, grad = loss_and_grad(ours, batch)
    eager_loss, eager_grad = loss_and_grad(eager, batch)
    sdpa_loss, _ = loss_and_grad(sdpa, batch)
    assert torch.equal(loss, eager_loss) and torch.equal(grad, eager_grad)
    assert loss != sdpa_loss  # the kernels round differently: the equality above is not trivial
    torch.testing.assert_close(loss, sdpa_loss, rtol=2e-2, atol=0)  # and both are the same attention


def test_long_rows_and_float32_stay_on_sdpa(tiny_dir):
    ours, sdpa = model_with(tiny_dir, NAME), model_with(tiny_dir, "sdpa")
    short, long = (padded_batch(ours.config.vocab_size, n) for n in (40, SHORT_KEYS + 8))
    assert torch.equal(loss_and_grad(ours, long)[1], loss_and_grad(sdpa, long)[1])
    assert torch.equal(ours(**short).loss, sdpa(**short).loss)  # float32, no autocast


def test_a_pass_without_gradients_uses_the_training_pass_kernel(tiny_dir):
    # A GRPO reference's (or old policy's) log-probs are computed without gradients; they must come from
    # the same kernel as the policy's training pass, or the KL and the importance ratio are off from the first step.
    ours, sdpa = model_with(tiny_dir, NAME), model_with(tiny_dir, "sdpa")
    short = padded_batch(ours.config.vocab_size, 40)
    assert torch.equal(loss_and_grad(ours, short, grad=False)[0], loss_and_grad(ours, short)[0])
    assert loss_and_grad(sdpa, short, grad=False)[0] != loss_and_grad(ours, short)[0]


def test_a_model_switches_only_from_sdpa_and_saves_a_plain_config(tiny_dir, tmp_path):
    model = AutoModelForCausalLM.from_pretrained(tiny_dir)
    assert model.config._attn_implementation == "sdpa"
    assert use_on_cpu(model).startswith(f"attention: the model's eager attention for bf16 passes over <= {SHORT_KEYS} tokens")
    assert model.config._attn_implementation == NAME
    assert use_on_cpu(AutoModelForCausalLM.from_pretrained(tiny_dir, attn_implementation="eager")) is None
    model.save_pretrained(tmp_path)
    assert NAME not in (tmp_path / "config.json").read_text()
    assert AutoModelForCausalLM.from_pretrained(tmp_path).config._attn_implementation == "sdpa"
    assert "attn_implementation" not in json.loads((tmp_path / "config.json").read_text())
