"""Build the TRL config object from a recipe: the recipe's keys by construction, plus the defaults
that depend on the machine or the data (see `posttrain.recipe.defaults`)."""

from __future__ import annotations

import os
from pathlib import Path

from posttrain.recipe.schema import Recipe
from posttrain.recipe.trl_fields import CONFIG_CLASSES


def chosen_keys(training) -> set[str]:
    """Keys the recipe gives a value. `key: null` is no choice: posttrain's per-device default applies,
    as for an absent key (TRL would read `bf16: null` as bf16 on, emulated and ~6x slower on most CPUs)."""
    return {k for k in training.model_fields_set if getattr(training, k) is not None}


def runtime_defaults(recipe: Recipe, device, data_format: str | None) -> dict[str, tuple[object, str]]:
    """TRL keys posttrain decides at start-up, with the reason; keys the recipe set are left alone."""
    set_keys = chosen_keys(recipe.training)
    out: dict[str, tuple[object, str]] = {}
    if "bf16" not in set_keys and "fp16" not in set_keys:
        use_bf16 = device.kind in ("cuda", "cpu") and device.bf16
        out["bf16"] = (use_bf16, f"{device.kind}: " + ("native bf16: mixed precision, float32 weights" if use_bf16 else "float32 (no native bf16)"))
    if recipe.training.algorithm in ("sft", "sft_vlm") and data_format == "messages" and "assistant_only_loss" not in set_keys:
        out["assistant_only_loss"] = (True, "messages data: loss on assistant turns only")
    if "activation_checkpointing" not in set_keys:
        # On a CPU too: measured on SmolLM2-135M + LoRA (docs/results/defaults-race.md), off saved no time (SFT, GRPO),
        # cost time (DPO 1.29x slower) and doubled peak memory; only tiny models gained (1.1-1.2x).
        out["activation_checkpointing"] = (True, f"{device.kind}: recompute activations in the backward pass (half the "
                                           "peak memory; on a CPU no slower on a real model)")
    if device.kind == "cpu" and "use_cpu" not in set_keys:
        # Without it, accelerate does not recognise several CPU processes as one job: torchrun's gloo
        # group exists but the model is never wrapped in DDP, so ranks train alone (docs/guides/distributed.md: "2x loss").
        world = int(os.environ.get("WORLD_SIZE", "1"))
        out["use_cpu"] = (True, f"cpu: the {world} gloo processes form one data-parallel job" if world > 1 else "cpu: one process")
    if device.kind == "cpu" and "dataloader_pin_memory" not in set_keys:
        out["dataloader_pin_memory"] = (False, "cpu: nothing to pin to")
    out.update(batching_defaults(recipe, device))
    out.update(reference_defaults(recipe))
    tracking = recipe.tracking
    out["report_to"] = (tracking.provider, "tracking.provider")
    if tracking.provider != "none":
        run_name = tracking.run_name or Path(recipe.training.output_dir).name
        out["run_name"] = (run_name, "tracking.run_name" if tracking.run_name else "the output directory's name")
    if tracking.project:
        out["project"] = (tracking.project, "tracking.project")
    return out


# Attention implementations with variable-length kernels: a flattened batch costs what its real tokens cost.
VARLEN_ATTENTION = ("flash_attention_2", "flash_attention_3", "flash-attn")
BATCHING_KEYS = ("padding_free", "packing", "train_sampling_strategy")


