"""Every private or undocumented internal of TRL, transformers, accelerate, PEFT and torch that posttrain
touches, in one table.

Where a library offers an extension point (a callback, a collator, a config field, a subclass hook
it documents) posttrain uses it. Where it offers none, posttrain wraps, reads or replaces a name the
library does not promise to keep, and an upgrade that renames it would silently lose the feature
(no timing split, no token audit) or, worse, compute something else (a DoRA layer merged as plain
LoRA, a KV cache whose length transformers no longer reads). So each such name is listed here with
what it is for, and:

- `check(family)` runs before a trainer is built: a class-level name missing from the installed
  library stops the run with exit 2 instead of training without it;
- `require(obj, name)` is how the code reaches each one (the same refusal, at the point of use);
- `returned(obj, name, result)` reads a private method's tuple result by field name, after checking
  that it has the fields posttrain was written for: a longer or reordered tuple must not be read by
  position;
- tests/architecture/test_internals.py checks that every entry exists in the installed library and
  that the library still uses it (`called_as` is in the caller's source), so an upgrade fails a test
  before it fails a run.

The refusal names the attribute, the installed version of its library and the version posttrain was
tested with (`TESTED_WITH`; pyproject.toml pins TRL and bounds the others from above).
"""

from __future__ import annotations

import functools
import importlib
from dataclasses import dataclass

# The versions this table was checked against (tests/architecture/test_internals.py passed on them).
TESTED_WITH = {"trl": "1.16.0", "transformers": "5.25.0", "accelerate": "1.16.0", "peft": "0.21.2", "torch": "2.13.0",
               "deepspeed": "0.19.8"}
_DISPLAY_NAMES = {"trl": "TRL", "peft": "PEFT"}


@dataclass(frozen=True)
class Internal:
    module: str  # where the owner lives; its top package is the library
    owner: str  # class name (dotted for a nested namespace: "ops.mkldnn"), or "" for a module-level name
    name: str  # the attribute
    purpose: str  # what posttrain loses without it, and where it uses it
    # the algorithm families (recipe/algorithms.py) whose runs need it (`check` looks there), or features any run
    # can use: "decoding" (posttrain's decoding loop: rollouts, held-out scoring, `posttrain generate/eval`),
    # "held_out", "cpu_attention", "cpu_lm_head", "forced_resume", "deepspeed_cpu"
    families: tuple[str, ...]
    called_as: str = ""  # text that must appear in `caller`'s source: the library still uses it (tests only)
    caller: str = ""  # 'module:Class' whose source holds `called_as` (default: the owner)
    instance: bool = False  # set on each instance (not on the class): checked where it is used
    # posttrain changes it after these methods of `caller` ran, so no other method may read it (tests only)
    read_only_in: tuple[str, ...] = ()
    returns: tuple[str, ...] = ()  # a method's tuple result, field by field, as the library's caller unpacks it

    @property
    def library(self) -> str:
        return self.module.split(".")[0]

    @property
    def where(self) -> str:
        return f"{self.module}.{self.owner + '.' if self.owner else ''}{self.name}"

    def resolve(self):
        return functools.reduce(getattr, filter(None, self.owner.split(".")), importlib.import_module(self.module))


_TIMING = "the generation/scoring time split of each RL step (algorithms/monitor.py attach_timers)"
_SCORING = ("the scoring time and the empty <think> share (algorithms/monitor.py attach_timers); the rewards "
            "refill reads to find groups without variance (algorithms/refill.py)")
_LOGPROBS = "the log-prob time of each RL step (algorithms/monitor.py attach_timers)"
_ROLLOUTS = ("posttrain's decoding loop for rollouts (algorithms/grpo.py route_generate replaces the unwrapped model's "
             "generate, which this method calls)")
_REFERENCE = "the reference model as the policy's own weights (algorithms/reference.py); TRL would reload it by name"
_LOGPROB_FIELDS = ("per_token_logps", "entropies", "aux_loss")
_REFILL = ("groups without reward variance replaced by fresh prompts (algorithms/refill.py attach_refill; "
           "training.refill_zero_variance_groups)")
_CACHE = "posttrain's preallocated KV cache (generation/decoding.py preallocated_cache)"
_MERGE = "LoRA merged into one weight while decoding (generation/inference_weights.py _lora_forward)"
_LORA = "peft.tuners.lora.layer"
_VANILLA_LORA = "result = result + lora_B(lora_A(dropout(x))) * scaling"  # the forward the merged weight stands in for


