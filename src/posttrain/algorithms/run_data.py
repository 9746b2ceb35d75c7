"""A run's data steps: read and map the datasets (before the model loads), then fit prompts to
data.max_prompt_length and count their tokens (once the tokenizer is loaded)."""

from __future__ import annotations

from posttrain.recipe.algorithms import ALGORITHMS

from .common import log


def prepare_data(recipe, seed: int):
    """(train, eval or None, format, reports) for the recipe's algorithm; no model needed yet."""
    from posttrain.data.formats import prepare_training_data
    from posttrain.data.prompts import read_prompt_data

    row = ALGORITHMS[recipe.training.algorithm]
    prompts_only = row.data == "prompt"
    if recipe.uses_images:
        from posttrain.data.vision import prepare_vision_data

        train, fmt, reports, evaluation = prepare_vision_data(recipe.data, seed, prompt_only=prompts_only)
        return train, evaluation, "prompt" if prompts_only else fmt, reports
    if prompts_only:
        from posttrain.data.prompts import untagged_prompt_warning
        from posttrain.rewards.builtin import numeric_gold_columns

        specs = getattr(recipe.training, "rewards", [])
        names = [r.name for r in specs]
        train, reports, evaluation = read_prompt_data(recipe.data, seed, numeric_columns=numeric_gold_columns(specs))
        warning = untagged_prompt_warning(train, names) if names else None
        if warning:
            log(warning)
        return train, evaluation, "prompt", reports
    train, fmt, reports, evaluation = prepare_training_data(recipe.data, row.fixed_format, seed)
    return train, evaluation, fmt, reports


def fit_prompts(recipe, tokenizer, datasets_: list, tools: list | None = None, drops=None):
    """Enforce data.max_prompt_length (GRPO/GSPO/DPO) now that the tokenizer is loaded (counting the
    tool schemas the chat template renders into each prompt, when there are tools); dropped prompts
    go into `drops` (a DropLedger), against their dataset when the split has one."""
    from posttrain.data.prompts import enforce_prompt_length

    data, out = recipe.data, []
    for split, ds in zip(("train", "eval"), datasets_):
        if ds is not None and "prompt" in ds.column_names and data.max_prompt_length is not None:
            before = len(ds)
            ds, note = enforce_prompt_length(ds, tokenizer, data.max_prompt_length, data.prompt_truncation, tools=tools)
            log(note)
            if drops is not None:
                drops.add_stage(split_key(data, split), f"over data.max_prompt_length={data.max_prompt_length}", before, before - len(ds))
        out.append(ds)
    return out


def split_key(data, split: str) -> str:
    """The dataset a split's rows come from ('data.datasets[0]'), or the section when it mixes several."""
    specs, section = (data.eval_datasets, "data.eval_datasets") if split == "eval" and data.eval_datasets else (data.datasets, "data.datasets")
    return f"{section}[0]" if len(specs) == 1 else f"{section} (mixed)"


def audit_prompts(train_dataset, eval_dataset, tokenizer, trl_config, tools: list | None = None) -> list:
    """RL runs: the prompts' token counts (posttrain.data.token_audit.PromptAudit), tool schemas included."""
    from posttrain.data.prompts import prompt_token_count
    from posttrain.data.token_audit import PromptAudit

    longest = getattr(trl_config, "max_completion_length", None)  # RFT's SFTConfig has none: its rounds' audits count the tokens
    return [PromptAudit(split, [len(prompt_token_count(p, tokenizer, tools)) for p in ds["prompt"]], longest)
            for split, ds in (("train", train_dataset), ("eval", eval_dataset)) if ds is not None and len(ds)]
