"""Keys that existed once (upstream in TRL, or in recipes of other tools) and what to write now.

A recipe that uses one fails with this message instead of an "unknown key" or a TypeError deep
inside TRL. Keys are written as paths with `*` for any list index. A hint always wins over a
did-you-mean: a close spelling is no guide when the old key meant something else
(FAI-RL's `data.max_length` is a sequence length, not posttrain's `data.max_prompt_length`).

FAI-RL (github.com/Roblox/FAI-RL, 0.2.x) recipes share posttrain's model/data/training shape, so
a whole FAI-RL recipe would fail key by key; `fairl_signs` recognises one and the loader answers
with a single message pointing at `posttrain convert` instead (see `posttrain.migrate`).
"""

from __future__ import annotations

_CONVERT = "`posttrain convert` translates a whole FAI-RL recipe"

MIGRATIONS: dict[str, str] = {
    "training.max_prompt_length": "TRL removed max_prompt_length from its configs (it truncated nothing in recent "
    "versions); posttrain enforces prompt length in the data step: use data.max_prompt_length.",
    "training.max_seq_length": "TRL renamed it: use training.max_length.",
    "training.evaluation_strategy": "transformers renamed it: use training.eval_strategy.",
    "training.overwrite_output_dir": "transformers removed it; posttrain resumes from or writes into output_dir "
    "(see training.resume_from_checkpoint).",
    "training.use_liger": "renamed upstream: use training.use_liger_kernel.",
    "training.warmup_ratio": "transformers 5 removed it: training.warmup_steps takes the fraction now (below 1 it is a "
    "share of the run's steps: training.warmup_steps=0.1 is the old warmup_ratio=0.1).",
    "model.model_name": "use model.base_model_name.",
    "model.model_name_or_path": "use model.base_model_name.",
    "model.lora_target": "use model.lora_target_modules.",
    "data.datasets.*.response_column": "use data.datasets[i].completion_column.",
    "data.datasets.*.dataset_name": "use data.datasets[i].name.",
    # ---- FAI-RL keys (each says where the setting lives now, or why it has none)
    "reward_api": "FAI-RL's HTTP reward service is posttrain's `http` reward: training.rewards: [{name: http, url: ..., "
    "timeout: ..., retries: ...}] (the key comes from api_key_env, never the recipe).",
    "local_reward_function": "write the function as a reward: training.rewards: [{name: 'package.module:function', "
    "<its kwargs>: ...}]; it is called as fn(completions, **dataset_columns).",
    "inference": "a FAI-RL inference recipe: " + _CONVERT + " into a generation recipe for `posttrain generate --recipe`.",
    "evaluation": "a FAI-RL evaluation recipe: " + _CONVERT + " into an evaluation recipe for `posttrain eval|compare --recipe`.",
    "model.low_cpu_mem_usage": "transformers always loads with low CPU memory use now; remove it.",
    "model.use_flash_attention": "use model.attn_implementation: flash_attention_2 (or sdpa).",
    "model.bnb_4bit_compute_dtype": "posttrain computes in model.torch_dtype (bfloat16 on GPUs that support it); remove it.",
    "model.lora_bias": "posttrain trains no biases in LoRA (PEFT's bias='none'); remove it.",
    "model.lora_exclude_modules": "list the modules to adapt in model.lora_target_modules instead.",
    "model.s3_region": "use s3.region (it applies to s3:// models and data too).",
    "model.s3_endpoint_url": "use s3.endpoint_url (it applies to s3:// models and data too).",
    "model.ignore_mismatched_sizes": "posttrain never loads weights of another shape; remove it.",
    "data.max_length": "FAI-RL's data.max_length is the sequence length: use training.max_length (SFT, CPT, DPO). "
    "In FAI-RL's GRPO/GSPO it only set max_completion_length = max_length - max_prompt_length: use "
    "training.max_completion_length.",
    "data.remove_unused_columns": "posttrain maps every dataset to the algorithm's columns itself; remove it.",
    "data.dataset_num_proc": "use training.dataset_num_proc.",
    "data.user_prompt": "FAI-RL's split-mode templates: " + _CONVERT + " into data.datasets[i].prompt_template / completion_template.",
    "data.assistant_prompt": "FAI-RL's split-mode templates: " + _CONVERT + " into data.datasets[i].prompt_template / completion_template.",
    "data.datasets.*.dataset_columns": "FAI-RL's .format() columns: " + _CONVERT + " into a per-dataset template "
    "(data.datasets[i].text_template, or prompt_template / completion_template).",
    "data.datasets.*.s3_region": "use s3.region (it applies to s3:// data too).",
    "data.datasets.*.s3_endpoint_url": "use s3.endpoint_url (it applies to s3:// data too).",
    "training.deepspeed_config": "use training.deepspeed (the same DeepSpeed JSON, passed to TRL) and launch with "
    "accelerate or deepspeed.",
    "training.eval_enabled": "use data.eval_fraction (a seeded held-out share) with training.eval_strategy: steps.",
    "training.eval_split_ratio": "use data.eval_fraction.",
    "training.early_stopping": "early stopping is on when training.early_stopping_patience is set (with evaluation "
    "and load_best_model_at_end: true).",
    "s3.enabled": "a present s3 section is on; delete the section to turn uploads off.",
    "s3.uploader": "posttrain uploads with boto3 (verified, retried); remove it.",
}
for _section in ("inference", "evaluation"):
    MIGRATIONS[f"{_section}.api_key"] = (f"keys never go in a recipe: export the key (OPENAI_API_KEY, ...) or name its "
                                         f"environment variable with {_section}.api_key_env.")
