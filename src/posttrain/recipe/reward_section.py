"""The reward model's training section: the rules between its keys that TRL leaves to a traceback."""

from __future__ import annotations

from .training_section import TrainingBase

GROUPED = ("group_by_length", "batch_rebalance")


class RewardTrainingBase(TrainingBase):
    """A reward model (Bradley-Terry on preference pairs) through TRL's RewardTrainer."""

    def cross_checks(self, world_size: int = 1) -> list[tuple[str, str]]:
        out = super().cross_checks(world_size)
        v = self.value
        if v("train_sampling_strategy") in GROUPED:
            out.append(("training.train_sampling_strategy",
                        f"{v('train_sampling_strategy')!r}: transformers' length-grouped samplers read an input_ids column, and TRL "
                        "1.16's reward data holds chosen_ids/rejected_ids pairs, so the run would stop with 'Can only automatically "
                        "infer lengths'. Use 'random' (TRL's default) or 'sequential'."))
        coefficient = v("center_rewards_coefficient")
        if coefficient is not None and coefficient < 0:
            out.append(("training.center_rewards_coefficient",
                        f"{coefficient}: the centering term (Eisenstein et al. 2023, Eq. 2) penalises the squared mean score; a "
                        "negative weight rewards scores far from 0 instead. Use a small positive value (0.01 recommended) or remove it."))
        return out
