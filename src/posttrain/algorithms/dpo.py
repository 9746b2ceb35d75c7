"""DPO through TRL's DPOTrainer.

    posttrain train --recipe recipes/dpo/tiny-cpu.yaml

Direct Preference Optimization (Rafailov et al. 2023) learns from prompt/chosen/rejected pairs.
`training.beta` here is DPO's *margin sharpness* — how strongly the implicit reward
beta * log(pi / pi_ref) separates chosen from rejected (TRL default 0.1) — not GRPO's KL weight.
`training.loss_type` takes one or several of TRL's DPO losses, weighted by `loss_weights`.

Reference model: with LoRA it is the base with the adapter switched off (no second copy in
memory); with full training a frozen copy of the policy as loaded (`posttrain.algorithms.reference`:
TRL would reload it by name, without the recipe's revision), or — with `precompute_ref_log_probs:
true` — the reference log-probs are computed once before training and no reference model is kept.

Length-grouped batches (`train_sampling_strategy: group_by_length` or `batch_rebalance`): TRL 1.16's
DPO data has no `input_ids` column, so transformers' samplers cannot find the row lengths and stop
with "Can only automatically infer lengths". posttrain gives them one: a pair's batch row is its
prompt plus the longer of its two responses (the collator pads chosen and rejected together).
"""

from __future__ import annotations

GROUPED = ("group_by_length", "batch_rebalance")


def build_trainer(run):
    from trl import DPOTrainer
    from trl.trainer import dpo_trainer

    from .reference import reference_is_the_policy

    with reference_is_the_policy(dpo_trainer, run.loaded.model, run.loaded_recipe.recipe.model):
        trainer = DPOTrainer(**run.trainer_kwargs())
    audit_pairs(run, trainer)
    if trainer.args.train_sampling_strategy in GROUPED:
        add_lengths(trainer)
    return trainer


def audit_pairs(run, trainer) -> None:
    """The token audit of DPO's tokenized pairs (`posttrain.data.token_audit`), per recipe dataset.

    Label tokens of a pair are its chosen plus rejected tokens that survive the collator's
    truncation of prompt + response to max_length. TRL drops, without a word, pairs whose prompt
    alone fills max_length (keep_start): they are counted here as pairs without a label token.
    """
    from collections import Counter

    from posttrain.data.token_audit import SOURCE_COLUMN, Auditor, end_of_turn, kept_labels

    args = trainer.args
    eot = end_of_turn(trainer.processing_class, getattr(trainer.model, "generation_config", None))
    for split, before, after in (("train", run.train_dataset, trainer.train_dataset), ("eval", run.eval_dataset, trainer.eval_dataset)):
        if before is None or after is None or isinstance(after, dict):
            continue
        auditor = Auditor(split, args.max_length, eot, unit="pair", truncation_mode=args.truncation_mode)
        sources = after[SOURCE_COLUMN] if SOURCE_COLUMN in after.column_names else [None] * len(after)
        keep = []
        for i, (prompt, chosen, rejected, source) in enumerate(zip(after["prompt_ids"], after["chosen_ids"], after["rejected_ids"], sources)):
            masked = [-100] * len(prompt)
            kept = [[t for t in kept_labels(masked + side, args.max_length, args.truncation_mode) if t != -100] for side in (chosen, rejected)]
            # a pair trains only if both responses keep a token: one side alone compares nothing
            if auditor.add(source, len(prompt) + max(len(chosen), len(rejected)), kept[0] + kept[1] if all(kept) else []):
                keep.append(i)
        if SOURCE_COLUMN in before.column_names:  # dropped by TRL before we saw them: the prompt filled max_length
            missing = Counter(before[SOURCE_COLUMN]) - Counter(sources)
            for source, n in missing.items():
                for _ in range(n):
                    auditor.add(source, (args.max_length or 0) + 1, [])
        run.token_audits += auditor.finish()
        if len(keep) < len(after):
            after = after.select(keep)
            if split == "train":
                trainer.train_dataset = after
            else:
                trainer.eval_dataset = after


def add_lengths(trainer) -> None:
    """A length column the grouped samplers read (train and eval), kept through TRL's removal of unused columns."""
    from posttrain.data.padding import row_lengths

    name = trainer.args.length_column_name

    def with_lengths(dataset):
        if dataset is None or name in dataset.column_names:
            return dataset
        padded, _real = row_lengths(dataset, trainer.args.max_length)
        return dataset.add_column(name, padded)

    trainer.train_dataset = with_lengths(trainer.train_dataset)
    if isinstance(trainer.eval_dataset, dict):
        trainer.eval_dataset = {k: with_lengths(v) for k, v in trainer.eval_dataset.items()}
    else:
        trainer.eval_dataset = with_lengths(trainer.eval_dataset)
    from posttrain.internals import require

    require(trainer, "_set_signature_columns_if_needed")()  # no public way to keep a column the model does not take
    columns = require(trainer, "_signature_columns")
    if name not in columns:
        trainer._signature_columns = [*columns, name]  # the collator ignores keys it does not read
