"""Inference-only linear layers for decoding: CPU weights pre-packed (and kept), LoRA without dropout.

    with inference_linears(model, rows=16) as note:
        model(input_ids, ...)          # every nn.Linear / LoRA Linear computes as described below

Decoding a small batch is a chain of matrix-vector-like products: every generated token reads every
weight once, and the linear layers are most of a decode step (82% on SmolLM2, CPU). Within the block:
- **CPU, float32: pre-packed weights.** A float32 GEMM re-lays the weight out for its kernel on every
  call; oneDNN's pre-packed weights (what torch.compile's CPU freezing uses) skip that. Measured on a
  2-core AVX2 machine, 8 rows, one thread: 576x1536 1.2x faster, 1536x576 1.5x, SmolLM2's 576x49152
  lm_head 2.1x. Packing costs about three decode steps, so packed weights are kept between calls.
  A trainer must call `forget_trained(model)` after changing weights (GRPO's rollouts do it when the
  step changed, and when a training pass begins, so the copies do not sit beside its activations):
  a fused optimizer writes parameters without bumping their version, so a version check alone would
  miss it. Frozen weights (a LoRA run's base and lm_head) are kept for the run.
- **LoRA merged** into a copy of the weight (W + s·B·A): one product instead of the base product,
  dropout and two thin products per layer and token, and without LoRA dropout: a model in training
  mode (TRL generates in training mode) would otherwise sample through dropout, from a perturbed
  policy. The merged copy is remade when the adapter changed (each rollout of a training run).

Nothing here writes a parameter: packed and merged weights are new tensors (kept on the module or
parameter they belong to, so they cost one extra copy of the weights while the model lives), and the modules' own
forward comes back when the block exits. oneDNN sums in another order than the stock kernel, so
results agree to float32 rounding (about 1e-6 relative): greedy tokens agree except at exact
near-ties (tests/generation/test_fast_decode.py compares tokens with `generate`).
"""

from __future__ import annotations

from contextlib import contextmanager


def _versions(*tensors) -> tuple:
    """Each tensor's storage and in-place version counter (torch's private `_version`: posttrain/internals.py)."""
    from posttrain.internals import require

    return tuple((t.data_ptr(), require(t, "_version")) for t in tensors)


def packed_weight(weight, rows: int, owner=None, key: tuple | None = None):
    """oneDNN's pre-packed copy of `weight`, kept on `owner` (default: the weight itself, a module's
    parameter) and reused while `key` (default: the weight's storage and version) is unchanged: an
    in-place update, as an optimizer step makes, bumps a version and the weight is packed again."""
    import torch

    from posttrain.internals import require

    owner = weight if owner is None else owner
    key = _versions(weight) if key is None else key
    hit = getattr(owner, "_posttrain_packed", None)
    if hit is not None and hit[0] == key:
        return hit[1]
    owner._posttrain_packed = None  # free the old copy before the new one is made
    packed = require(torch.ops.mkldnn, "_reorder_linear_weight")(weight.detach(), rows)
    owner._posttrain_packed = (key, packed)
    return packed


def packs_on(weight) -> bool:
    """oneDNN packing pays on a CPU in float32; elsewhere the plain product is used."""
    import torch

    return weight.device.type == "cpu" and weight.dtype == torch.float32 and torch.backends.mkldnn.is_available()


def _product(weight, bias, packed=None, plain=None):
    """x -> x W^T + b, through `packed` (W pre-packed) where given; `plain` computes it otherwise
    (an input that is not float32 on the CPU)."""
    import torch
    import torch.nn.functional as F

    from posttrain.internals import require

    weight = weight.detach()
    plain = plain or (lambda x: F.linear(x, weight, bias))
    if packed is None:
        return plain
    linear_pointwise = require(torch.ops.mkldnn, "_linear_pointwise")

    def product(x):
        if x.dtype != torch.float32 or x.device.type != "cpu":
            return plain(x)
        return linear_pointwise(x, packed, bias, "none", [], "")

    return product


def _lora_forward(module, rows: int):
    """A PEFT LoRA Linear's forward for decoding: one product with the merged weight W + s·B·A (no
    dropout), packed on a CPU; or None where the layer must keep its own forward (DoRA and other
    variants, LoRA bias, disabled or merged adapters, quantized bases). The merged copy is made again
    only when the base or a factor changed (every rollout of a training run: a few decode steps' worth
    of work; measured against running the two thin LoRA products beside a packed base at every token,
    SmolLM2 with LoRA on every linear layer, 32 tokens: the merged weight was about 2x faster).
    PEFT's attributes read here are its internals (posttrain/internals.py): one renamed stops the run
    rather than merge a layer whose forward computes something else."""
    import torch

    from posttrain.internals import require

    if module.disable_adapters or require(module, "merged") or require(module, "fan_in_fan_out"):
        return None
    base = module.get_base_layer()
    if type(base) is not torch.nn.Linear:
        return None
    lora_A, lora_B, scaling = (require(module, name) for name in ("lora_A", "lora_B", "scaling"))
    active = [a for a in module.active_adapters if a in lora_A]
    variants, biases = require(module, "lora_variant"), require(module, "lora_bias")
    if any(a in variants or biases.get(a) for a in active):
        return None
    factors = [w for a in active for w in (lora_A[a].weight, lora_B[a].weight)]
    key = (*_versions(base.weight, *factors), tuple(scaling[a] for a in active))
    bias = None if base.bias is None else base.bias.detach()

    def merged():
        weight = base.weight.detach()
        for adapter in active:
            weight = weight + require(module, "get_delta_weight")(adapter).to(weight.dtype)
        return weight

    if packs_on(base.weight):  # only the packed copy is kept; the plain product (never used in float32) merges anew
        hit = getattr(module, "_posttrain_packed", None)
        packed = hit[1] if hit is not None and hit[0] == key else packed_weight(merged(), rows, owner=module, key=key)
        return _product(base.weight, bias, packed, plain=lambda x: torch.nn.functional.linear(x, merged(), bias))
    hit = getattr(module, "_posttrain_merged", None)
    if hit is None or hit[0] != key:
        module._posttrain_merged = hit = (key, merged())
    return _product(hit[1], bias)


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
            product = _product(module.weight, bias, packed_weight(module.weight, rows) if packs_on(module.weight) else None)
            found[module] = lambda x, *args, _product=product, **kwargs: _product(x)
    return found


def forget_trained(model, *, frozen_too: bool = False) -> int:
    """Drop the packed and merged copies that depend on a trainable parameter of `model` (call it
    after an optimizer step); frozen weights keep theirs, unless `frozen_too` (a run that will not
    decode again soon: its copies would only hold memory). Returns how many were dropped."""
    dropped = 0
    for module in model.modules():
        owners = [module] if hasattr(module, "_posttrain_merged") or hasattr(module, "_posttrain_packed") else []
        owners += [p for p in module.parameters(recurse=False) if hasattr(p, "_posttrain_packed")]
        for owner in owners:
            params = list(owner.parameters()) if hasattr(owner, "parameters") else [owner]
            if frozen_too or any(p.requires_grad for p in params):
                for name in ("_posttrain_packed", "_posttrain_merged"):
                    if owner.__dict__.pop(name, None) is not None:
                        dropped += 1
    return dropped


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
