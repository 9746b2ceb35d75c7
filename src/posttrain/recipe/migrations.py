"""Keys that existed once (upstream in TRL, or in recipes of other tools) and what to write now.

A recipe that uses one fails with this message instead of an "unknown key" or a TypeError deep
inside TRL. Keys are written as paths with `*` for any list index.
"""

MIGRATIONS: dict[str, str] = {
    "wandb": "the tracking section replaced it: write tracking: {provider: wandb, project: ..., run_name: ...}.",
    "training.max_prompt_length": "TRL removed max_prompt_length from its configs (it truncated nothing in recent "
    "versions); posttrain enforces prompt length in the data step: use data.max_prompt_length.",
    "training.max_seq_length": "TRL renamed it: use training.max_length.",
    "training.evaluation_strategy": "transformers renamed it: use training.eval_strategy.",
    "training.overwrite_output_dir": "transformers removed it; posttrain resumes from or writes into output_dir "
    "(see training.resume_from_checkpoint).",
    "training.use_liger": "renamed upstream: use training.use_liger_kernel.",
    "model.model_name": "use model.base_model_name.",
    "model.model_name_or_path": "use model.base_model_name.",
    "model.lora_target": "use model.lora_target_modules.",
    "data.datasets.*.response_column": "use data.datasets[i].completion_column.",
    "data.datasets.*.dataset_name": "use data.datasets[i].name.",
}


def migration_for(parts: list) -> str | None:
    key = ".".join("*" if isinstance(p, int) else str(p) for p in parts)
    return MIGRATIONS.get(key)
