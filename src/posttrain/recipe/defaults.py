"""posttrain's defaults, per algorithm, in one place.

Each entry departs from TRL's own default on purpose; the comment says why. They sit between
TRL's defaults and the recipe (TRL default < posttrain default < recipe YAML < key=value override)
and the start-up log shows every value that differs from TRL's, with the layer that set it.

Defaults that depend on the machine or the data are resolved when the run starts, not here:
- precision: TRL turns bf16 on everywhere; posttrain uses bf16 where the device computes it
  natively — CUDA GPUs that support it, and CPUs with avx512_bf16 or amx_bf16 (autocast over
  float32 weights: SFT 1.55x and DPO 1.68x faster than float32 on tiny:qwen2-6m; GRPO generates in
  float32 there, `algorithms.grpo.generate_without_autocast`) — and float32 elsewhere (bf16 on a
  CPU without those instructions is emulated, ~6x slower).
- SFT on `messages` data trains on assistant turns only (TRL: `assistant_only_loss=True`);
  prompt/completion data trains on the completion only (TRL's own default).
- activation checkpointing: on everywhere, as TRL's (`trl_config.runtime_defaults`). It was off on
  CPU for a while (tiny models' steps 1.1-1.2x faster without it), until SmolLM2-135M + LoRA showed
  that off saved no time there (SFT, GRPO), cost time (DPO 1.29x slower) and doubled peak memory.
- CPU attention (`algorithms/run.py`): with bf16 autocast, rows of at most 384 tokens take the
  model's eager attention (`models/cpu_attention.py`); the same result, faster. (Cheaper LoRA
  dropout masks were tried and removed: 1.02-1.05x end to end, docs/results/speed-paths.md.)
- SFT batching (`trl_config.batching_defaults`; a recipe that sets `padding_free`, `packing` or
  `train_sampling_strategy` keeps its own): `padding_free=True` where attention keeps the flattened
  rows apart: CUDA with flash attention (varlen kernels) and a CPU with posttrain's CPU attention
  (the recipe naming no `attn_implementation`; `models/cpu_attention.py`); the same batches as
  TRL's, no padding computed. Elsewhere TRL's random batches: length grouping was measured 1.2-1.3x
  faster on CPU (benchmarks/padding.py) but changed what `make demo` learned (loose accuracy 0%
  against 61%), so it is opt-in. CPT keeps its fixed-block packing; vision SFT stays padded.
  DPO: TRL 1.16 turned padding-free off (`padding_free` is a dead key there); on one CPU process the
  micro-batch rule splits its batches (`algorithms/micro_batching.py`); `group_by_length` works
  (posttrain supplies the pair lengths TRL's DPO data lacks) and is opt-in. GRPO/GSPO on a CPU score
  their padded batches as one flattened row (`models/flat_batches.py`).
- DPO `precompute_ref_log_probs=True` when the run makes 2+ passes over its data (num_train_epochs
  >= 2, no max_steps, no sync_ref_model; `trl_config.reference_defaults`): one reference pass
  before training replaces one per epoch (measured over one epoch: 1.36x faster with LoRA, 0.81x
  with full fine-tuning; from two epochs on faster with both, see docs/guides/dpo.md), and full
  fine-tuning then holds no frozen copy of the model (memory only goes down).
- `use_cpu=True` on machines without a GPU. Without it, N processes started by torchrun on CPU
  are not one job: accelerate's `PartialState` (state.py `_prepare_backend`) picks
  `DistributedType.MULTI_CPU` only when asked for the CPU, else `NO`; transformers still opens the
  gloo group, but the model is never wrapped in DDP and `accelerator.gather` returns the local
  value. Each rank then trains alone and, with `average_tokens_across_devices`, logs
  `loss * num_processes` (trainer.py / TRL's SFT `compute_loss` multiply by the process count to
  undo DDP's averaging, which never happens): the "2x loss and grad-norm on 2 processes".
"""

from __future__ import annotations

from .algorithms import ALGORITHMS

COMMON: dict[str, object] = {
    # TRL turns checkpointing on through `gradient_checkpointing`, a name transformers 5 deprecated.
    # Whether it is on is decided per device at start-up (see the module docstring); how it runs when
    # on is stated here: non-reentrant works with LoRA (frozen inputs) and is what PyTorch recommends.
    "activation_checkpointing_kwargs": {"use_reentrant": False},
    # A run killed mid-way and started again with the same command continues where it stopped.
    "resume_from_checkpoint": "auto",
}

# Only SFT-family trainers use transformers' loss, which is what this key acts on; DPO and GRPO
# compute and normalise their own (it is rejected there: the rows' `dead` in recipe/algorithms.py).
TOKEN_LOSS: dict[str, object] = {
    # Many processes, one result (kept at TRL's value, stated here on purpose). With it, each rank
    # divides its summed token loss by the number of loss tokens of *all* ranks (gathered in
    # transformers' Trainer._get_num_items_in_batch) and multiplies by the process count, which
    # DDP's gradient averaging divides out again: N processes x batch B take exactly the step of
    # one process with batch N*B, and the logged loss is the global per-token mean. With false,
    # each rank averages over its own tokens and DDP averages those means: ranks with few tokens
    # weigh as much as ranks with many, so the step differs from the one-process step.
    # Measured (tests/distributed/test_many_processes.py): 2 x 8 vs 1 x 16 on CPU, losses and
    # grad-norms equal to 1e-7 relative, weights to 5e-5 after 3 steps at lr 1e-2.
    "average_tokens_across_devices": True,
}

# posttrain's per-algorithm defaults live in each algorithm's row (recipe/algorithms.py, `defaults`),
# each with the reason it departs from TRL's; this view keeps them readable by name.
ALGORITHM_DEFAULTS: dict[str, dict[str, object]] = {name: row.defaults for name, row in ALGORITHMS.items()}


def defaults_for(algorithm: str, training: dict) -> dict[str, object]:
    """posttrain's defaults for an algorithm; `training` (the raw section) feeds derived ones."""
    row = ALGORITHMS.get(algorithm)
    out = {**COMMON, **(TOKEN_LOSS if row is not None and row.token_loss else {}), **(row.defaults if row is not None else {})}
    if algorithm == "cpt" and training.get("packing") is False:
        del out["packing_strategy"]  # read only when packing (recipe.liveness); unpacked CPT has no strategy
    if row is not None and row.family == "grpo" and (training.get("tools") or training.get("environment")):  # GRPOTrainer's tools
        # TRL's None lets a policy that keeps calling tools spend its whole completion budget on calls;
        # rollouts cut at this limit are counted (tools/cut_off).
        out["max_tool_calling_iterations"] = 5
    if algorithm == "gspo" and not {"steps_per_generation", "generation_batch_size", "num_iterations"} & training.keys():
        gas = training.get("gradient_accumulation_steps", 1)
        out["steps_per_generation"] = 4 * gas if isinstance(gas, int) else 4
    return out
