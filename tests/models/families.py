"""Tiny random models of the families users bring, for tests that a speed path computes what the plain
path computes on each: the attention features that differ between them (sliding windows shorter than
the test's rows, Gemma's local/global layers and soft-capping, Qwen3's normalised queries and keys,
Phi-3's fused projections) are what a fast path can silently get wrong."""

from __future__ import annotations

import torch

WINDOW = 8  # shorter than the tests' rows, so a path that ignores a window computes something else
COMMON = dict(vocab_size=128, hidden_size=32, intermediate_size=64, num_hidden_layers=2, num_attention_heads=4,
              num_key_value_heads=2, head_dim=8, max_position_embeddings=256, pad_token_id=0, bos_token_id=1,
              eos_token_id=2)
FAMILIES = {
    "llama": ("LlamaConfig", {}),
    "qwen2-window": ("Qwen2Config", dict(use_sliding_window=True, sliding_window=WINDOW, max_window_layers=1)),
    "qwen3": ("Qwen3Config", {}),
    "mistral-window": ("MistralConfig", dict(sliding_window=WINDOW)),
    "gemma2": ("Gemma2Config", dict(sliding_window=WINDOW)),  # local/global layers, attention + final soft-capping
    "gemma3": ("Gemma3TextConfig", dict(sliding_window=WINDOW)),  # local/global layers
    "phi3-window": ("Phi3Config", dict(sliding_window=WINDOW)),
}


def family_model(name: str):
    """A float32 random model of the family, as `from_pretrained` would load it (its default attention:
    sdpa, or eager where sdpa cannot compute it), the same weights on every call."""
    import transformers

    config_class, options = FAMILIES[name]
    config = getattr(transformers, config_class)(**COMMON, **options)
    torch.manual_seed(0)
    model = transformers.AutoModelForCausalLM.from_config(config, dtype=torch.float32)
    with torch.no_grad():  # larger random weights, so a wrong mask or position shows well above rounding
        for p in model.parameters():
            p.mul_(4)
    return model
