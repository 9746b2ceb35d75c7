"""Inference-only weights for the linear layers of a causal LM: LoRA merged, CPU weights pre-packed.

    with inference_linears(model, rows=16) as note:
        model(input_ids, ...)          # every nn.Linear / LoRA Linear computes with the weights below

Decoding a small batch is a chain of matrix-vector-like products: every generated token reads every
weight once. Two things make the stock forward slower than it needs to be there:
- **unmerged LoRA**: each adapted layer runs its base product plus dropout and two thin products
  (x A, then B), 3 extra kernels per layer per token; merged (W + s·B·A) it is one product, and the
  arithmetic is the policy's own (no dropout: a training-mode model would otherwise sample through
  LoRA dropout);
- **repacking on every call (CPU)**: a float32 GEMM re-lays the weight out for its kernel on each
  call; oneDNN's pre-packed weights (what torch.compile's CPU freezing uses) skip that. Measured on
  this 2-core AVX2 machine, 8 rows: 576x1536 1.2x faster, 1536x576 1.5x, the 576x49152 lm_head 2.1x
  (benchmarks/rollout_speed.py measures the whole decode).

Nothing here changes the model: the merged and packed weights are new tensors, the modules' own
forward comes back when the block exits, and parameters are never written (an in-place merge and
unmerge would add rounding drift to the frozen base every step). The cost is memory: one extra copy
of the merged/packed weights for the duration of the block.

Results equal the stock forward up to float32 rounding (oneDNN sums in another order: about 1e-6
relative), so greedy tokens agree except at exact near-ties; tests/generation/test_fast_decode.py
checks tokens against `generate` on a tiny model and SmolLM2.
"""

from __future__ import annotations

from contextlib import contextmanager


def _lora_merged(module):
    """(weight, bias) of a PEFT LoRA Linear with its active adapters merged, or None when the layer
    is something this cannot merge exactly (DoRA and other variants, LoRA bias, adapters disabled)."""
    import torch

    if module.disable_adapters or getattr(module, "merged", False) or getattr(module, "fan_in_fan_out", False):
        return None
    base = module.get_base_layer()
    if type(base) is not torch.nn.Linear:
        return None  # quantized (QLoRA) or other base layers keep their own forward
    active = [a for a in module.active_adapters if a in module.lora_A]
    if any(a in getattr(module, "lora_variant", {}) or getattr(module, "lora_bias", {}).get(a) for a in active):
        return None
    weight = base.weight.detach()
    for adapter in active:
        weight = weight + module.get_delta_weight(adapter).to(weight.dtype)
    return weight, None if base.bias is None else base.bias.detach()


def _lora_linear_class():
    try:
        from peft.tuners.lora.layer import Linear
    except ImportError:  # peft is a dependency, but keep plain models working without it
        return None
    return Linear


def effective_linears(model) -> dict:
    """{module: (weight, bias)} for every plain nn.Linear and every mergeable LoRA Linear of `model`
    (the LoRA layer itself: its base layer and A/B factors are never reached once it is replaced)."""
    import torch

    lora_cls = _lora_linear_class()
    found, inside_lora = {}, set()
    for module in model.modules():
        if lora_cls is not None and isinstance(module, lora_cls):
            inside_lora.update(id(m) for m in module.modules() if m is not module)
            merged = _lora_merged(module)
            if merged is not None:
                found[module] = merged
    for module in model.modules():
        if type(module) is torch.nn.Linear and id(module) not in inside_lora:
            found[module] = (module.weight.detach(), None if module.bias is None else module.bias.detach())
    return found


def packs_on(device, dtype) -> bool:
    """oneDNN packing pays on a CPU in float32; elsewhere the plain product is used."""
    import torch

    return device.type == "cpu" and dtype == torch.float32 and torch.backends.mkldnn.is_available()


def _linear_forward(weight, bias, rows: int, pack: bool):
    import torch
    import torch.nn.functional as F

    if not pack:
        return lambda x, *args, **kwargs: F.linear(x, weight, bias)
    packed = torch.ops.mkldnn._reorder_linear_weight(weight, rows)

    def forward(x, *args, **kwargs):
        if x.dtype != torch.float32 or x.device.type != "cpu":
            return F.linear(x, weight, bias)
        return torch.ops.mkldnn._linear_pointwise(x, packed, bias, "none", [], "")

    return forward


@contextmanager
def inference_linears(model, rows: int):
    """Within the block, the linear layers of `model` compute with merged LoRA and (CPU float32)
    pre-packed weights, sized for `rows` rows per product. Yields a one-line note for the log."""
    import torch

    layers = effective_linears(model)
    replaced = []
    try:
        with torch.no_grad():
            packed = 0
            for module, (weight, bias) in layers.items():
                if "forward" in module.__dict__:
                    continue  # someone else (an accelerate hook, a quantizer) already replaced it: leave it be
                pack = packs_on(weight.device, weight.dtype)
                packed += pack
                module.forward = _linear_forward(weight, bias, rows, pack)
                replaced.append(module)
        lora = sum(1 for m in replaced if type(m) is not torch.nn.Linear)
        yield f"{len(replaced)} linear layers ({lora} LoRA merged, {packed} pre-packed for the CPU)"
    finally:
        for module in replaced:
            del module.forward
