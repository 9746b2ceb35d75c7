"""SFT and CPT through TRL's SFTTrainer.

    posttrain train --recipe recipes/sft/tiny-cpu.yaml
    posttrain train --recipe recipes/cpt/tiny-cpu.yaml

SFT trains on prompt/completion pairs (loss on the completion), on `messages` chats (loss on
assistant turns) or on plain text. CPT is SFT's preset for raw text: no chat template, sequences
concatenated and cut into fixed blocks of `training.max_length` tokens (TRL's 'wrapped' packing),
loss on every token. The presets live in `posttrain.recipe.defaults`.
"""

from __future__ import annotations


def build_trainer(run):
    from trl import SFTTrainer

    return SFTTrainer(**run.trainer_kwargs())