def _rl_trainer(module: str, owner: str, family: str) -> list[Internal]:
    """The names GRPO's builder (algorithms/grpo.py build_rl_trainer) reaches on GRPOTrainer and RLOOTrainer alike."""
    return [
        Internal(module, "", "create_model_from_path", _REFERENCE, (family,), "create_model_from_path(", f"{module}:{owner}"),
        Internal(module, owner, "_generate", _TIMING, (family,), "self._generate("),
        Internal(module, owner, "_calculate_rewards", _SCORING, (family,), "self._calculate_rewards("),
        Internal(module, owner, "_get_per_token_logps_and_entropies", _LOGPROBS, (family,),
                 "self._get_per_token_logps_and_entropies(", returns=_LOGPROB_FIELDS),
        Internal(module, owner, "_generate_single_turn", _ROLLOUTS, (family,), "unwrapped_model.generate("),
        Internal(module, owner, "_generate_and_score_completions",
                 _REFILL + ("; tool-call counts of runs with tools (algorithms/tool_use.py)" if family == "grpo" else ""),
                 (family,), "self._generate_and_score_completions("),
        Internal(module, owner, "_metrics", _REFILL + ": the refill/* counts, logged beside TRL's frac_reward_zero_std",
                 (family,), 'self._metrics[mode]["frac_reward_zero_std"]', instance=True),
    ]


