"""posttrain's decoding loop: `model.generate`'s results, faster on small batches.

    sequences = decode(model, input_ids, attention_mask, generation_config)   # what model.generate returns

Used by GRPO/GSPO rollouts (`algorithms.grpo.route_generate`: TRL calls `model.generate` and gets
this) and by the local evaluation engine. Where the time of `generate` goes on a small batch, and what this
does about each (benchmarks/rollout_speed.py measures it side by side):

- **the weights are read once per decoded token**, and the linear layers dominate (82% of a
  SmolLM2 decode step on a CPU): CPU weights are pre-packed and kept while they do not change, LoRA
  runs without dropout (`inference_weights.inference_linears`);
- **group prompts are prefilled once**: GRPO repeats each prompt `num_generations` times; the
  prompt's keys and values are computed for one copy and repeated in the cache;
- **a prefix all prompts share is prefilled once**: an evaluation's or a GRPO batch's prompts open with
  the same system prompt (97 of SmolLM2's ~125 tokens per arithmetic item); its keys and values are
  computed for one row and written into every row's place in the cache (`shared_prefix`);
- **no cache copies**: keys and values go into buffers sized for the whole generation
  (`preallocated_cache`; the default cache concatenates, copying every layer's cache per token);
- **logits only where they are sampled**: the prefill asks the model for the last position's logits;
- **finished rows leave the batch**: a row that emitted a stop token is dropped from the cache, the mask
  and every later step (`generate` keeps computing it, and an evaluation batch then costs its longest
  answer times its rows); the rows left compute what they computed beside it;
- **one uniform draw per row on a CPU** (`sample`: the inverse of the cumulative distribution) instead of
  `torch.multinomial`'s exponential draw for every vocabulary entry: 14 ms of a 16-row SmolLM2
  decode step on one avx512 core (28 ms on AVX2) against 0.7 ms. The same distribution, not the same
  draws: seeded alike, sampled tokens differ from `generate`'s (greedy ones do not).

What stays the same as `generate`: the model's own forward (any architecture transformers runs with
a KV cache), left padding with position ids from the attention mask, the logits processors
(transformers' own temperature / top-k / top-p / min-p warpers, applied in `generate`'s order to
float32 logits), draws from the global RNG (one per row and step, whether or not the row is still
decoding, so a row's samples do not depend on when the others finish), eos handling (a finished row is
padded) and the returned shape. So greedy tokens are `generate`'s up to float32 rounding, and samples come from the
same distribution (tests/generation/test_fast_decode.py). Anything else in the generation config (beams,
repetition penalty, min_new_tokens, suppressed tokens, streamers, ...) is not implemented here:
`unsupported` names it and the caller uses `generate` itself.
"""

from __future__ import annotations

import functools
from contextlib import nullcontext

# Generation-config fields this loop implements; any other field set away from its default sends
# the call to `generate` (see `unsupported`).
SUPPORTED = {
    "max_new_tokens", "do_sample", "temperature", "top_p", "top_k", "min_p", "eos_token_id", "pad_token_id",
    "bos_token_id", "use_cache", "cache_implementation", "disable_compile", "return_dict_in_generate",
}
# Bookkeeping fields that do not change what is generated.
IGNORED = {"transformers_version", "_from_model_config", "_commit_hash", "_original_object_hash"}


def unsupported(generation_config, model_kwargs: dict) -> str | None:
    """Why this loop cannot stand in for `generate` with these arguments, or None when it can."""
    from transformers import GenerationConfig

    if model_kwargs:
        return f"model inputs {sorted(model_kwargs)}"
    default = GenerationConfig().to_dict()
    for key, value in generation_config.to_dict().items():
        if key in SUPPORTED or key in IGNORED or value == default.get(key, value):
            continue
        if key == "repetition_penalty" and value == 1.0:
            continue
        return f"generation setting {key}={value!r}"
    if generation_config.max_new_tokens is None:
        return "no max_new_tokens"
    if generation_config.return_dict_in_generate:
        return "return_dict_in_generate"
    if generation_config.cache_implementation not in (None, "dynamic"):
        return f"cache_implementation={generation_config.cache_implementation!r}"
    if generation_config.do_sample and generation_config.temperature is not None and generation_config.temperature <= 0:
        return f"temperature={generation_config.temperature}"
    return None