for _media in ("image", "video"):
    for _suffix in ("cache_dir", "fetch_timeout", "fetch_retries", "s3_region", "s3_endpoint_url"):
        MIGRATIONS[f"data.{_media}_{_suffix}"] = f"a FAI-RL {_media} setting: " + _CONVERT + " into the vision-language data keys."
    MIGRATIONS[f"data.datasets.*.{_media}_columns"] = f"FAI-RL's {_media} columns: " + _CONVERT + " into the vision-language data keys."
for _key in ("video_num_frames", "video_backend"):  # (max_image_pixels and video_fps are posttrain keys too)
    MIGRATIONS[f"data.{_key}"] = "a FAI-RL media setting: " + _CONVERT + " into the vision-language data keys."

# training.algorithm values of other tools that posttrain does not (or not yet) run.
ALGORITHM_MIGRATIONS: dict[str, str] = {
    "ppo": "posttrain has no PPO (FAI-RL's ppo trained against a reward model); GRPO with a reward (training.rewards) "
    "is the closest: set training.algorithm=grpo.",
    "sft_vlm": "FAI-RL's vision-language SFT; this build of posttrain has no sft_vlm algorithm.",
}


def migration_for(parts: list, raw: dict | None = None) -> str | None:
    key = ".".join("*" if isinstance(p, int) else str(p) for p in parts)
    if key == "wandb":
        return _wandb_hint(raw.get("wandb") if isinstance(raw, dict) else None)
    return MIGRATIONS.get(key)


def _wandb_hint(section) -> str:
    """The wandb section's replacement; `enabled: false` meant no tracking, which is the default."""
    if isinstance(section, dict) and section.get("enabled") is False:
        return "the tracking section replaced it; this one has enabled: false, and tracking is off by default: delete the section."
    return "the tracking section replaced it: write tracking: {provider: wandb, project: ..., run_name: ...}."


# ------------------------------------------------------------------------------ FAI-RL recognition
# Key paths only FAI-RL recipes hold (an unknown-key error on one of these is a "sign").
FAIRL_KEYS = {k for k in MIGRATIONS if k.split(".")[0] in ("model", "data", "training", "s3")} - {
    "training.max_prompt_length", "training.max_seq_length", "training.evaluation_strategy", "training.overwrite_output_dir",
    "training.use_liger", "training.warmup_ratio", "model.model_name", "model.model_name_or_path", "model.lora_target",
    "data.datasets.*.response_column", "data.datasets.*.dataset_name",
} | {"wandb", "reward_api", "local_reward_function", "inference", "evaluation", "training.gradient_checkpointing"}
# One of these alone identifies a FAI-RL recipe; otherwise it takes three signs.
STRONG_SIGNS = {"inference", "evaluation", "reward_api", "local_reward_function", "s3.enabled"}


def fairl_signs(raw: dict) -> list[str]:
    """FAI-RL-only key paths found in `raw` (empty unless it looks like a FAI-RL recipe).

    A posttrain recipe with one stray `wandb:` section still gets the ordinary per-key errors;
    a recipe with a FAI-RL-only section, `wandb.enabled`, or three FAI-RL keys is FAI-RL's.
    """
    found = [k for k in _paths(raw) if k in FAIRL_KEYS and not _posttrain_has(k)]
    wandb = raw.get("wandb")
    strong = bool(set(found) & STRONG_SIGNS) or (isinstance(wandb, dict) and "enabled" in wandb)
    return found if strong or len(set(found)) >= 3 else []


def _posttrain_has(path: str) -> bool:
    """Is this key path (``*`` for list items) a key of posttrain's own schema too (image_columns and
    video_columns, since sft_vlm)? Then it is no sign of FAI-RL: a posttrain recipe holding it and a
    stale key gets the one-key error."""
    from .schema import TRAINING_MODELS, Recipe
    from .section import unwrap

    parts = [p for p in path.split(".") if p != "*"]
    if parts[0] == "training":
        return len(parts) == 2 and any(parts[1] in m.model_fields for m in TRAINING_MODELS.values())
    model = Recipe
    for part in parts:
        info = model.model_fields.get(part) if model is not None else None
        if info is None:
            return False
        found = unwrap(info.annotation)
        model = found[0] if found else None
    return True


def _paths(raw: dict):
    for section, body in raw.items():
        yield str(section)
        if not isinstance(body, dict):
            continue
        for key, value in body.items():
            yield f"{section}.{key}"
            if section == "data" and key == "datasets" and isinstance(value, list):
                for item in value:
                    if isinstance(item, dict):
                        yield from (f"data.datasets.*.{k}" for k in item)
