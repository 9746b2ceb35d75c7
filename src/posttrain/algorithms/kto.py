"""KTO through TRL's KTOTrainer.

    posttrain train --recipe recipes/kto/tiny-cpu.yaml

Kahneman-Tversky Optimization (Ethayarajh et al. 2024, arXiv:2402.01306) learns from unpaired
feedback: each row is a prompt, one completion and a label (desirable or not: thumbs up/down), so
no pairs are needed. The loss pushes the implicit reward beta * log(pi / pi_ref) of desirable
completions above a reference point (the batch's KL estimate) and of undesirable ones below it,
weighted by `desirable_weight` / `undesirable_weight`.

Imbalance: with n_D desirable and n_U undesirable rows the paper (Eq. 8) recommends
desirable_weight * n_D / (undesirable_weight * n_U) in [1, 4/3]. posttrain prints the counts, the
ratio and, when it is outside, the ranges for either weight at start-up (TRL only logs a warning).

Reference model: with LoRA the base with the adapter switched off; with full training a frozen copy
of the policy as loaded, given to TRL as `ref_model` (TRL would reload it by name, without the
recipe's revision); with `precompute_ref_log_probs: true` none is kept.

Rows are shuffled once (seeded) before training: TRL's KL estimate needs sequential batches, and a
file sorted by label would otherwise give batches of one label.
"""

from __future__ import annotations


def balance_note(labels: list[bool], desirable_weight: float, undesirable_weight: float) -> str:
    """The start-up line on label balance: counts, the weighted ratio and, outside [1, 4/3], what fixes it.

    >>> balance_note([True] * 30 + [False] * 10, 1.0, 1.0).split(";")[0]
    'kto data: 30 desirable, 10 undesirable rows'
    """
    n_d, n_u = sum(labels), len(labels) - sum(labels)
    head = f"kto data: {n_d} desirable, {n_u} undesirable rows"
    if n_d == 0 or n_u == 0:
        return head + f"; only {'desirable' if n_u == 0 else 'undesirable'} rows: KTO learns from both kinds, add the other"
    ratio = desirable_weight * n_d / (undesirable_weight * n_u)
    line = f"{head}; weighted ratio desirable_weight*n_D/(undesirable_weight*n_U) = {ratio:.3g}"
    if 1.0 <= ratio <= 4 / 3:
        return line + " (in KTO's recommended [1, 1.33])"
    d_low, d_high = undesirable_weight * n_u / n_d, undesirable_weight * n_u / n_d * 4 / 3
    u_low, u_high = desirable_weight * n_d / n_u * 3 / 4, desirable_weight * n_d / n_u
    return (line + f", outside KTO's recommended [1, 1.33] (Ethayarajh et al. 2024, Eq. 8): set training.desirable_weight in "
            f"[{d_low:.3g}, {d_high:.3g}] or training.undesirable_weight in [{u_low:.3g}, {u_high:.3g}] (one of them)")


def build_trainer(run):
    from trl import KTOTrainer

    from .common import log
    from .reference import frozen_copy

    args = run.trl_config
    log(balance_note([bool(x) for x in run.train_dataset["label"]], args.desirable_weight, args.undesirable_weight))
    run.train_dataset = run.train_dataset.shuffle(seed=args.seed)
    needs_reference = run.peft_config is None and run.loaded.adapter_dir is None and not args.precompute_ref_log_probs
    return KTOTrainer(ref_model=frozen_copy(run.loaded.model) if needs_reference else None, **run.trainer_kwargs())
