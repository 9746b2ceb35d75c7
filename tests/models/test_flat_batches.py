"""A padded batch scored through TRL's fused head runs as one flattened row: the same numbers, no padding."""

import pytest
import torch
from tolerances import assert_within_bf16_rounding, float32_sum_atol
from transformers import AutoModelForCausalLM
from trl.trainer.utils import add_fused_lm_head

from posttrain.models.cpu_attention import NAME
from posttrain.models.flat_batches import flatten_scored_batches

FIELDS = ("log_probs", "entropy", "mean_logits", "is_top1", "label_mask")


def scoring_model(tiny_dir, flat: bool):
    model = AutoModelForCausalLM.from_pretrained(tiny_dir, attn_implementation=NAME)
    add_fused_lm_head(model, outputs=FIELDS[:-1])  # as TRL's DPOTrainer does
    if flat:
        flatten_scored_batches(model)
    widths = []  # what the backbone is given: one row of real tokens, or the padded batch
    model.model.register_forward_pre_hook(lambda m, a, kw: widths.append(tuple(kw["input_ids"].shape)), with_kwargs=True)
    return model, widths


def padded_batch(vocab: int, side: str):
    """Four prompt + response rows of 9-30 tokens, padded to the longest; labels on the responses only."""
    torch.manual_seed(4)
    prompts, responses = [5, 12, 3, 8], [4, 18, 9, 1]
    longest = max(p + r for p, r in zip(prompts, responses))
    ids = torch.randint(1, vocab, (4, longest))
    mask, labels = torch.zeros_like(ids), torch.full_like(ids, -100)
    for i, (p, r) in enumerate(zip(prompts, responses)):
        start = 0 if side == "right" else longest - p - r
        mask[i, start:start + p + r] = 1
        labels[i, start + p:start + p + r] = ids[i, start + p:start + p + r]
    return dict(input_ids=ids, attention_mask=mask, labels=labels), int(mask.sum())


def score(model, batch, bf16: bool):
    model.zero_grad()
    with torch.autocast("cpu", dtype=torch.bfloat16, enabled=bf16):
        out = model(**batch, fused_lm_head=True, use_cache=False)
    out.log_probs.sum().backward()
    return out, model.model.layers[0].mlp.up_proj.weight.grad.clone()


@pytest.mark.parametrize("side", ["right", "left"])
@pytest.mark.parametrize("bf16", [False, True], ids=["float32", "bf16"])
def test_a_flattened_batch_scores_what_the_padded_batch_scores(tiny_dir, side, bf16):
    padded_model, padded_widths = scoring_model(tiny_dir, flat=False)
    flat_model, flat_widths = scoring_model(tiny_dir, flat=True)
    batch, tokens = padded_batch(padded_model.config.vocab_size, side)
    (padded, padded_grad), (flat, flat_grad) = score(padded_model, batch, bf16), score(flat_model, batch, bf16)
    assert padded_widths == [tuple(batch["input_ids"].shape)] and flat_widths == [(1, tokens)]
    for name in FIELDS:
        assert getattr(flat, name).shape == getattr(padded, name).shape, name
    assert flat.label_mask.sum() == (batch["labels"][:, 1:] != -100).sum() == 4 + 18 + 9 + 1
    # is_top1 exactly: the labels are random tokens, each its row's top-1 about once in 1,152, so no label's logit
    # lies within a rounding of its row's maximum
    assert torch.equal(flat.is_top1, padded.is_top1) and torch.equal(flat.label_mask, padded.label_mask)
    if bf16:  # bf16 rounds each pass's activations its own way (left padding: other positions, the same rotations
        # relative to each other), and which roundings flip depends on the CPU's kernels: bounds from the padded
        # pass's own bf16 rounding error, measured against the same pass in float32
        padded32, padded32_grad = score(padded_model, batch, bf16=False)
        for name in ("log_probs", "entropy", "mean_logits"):
            assert_within_bf16_rounding(getattr(flat, name), getattr(padded, name), getattr(padded32, name), msg=name)
        assert_within_bf16_rounding(flat_grad, padded_grad, padded32_grad, msg="up_proj gradient")
        # one number (a scalar's rounding can cancel, so no measured bound): a mean over 32 tokens of log-probs near
        # -log(1152) = -7, each moved by at most twice its logits' largest change; these logits lie within +-2, where a
        # bf16 step is at most 2^-7 = 0.008: 1e-2 of 7 allows four steps on every token at once
        torch.testing.assert_close(flat.loss, padded.loss, rtol=1e-2, atol=0)
    else:  # float32 (roundings of 2^-24 relative): sums of at most 1,152 terms in another order, 2 layers
        for name in ("log_probs", "entropy", "mean_logits"):
            torch.testing.assert_close(getattr(flat, name), getattr(padded, name), rtol=0, atol=1e-5, msg=name)
        torch.testing.assert_close(flat.loss, padded.loss, rtol=1e-5, atol=0)
        torch.testing.assert_close(flat_grad, padded_grad, rtol=1e-4, atol=float32_sum_atol(padded_grad, terms=tokens))


def test_other_calls_run_the_forward_as_it_was(tiny_dir):
    model, widths = scoring_model(tiny_dir, flat=True)
    batch, _ = padded_batch(model.config.vocab_size, "right")
    holed = {**batch, "attention_mask": batch["attention_mask"].clone()}
    holed["attention_mask"][1, 3] = 0  # a row with a hole: no contiguous span to flatten
    with torch.no_grad():
        model(**holed, fused_lm_head=True, use_cache=False)
        model(**batch, use_cache=False)  # not a scored batch (plain logits)
        model(**{k: v[:1] for k, v in batch.items()}, fused_lm_head=True, use_cache=False)  # one row: nothing to gain
    shape = tuple(batch["input_ids"].shape)
    assert widths == [shape, shape, (1, shape[1])]


def test_models_with_learned_positions_are_never_flattened():
    """A left-padded row's positions start after its padding in TRL's padded pass; flattened they restart at
    0. Rotary attention sees only differences (the same numbers); GPT-2's learned positions would not."""
    from types import SimpleNamespace

    import transformers

    from posttrain.models.cpu_attention import use_on_cpu
    from posttrain.models.flat_batches import flatten_scored_passes, rotary

    gpt2 = transformers.AutoModelForCausalLM.from_config(transformers.GPT2Config(n_layer=1, n_embd=32, n_head=4, vocab_size=64,
                                                                                 bos_token_id=0, eos_token_id=0))
    assert use_on_cpu(gpt2, bf16=False) is not None and not rotary(gpt2)  # it takes posttrain's attention, and is still left padded
    forward = gpt2.forward
    note = flatten_scored_passes(SimpleNamespace(model=gpt2, ref_model=None))
    assert note.startswith("scored batches: padded, as TRL scores them (the model's positions are learned") and gpt2.forward == forward
