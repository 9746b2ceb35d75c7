"""Each CPU speed path computes what the plain path computes, on every family users bring (tiny random
models: tests/models/families.py), at lengths past their sliding windows, or it stands aside.

The plain path is the model as transformers loads it (sdpa, or eager where sdpa cannot compute the
model: Gemma 2's soft-capping) given padded batches and `generate`. Float32, one thread: what is
compared is the computation, not the rounding of one kernel against another."""

from __future__ import annotations

import copy

import pytest
import torch
from families import FAMILIES, WINDOW, family_model
from tolerances import assert_within_bf16_rounding, assert_within_float32_rounding
from trl.trainer.utils import add_fused_lm_head

from posttrain.generation.decoding import decode
from posttrain.models.cpu_attention import NAME, use_on_cpu
from posttrain.models.flat_batches import flatten_scored_batches

LENGTHS = [7, 31, 12, 20]  # rows longer than the window, and one shorter
assert max(LENGTHS) > 2 * WINDOW


@pytest.fixture(autouse=True)
def one_thread():
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


def as_posttrain_runs_it(plain):
    """The model with posttrain's CPU attention where `use_on_cpu` takes it (as a CPU run does), and
    whether it did."""
    model = copy.deepcopy(plain)
    return model, use_on_cpu(model, bf16=False) is not None


def rows(lengths=LENGTHS, seed=2):
    torch.manual_seed(seed)
    return [torch.randint(3, 128, (n,)) for n in lengths]


def left_padded(parts: list) -> tuple:
    """Rows padded on the left with token 0, as a decoding batch holds them, and their attention mask."""
    width = max(len(r) for r in parts)
    ids = torch.stack([torch.cat([r.new_zeros(width - len(r)), r]) for r in parts])
    mask = torch.stack([torch.cat([torch.zeros(width - len(r), dtype=torch.long), torch.ones(len(r), dtype=torch.long)]) for r in parts])
    return ids, mask


def loss_and_grads(model, batch):
    model.zero_grad()
    loss = model(**batch, use_cache=False).loss
    loss.backward()
    return loss.detach(), {n: p.grad.clone() for n, p in model.named_parameters() if p.grad is not None}


def rows_alone_in_float64(plain, parts):
    """The loss of a batch and its gradients, computed in float64 with each row alone (no padding, no mask): what
    both the padded and the flattened batch compute, without either one's masking or rounding."""
    model = copy.deepcopy(plain).double()
    model.zero_grad()
    predicted = sum(len(r) - 1 for r in parts)  # each row predicts its tokens after the first
    loss = sum(model(input_ids=r[None], labels=r[None], use_cache=False).loss * (len(r) - 1) for r in parts) / predicted
    loss.backward()
    return loss.detach(), {n: p.grad.clone() for n, p in model.named_parameters() if p.grad is not None}


@pytest.mark.parametrize("attention", ["posttrain's", "transformers'"])
@pytest.mark.parametrize("family", FAMILIES)
def test_padding_free_sft_learns_what_padded_batches_learn(family, attention):
    """SFT's CPU default: each batch flattened into one row (TRL's padding-free collator), through posttrain's CPU
    attention where a kind runs it, else through the model's own (transformers' packed-sequence mask from the position
    ids: sdpa, Gemma 2's eager). Its loss and every gradient equal the padded batch's through the plain model, within
    twice the plain path's own float32 rounding (measured against it in float64)."""
    from trl.trainer.sft_trainer import DataCollatorForLanguageModeling

    plain = family_model(family)
    ours, switched = as_posttrain_runs_it(plain) if attention == "posttrain's" else (copy.deepcopy(plain), False)
    if attention == "posttrain's":
        assert switched == (family != "gemma2"), "only sdpa models switch; Gemma 2 keeps eager (soft-capping)"
    parts = rows()
    flat = DataCollatorForLanguageModeling(pad_token_id=0, padding_free=True)([{"input_ids": r.tolist()} for r in parts])
    longest = max(LENGTHS)
    ids = torch.stack([torch.cat([r, r.new_zeros(longest - len(r))]) for r in parts])
    mask = (torch.arange(longest)[None] < torch.tensor(LENGTHS)[:, None]).long()
    padded = dict(input_ids=ids, attention_mask=mask, labels=ids.masked_fill(mask == 0, -100))

    flat_loss, flat_grads = loss_and_grads(ours, flat)
    padded_loss, padded_grads = loss_and_grads(plain, padded)
    exact_loss, exact_grads = rows_alone_in_float64(plain, parts)
    assert abs(float(flat_loss) - float(padded_loss)) <= 2 * max(abs(float(padded_loss) - float(exact_loss)), 2.0 ** -24 * float(exact_loss))
    assert flat_grads.keys() == padded_grads.keys()
    for name, grad in padded_grads.items():
        assert_within_float32_rounding(flat_grads[name], grad, exact_grads[name], msg=name)


