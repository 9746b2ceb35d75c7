"""The fused LM head on a CPU: per-token log-probabilities over whole vocabulary rows, a few hundred
tokens at a time.

Every TRL 1.16 trainer scores tokens through `add_fused_lm_head`, which never builds the
[tokens x vocabulary] logits: `ChunkedLogProbFunction` projects tiles of 4,096 tokens x 32,768
vocabulary rows and folds each into running statistics. On a GPU the fold is a Triton kernel; on a
CPU it is eight or so float32 passes over each tile in torch, and the backward pass accumulates
every tile's gradient products in float32 (`_addmm_fp32`), away from the CPU's bf16 matrix units.
Measured on a 2-core AMX Xeon (benchmarks/big_vocab.py, one LoRA step): 1.3-2.4x slower than the
full logits, and on SmolLM2 more memory, not less (its 4,096 x 32,768 float32 tile is 512 MB).

Here each block of tokens takes the whole vocabulary in one product (bf16 under autocast, as the
plain model computes it), then log-softmax, the target's log-probability and the statistics TRL
asks for, in float32; the block's product is recomputed in the backward pass, so at most one
block's logits exist at a time: `BLOCK_ELEMENTS` (2^25: 128 MB of float32) / vocabulary
rows tokens per block, 128 tokens for a 262,144-row vocabulary. The gradient is autograd's over the
same operations as the full-logits loss, so it is the plain path's, not an approximation of it;
tests/models/test_cpu_lm_head.py checks every output and gradient against TRL's function.

Installed on CPU runs only (`use_on_cpu`), for tensors on a CPU; anything else goes to TRL's, and so
does an output layer that trains itself (full fine-tuning) under bf16: its weight's gradient would be
summed over blocks of bf16 products, each rounded, where TRL sums them in float32 (the bias its
`_addmm_fp32` comment describes). LoRA leaves the output layer frozen, as do the reference and
old-policy passes.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

BLOCK_ELEMENTS = 2 ** 25  # logits per block (tokens x vocabulary rows)
_STATE: dict = {}


def token_blocks(hidden, weight, bias, targets, temperature, chunk_size, final_logit_softcapping=None, logit_scale=1.0,
                 outputs=("entropy", "log_sum_sq_probs", "mean_logits", "is_top1")):
    """TRL's `ChunkedLogProbFunction.apply` signature and results: (log_probs, entropy, log_sum_sq_probs,
    mean_logits, is_top1), None where not in `outputs`. `chunk_size` (TRL's vocabulary tile) is unused."""
    rows = max(1, BLOCK_ELEMENTS // weight.shape[0])
    if torch.is_autocast_enabled("cpu"):  # cast once, not in every block (autocast caches no cast of a frozen weight)
        weight = weight.to(torch.get_autocast_dtype("cpu"))
        bias = None if bias is None else bias.to(weight.dtype)
    settings = (float(temperature), final_logit_softcapping, float(logit_scale), tuple(outputs))
    with torch.autocast("cpu", enabled=False):  # the products run in the weight's dtype, as autocast would run them
        parts = [_Block.apply(hidden[i:i + rows].to(weight.dtype), weight, bias, targets[i:i + rows], settings)
                 for i in range(0, max(hidden.shape[0], 1), rows)]
    return tuple(None if part[0] is None else torch.cat(part) for part in zip(*parts))


def _logits(hidden, weight, bias, settings):
    """(z, the projection's raw float32 values): the transformed logits TRL scores (scale, soft-cap, temperature)."""
    temperature, softcap, logit_scale, _ = settings
    y = F.linear(hidden, weight, bias).float().mul_(logit_scale)
    z = y if softcap is None else torch.tanh(y / softcap).mul_(softcap)
    return (z.div_(temperature) if temperature != 1.0 else z), y


class _Block(torch.autograd.Function):
    """One block of tokens over the whole vocabulary. The forward keeps no logits; the backward recomputes
    the block's product and turns it into the logits' gradient (TRL's formulas: d log p_t / dz = 1[t] - p,
    d entropy / dz = -p (log p + entropy)), then one product with the weight for the hidden states'."""

    @staticmethod
    def forward(ctx, hidden, weight, bias, targets, settings):
        outputs = settings[3]
        z, _ = _logits(hidden, weight, bias, settings)
        log_z = torch.logsumexp(z, -1)
        log_probs = z.gather(-1, targets[:, None]).squeeze(-1) - log_z
        entropy = log_sq = mean = top1 = None
        if "entropy" in outputs:
            entropy = log_z - (torch.exp(z - log_z[:, None]) * z).sum(-1)
        if "log_sum_sq_probs" in outputs:
            log_sq = torch.logsumexp(2 * (z - log_z[:, None]), -1)
        if "mean_logits" in outputs:
            mean = z.mean(-1)
        if "is_top1" in outputs:
            top1 = z.argmax(-1) == targets  # the first maximum, as TRL counts a tie with an earlier token
        ctx.save_for_backward(hidden, weight, bias, targets, log_z, log_z if entropy is None else entropy)
        ctx.settings = settings
        ctx.mark_non_differentiable(*(x for x in (log_sq, mean, top1) if x is not None))
        ctx.set_materialize_grads(False)
        return log_probs, entropy, log_sq, mean, top1

    @staticmethod
    def backward(ctx, grad_log_probs, grad_entropy, *_):
        hidden, weight, bias, targets, log_z, entropy = ctx.saved_tensors
        temperature, softcap, logit_scale, _ = ctx.settings
        z, y = _logits(hidden, weight, bias, ctx.settings)
        log_p = z.sub_(log_z[:, None])
        p = torch.exp(log_p)
        grad = torch.zeros_like(p)
        if grad_entropy is not None:
            grad = -grad_entropy[:, None] * p * (log_p + entropy[:, None])
        if grad_log_probs is not None:
            grad -= grad_log_probs[:, None] * p
            grad.scatter_add_(-1, targets[:, None], grad_log_probs[:, None].float())
        grad = grad.mul_(logit_scale / temperature)
        if softcap is not None:
            grad.mul_(1 - torch.tanh(y / softcap) ** 2)
        grad = grad.to(weight.dtype)
        grad_hidden = grad @ weight if ctx.needs_input_grad[0] else None
        grad_weight = grad.t() @ hidden if ctx.needs_input_grad[1] else None
        grad_bias = grad.sum(0) if bias is not None and ctx.needs_input_grad[2] else None
        return grad_hidden, grad_weight, grad_bias, None, None


class _CpuOrTrl:
    """Stands in for `trl.trainer.utils._ChunkedLogProbFunction`: CPU tensors here, the rest to TRL's."""

    def __init__(self, trl_function):
        self.trl_function = trl_function

    def apply(self, hidden, weight, *args):
        if hidden.device.type == "cpu" and not (weight.requires_grad and torch.is_autocast_enabled("cpu")):
            return token_blocks(hidden, weight, *args)
        return self.trl_function.apply(hidden, weight, *args)


def use_on_cpu() -> str:
    """Route TRL's fused LM head through `token_blocks` for CPU tensors (once per process); the start-up note."""
    from trl.trainer import utils as trl_utils

    from posttrain.internals import require

    current = require(trl_utils, "_ChunkedLogProbFunction")
    if not isinstance(current, _CpuOrTrl):
        trl_utils._ChunkedLogProbFunction = _CpuOrTrl(current)
    return (f"output layer: the whole vocabulary per block of tokens ({BLOCK_ELEMENTS:,} logits at a time, recomputed in the "
            "backward pass), in place of TRL's 32,768-row tiles, which are slower on a CPU")