INTERNALS = [
    # --- TRL and transformers' Trainer ---
    Internal("trl.trainer.sft_trainer", "SFTTrainer", "_prepare_dataset",
             "posttrain's assistant-token masks and token audit (algorithms/sft.py subclasses it)", ("sft",),
             "self._prepare_dataset("),
    Internal("trl.trainer.sft_trainer", "SFTTrainer", "_tokenizer",
             "the tokenizer the token audit reads inside _prepare_dataset (algorithms/sft.py)", ("sft",),
             "self._tokenizer = ", instance=True),
    Internal("trl.trainer.sft_trainer", "SFTTrainer", "_skip_prepare_dataset",
             "telling a skipped dataset step from a missing one (algorithms/sft.py)", ("sft",),
             "self._skip_prepare_dataset = ", instance=True),
    Internal("trl.trainer.sft_trainer", "SFTTrainer", "completion_only_loss",
             "whether a prompt/completion chat trains on its completion only, when posttrain masks chats itself "
             "(algorithms/sft.py _prepare_dataset)", ("sft",), "self.completion_only_loss = ", instance=True),
    Internal("trl.trainer.sft_trainer", "SFTTrainer", "padding_free",
             "padding-free SFT with max_length, which TRL refuses: the trainer is built padded and posttrain sets this "
             "after (algorithms/sft.py build_trainer)", ("sft",), "self.padding_free = ", instance=True,
             read_only_in=("__init__",)),
    Internal("trl.trainer.sft_config", "SFTConfig", "assistant_only_loss",
             "posttrain's assistant masks on any chat template: cleared while SFTTrainer is built, so TRL's check for "
             "{% generation %} markers stands aside (algorithms/sft.py)", ("sft",), "args.assistant_only_loss",
             "trl.trainer.sft_trainer:SFTTrainer", read_only_in=("__init__", "_prepare_dataset")),
    Internal("trl.trainer.dpo_trainer", "", "create_model_from_path", _REFERENCE, ("dpo",), "create_model_from_path(",
             "trl.trainer.dpo_trainer:DPOTrainer"),
    Internal("trl.trainer.dpo_trainer", "DPOTrainer", "loss_types",
             "never micro-batching a DPO loss computed over the whole batch (algorithms/micro_batching.py why_not_exact)",
             ("dpo",), "zip(self.loss_types, self.loss_weights", instance=True),
    Internal("transformers.trainer", "Trainer", "_set_signature_columns_if_needed",
             "keeping DPO's length column for length-grouped batches (algorithms/dpo.py add_lengths)", ("dpo",),
             "self._set_signature_columns_if_needed("),
    Internal("transformers.trainer", "Trainer", "_signature_columns",
             "keeping DPO's length column for length-grouped batches (algorithms/dpo.py add_lengths)", ("dpo",),
             "signature_columns = self._signature_columns", instance=True),
    Internal("transformers.trainer", "Trainer", "_train_batch_size",
             "the CPU micro-batch split (algorithms/micro_batching.py): the batch size the dataloader takes, read from the "
             "args when the trainer was built", ("sft", "dpo"), "batch_size=self._train_batch_size", instance=True),
    *_rl_trainer("trl.trainer.grpo_trainer", "GRPOTrainer", "grpo"),
    Internal("transformers.trainer", "Trainer", "_save_checkpoint",
             "a checkpoint of the last finished step when a reward fails mid-run (algorithms/run.py save_at_fault), "
             "written as the Trainer's own save at that step would write it", ("grpo", "rloo"), "self._save_checkpoint("),
    Internal("trl.trainer.grpo_trainer", "GRPOTrainer", "_tool_call_loop",
             "tool-call counts and health flags of runs with tools (algorithms/tool_use.py)", ("grpo",),
             "self._tool_call_loop(", returns=("tool_mask", "completions", "completion_ids", "logprobs", "tool_call_count",
                                               "tool_failure_count", "tool_images")),
    # RLOO runs through GRPO's builder (algorithms/grpo.py build_rl_trainer): the same names on RLOOTrainer.
    *_rl_trainer("trl.trainer.rloo_trainer", "RLOOTrainer", "rloo"),

    # --- accelerate ---
    Internal("accelerate.accelerator", "Accelerator", "_original_forward",
             "the float32 forward under bf16 autocast on a CPU, kept on the model by Accelerator.prepare_model "
             "(algorithms/common.py without_autocast: rollouts, held-out scoring)", ("grpo", "rloo", "held_out"),
             "model._original_forward = model.forward", instance=True),

    # --- transformers' KV cache: posttrain's layer subclasses DynamicLayer and replaces DynamicCache's layers ---
    Internal("transformers.cache_utils", "DynamicLayer", "lazy_initialization", _CACHE, ("decoding",),
             "self.lazy_initialization(key_states, value_states)"),
    Internal("transformers.cache_utils", "DynamicLayer", "is_initialized", _CACHE, ("decoding",),
             "if not self.is_initialized", instance=True),
    Internal("transformers.cache_utils", "DynamicLayer", "keys", _CACHE + ": the cache length transformers reads",
             ("decoding",), "return self.keys.shape[-2]", instance=True),
    Internal("transformers.cache_utils", "DynamicLayer", "values", _CACHE, ("decoding",), "self.values = ", instance=True),
    Internal("transformers.cache_utils", "DynamicLayer", "reorder_cache", _CACHE + ": a group prompt prefilled once",
             ("decoding",), "self.layers[layer_idx].reorder_cache(beam_idx)", "transformers.cache_utils:Cache"),
    Internal("transformers.cache_utils", "DynamicCache", "layers", _CACHE, ("decoding",),
             "self.layers[layer_idx].update(key_states, value_states", "transformers.cache_utils:Cache", instance=True),

    # --- PEFT's LoRA Linear: the merged weight W + s·B·A must be what its forward computes ---
    *(Internal(_LORA, "Linear", name, _MERGE, ("decoding",), _VANILLA_LORA, instance=True)
      for name in ("lora_A", "lora_B", "scaling")),
    Internal(_LORA, "Linear", "lora_variant", _MERGE + ": DoRA and other variants keep their own forward", ("decoding",),
             "if active_adapter not in self.lora_variant", instance=True),
    Internal(_LORA, "LoraLayer", "lora_bias", _MERGE + ": a LoRA bias keeps its own forward", ("decoding",),
             "self.lora_bias[adapter_name]", instance=True),
    Internal(_LORA, "Linear", "fan_in_fan_out", _MERGE + ": transposed (Conv1D) bases keep their own forward",
             ("decoding",), "transpose(weight_B @ weight_A, self.fan_in_fan_out)", instance=True),
    Internal(_LORA, "Linear", "merged", _MERGE + ": an adapter already merged is not merged twice", ("decoding",),
             "elif self.merged:"),
    Internal(_LORA, "Linear", "get_delta_weight", _MERGE, ("decoding",), "delta_weight = self.get_delta_weight("),

    # --- torch: oneDNN's pre-packed weights, and the version counter that says a weight changed ---
    Internal("torch", "ops.mkldnn", "_reorder_linear_weight",
             "pre-packed CPU weights while decoding (generation/inference_weights.py packed_weight)", ("decoding",)),
    Internal("torch", "ops.mkldnn", "_linear_pointwise",
             "pre-packed CPU weights while decoding (generation/inference_weights.py _product)", ("decoding",)),
    Internal("torch", "Tensor", "_version",
             "remaking a packed or merged weight after an in-place update (generation/inference_weights.py _versions)",
             ("decoding",)),

    # Still read directly, not through require (models/cpu_attention.py, models/flat_batches.py,
    # algorithms/reward.py, algorithms/callbacks.py: to be routed); the tests check them all the same.
    Internal("transformers.configuration_utils", "PreTrainedConfig", "_attn_implementation",
             "posttrain's CPU attention and flattened scoring (models/cpu_attention.py, models/flat_batches.py)",
             ("cpu_attention",)),
    Internal("transformers.masking_utils", "", "find_packed_sequence_indices",
             "padding-free SFT on a CPU without posttrain's CPU attention (AVX2, AMX): sdpa and eager attention keep a "
             "flattened batch's rows apart only where transformers reads the rows from the position ids "
             "(algorithms/trl_config.py batching_defaults); without it every row would attend to the rows before it",
             ("sft", "rft"), "find_packed_sequence_indices(position_ids)", "transformers.masking_utils:_preprocess_mask_arguments"),
    Internal("trl.trainer.utils", "", "_ChunkedLogProbFunction",
             "the CPU LM head: whole-vocabulary blocks of tokens in place of TRL's tiles (models/cpu_lm_head.py use_on_cpu)",
             ("cpu_lm_head",), "_ChunkedLogProbFunction.apply(", "trl.trainer.utils:add_fused_lm_head"),
    Internal("transformers.models.gemma2.modeling_gemma2", "", "eager_attention_forward",
             "soft-capped attention (Gemma 2) in posttrain's CPU attention, which sdpa cannot compute; without it the "
             "soft-capped layers would be refused (models/cpu_attention.py short_eager_else_sdpa; each family's modeling "
             "module has its own, looked up on the attention layer's module)", ("cpu_attention",),
             "eager_attention_forward", "transformers.models.gemma2.modeling_gemma2:Gemma2Attention"),
    Internal("transformers.configuration_utils", "PreTrainedConfig", "_name_or_path",
             "a reward model named after its recipe entry in TRL's logs (rewards/<name>/mean: algorithms/reward.py "
             "load_reward_model)", ("grpo", "rloo"), 'getattr(config, "_name_or_path"', "trl.trainer.utils:get_config_model_id",
             instance=True),
    Internal("deepspeed.ops", "", "__compatible_ops__",
             "ZeRO on a CPU without compiling DeepSpeed's shared-memory all-reduce, which only inference uses "
             "(distributed/backends.py skip_deepspeed_inference_op; without it the build runs, minutes, once per machine)",
             ("deepspeed_cpu",), "__compatible_ops__.get(builder.NAME", "deepspeed.comm.torch:build_shm_op"),
    Internal("torch.optim.lr_scheduler", "LRScheduler", "_last_lr",
             "the learning rate logged after a forced resume changes it (algorithms/callbacks.py)", ("forced_resume",),
             "return self._last_lr", instance=True),
]


