"""Imported at start-up by a run whose PYTHONPATH names this folder: posttrain's decoding loop then
draws as transformers' `generate` does (one `torch.multinomial` call per step), so that a GRPO run on
posttrain's rollouts can be compared step for step with one on `generate`'s: everything but the draw
rule is posttrain's. The draw rule itself (`decoding.sample`) is tested for its distribution in
tests/generation/test_fast_decode.py."""

from posttrain.generation import decoding


def multinomial(probs):
    import torch

    return torch.multinomial(probs, num_samples=1).squeeze(1)


decoding.sample = multinomial
