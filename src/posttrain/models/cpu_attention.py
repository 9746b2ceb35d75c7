"""Attention for training runs on a CPU: eager for short bf16 rows, and the rows of flattened batches kept apart.

On a CPU that computes bf16 natively posttrain trains under bf16 autocast (models/loading.py), and
PyTorch's sdpa then runs its CPU flash kernel in bf16, whose backward pass is slow for short rows:
one SmolLM2 attention layer (9 query / 3 key-value heads, padding mask) took 17.8 ms forward +
backward for 8 rows x 130 keys against 5.1 ms for the model's own eager attention (matmul, softmax,
matmul), 31.1 against 16.4 ms at 4 x 384; at 2 x 1024 eager loses (160 against 81 ms: it keeps a rows x heads x keys^2 score
matrix). A whole SmolLM2 LoRA training step (checkpointing on) was 1.07-1.13x faster with eager at
130 tokens, 1.03-1.07x at 384, and 1.22-1.26x slower at 768 (benchmarks/cpu_training_step.py, two
runs; steps vary about 10% run to run). So `short_eager_else_sdpa` takes the model's eager
attention for every bf16 or fp16 pass over at most `SHORT_KEYS` keys, and sdpa everywhere else
(float32, a decoded token, long rows). Both compute exact attention and differ in rounding only,
so the choice depends on the shape and precision alone, never on the pass: a GRPO policy's
training pass and its reference's no-gradient log-probs over the same rows use one kernel and
agree bit for bit (their KL is exactly 0 at the first step). Without gradients eager was about 1.07x
faster too (a whole SmolLM2 forward, 130-768 tokens).

Padding-free batches (SFT on a CPU: `trl_config.batching_defaults`) arrive as one flattened row
with TRL's row boundaries (`cu_seq_lens_q`). sdpa would compute that row's attention densely, every
token against every other, most of it masked off (the cost grows with the square of the batch's
tokens); `rows_apart` instead lays the rows side by side, each padded to the longest, and attends
within each row (the rule above per row), so attention costs what a padded batch's would while every
other layer works on the real tokens only. One SmolLM2 LoRA step over 8 rows of 79-202 tokens:
5.12 s as 8 one-row passes (the micro-batch rule's choice), 5.26 s padded, 4.33 s flattened with
sdpa's dense mask, 3.31 s flattened with rows apart (benchmarks/cpu_training_step.py --parts batching).

It is registered with transformers' AttentionInterface as "posttrain_cpu" (masks built as sdpa's),
and `use_on_cpu` sets it on a model loaded with sdpa. transformers never writes the name into a
saved config.json, so saved models load anywhere as before.
"""

from __future__ import annotations

import sys

import torch
from transformers import AttentionInterface, AttentionMaskInterface
from transformers.integrations.sdpa_attention import sdpa_attention_forward
from transformers.masking_utils import sdpa_mask

from posttrain.internals import require

NAME = "posttrain_cpu"
SHORT_KEYS = 384


def attention(module, query, key, value, attention_mask, **kwargs):
    bounds = kwargs.get("cu_seq_lens_q")
    if bounds is not None and _flattened(query, key, bounds, kwargs.get("cu_seq_lens_k")) and _rows_apart_knows(module, kwargs):
        return rows_apart(module, query, key, value, bounds, **kwargs)
    return short_eager_else_sdpa(module, query, key, value, attention_mask, **kwargs)


# what rows_apart reproduces of a layer's attention; any other option (attention sinks, chunked or
# bidirectional attention, ...) leaves the flat row to the dense path, with the mask transformers built for it
ROWS_APART_KNOWS = {"dropout", "scaling", "sliding_window", "softcap", "is_causal", "output_attentions", "use_cache"}


def _rows_apart_knows(module, kwargs) -> bool:
    causal = kwargs.get("is_causal", getattr(module, "is_causal", True))
    extra = {k for k, v in kwargs.items() if v is not None and k not in ROWS_APART_KNOWS and k not in FLAT_KEYS}
    return bool(causal) and not extra


def _flattened(query, key, bounds, key_bounds) -> bool:
    """A padding-free batch: one row of several rows' tokens, the same boundaries for queries and keys."""
    return (query.shape[0] == 1 and query.shape[2] == key.shape[2] == int(bounds[-1]) and bounds.numel() > 2
            and (key_bounds is None or torch.equal(key_bounds, bounds)))


