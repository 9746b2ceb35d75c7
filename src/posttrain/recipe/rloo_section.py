"""RLOO's training section: GRPO's rewards and rules (recipe/rl_section.py), less what TRL's RLOOTrainer lacks."""

from __future__ import annotations

from .rl_section import RLTrainingBase


class RLOOTrainingBase(RLTrainingBase):
    """RLOO (Ahmadian et al. 2024, arXiv:2402.14740): leave-one-out baselines over each prompt's group."""

    def cross_checks(self, world_size: int = 1) -> list[tuple[str, str]]:
        out = super().cross_checks(world_size)
        for key in ("tools", "environment"):
            if getattr(self, key):
                out.append((f"training.{key}", "TRL 1.16's RLOOTrainer has no tool calling or environments (GRPOTrainer has): "
                            "use training.algorithm=grpo for agentic RL, or remove the key."))
        return out
