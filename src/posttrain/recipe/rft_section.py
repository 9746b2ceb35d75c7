"""Rejection-sampling fine-tuning's training section: how each round samples, what it keeps, how much it trains.

RFT trains with TRL's SFTConfig (SFT's loss, chat template and batching), so every SFT field is here; its own keys
say how each round samples completions and which it keeps (algorithms/rft.py runs them).
"""

from __future__ import annotations

from typing import Any

from pydantic import Field, StrictInt

from .rl_section import REWARDS_DESCRIPTION, RewardList
from .training_section import TrainingBase


class RFTTrainingBase(TrainingBase):
    """Rejection-sampling fine-tuning (expert iteration, STaR, RFT): sample, keep what the rewards accept, fine-tune."""

    rewards: RewardList = Field(
        min_length=1,
        description=REWARDS_DESCRIPTION + " RFT sums them (with weights, as GRPO does) and keeps the completions whose sum is at "
        "least training.reward_threshold. Reward functions only (built-ins, http, 'package.module:function').",
    )
    reward_threshold: float = Field(
        1.0,
        description="A sampled completion is kept when its weighted reward sum is at least this. 1.0 keeps the right answers of "
        "a 0/1 correctness reward (answer_match, loose_match, math_match, or a correct_* preset); with a format bonus beside "
        "it, raise it to the sum a right, well-formed answer earns (1.5 for demo-real's answer_match 1.0 + loose_match 0.5).",
    )
    rounds: StrictInt = Field(
        3, ge=1,
        description="Rounds of sample -> keep -> fine-tune. Each round samples with the weights the previous round trained; "
        "the run is rounds x (the round's optimizer steps) long. The schedule's key: num_train_epochs and max_steps are "
        "refused (each round is one epoch of training.rows_per_round rows).",
    )
    num_generations: StrictInt = Field(
        8, ge=1,
        description="Completions sampled per prompt each round (k), with posttrain's decoding loop (as `posttrain eval` "
        "samples). More finds more solutions to hard prompts, at k times the generation cost.",
    )
    prompts_per_round: StrictInt | None = Field(
        None, ge=1,
        description="Prompts sampled each round; unset: every training prompt. They are drawn in a seeded shuffle (training.seed) "
        "that runs on through the data across rounds, a fresh shuffle on each pass.",
    )
    rows_per_round: StrictInt | None = Field(
        None, ge=1,
        description="Training rows (kept prompt/completion pairs) each round trains on, as one epoch; unset: as many as "
        "the prompts the round sampled (one SFT epoch's worth). Fixed, so every round (and the run) trains a stated number "
        "of sequences: the kept pairs are taken round-robin over their prompts (every solved prompt once before any twice), "
        "and repeat when fewer were kept (rft/repeats in metrics.jsonl).",
    )
    temperature: float = Field(
        1.0, gt=0,
        description="Sampling temperature of the rounds' completions (> 0: at 0 the k samples would be one greedy answer).",
    )
    top_p: float = Field(1.0, gt=0, le=1, description="Nucleus sampling of the rounds' completions (1.0: off).")
    max_completion_length: StrictInt = Field(
        256, ge=1,
        description="Most tokens a sampled completion may have; one cut at this length is kept only if the rewards accept it "
        "(it then trains without its end-of-turn token).",
    )

    def trl_kwargs(self) -> dict[str, Any]:
        """SFTConfig's arguments: one epoch per round (the rows are swapped at each epoch's start: algorithms/rft.py)."""
        return {**super().trl_kwargs(), "num_train_epochs": self.rounds}

    def cross_checks(self, world_size: int = 1) -> list[tuple[str, str]]:
        out = super().cross_checks(world_size)
        for i, spec in enumerate(self.rewards):
            if spec.model is not None:
                out.append((f"training.rewards[{i}].model", "RFT keeps completions whose reward sum passes a fixed threshold, and a "
                            "trained reward model's scores have no fixed scale to set one on; use reward functions (name: ...) "
                            "with algorithm rft, or train with algorithm grpo, which only compares scores within a group."))
        if self.distributed in ("zero3", "zero3_offload", "fsdp"):
            out.append(("training.distributed", f"{self.distributed!r} shards the weights, and each RFT round samples with whole "
                        "weights on every process (posttrain's decoding loop, as held-out scoring does); use ddp or zero2."))
        return out
