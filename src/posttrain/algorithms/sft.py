"""SFT and CPT through TRL's SFTTrainer.

    posttrain train --recipe recipes/sft/tiny-cpu.yaml
    posttrain train --recipe recipes/cpt/tiny-cpu.yaml

SFT trains on prompt/completion pairs (loss on the completion), on `messages` chats (loss on
assistant turns) or on plain text. CPT is SFT's preset for raw text: no chat template, sequences
concatenated and cut into fixed blocks of `training.max_length` tokens (TRL's 'wrapped' packing),
loss on every token. The presets live in `posttrain.recipe.defaults`.

Padding-free batches (`training.padding_free`, chosen per device at start-up: see
`posttrain.algorithms.trl_config.batching_default`) flatten each batch into one row with per-row
position ids; the attention mask the model builds from those position ids is block-diagonal, so
no token attends across rows (tests/e2e/test_padding_free.py checks it on a constructed batch).
"""

from __future__ import annotations


def build_trainer(run):
    from trl import SFTTrainer

    args = run.trl_config
    if not (args.padding_free and not args.packing and args.max_length is not None):
        return SFTTrainer(**run.trainer_kwargs())
    # TRL 1.16 refuses padding_free with max_length ("max_length is not enforced" without packing):
    # its dataset step truncates only when it builds the trainer, and padding-free only changes the
    # collator. So the trainer is built padded (rows truncated to max_length, as the recipe says),
    # then its collator flattens batches. Nothing else in SFTTrainer reads `padding_free`.
    args.padding_free = False
    try:
        trainer = SFTTrainer(**run.trainer_kwargs())
    finally:
        args.padding_free = True
    trainer.padding_free = True
    trainer.data_collator.padding_free = True
    return trainer