@pytest.mark.parametrize("side", ["right", "left"])
@pytest.mark.parametrize("family", FAMILIES)
def test_grpo_scored_batches_flattened_score_what_padded_batches_score(family, side):
    """GRPO/GSPO's scoring passes on a CPU (policy, reference, old log-probs through TRL's fused head)
    run flattened only where the model took posttrain's attention; there the log-probs, entropies and
    gradients equal the padded batch's through the plain model."""
    plain = family_model(family)
    ours, switched = as_posttrain_runs_it(plain)
    if not switched:  # flatten_scored_passes flattens only models with posttrain's attention
        assert ours.config._attn_implementation != NAME
        return
    fields = ("log_probs", "entropy")
    for model in (plain, ours):
        add_fused_lm_head(model, outputs=fields)
    flatten_scored_batches(ours)
    prompts, completions = [5, 12, 3, 8], [14, 18, 9, 12]
    longest = max(p + c for p, c in zip(prompts, completions))
    ids = torch.randint(3, 128, (4, longest), generator=torch.Generator().manual_seed(4))
    mask, labels = torch.zeros_like(ids), torch.full_like(ids, -100)
    for i, (p, c) in enumerate(zip(prompts, completions)):
        start = 0 if side == "right" else longest - p - c
        mask[i, start:start + p + c] = 1
        labels[i, start + p:start + p + c] = ids[i, start + p:start + p + c]
    batch = dict(input_ids=ids, attention_mask=mask, labels=labels, fused_lm_head=True, use_cache=False)
    scored = []
    for model in (ours, plain):
        model.zero_grad()
        out = model(**batch)
        out.log_probs.sum().backward()
        scored.append((out, model.model.layers[-1].self_attn.o_proj.weight.grad.clone()))
    (flat, flat_grad), (padded, padded_grad) = scored
    for name in fields:
        torch.testing.assert_close(getattr(flat, name), getattr(padded, name), rtol=0, atol=1e-4, msg=name)
    torch.testing.assert_close(flat_grad, padded_grad, rtol=1e-3, atol=1e-4)


@pytest.mark.parametrize("family", FAMILIES)
def test_the_decoding_loop_generates_what_generate_generates(family):
    """Greedy rollouts and evaluation answers: posttrain's decoding loop (grouped prefill, preallocated
    cache, packed weights) gives `generate`'s tokens, past the window, with the model as a CPU run has it."""
    from transformers import GenerationConfig

    ours, _ = as_posttrain_runs_it(family_model(family))
    ours.eval()
    parts = rows([5, 11, 9, 11], seed=5)  # two rows alike: one shared prefill
    parts[3] = parts[1]
    ids, mask = left_padded(parts)
    width = ids.shape[1]
    config = GenerationConfig(max_new_tokens=3 * WINDOW, do_sample=False, eos_token_id=2, pad_token_id=0)
    with torch.no_grad():
        expected = ours.generate(input_ids=ids, attention_mask=mask, generation_config=config)
    got = decode(ours, ids, mask, config)
    assert got.shape == expected.shape and got.shape[1] > width + 2 * WINDOW
    assert torch.equal(got, expected), (got != expected).nonzero()[:5]


@pytest.mark.parametrize("family", FAMILIES)
def test_under_bf16_each_flattened_row_computes_what_it_computes_alone(family):
    """On a CPU with native bf16, short rows take the model's eager attention (models/cpu_attention.py):
    each row of a flattened batch then gets the logits it gets alone, window and all."""
    from trl.trainer.sft_trainer import DataCollatorForLanguageModeling

    ours, _ = as_posttrain_runs_it(family_model(family))
    use_on_cpu(ours, bf16=True)
    parts = rows()
    flat = DataCollatorForLanguageModeling(pad_token_id=0, padding_free=True)([{"input_ids": r.tolist()} for r in parts])
    with torch.no_grad(), torch.autocast("cpu", dtype=torch.bfloat16):
        together = ours(**{k: v for k, v in flat.items() if k != "labels"}, use_cache=False).logits[0].split(LENGTHS)
        alone = [ours(input_ids=r[None], use_cache=False).logits[0] for r in parts]
    with torch.no_grad():
        alone_float32 = [ours(input_ids=r[None], use_cache=False).logits[0] for r in parts]
    for i, (a, b) in enumerate(zip(together, alone)):  # logits up to ~8: one bf16 step is 2^-5 there
        assert_within_bf16_rounding(a, b, alone_float32[i], msg=f"{family} row {i}")