def _installed(library: str) -> str:
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version(library)
    except PackageNotFoundError:  # pragma: no cover - every library here is a dependency
        return "(not installed)"


def _refusal(internal: Internal, what: str) -> Exception:
    """The exit-2 error: what the installed library does wrong ("has no X"), the feature, the tested version."""
    from posttrain.errors import UserError

    library, tested = internal.library, TESTED_WITH.get(internal.library, "?")
    return UserError(f"{_DISPLAY_NAMES.get(library, library)} {_installed(library)} {what}, which posttrain uses for "
                     f"{internal.purpose}. posttrain was tested with {library}=={tested} and refuses to run rather than silently lose or change "
                     f"the feature: install {library}=={tested} (pyproject.toml bounds it).")


def _entry(obj, name: str) -> Internal:
    """The table's row for `name` on `obj` (an instance or a class): the row whose owner is in its class's ancestry
    (a name missing from the table, which tests/architecture/test_internals.py rules out: a row made up from `obj`)."""
    cls = obj if isinstance(obj, type) else type(obj)
    rows = [i for i in INTERNALS if i.name == name] or [Internal(cls.__module__, cls.__name__, name, "a feature", ())]
    ancestry = {c.__name__ for c in cls.__mro__}
    return next((i for i in rows if i.owner.rpartition(".")[2] in ancestry), rows[0])


def check(family: str) -> None:
    """Before a trainer of this family is built: every class-level name its run needs exists (else exit 2)."""
    for internal in INTERNALS:
        if family in internal.families and not internal.instance and not hasattr(internal.resolve(), internal.name):
            raise _refusal(internal, f"has no {internal.where}")


def require(obj, name: str, *, missing_ok: bool = False):
    """`getattr(obj, name)` for a name in INTERNALS, or the refusal naming it (None where `missing_ok`)."""
    missing = object()
    found = getattr(obj, name, missing)
    if found is not missing:
        return found
    if missing_ok:
        return None
    internal = _entry(obj, name)
    raise _refusal(internal, f"has no {internal.where}")


def returned(obj, name: str, result, **types) -> dict:
    """The tuple `obj.<name>(...)` returned, by the field names in its INTERNALS row, after checking its length
    (and the types given, `field=type`): a tuple of another shape is refused rather than read by position."""
    internal = _entry(obj, name)
    fields = internal.returns
    if not isinstance(result, tuple) or len(result) != len(fields) or any(
            not isinstance(result[fields.index(k)], t) for k, t in types.items()):
        got = f"({', '.join(type(v).__name__ for v in result)})" if isinstance(result, tuple) else type(result).__name__
        expected = ", ".join(f"{f}: {types[f].__name__}" if f in types else f for f in fields)
        raise _refusal(internal, f"returned {got} from {internal.where} where posttrain reads ({expected})")
    return dict(zip(fields, result))
