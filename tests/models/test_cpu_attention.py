"""posttrain_cpu attention: the model's eager attention for short bf16 passes, sdpa for the rest."""

import json

import pytest
import torch
from tolerances import assert_within_bf16_rounding, float32_sum_atol
from transformers import AutoModelForCausalLM

from posttrain.models.cpu_attention import NAME, SHORT_KEYS, attention, use_on_cpu


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
    assert torch.equal(loss, eager_loss) and torch.equal(grad, eager_grad)  # the same kernel on the same shapes
    # the kernels round at different places (eager: scores and probabilities to bf16; sdpa's flash kernel: float32
    # inside), so over 120 x 1,152 logits they never all round alike: the equality above is not trivial
    assert loss != sdpa_loss
    # and both are the same attention: each token's loss moves by at most twice its logits' largest change, here up to
    # two bf16 steps of the largest logit (a step is 2^-4 = 0.06 at 8-16 with these weights), against a mean loss
    # near 13: 2 x 2 x 0.06 / 13 = 2e-2
    torch.testing.assert_close(loss, sdpa_loss, rtol=2e-2, atol=0)


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
    assert use_on_cpu(model, bf16=True).startswith(f"attention: the model's eager attention for bf16 passes over <= {SHORT_KEYS} tokens")
    assert model.config._attn_implementation == NAME
    assert use_on_cpu(AutoModelForCausalLM.from_pretrained(tiny_dir), bf16=False) == (
        "attention: sdpa; each row of a padding-free batch attends on its own (no dense mask across the batch)")
    assert use_on_cpu(AutoModelForCausalLM.from_pretrained(tiny_dir, attn_implementation="eager"), bf16=True) is None
    model.save_pretrained(tmp_path)
    assert NAME not in (tmp_path / "config.json").read_text()
    assert AutoModelForCausalLM.from_pretrained(tmp_path).config._attn_implementation == "sdpa"
    assert "attn_implementation" not in json.loads((tmp_path / "config.json").read_text())


# ------------------------------------------------------------------------ padding-free batches
def flattened(vocab: int, lengths: list[int]):
    """A padding-free batch as TRL's SFT collator builds it (one row, position ids and row boundaries)."""
    from trl.trainer.sft_trainer import DataCollatorForLanguageModeling

    torch.manual_seed(2)
    rows = [{"input_ids": torch.randint(0, vocab, (n,)).tolist()} for n in lengths]
    return rows, DataCollatorForLanguageModeling(pad_token_id=0, padding_free=True)(rows)


@pytest.mark.parametrize("bf16", [True, False], ids=["bf16-eager-rows", "float32-sdpa-rows"])
def test_each_flattened_row_computes_what_it_computes_alone(tiny_dir, bf16):
    model = model_with(tiny_dir, NAME)
    rows, batch = flattened(model.config.vocab_size, [7, 31, 12, 20])
    assert batch["input_ids"].shape == (1, 70) and "cu_seq_lens_q" in batch
    with torch.no_grad(), torch.autocast("cpu", dtype=torch.bfloat16, enabled=bf16):
        together = model(**{k: v for k, v in batch.items() if k != "labels"}, use_cache=False).logits[0].split([7, 31, 12, 20])
        alone = [model(input_ids=torch.tensor([r["input_ids"]])).logits[0] for r in rows]
    with torch.no_grad():
        alone_float32 = [model(input_ids=torch.tensor([r["input_ids"]])).logits[0] for r in rows]
    for i, (a, b) in enumerate(zip(together, alone)):
        if bf16:  # eager within each row, as alone; other shapes round otherwise (avx512 without AMX: one bf16 step apart)
            assert_within_bf16_rounding(a, b, alone_float32[i], msg=f"row {i}")
        else:  # sdpa on padded rows against one row: float32 rounding only, logits up to ~14 (one float32 step: 1e-6)
            torch.testing.assert_close(a, b, rtol=0, atol=1e-4, msg=f"row {i}")


def test_rows_apart_keeps_rows_from_attending_across_boundaries():
    """Called as the model calls it, without a mask: the boundaries alone keep the rows apart (plain
    causal attention over the flat row, what sdpa does with no mask, mixes them: checked)."""
    from torch import nn

    module = nn.Module()
    module.is_causal, module.num_key_value_groups, module.training = True, 2, False
    torch.manual_seed(3)
    lengths = [5, 9, 3]
    query, key, value = torch.randn(1, 4, 17, 8), torch.randn(1, 2, 17, 8), torch.randn(1, 2, 17, 8)
    bounds = torch.tensor([0, 5, 14, 17], dtype=torch.int32)
    out, _ = attention(module, query, key, value, None, scaling=8 ** -0.5, dropout=0.0, cu_seq_lens_q=bounds, cu_seq_lens_k=bounds)
    start = 0
    for n in lengths:
        part = slice(start, start + n)
        alone, _ = attention(module, query[:, :, part], key[:, :, part], value[:, :, part], None, scaling=8 ** -0.5, dropout=0.0)
        torch.testing.assert_close(out[:, part], alone, rtol=1e-5, atol=1e-6)
        start += n
    mixed, _ = attention(module, query, key, value, None, scaling=8 ** -0.5, dropout=0.0)
    assert (mixed[:, 5:] - out[:, 5:]).abs().max() > 1e-2


def test_a_flattened_batch_trains_as_its_padded_batch(tiny_dir):
    """Loss and gradients of one flattened batch equal the padded batch's (float32: only rounding differs)."""
    model = model_with(tiny_dir, NAME)
    rows, batch = flattened(model.config.vocab_size, [7, 31, 12, 20])
    longest = 31
    ids = torch.tensor([r["input_ids"] + [0] * (longest - len(r["input_ids"])) for r in rows])
    mask = (torch.arange(longest)[None] < torch.tensor([7, 31, 12, 20])[:, None]).long()
    grads = []
    for inputs in (batch, dict(input_ids=ids, attention_mask=mask, labels=ids.masked_fill(mask == 0, -100))):
        model.zero_grad()
        loss = model(**inputs).loss
        loss.backward()
        grads.append((loss, model.model.layers[0].self_attn.q_proj.weight.grad.clone()))
    (flat_loss, flat_grad), (padded_loss, padded_grad) = grads
    torch.testing.assert_close(flat_loss, padded_loss, rtol=1e-5, atol=0)
    torch.testing.assert_close(flat_grad, padded_grad, rtol=1e-4, atol=float32_sum_atol(padded_grad, terms=70))  # 70 tokens
