"""DPO through TRL's DPOTrainer.

    posttrain train --recipe recipes/dpo/tiny-cpu.yaml

Direct Preference Optimization (Rafailov et al. 2023) learns from prompt/chosen/rejected pairs.
`training.beta` here is DPO's *margin sharpness* — how strongly the implicit reward
beta * log(pi / pi_ref) separates chosen from rejected (TRL default 0.1) — not GRPO's KL weight.
`training.loss_type` takes one or several of TRL's DPO losses, weighted by `loss_weights`.

Reference model: with LoRA it is the base with the adapter switched off (no second copy in
memory); with full training TRL loads a frozen copy, or — with `precompute_ref_log_probs: true` —
computes the reference log-probs once before training and keeps no reference model.

Length-grouped batches (`train_sampling_strategy: group_by_length` or `batch_rebalance`): TRL 1.16's
DPO data has no `input_ids` column, so transformers' samplers cannot find the row lengths and stop
with "Can only automatically infer lengths". posttrain gives them one: a pair's batch row is its
prompt plus the longer of its two responses (the collator pads chosen and rejected together).
"""

from __future__ import annotations

GROUPED = ("group_by_length", "batch_rebalance")


def build_trainer(run):
    from trl import DPOTrainer

    trainer = DPOTrainer(**run.trainer_kwargs())
    if trainer.args.train_sampling_strategy in GROUPED:
        add_lengths(trainer)
    return trainer


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
    trainer._set_signature_columns_if_needed()
    if name not in trainer._signature_columns:
        trainer._signature_columns = [*trainer._signature_columns, name]  # the collator ignores keys it does not read