def stops_ending_rows_apart(free) -> list[int]:
    """Two stop tokens that end row 0 before the window, row 1 past it, and row 2 or 3 never (it runs to
    the cap), read from the rows' tokens when nothing stops them (random models repeat tokens a lot)."""
    for runner in (2, 3):
        never = set(free[runner].tolist())
        early = set(free[1, :WINDOW + 1].tolist())
        first = [t for t in free[0, :WINDOW - 1].tolist() if t not in never | early]
        second = [t for t in free[1, WINDOW + 1:].tolist() if t not in never | early]
        if first and second:
            return [first[0], second[0]]
    raise AssertionError(f"no such stop tokens in {free.tolist()}")


@pytest.mark.parametrize("family", FAMILIES)
def test_finished_rows_leave_the_batch_and_the_others_decode_what_generate_decodes(family):
    """Rows that stop at different steps (one before the window is full, one past it, one at the cap):
    each later forward pass holds only the rows still decoding, and every row's tokens are `generate`'s,
    which keeps computing finished rows to the end."""
    from transformers import GenerationConfig

    ours, _ = as_posttrain_runs_it(family_model(family))
    ours.eval()
    parts = rows([5, 11, 9, 7], seed=5)
    ids, mask = left_padded(parts)
    width = ids.shape[1]
    cap = 3 * WINDOW

    def config(stops):
        return GenerationConfig(max_new_tokens=cap, do_sample=False, eos_token_id=stops, pad_token_id=0)

    with torch.no_grad():
        free = ours.generate(input_ids=ids, attention_mask=mask, generation_config=config(None))[:, width:]
    stops = stops_ending_rows_apart(free)
    with torch.no_grad():
        expected = ours.generate(input_ids=ids, attention_mask=mask, generation_config=config(stops))
    new = expected[:, width:]
    ends = [next((k + 1 for k, t in enumerate(row) if t in stops), cap) for row in new.tolist()]
    assert ends[0] < WINDOW < ends[1] < cap == max(ends), ends

    batch_sizes = []
    hook = ours.register_forward_pre_hook(lambda module, args, kwargs: batch_sizes.append(len(kwargs["input_ids"])), with_kwargs=True)
    steps = []
    try:
        got = decode(ours, ids, mask, config(stops), on_step=lambda tokens, finished: steps.append((tokens, finished)))
    finally:
        hook.remove()
    assert torch.equal(got, expected), (got != expected).nonzero()[:5]
    still = [sum(end > step for end in ends) for step in range(cap)]  # rows decoding at each step
    assert batch_sizes == [len(parts)] + still[1:], "a pass computed a finished row"  # the prefill, then one pass per step
    assert [tokens for tokens, _ in steps] == still and sum(finished for _, finished in steps) == len(parts)


@pytest.mark.parametrize("family", FAMILIES)
def test_a_prefix_shared_by_every_row_is_prefilled_once_and_decodes_what_generate_decodes(family):
    """Rows opening with the same 20 tokens (a system prompt) and paddings on both sides of the shared
    columns: full-attention models prefill the prefix once (windowed ones prefill in full), and every
    row's greedy tokens are `generate`'s."""
    from transformers import GenerationConfig

    from posttrain.generation.decoding import forward_options, preallocated_cache, shared_prefix

    ours, _ = as_posttrain_runs_it(family_model(family))
    ours.eval()
    prefix = rows([20], seed=7)[0]
    parts = [torch.cat([prefix, r]) for r in rows([15, 21, 19, 12, 36], seed=8)]  # pads 21, 15, 17, 24, 0
    ids, mask = left_padded(parts)
    width = ids.shape[1]
    config = GenerationConfig(max_new_tokens=2 * WINDOW, do_sample=False, eos_token_id=2, pad_token_id=0)
    with torch.no_grad():
        expected = ours.generate(input_ids=ids, attention_mask=mask, generation_config=config)
        shared = shared_prefix(ours, preallocated_cache(ours.config, width + 1), ids, mask, forward_options(ours))
    assert shared == (20 if family in ("llama", "qwen3") else 0)  # the others have sliding-window layers
    assert torch.equal(decode(ours, ids, mask, config), expected)
