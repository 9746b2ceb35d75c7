"""posttrain's CPU LM head (models/cpu_lm_head.py) computes what TRL's fused head computes: every
per-token output and every gradient, with soft-capping, logit scales, temperatures and a bias, over
blocks small enough that a row of tokens spans several; under bf16 autocast, what the full logits
give; and through TRL's own `add_fused_lm_head` on every family's tiny model."""

from __future__ import annotations

import pytest
import torch
from families import FAMILIES, family_model
from trl.kernels import ChunkedLogProbFunction
from trl.trainer.utils import add_fused_lm_head

from posttrain.models import cpu_lm_head
from posttrain.models.cpu_lm_head import token_blocks

OUTPUTS = ("entropy", "log_sum_sq_probs", "mean_logits", "is_top1")


def inputs(bias: bool, seed: int = 0):
    torch.manual_seed(seed)
    hidden = torch.randn(37, 16, requires_grad=True)
    weight = (torch.randn(500, 16) * 0.5).requires_grad_()
    b = (torch.randn(500) * 0.1).requires_grad_() if bias else None
    targets = torch.randint(0, 500, (37,))
    with torch.no_grad():  # a third of the tokens are their row's top-1, so is_top1 has both values
        targets[:12] = torch.nn.functional.linear(hidden[:12], weight, b).argmax(-1)
    return hidden, weight, b, targets


@pytest.mark.parametrize("softcap, scale, temperature, bias", [
    (None, 1.0, 1.0, False), (30.0, 1.0, 1.0, False), (None, 0.5, 0.7, True), (5.0, 2.0, 0.9, True)])
def test_every_output_and_gradient_is_trls(monkeypatch, softcap, scale, temperature, bias):
    monkeypatch.setattr(cpu_lm_head, "BLOCK_ELEMENTS", 500 * 5)  # 5 tokens per block: 8 blocks for 37 tokens
    results, grads = [], []
    for function in (ChunkedLogProbFunction.apply, token_blocks):
        hidden, weight, b, targets = inputs(bias)
        out = function(hidden, weight, b, targets, temperature, 128, softcap, scale, OUTPUTS)
        torch.manual_seed(1)
        loss = (out[0] * torch.randn(37)).sum() + (out[1] * torch.randn(37)).sum()  # log-probs and entropy both carry gradients
        loss.backward()
        results.append(out)
        grads.append([t.grad for t in (hidden, weight, b) if t is not None])
    for name, ours, theirs in zip(("log_probs", *OUTPUTS), results[1], results[0]):
        if name == "is_top1":
            assert torch.equal(ours, theirs) and ours[:12].all() and not ours[12:].all()
        else:
            torch.testing.assert_close(ours, theirs, rtol=1e-5, atol=1e-5, msg=name)
    for ours, theirs in zip(grads[1], grads[0]):
        torch.testing.assert_close(ours, theirs, rtol=1e-4, atol=1e-5)


def test_only_the_outputs_asked_for():
    hidden, weight, _, targets = inputs(False)
    out = token_blocks(hidden, weight, None, targets, 1.0, 128, None, 1.0, ("is_top1",))
    assert out[0].shape == (37,) and out[1] is None and out[2] is None and out[3] is None and out[4].dtype == torch.bool
    empty = token_blocks(hidden[:0], weight, None, targets[:0], 1.0, 128, None, 1.0, OUTPUTS)
    assert empty[0].shape == (0,)


def test_under_bf16_what_the_full_logits_give(monkeypatch):
    """bf16 autocast, a frozen output layer (LoRA): the projection in bf16 over the whole vocabulary, as the plain
    model's head computes it, so each token's log-probability and gradient are those of log_softmax over the full
    logits."""
    monkeypatch.setattr(cpu_lm_head, "BLOCK_ELEMENTS", 500 * 4)
    grads = []
    for path in ("blocks", "full"):
        hidden, weight, _, targets = inputs(False, seed=3)
        weight.requires_grad_(False)
        with torch.autocast("cpu", dtype=torch.bfloat16):
            if path == "blocks":
                log_probs = token_blocks(hidden, weight, None, targets, 1.0, 128, None, 1.0, ())[0]
            else:
                logits = torch.nn.functional.linear(hidden, weight).float()
                log_probs = torch.log_softmax(logits, -1).gather(-1, targets[:, None]).squeeze(-1)
        log_probs.sum().backward()
        grads.append((log_probs.detach(), hidden.grad))
    for ours, theirs in zip(*grads):
        torch.testing.assert_close(ours, theirs, rtol=1e-5, atol=1e-5)


def test_an_output_layer_that_trains_under_bf16_is_left_to_trl():
    """Full fine-tuning under bf16: TRL sums the weight's gradient over tiles in float32; blocks would round each."""
    router = cpu_lm_head._CpuOrTrl(ChunkedLogProbFunction)
    results = []
    for function in (ChunkedLogProbFunction.apply, router.apply):
        hidden, weight, _, targets = inputs(False, seed=4)
        with torch.autocast("cpu", dtype=torch.bfloat16):
            function(hidden, weight, None, targets, 1.0, 128, None, 1.0, ())[0].sum().backward()
        results.append(weight.grad)
    assert torch.equal(*results)


@pytest.mark.parametrize("family", FAMILIES)
def test_through_trls_fused_head_on_every_family(family, monkeypatch):
    """TRL's fused forward (backbone, shift, label mask, Gemma 2's final soft-capping) with its tiles and with the
    CPU blocks: the same loss, log-probs and gradients."""
    from trl.trainer import utils as trl_utils

    monkeypatch.setattr(cpu_lm_head, "BLOCK_ELEMENTS", 128 * 7)  # 7 tokens per block
    torch.manual_seed(0)
    ids = torch.randint(3, 128, (2, 19))
    labels = ids.clone()
    labels[0, :5] = -100
    results = []
    for use_blocks in (False, True):
        monkeypatch.setattr(trl_utils, "_ChunkedLogProbFunction", ChunkedLogProbFunction)
        if use_blocks:
            cpu_lm_head.use_on_cpu()
            assert isinstance(trl_utils._ChunkedLogProbFunction, cpu_lm_head._CpuOrTrl)
        model = family_model(family)
        add_fused_lm_head(model, outputs=("log_probs", "entropy", "is_top1"))
        out = model(input_ids=ids, attention_mask=torch.ones_like(ids), labels=labels, fused_lm_head=True)
        out.loss.backward()
        results.append((out.loss.detach(), out.log_probs.detach(), out.entropy.detach(), out.is_top1,
                        [p.grad for p in model.parameters() if p.grad is not None]))
    (loss, log_probs, entropy, top1, grads), (loss2, log_probs2, entropy2, top1_2, grads2) = results
    torch.testing.assert_close(loss2, loss, rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(log_probs2, log_probs, rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(entropy2, entropy, rtol=1e-5, atol=1e-5)
    assert torch.equal(top1_2, top1) and len(grads) == len(grads2) > 0
    for ours, theirs in zip(grads2, grads):
        torch.testing.assert_close(ours, theirs, rtol=1e-4, atol=1e-5)
