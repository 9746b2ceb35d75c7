"""Padded batches scored as one flattened row: GRPO's training passes on a CPU without padding.

    note = flatten_scored_passes(trainer)   # after the trainer is built

TRL pads GRPO's rows, prompt to the left and completion to the right, to the batch's longest, and
on a CPU a padded token costs what a real one costs: the SmolLM2 race's completions ran from 14 to
512 tokens, so about half of every policy, reference and old-policy pass was padding. Here the
model's forward, when called the way TRL scores a batch (`fused_lm_head=True`, a padded batch with
its attention mask and labels), takes the batch's real tokens as one row, each row with its own
positions and boundaries (`cu_seq_lens`, read by posttrain's CPU attention, which attends within
each row: models/cpu_attention.py), and puts the per-token results (log-probs, entropy, ...) back
where the padded batch had them, zeros elsewhere, as TRL's head leaves them where labels are -100.
The same numbers up to rounding (positions restart at 0 in each row; rotary attention depends only
on their differences: tests/models/test_flat_batches.py); only the cost changes.

Rows must be contiguous in their padded row (left or right padding); any other call (generation,
a batch of one, shifted labels, images) runs the forward as it was. Not for DPO: its micro-batch
rule already scores one pair (2 rows of ~200 tokens) per pass on a CPU; flattening the race's 8
pairs per step was no faster (31.5 against 30.2 s) and held twice the memory.
"""

from __future__ import annotations

import functools

import torch

PER_TOKEN = ("log_probs", "entropy", "log_sum_sq_probs", "mean_logits", "is_top1", "label_mask")
SCORED = {"input_ids", "attention_mask", "labels", "fused_lm_head", "use_cache", "output_router_logits"}


def flatten_scored_batches(model) -> None:
    """Wrap `model.forward` (TRL's fused-head forward, bound to the instance) so scored batches run flattened."""
    padded_forward = model.forward

    @functools.wraps(padded_forward)
    def forward(*args, **kwargs):
        rows = _contiguous_rows(kwargs) if not args and kwargs.get("fused_lm_head") and _only_scoring(kwargs) else None
        if rows is None:
            return padded_forward(*args, **kwargs)
        real, starts, lengths = rows
        return _padded(padded_forward(**_flat_call(kwargs, real, starts, lengths)), real)

    model.forward = forward


def _only_scoring(kwargs: dict) -> bool:
    """Nothing but a scored batch: other keys (PEFT passes inputs_embeds, output_* and return_dict through) unset."""
    return all(k in SCORED or v is None or v is False or k == "return_dict" for k, v in kwargs.items())


def _contiguous_rows(kwargs: dict):
    """(real-token mask, first real column, real length) per row, or None when the batch cannot be flattened."""
    ids, mask, labels = kwargs.get("input_ids"), kwargs.get("attention_mask"), kwargs.get("labels")
    if ids is None or mask is None or labels is None or ids.dim() != 2 or ids.shape[0] < 2 or mask.shape != ids.shape:
        return None
    real = mask.bool()
    lengths = real.sum(1)
    starts = real.int().argmax(1)
    columns = torch.arange(ids.shape[1], device=ids.device)[None]
    contiguous = (columns >= starts[:, None]) & (columns < (starts + lengths)[:, None])
    if not (lengths > 0).all() or not torch.equal(contiguous, real):
        return None
    return real, starts, lengths


def _flat_call(kwargs: dict, real, starts, lengths) -> dict:
    bounds = torch.cat([lengths.new_zeros(1), lengths.cumsum(0)]).to(torch.int32)
    labels = kwargs["labels"][real].clone()
    labels[bounds[:-1].long()] = -100  # a row's first token is nobody's next token (the previous row's last predicts nothing)
    positions = (torch.arange(real.shape[1], device=real.device)[None] - starts[:, None])[real]
    longest = int(lengths.max())
    rest = {k: v for k, v in kwargs.items() if k not in ("input_ids", "attention_mask", "labels")}
    return {**rest, "input_ids": kwargs["input_ids"][real][None], "labels": labels[None], "position_ids": positions[None],
            "cu_seq_lens_q": bounds, "cu_seq_lens_k": bounds, "max_length_q": longest, "max_length_k": longest}


def _padded(out, real):
    """The flat row's per-token fields ([1, tokens - 1]: entry k scores flat token k + 1) back in the padded
    batch's shifted layout ([rows, columns - 1]: entry (r, j) scores row r's column j + 1), zeros elsewhere."""
    scored = real[:, :-1] & real[:, 1:]  # column j + 1 is a real token that follows one in the same row
    flat_index = (real.flatten().cumsum(0) - 1).view(real.shape)[:, :-1][scored]
    for name in PER_TOKEN:
        value = getattr(out, name, None)
        if value is not None:
            out[name] = value.new_zeros(scored.shape).masked_scatter(scored, value[0, flat_index])
    return out


def rotary(model) -> bool:
    """Whether the model's positions enter only through rotary embeddings, whose attention depends on position
    differences alone: then a row's positions may restart at 0 in the flat row (GPT-2's learned ones may not)."""
    return any("RotaryEmbedding" in type(m).__name__ for m in model.modules())


def flatten_scored_passes(trainer) -> str | None:
    """GRPO/GSPO whose models attend with posttrain's CPU attention: every batch the trainer scores
    (the policy's loss pass, the reference's and the old policy's log-probs) runs flattened. The
    start-up note, or None when a model has another attention (which would see one dense row; then
    none is flattened, so the policy and its reference keep computing alike)."""
    from .cpu_attention import NAME

    from posttrain.internals import require

    policy = trainer.model.get_base_model() if hasattr(trainer.model, "get_base_model") else trainer.model
    models = [m for m in (policy, getattr(trainer, "ref_model", None)) if m is not None]
    if not all(require(m.config, "_attn_implementation") == NAME for m in models):
        return None
    if not all(map(rotary, models)):
        return ("scored batches: padded, as TRL scores them (the model's positions are learned, not rotary: a left-padded "
                "row's positions differ from a flattened row's, so flattening would compute something else)")
    for model in models:
        flatten_scored_batches(model)
    return ("scored batches: each batch's prompt + completion rows run as one flattened row (policy, reference, old "
            "log-probs; no padding computed, posttrain's CPU attention keeps the rows apart)")
