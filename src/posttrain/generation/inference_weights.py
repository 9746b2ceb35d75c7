"""Inference-only linear layers for decoding: CPU weights pre-packed (and kept), LoRA without dropout.

    with inference_linears(model, rows=16) as note:
        model(input_ids, ...)          # every nn.Linear / LoRA Linear computes as described below

Decoding a small batch is a chain of matrix-vector-like products: every generated token reads every
weight once, and the linear layers are most of a decode step (82% on SmolLM2, CPU). Within the block:
- **CPU, float32: pre-packed weights.** A float32 GEMM re-lays the weight out for its kernel on every
  call; oneDNN's pre-packed weights (what torch.compile's CPU freezing uses) skip that. Measured on a
  2-core AVX2 machine, 8 rows, one thread: 576x1536 1.2x faster, 1536x576 1.5x, SmolLM2's 576x49152
  lm_head 2.1x. Packing costs about three decode steps, so packed weights are kept between calls
  (keyed by the tensor's storage and version: an optimizer step that changes a weight in place makes
  it repack; frozen weights, e.g. a LoRA run's base and lm_head, are packed once per run).
- **LoRA**: on a CPU the adapter runs unmerged beside the packed base (its two thin products cost far
  less than repacking a merged weight every rollout); on a GPU it is merged into a copy of the weight
  (one product instead of three kernels). Either way without LoRA dropout: a model in training mode
  (TRL generates in training mode) would otherwise sample through dropout, from a perturbed policy.

Nothing here writes a parameter: packed and merged weights are new tensors, and the modules' own
forward comes back when the block exits. oneDNN sums in another order than the stock kernel, so
results agree to float32 rounding (about 1e-6 relative): greedy tokens agree except at exact
near-ties (tests/generation/test_fast_decode.py compares tokens with `generate`).
"""

from __future__ import annotations

from contextlib import contextmanager


def packed_weight(weight, rows: int):
    """oneDNN's pre-packed copy of `weight` (a module's parameter), kept on the parameter itself and
    reused while its storage and version are unchanged (an in-place update bumps the version)."""
    import torch

    key = (weight.data_ptr(), weight._version)
    hit = getattr(weight, "_posttrain_packed", None)
    if hit is not None and hit[0] == key:
        return hit[1]
    packed = torch.ops.mkldnn._reorder_linear_weight(weight.detach(), rows)
    weight._posttrain_packed = (key, packed)
    return packed


def packs_on(weight) -> bool:
    """oneDNN packing pays on a CPU in float32; elsewhere the plain product is used."""
    import torch

    return weight.device.type == "cpu" and weight.dtype == torch.float32 and torch.backends.mkldnn.is_available()


def _product(weight, bias, rows: int):
    """x -> x W^T + b, through a packed copy of W where that pays (`weight`: the parameter itself, so
    its packed copy can be kept on it)."""
    import torch
    import torch.nn.functional as F

    if not packs_on(weight):
        return lambda x: F.linear(x, weight, bias)
    packed = packed_weight(weight, rows)
    weight = weight.detach()

    def product(x):
        if x.dtype != torch.float32 or x.device.type != "cpu":
            return F.linear(x, weight, bias)
        return torch.ops.mkldnn._linear_pointwise(x, packed, bias, "none", [], "")

    return product


def _lora_forward(module, rows: int):
    """A PEFT LoRA Linear's forward for decoding, or None where it must keep its own (DoRA and other
    variants, LoRA bias, disabled or merged adapters, quantized bases): the base product (packed on a
    CPU) plus B(A x) * scale per active adapter, without dropout; on a GPU the merged weight."""
    import torch

    if module.disable_adapters or getattr(module, "merged", False) or getattr(module, "fan_in_fan_out", False):
        return None
    base = module.get_base_layer()
    if type(base) is not torch.nn.Linear:
        return None
    active = [a for a in module.active_adapters if a in module.lora_A]
    if any(a in getattr(module, "lora_variant", {}) or getattr(module, "lora_bias", {}).get(a) for a in active):
        return None
    weight, bias = base.weight, None if base.bias is None else base.bias.detach()
    if not packs_on(weight):
        merged = weight.detach()
        for adapter in active:
            merged = merged + module.get_delta_weight(adapter).to(merged.dtype)
        return _product(merged, bias, rows)
    product = _product(weight, bias, rows)
    factors = [(module.lora_A[a], module.lora_B[a], module.scaling[a]) for a in active]

    def forward(x, *args, **kwargs):
        out = product(x)
        for lora_a, lora_b, scale in factors:
            out = out + lora_b(lora_a(x)) * scale
        return out

    return forward


def _lora_linear_class():
    try:
        from peft.tuners.lora.layer import Linear
    except ImportError:  # peft is a dependency, but keep plain models working without it
        return None
    return Linear


def decoding_forwards(model, rows: int) -> dict:
    """{module: forward} for every plain nn.Linear and every LoRA Linear of `model` that has a
    decoding forward (a LoRA layer's own base layer and factors are reached through it, never alone)."""
    import torch

    lora_cls = _lora_linear_class()
    found, inside_lora = {}, set()
    for module in model.modules():
        if lora_cls is not None and isinstance(module, lora_cls):
            inside_lora.update(id(m) for m in module.modules() if m is not module)
            forward = _lora_forward(module, rows)
            if forward is not None:
                found[module] = forward
    for module in model.modules():
        if type(module) is torch.nn.Linear and id(module) not in inside_lora:
            bias = None if module.bias is None else module.bias.detach()
            product = _product(module.weight, bias, rows)
            found[module] = lambda x, *args, _product=product, **kwargs: _product(x)
    return found


@contextmanager
def inference_linears(model, rows: int):
    """Within the block, the linear layers of `model` compute as the module docstring says, sized for
    `rows` rows per product. Yields a one-line note for the log."""
    import torch

    replaced = []
    try:
        with torch.no_grad():
            for module, forward in decoding_forwards(model, rows).items():
                if "forward" in module.__dict__:
                    continue  # someone else (an accelerate hook, a quantizer) already replaced it: leave it be
                module.forward = forward
                replaced.append(module)
        lora = sum(1 for m in replaced if type(m) is not torch.nn.Linear)
        packed = sum(1 for m in replaced if packs_on(m.get_base_layer().weight if hasattr(m, "get_base_layer") else m.weight))
        yield f"{len(replaced)} linear layers ({lora} with LoRA, {packed} pre-packed for the CPU)"
    finally:
        for module in replaced:
            del module.forward
