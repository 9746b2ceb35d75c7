"""Imported at start-up by a posttrain run whose PYTHONPATH names this folder (grpo_step.py's
`unmerged` contestant): posttrain's decoding loop runs the model's own linear layers (LoRA unmerged,
weights not pre-packed, LoRA dropout active in training mode, as TRL samples) instead of
generation/inference_weights.py's, everything else equal, so a race measures what they gain."""

from contextlib import nullcontext

from posttrain.generation import inference_weights

inference_weights.inference_linears = lambda model, rows: nullcontext()
