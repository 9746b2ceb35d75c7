"""Imported at start-up by a run whose PYTHONPATH names this folder: posttrain's decoding loop then
draws as transformers' `generate` does (one `torch.multinomial` call per step), so that a GRPO run on
posttrain's rollouts can be compared step for step with one on `generate`'s: everything but the draw
rule is posttrain's. The draw rule itself (`decoding.sample`) is tested for its distribution in
tests/generation/test_fast_decode.py."""

from posttrain.generation import decoding


def multinomial(probs, rows=None, batch=None):
    """`generate`'s draw: `torch.multinomial` over the whole batch, which on a CPU is the argmax of
    probs / q for q ~ Exp(1), one per row and token, finished rows included (`generate` keeps them;
    posttrain's loop drops them, so the exponentials of its `rows` are taken from a whole batch's)."""
    import torch

    if rows is None:
        return torch.multinomial(probs, num_samples=1).squeeze(1)
    q = probs.new_empty(batch, probs.shape[-1]).exponential_(1)[rows]
    return (probs / q).argmax(-1)


decoding.sample = multinomial
