"""posttrain's defaults, per algorithm, in one place.

Each entry departs from TRL's own default on purpose; the comment says why. They sit between
TRL's defaults and the recipe (TRL default < posttrain default < recipe YAML < key=value override)
and the start-up log shows every value that differs from TRL's, with the layer that set it.

Defaults that depend on the machine or the data are resolved when the run starts, not here:
- precision: TRL turns bf16 on everywhere; posttrain uses bf16 only on CUDA devices that support
  it and float32 elsewhere (bf16 on a CPU without bf16 instructions is ~6x slower).
- SFT on `messages` data trains on assistant turns only (TRL: `assistant_only_loss=True`);
  prompt/completion data trains on the completion only (TRL's own default).
"""

from __future__ import annotations

COMMON: dict[str, object] = {
    # TRL turns checkpointing on through `gradient_checkpointing`, a name transformers 5 deprecated;
    # posttrain states it under the new name. Non-reentrant works with LoRA (frozen inputs) and is
    # what PyTorch recommends. Tiny CPU models run faster with activation_checkpointing=false.
    "activation_checkpointing": True,
    "activation_checkpointing_kwargs": {"use_reentrant": False},
    # A run killed mid-way and started again with the same command continues where it stopped.
    "resume_from_checkpoint": "auto",
}

ALGORITHM_DEFAULTS: dict[str, dict[str, object]] = {
    # Continued pre-training: raw text cut into fixed-length blocks, loss on every token.
    "cpt": {"packing": True, "packing_strategy": "wrapped", "completion_only_loss": False},
    "sft": {},
    # Vision-language SFT: TRL truncates at max_length (1024) after the processor has expanded each
    # image into its tokens, and a cut through an image's tokens is an error ("Image features and
    # image tokens do not match"). Unbounded by default; bound image tokens with data.max_image_pixels.
    "sft_vlm": {"max_length": None},
    # TRL's beta=0.0 silently removes the KL term and the reference model; with it, policies drift
    # into reward hacks (empty reasoning + bare answers). 0.04 is the DeepSeekMath GRPO value.
    "grpo": {"beta": 0.04},
    # GSPO (Zheng et al. 2025, arXiv:2507.18071 v2, section 5.1), as TRL's reproduction sets it:
    # sequence-level importance ratios, clipping 3e-4 / 4e-4, the 'grpo' loss, no KL term, and an
    # off-policy schedule (4 mini-batches per rollout; see `derived_defaults`) without which the
    # sequence ratio is 1 and GSPO changes nothing.
    "gspo": {"importance_sampling_level": "sequence", "loss_type": "grpo", "epsilon": 3e-4, "epsilon_high": 4e-4, "beta": 0.0},
}


def defaults_for(algorithm: str, training: dict) -> dict[str, object]:
    """posttrain's defaults for an algorithm; `training` (the raw section) feeds derived ones."""
    out = {**COMMON, **ALGORITHM_DEFAULTS.get(algorithm, {})}
    if algorithm == "gspo" and not {"steps_per_generation", "generation_batch_size", "num_iterations"} & training.keys():
        gas = training.get("gradient_accumulation_steps", 1)
        out["steps_per_generation"] = 4 * gas if isinstance(gas, int) else 4
    return out