def warpers(generation_config):
    """transformers' sampling warpers for this config, in `generate`'s order (min_tokens_to_keep=1)."""
    from transformers.generation.logits_process import (
        LogitsProcessorList, MinPLogitsWarper, TemperatureLogitsWarper, TopKLogitsWarper, TopPLogitsWarper)

    c, chain = generation_config, LogitsProcessorList()
    if not c.do_sample:
        return chain
    if c.temperature is not None and c.temperature != 1.0:
        chain.append(TemperatureLogitsWarper(c.temperature))
    if c.top_k is not None and c.top_k != 0:
        chain.append(TopKLogitsWarper(top_k=c.top_k))
    if c.top_p is not None and c.top_p < 1.0:
        chain.append(TopPLogitsWarper(top_p=c.top_p))
    if c.min_p is not None:
        chain.append(MinPLogitsWarper(min_p=c.min_p))
    return chain


def prompt_groups(input_ids, attention_mask):
    """(unique row indices, index of each row's unique row): rows with the same tokens and mask share
    one prefill."""
    import torch

    keys = {}
    inverse = []
    for ids, mask in zip(input_ids.tolist(), attention_mask.tolist()):
        inverse.append(keys.setdefault((tuple(ids), tuple(mask)), len(keys)))
    first = {}
    for row, k in enumerate(inverse):
        first.setdefault(k, row)
    unique = torch.tensor([first[k] for k in range(len(keys))], device=input_ids.device)
    return unique, torch.tensor(inverse, device=input_ids.device)


def decode(model, input_ids, attention_mask, generation_config, *, weights: bool = True, on_step=None):
    """The sequences `model.generate(input_ids=..., attention_mask=..., generation_config=...)`
    returns (prompt followed by new tokens, finished rows padded), for a config `unsupported`
    accepts. `weights=False` keeps the model's own linear layers (no packing; a caller that packs
    once around many calls passes it). `on_step(tokens, finished)`, if given, is called after each
    decoded token with the tokens that step made (one per row still decoding) and the rows it
    finished (a stop token, or the last step): what a progress bar counts."""
    import torch

    from posttrain.generation.inference_weights import inference_linears

    config = generation_config
    stop = config.eos_token_id
    stop = torch.tensor([] if stop is None else [stop] if isinstance(stop, int) else list(stop), device=input_ids.device)
    pad = config.pad_token_id if config.pad_token_id is not None else (int(stop[0]) if len(stop) else 0)
    chain = warpers(config)
    batch = input_ids.shape[0]
    unique, inverse = prompt_groups(input_ids, attention_mask)
    forward_kwargs = forward_options(model)

    with inference_linears(model, rows=batch) if weights else nullcontext(), torch.inference_mode():
        cache = preallocated_cache(model.config, input_ids.shape[1] + config.max_new_tokens)
        mask = attention_mask[unique]
        positions = (mask.long().cumsum(-1) - 1).masked_fill(mask == 0, 1)  # as generate derives them
        start = shared_prefix(model, cache, input_ids[unique], mask, forward_kwargs)  # columns already in the cache
        out = model(input_ids=input_ids[unique, start:], attention_mask=mask, position_ids=positions[:, start:], use_cache=True,
                    **{forward_kwargs["cache"]: cache}, **forward_kwargs["extra"])
        if len(unique) < batch:
            cache.reorder_cache(inverse)
        logits = out.logits[inverse, -1].float()
        width = input_ids.shape[1]
        sequences = input_ids.new_full((batch, width + config.max_new_tokens), pad)  # finished rows stay padded
        sequences[:, :width] = input_ids
        full_mask = attention_mask.new_ones(batch, width + config.max_new_tokens)
        full_mask[:, :width] = attention_mask
        position = attention_mask.long().sum(-1, keepdim=True) - 1
        rows = torch.arange(batch, device=input_ids.device)  # the rows still decoding: the cache's, mask's and logits' rows
        end = width - 1
        for step in range(config.max_new_tokens):
            end = width + step
            scores = chain(sequences[rows, :end], logits)
            if config.do_sample:
                token = sample(torch.softmax(scores, dim=-1), rows=rows, batch=batch)
            else:
                token = scores.argmax(-1)
            sequences[rows, end] = token
            last = step + 1 == config.max_new_tokens
            finished = torch.isin(token, stop)
            if on_step is not None:
                on_step(len(rows), len(rows) if last else int(finished.sum()))
            if last or finished.all():
                break
            if finished.any():  # drop them: they would cost every later step a row of compute
                keep = (~finished).nonzero().squeeze(1)
                rows, token, position, full_mask = rows[keep], token[keep], position[keep], full_mask[keep]
                cache.reorder_cache(keep)
            position = position + 1
            out = model(input_ids=token[:, None], attention_mask=full_mask[:, :end + 1], position_ids=position,
                        use_cache=True, **{forward_kwargs["cache"]: cache}, **forward_kwargs["extra"])
            logits = out.logits[:, -1].float()
    return sequences[:, :end + 1]


