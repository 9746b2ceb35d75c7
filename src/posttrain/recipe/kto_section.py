"""KTO's training section: the rules between its keys that TRL leaves to the user (or only warns about)."""

from __future__ import annotations

from .training_section import TrainingBase

KL_LOSSES = ("kto",)  # TRL 1.16: every loss but apo_zero_unpaired estimates the KL term from the batch


class KTOTrainingBase(TrainingBase):
    """KTO (Ethayarajh et al. 2024, arXiv:2402.01306) on unpaired desirable/undesirable completions."""

    def cross_checks(self, world_size: int = 1) -> list[tuple[str, str]]:
        out = super().cross_checks(world_size)
        v = self.value
        if v("loss_type") in KL_LOSSES:
            if (v("per_device_train_batch_size") or 1) < 2:
                out.append(("training.per_device_train_batch_size",
                            f"{v('per_device_train_batch_size')}: KTO's reference point (the KL term) is estimated from the other "
                            "completions of the same batch (TRL pairs each prompt with its neighbour's completion); with one row "
                            "per batch that is the row itself. Use 2 or more (the paper uses 32), or loss_type=apo_zero_unpaired."))
            if v("train_sampling_strategy") != "sequential":
                out.append(("training.train_sampling_strategy",
                            f"{v('train_sampling_strategy')!r}: TRL 1.16 precomputes each row's KL completion against its "
                            "neighbours in a fixed-order batch, so KTO's KL loss needs 'sequential' (TRL's KTO default; posttrain "
                            "shuffles the rows once, seeded, before training). Remove the key."))
        elif v("train_sampling_strategy") in ("group_by_length", "batch_rebalance"):
            out.append(("training.train_sampling_strategy",
                        f"{v('train_sampling_strategy')!r}: transformers' length-grouped samplers read an input_ids column, and TRL "
                        "1.16's KTO rows hold prompt and completion ids apart, so the run would stop with 'Can only automatically "
                        "infer lengths'. Use 'sequential' (TRL's KTO default) or 'random'."))
        for key in ("desirable_weight", "undesirable_weight"):
            if v(key) is not None and v(key) <= 0:
                out.append((f"training.{key}", f"{v(key)}: a weight of 0 or less removes (or flips) that side's loss; use a "
                            "positive weight (KTO's Eq. 8 suggests desirable_weight * n_desirable / (undesirable_weight * "
                            "n_undesirable) in [1, 4/3])."))
        return out