def rows_apart(module, query, key, value, bounds, **kwargs):
    """Attention of a flattened batch, row by row: its rows (boundaries `bounds`, TRL's cu_seq_lens)
    padded side by side to [rows, heads, longest, dim], causal attention within each row (within the
    layer's `sliding_window` where it has one; eager or sdpa by `short_eager_else_sdpa`'s rule), and the
    real tokens gathered back into the flat row."""
    lengths = bounds.diff().long()
    rows, longest = lengths.numel(), int(lengths.max())
    starts = bounds[:-1].long().repeat_interleave(lengths)
    row_of = torch.arange(rows, device=query.device).repeat_interleave(lengths)
    slot = row_of * longest + torch.arange(query.shape[2], device=query.device) - starts  # each token's padded place

    def side_by_side(x):  # [1, heads, tokens, dim] -> [rows, heads, longest, dim]
        flat = x[0].transpose(0, 1)
        padded = flat.new_zeros(rows * longest, *flat.shape[1:]).index_copy(0, slot, flat)
        return padded.view(rows, longest, *flat.shape[1:]).transpose(1, 2)

    positions = torch.arange(longest, device=query.device)
    behind = positions[:, None] - positions[None, :]  # query's position minus key's
    within = (behind >= 0) & (behind < kwargs["sliding_window"]) if kwargs.get("sliding_window") else behind >= 0
    mask = (positions[None, :] < lengths[:, None])[:, None, None, :] & within
    rest = {k: v for k, v in kwargs.items() if k not in FLAT_KEYS}
    out, _ = short_eager_else_sdpa(module, side_by_side(query), side_by_side(key), side_by_side(value), mask, **rest)
    return out.reshape(rows * longest, *out.shape[2:]).index_select(0, slot)[None], None


# the padding-free batch's own keys (TRL's collator): they describe the flat row, not the rows laid side by side
FLAT_KEYS = ("cu_seq_lens_q", "cu_seq_lens_k", "max_length_q", "max_length_k", "seq_idx", "position_ids")


def short_eager_else_sdpa(module, query, key, value, attention_mask, **kwargs):
    from posttrain.internals import require

    needs_eager = kwargs.get("softcap") is not None  # sdpa has no soft-capping (Gemma 2): eager or a refusal
    modeling = sys.modules[type(module).__module__]  # the layer's family's modeling module
    eager = require(modeling, "eager_attention_forward", missing_ok=not needs_eager)
    short = query.shape[2] == key.shape[2] <= SHORT_KEYS
    if eager is None or not (needs_eager or short and _low_precision(query)):
        return sdpa_attention_forward(module, query, key, value, attention_mask, **kwargs)
    causal = kwargs.get("is_causal")
    causal = getattr(module, "is_causal", True) if causal is None else causal
    return eager(module, query, key, value, additive_mask(attention_mask, causal, query), **kwargs)


def _low_precision(query: torch.Tensor) -> bool:
    """Whether attention computes in bf16/fp16: the query's own dtype, or CPU autocast's (RoPE returns float32
    queries under autocast; sdpa and eager's matmuls then cast them down)."""
    low = (torch.bfloat16, torch.float16)
    return query.dtype in low or (torch.is_autocast_enabled("cpu") and torch.get_autocast_dtype("cpu") in low)


def additive_mask(mask: torch.Tensor | None, causal: bool, query: torch.Tensor) -> torch.Tensor | None:
    """sdpa's mask (boolean, True = attend; or None for plain causal attention) as the additive float
    mask eager attention adds to its scores."""
    low = torch.finfo(query.dtype).min
    if mask is None:
        if not causal:
            return None
        n = query.shape[2]
        return torch.full((n, n), low, dtype=query.dtype, device=query.device).triu(1)[None, None]
    if mask.dtype == torch.bool:
        return torch.zeros(mask.shape, dtype=query.dtype, device=mask.device).masked_fill(~mask, low)
    return mask


AttentionInterface.register(NAME, attention)
AttentionMaskInterface.register(NAME, sdpa_mask)


def use_on_cpu(model, bf16: bool) -> str | None:
    """Switch a model loaded with sdpa to posttrain_cpu's `attention`; the start-up note, or None when
    the model keeps its attention (another implementation chosen, or one transformers cannot switch).
    `bf16`: the run trains under bf16 autocast (where short rows take eager attention)."""
    if require(model.config, "_attn_implementation") != "sdpa":
        return None
    model.set_attn_implementation(NAME)
    if require(model.config, "_attn_implementation") != NAME:
        return None
    rows = "each row of a padding-free batch attends on its own (no dense mask across the batch)"
    if not bf16:
        return f"attention: sdpa; {rows}"
    return (f"attention: the model's eager attention for bf16 passes over <= {SHORT_KEYS} tokens, sdpa otherwise "
            f"(bf16 on this CPU: sdpa's backward pass is slower there for short rows); {rows}; "
            "set model.attn_implementation to choose one")