SHARED_PREFIX_MIN = 16  # tokens; a shorter shared prefix does not repay its own forward pass


def shared_prefix(model, cache, input_ids, attention_mask, forward_kwargs) -> int:
    """Prefill the tokens every (left-padded) row starts with once, for one row, and write their keys
    and values into each row's columns of `cache`; return the first column the batch's own prefill must
    compute (0: nothing shared). Row i holds the prefix in columns [pad_i, pad_i + L); the batch prefill
    starts at `min(pad) + L`, so a row with more padding recomputes the part of the prefix past that
    column. Keys and values at a position depend only on the tokens up to it, so the cache holds what a
    full prefill writes, up to float rounding. Only where every layer is a preallocated full-attention
    layer (a sliding window keeps only its last positions: such models prefill in full); pad columns
    hold zeros, which the mask hides."""
    import os

    import torch

    layer_class = _preallocated_layer_class()
    if len(input_ids) < 2 or not cache.layers or not all(type(layer) is layer_class for layer in cache.layers):
        return 0
    pads = (attention_mask == 0).sum(-1).tolist()
    rows = [ids[pad:] for ids, pad in zip(input_ids.tolist(), pads)]
    if any(mask[pad:].count(0) for mask, pad in zip(attention_mask.tolist(), pads)):
        return 0  # not left padding
    length = min(len(os.path.commonprefix(rows)), min(map(len, rows)) - 1)  # every row prefills its last token itself
    if length < SHARED_PREFIX_MIN:
        return 0
    start = min(pads) + length
    one = preallocated_cache(model.config, length)
    prefix = input_ids.new_tensor(rows[0][:length])[None]
    model(input_ids=prefix, attention_mask=torch.ones_like(prefix), position_ids=torch.arange(length, device=prefix.device)[None],
          use_cache=True, **{forward_kwargs["cache"]: one}, **forward_kwargs["extra"])
    batch = len(input_ids)
    for layer, shared in zip(cache.layers, one.layers):
        layer.lazy_initialization(shared.keys.expand(batch, -1, -1, -1), shared.values.expand(batch, -1, -1, -1))
        for buffer, values in ((layer.key_buffer, shared.keys), (layer.value_buffer, shared.values)):
            buffer[:, :, :start] = 0
            for row, pad in enumerate(pads):
                if pad < start:
                    buffer[row, :, pad:start] = values[0, :, :start - pad]
        layer.filled = start
        layer.keys, layer.values = layer.key_buffer[:, :, :start], layer.value_buffer[:, :, :start]
    return start


def sample(probs, rows=None, batch: int | None = None):
    """One token per row of `probs` (rows of a distribution, zeros where a warper removed a token).
    On a CPU: by inverting the cumulative distribution with one uniform per row. CPU cumsum adds in
    float64 in order, so a token's share of [0, total) is its probability up to one float32 rounding
    and a token of probability 0 has none: it is never drawn. `rows` (of a `batch`): the batch rows
    `probs` holds; uniforms are drawn for the whole batch and theirs used, so a row draws the same
    numbers however many rows are left. Elsewhere `torch.multinomial`, whose exponential draws are
    cheap on a GPU, and whose parallel cumsum would not give that guarantee."""
    import torch

    if probs.device.type != "cpu":
        return torch.multinomial(probs, num_samples=1).squeeze(1)
    cdf = probs.cumsum(-1)
    total = cdf[:, -1:]
    uniform = torch.rand_like(total) if rows is None else torch.rand(batch, 1, dtype=total.dtype)[rows]
    u = torch.minimum(uniform * total, torch.nextafter(total, torch.zeros_like(total)))  # u < total
    return torch.searchsorted(cdf, u, right=True).squeeze(1)  # the first token whose running sum exceeds u