def batching_defaults(recipe: Recipe, device) -> dict[str, tuple[object, str]]:
    """SFT without padding where that learns exactly what padded batches learn; nothing when the recipe chose.

    Padding-free batches (each batch flattened into one row; the same rows per step as TRL's random
    batches, the same loss, no padding computed; tests/e2e/test_padding_free.py) wherever attention
    can treat the flattened rows apart: CUDA with flash attention (varlen kernels), and a CPU when the
    recipe names no attention: posttrain's CPU attention (`models/cpu_attention.py`: the rows laid side
    by side) where it runs, else transformers' sdpa or eager attention with its packed-sequence mask
    from the position ids (one dense mask over the flattened batch; every family tested in
    tests/models/test_fast_paths_every_family.py). Measured with sdpa on SmolLM2 + LoRA: 65 against 52
    tokens/s padded on AVX2, 110 against 95 on AMX (docs: speed paths). On a CPU this replaces the
    micro-batch rule for SFT: one pass over 8 SmolLM2 rows of 79-202 tokens took 3.31 s flattened
    against 5.12 s as the rule's 8 one-row passes (benchmarks/cpu_training_step.py).
    Length grouping (`train_sampling_strategy: group_by_length`) was measured 1.2-1.3x faster on CPU
    (benchmarks/padding.py) and was the CPU default for an hour, until `make demo`'s SFT learned
    nothing with it (train loss 2.05 against 1.37, loose accuracy 0% against 61%: when length tracks
    content, grouped batches are one-sided). A default must not change what a run learns, so it is
    opt-in. DPO: TRL 1.16 has no padding-free DPO; grouping is opt-in there too.
    """
    training = recipe.training
    if training.algorithm not in ("sft", "rft") or chosen_keys(training) & set(BATCHING_KEYS):
        return {}  # cpt packs fixed blocks; sft_vlm must pad (TRL refuses the rest); the recipe's choice wins
    attention = recipe.model.attn_implementation or "sdpa"
    if device.kind == "cuda" and any(name in attention for name in VARLEN_ATTENTION):
        return {"padding_free": (True, f"cuda + {attention}: batches flattened, no padding computed, no cross-row attention")}
    if device.kind == "cpu" and recipe.model.attn_implementation is None and not recipe.uses_images:
        keeps = ("posttrain's CPU attention attends within each row" if cpu_attention_applies(recipe, device) else
                 "the model's attention attends within each row (transformers' packed-sequence mask, from the position ids)")
        return {"padding_free": (True, f"cpu: batches flattened into one row, no padding computed; {keeps}")}
    return {}


def cpu_attention_applies(recipe: Recipe, device) -> bool:
    """Whether the run's model takes posttrain's CPU attention (`models/cpu_attention.py`): on a CPU,
    when the recipe names no attention implementation, for text models, where it earned its place on
    this kind of CPU (`models/cpu_paths.py`)."""
    from posttrain.models.cpu_paths import path_on

    return (device.kind == "cpu" and recipe.model.attn_implementation is None and not recipe.uses_images
            and path_on("cpu_attention", recipe.training.algorithm))


def reference_defaults(recipe: Recipe) -> dict[str, tuple[object, str]]:
    """DPO: precompute the reference log-probs when the run makes two or more passes over its data
    (the rule and its measurements: `posttrain.recipe.liveness.precompute_reason`)."""
    from posttrain.recipe.liveness import precompute_reason

    if "precompute_ref_log_probs" in chosen_keys(recipe.training):
        return {}
    why = precompute_reason(recipe)
    return {"precompute_ref_log_probs": (True, why)} if why else {}


def config_kwargs(recipe: Recipe, device, data_format: str | None) -> dict:
    kwargs = recipe.training.trl_kwargs()
    if recipe.training.distributed is not None:  # the schema refused deepspeed/fsdp keys set beside it
        from posttrain.distributed.backends import backend_fields

        set_keys = chosen_keys(recipe.training)
        kwargs.update({k: v for k, v in backend_fields(recipe.training.distributed).items() if k not in set_keys})
    kwargs.update({k: v for k, (v, _why) in runtime_defaults(recipe, device, data_format).items()})
    return kwargs


def build_trl_config(recipe: Recipe, device, data_format: str | None):
    import trl

    cls = getattr(trl, CONFIG_CLASSES[type(recipe.training)._family])
    return cls(**config_kwargs(recipe, device, data_format))
