"""DPO through TRL's DPOTrainer.

    posttrain train --recipe recipes/dpo/tiny-cpu.yaml

Direct Preference Optimization (Rafailov et al. 2023) learns from prompt/chosen/rejected pairs.
`training.beta` here is DPO's *margin sharpness* — how strongly the implicit reward
beta * log(pi / pi_ref) separates chosen from rejected (TRL default 0.1) — not GRPO's KL weight.
`training.loss_type` takes one or several of TRL's DPO losses, weighted by `loss_weights`.

Reference model: with LoRA it is the base with the adapter switched off (no second copy in
memory); with full training TRL loads a frozen copy, or — with `precompute_ref_log_probs: true` —
computes the reference log-probs once before training and keeps no reference model.
"""

from __future__ import annotations


def build_trainer(run):
    from trl import DPOTrainer

    return DPOTrainer(**run.trainer_kwargs())
