"""TRL fields that act only when another key is on: set while it is off, they are refused.

TRL's config classes hold every field of every feature; a trainer reads many of them only when
another key switches the feature on (`hub_model_id` only when `push_to_hub` uploads, `discopop_tau`
only with the discopop loss). Accepted alone, such a key looks live and does nothing. Each entry
below says what makes its field live, as a predicate on the whole recipe, so the error can name
the key that would: "training.hub_model_id only applies with training.push_to_hub=true ...".

How the table is kept true: `tests/e2e/test_trl_fields_read.py` trains every algorithm a step on a
tiny model with a TRL config that records which fields the trainer reads. A field it never reads
must be here (and the run's recipe must have the feature off), be read only by the config's own
constructor for a stated reason (`CONSTRUCTION_ONLY` there), be read only in situations a
one-process run from scratch lacks (`SITUATIONAL` there), or be rejected outright
(`schema.DEAD_FOR_ALGORITHM`). A TRL upgrade that stops reading a field fails that test.

Standard library (and the algorithm table) only: the schema imports this while validating.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from .algorithms import CONFIG_CLASSES

ALL_FAMILIES = tuple(CONFIG_CLASSES)


@dataclass(frozen=True)
class LiveWhen:
    """A field is read only when `live(recipe)`; `needs` names what makes it so (the error's hint)."""

    needs: str
    live: Callable[[Any], bool]
    enable: dict[str, Any] = field(default_factory=dict)  # dotted keys -> values that make it live (for the tests)
    families: tuple[str, ...] = ALL_FAMILIES


def _value(key: str) -> Callable[[Any], Any]:
    return lambda recipe: recipe.training.value(key)


def _has(key: str, item: str) -> Callable[[Any], bool]:
    return lambda recipe: item in (recipe.training.value(key) or [])


def reference_precomputed(recipe) -> bool:
    """Whether a DPO run precomputes its reference log-probs: the recipe's value, else posttrain's rule."""
    chosen = recipe.training.value("precompute_ref_log_probs") if "precompute_ref_log_probs" in recipe.training.model_fields_set else None
    return bool(chosen) if chosen is not None else precompute_reason(recipe) is not None


def precompute_reason(recipe) -> str | None:
    """Why posttrain turns DPO's precompute_ref_log_probs on for this recipe, or None when it does not.

    Precomputing costs one reference forward pass over the data before training and saves the
    reference forward of every step (benchmarks/padding.py --algorithm dpo; docs/guides/dpo.md): over one
    epoch a gain with LoRA and a loss with full fine-tuning, a saving from the second epoch on, and
    full fine-tuning no longer holds a frozen copy of the model. A run bounded by max_steps may stop
    before an epoch, so it is left alone, as are runs that move the reference (sync_ref_model) or
    read images (TRL refuses both).
    """
    training = recipe.training
    if training.algorithm != "dpo" or recipe.uses_images:  # DPO's own key (precompute_ref_log_probs)
        return None
    epochs = training.value("num_train_epochs")
    if (training.value("max_steps") or -1) > 0 or training.value("sync_ref_model") or not epochs or epochs < 2:
        return None
    return f"{epochs:g} epochs: one reference pass before training replaces one per epoch"


_HUB = LiveWhen("training.push_to_hub=true", _value("push_to_hub"), {"training.push_to_hub": True})
_TRACKIO = LiveWhen("tracking.provider=trackio", lambda r: r.tracking.provider == "trackio", {"tracking.provider": "trackio"})
_GROUPED = LiveWhen("training.train_sampling_strategy=group_by_length (or batch_rebalance)",
                    lambda r: r.training.value("train_sampling_strategy") in ("group_by_length", "batch_rebalance"),
                    {"training.train_sampling_strategy": "group_by_length"}, ("sft", "dpo"))
_SYNC_REF = LiveWhen("training.sync_ref_model=true", _value("sync_ref_model"), {"training.sync_ref_model": True}, ("dpo", "grpo", "rloo", "kto"))
_VLLM = LiveWhen("training.use_vllm=true", _value("use_vllm"), {"training.use_vllm": True}, ("grpo", "rloo", "distillation"))
_ADAPTIVE_ENTROPY = LiveWhen("training.use_adaptive_entropy=true", _value("use_adaptive_entropy"),
                             {"training.use_adaptive_entropy": True}, ("grpo",))
_LOW_RANK_OPTIMIZERS = ("galore_adamw", "galore_adamw_8bit", "galore_adafactor", "galore_adamw_layerwise",
                        "galore_adamw_8bit_layerwise", "galore_adafactor_layerwise", "apollo_adamw", "apollo_adamw_layerwise")

# field -> when it is read. Every entry was seen unread in a run with its feature off (the test above).
LIVE_ONLY_WITH: dict[str, LiveWhen] = {
    **dict.fromkeys(("hub_model_id", "hub_strategy", "hub_token", "hub_private_repo", "hub_always_push", "hub_revision"), _HUB),
    **dict.fromkeys(("trackio_space_id", "trackio_static_space_id", "trackio_bucket_id"), _TRACKIO),
    "length_column_name": _GROUPED,
    "optim_target_modules": LiveWhen("training.optim=galore_* or apollo_* (the low-rank optimizers)",
                                     lambda r: r.training.value("optim") in _LOW_RANK_OPTIMIZERS, {"training.optim": "galore_adamw"}),
    "greater_is_better": LiveWhen("training.metric_for_best_model (or load_best_model_at_end=true)",
                                  lambda r: r.training.value("metric_for_best_model") is not None or bool(r.training.value("load_best_model_at_end")),
                                  {"training.metric_for_best_model": "eval_loss"}),
    "liger_kernel_config": LiveWhen("training.use_liger_kernel=true", _value("use_liger_kernel"), {"training.use_liger_kernel": True}),
    "dataloader_prefetch_factor": LiveWhen("training.dataloader_num_workers > 0", lambda r: bool(r.training.value("dataloader_num_workers")),
                                           {"training.dataloader_num_workers": 2}),
    # SFT
    "eval_packing": LiveWhen("evaluation data (data.eval_datasets or data.eval_fraction)", lambda r: r.data.has_eval,
                             {"data.eval_fraction": 0.1, "training.eval_strategy": "steps"}, ("sft",)),
    "packing_strategy": LiveWhen("training.packing=true", _value("packing"), {"training.packing": True}, ("sft",)),
    # DPO
    "precompute_ref_batch_size": LiveWhen("training.precompute_ref_log_probs=true (posttrain's default only for 2+ epochs without max_steps)",
                                          reference_precomputed, {"training.precompute_ref_log_probs": True}, ("dpo", "kto")),
    "discopop_tau": LiveWhen("'discopop' in training.loss_type", _has("loss_type", "discopop"), {"training.loss_type": ["discopop"]}, ("dpo",)),
    "ref_model_mixup_alpha": _SYNC_REF,
    "ref_model_sync_steps": _SYNC_REF,
    # GRPO / GSPO
    **{name: _VLLM for name in ("vllm_enable_sleep_mode", "vllm_gpu_memory_utilization", "vllm_group_port", "vllm_importance_sampling_cap",
                                "vllm_importance_sampling_clip_max", "vllm_importance_sampling_clip_min", "vllm_importance_sampling_correction",
                                "vllm_importance_sampling_mode", "vllm_max_model_length", "vllm_mode", "vllm_model_impl",
                                "vllm_server_base_url", "vllm_server_host", "vllm_server_port", "vllm_server_timeout",
                                "vllm_structured_outputs_regex", "vllm_tensor_parallel_size")},
    **dict.fromkeys(("entropy_coef_min", "entropy_coef_max", "entropy_coef_delta", "entropy_target"), _ADAPTIVE_ENTROPY),
    **{name: LiveWhen("training.loss_type=sapo", lambda r: r.training.value("loss_type") == "sapo", {"training.loss_type": "sapo"}, ("grpo",))
       for name in ("sapo_temperature_pos", "sapo_temperature_neg")},
    **{name: LiveWhen("training.loss_type=vespo", lambda r: r.training.value("loss_type") == "vespo", {"training.loss_type": "vespo"}, ("grpo",))
       for name in ("vespo_k_pos", "vespo_k_neg", "vespo_lambda_pos", "vespo_lambda_neg")},
    "use_bias_correction_kl": LiveWhen("training.beta > 0 (the KL term)", lambda r: bool(r.training.value("beta")), {"training.beta": 0.04}, ("grpo",)),
    "log_completions_hub_repo": LiveWhen("training.log_completions=true", _value("log_completions"), {"training.log_completions": True}, ("grpo", "rloo")),
    "transformers_continuous_batching_config": LiveWhen("training.use_transformers_continuous_batching=true",
                                                        _value("use_transformers_continuous_batching"),
                                                        {"training.use_transformers_continuous_batching": True}, ("grpo", "rloo")),
}


def inactive_keys(recipe) -> list[tuple[str, str]]:
    """(key path, message) for each TRL field the recipe sets whose feature is off, grouped by what would switch it on."""
    training = recipe.training
    family = type(training)._family
    by_need: dict[str, list[str]] = {}
    for name in sorted(training.model_fields_set):
        rule = LIVE_ONLY_WITH.get(name)
        if rule is None or family not in rule.families or getattr(training, name) is None or rule.live(recipe):
            continue
        by_need.setdefault(rule.needs, []).append(name)
    out = []
    for needs, names in by_need.items():
        keys = ", ".join(f"training.{n}" for n in names)
        verb = "applies" if len(names) == 1 else "apply"
        out.append((f"training.{names[0]}", f"{keys} only {verb} with {needs}, which this recipe does not have, so "
                    f"{'it' if len(names) == 1 else 'they'} would do nothing; set {needs.split(' (')[0]} or remove {keys}."))
    return out
