"""RLOO through TRL's RLOOTrainer, with GRPO's rewards, data, rollouts and health checks.

    posttrain train --recipe recipes/rloo/tiny-cpu.yaml

REINFORCE Leave-One-Out (Ahmadian et al. 2024, "Back to Basics", arXiv:2402.14740; Kool et al. 2019):
sample `num_generations` completions per prompt and use, as each completion's baseline, the mean
reward of the *other* completions of its prompt; no critic, no per-group standard-deviation scaling
(TRL's `normalize_advantages` is off by default). TRL 1.16 adds the KL penalty to the reward
(`beta`, 0.05 by default: RLOO keeps TRL's non-zero value) and PPO-style clipping (`epsilon` 0.2).

Everything around the trainer is GRPO's (`algorithms/grpo.py` build_rl_trainer): the recipe's
rewards (functions, `http`, reward models as `model:`), the prompt data and its templates,
posttrain's decoding loop for rollouts, the generation/scoring time split and the RL health
checks (no_learning_signal, reward divergence, ...), which read the same metric names RLOO logs.
TRL's RLOOTrainer has no tools or environments (recipe/rloo_section.py refuses them).
"""

from __future__ import annotations


def build_trainer(run):
    from trl import RLOOTrainer
    from trl.trainer import rloo_trainer

    from .grpo import build_rl_trainer

    return build_rl_trainer(run, RLOOTrainer, rloo_trainer)