def preallocated_cache(model_config, capacity: int):
    """A DynamicCache whose full-attention layers write into buffers of `capacity` positions instead
    of concatenating (which copies the whole cache at every token: 10% of a decode step on SmolLM2
    at 64 positions, growing with the length). Models with sliding-window or other special layers
    keep transformers' own layers. The layers are transformers internals (posttrain/internals.py): one
    renamed stops the run rather than leave transformers reading a cache this one does not fill."""
    from transformers import DynamicCache
    from transformers.cache_utils import DynamicLayer

    from posttrain.internals import require

    cache = DynamicCache(config=model_config)
    layers = require(cache, "layers")
    if layers and all(type(layer) is DynamicLayer for layer in layers):
        layer_class = _preallocated_layer_class()
        cache.layers = [layer_class(capacity) for _ in layers]
    return cache


@functools.cache
def _preallocated_layer_class():
    """The layer class subclasses transformers': defined on first use, so importing this stays cheap."""
    from transformers.cache_utils import DynamicLayer

    from posttrain.internals import require

    for method in ("lazy_initialization", "reorder_cache"):  # the methods overridden below, which transformers calls
        require(DynamicLayer, method)

    class PreallocatedLayer(DynamicLayer):
        """A DynamicLayer that fills preallocated buffers; `keys`/`values` are views of the filled part."""

        def __init__(self, capacity: int):
            super().__init__()
            for name in ("is_initialized", "keys", "values"):  # the state transformers reads back
                require(self, name)
            self.capacity = capacity

        def lazy_initialization(self, key_states, value_states):
            super().lazy_initialization(key_states, value_states)
            batch, heads, _, dim = key_states.shape
            self.key_buffer = key_states.new_empty(batch, heads, self.capacity, dim)
            self.value_buffer = value_states.new_empty(batch, heads, self.capacity, value_states.shape[-1])
            self.filled = 0

        def update(self, key_states, value_states, *args, **kwargs):
            if not self.is_initialized:
                self.lazy_initialization(key_states, value_states)
            end = self.filled + key_states.shape[-2]
            if end > self.capacity:
                raise RuntimeError(f"preallocated KV cache of {self.capacity} positions overflowed ({end})")
            self.key_buffer[:, :, self.filled:end] = key_states
            self.value_buffer[:, :, self.filled:end] = value_states
            self.filled = end
            self.keys, self.values = self.key_buffer[:, :, :end], self.value_buffer[:, :, :end]
            return self.keys, self.values

        def reorder_cache(self, beam_idx):
            """Rows repeated (a group's prefill) or dropped (finished rows): only the filled part is copied."""
            for name in ("key_buffer", "value_buffer"):
                old = getattr(self, name)
                new = old.new_empty(len(beam_idx), *old.shape[1:])
                new[:, :, :self.filled] = old[:, :, :self.filled].index_select(0, beam_idx)
                setattr(self, name, new)
            self.keys, self.values = self.key_buffer[:, :, :self.filled], self.value_buffer[:, :, :self.filled]

    return PreallocatedLayer


def forward_options(model) -> dict:
    """How this model's forward takes the cache (`cache` since transformers 5.2x, `past_key_values`
    before) and whether it computes the last position's logits only when asked (as `generate` checks
    it). A PEFT wrapper forwards keywords to its base model, whose signature is the one to read."""
    import inspect

    base = model.get_base_model() if hasattr(model, "get_base_model") else model
    parameters = inspect.signature(base.forward).parameters
    return {"cache": "cache" if "cache" in parameters else "past_key_values",
            "extra": {"logits_to_keep": 1} if "logits_to_keep" in parameters else {}}
