"""No wasted groups: drop the groups whose rewards are all equal and refill the batch with fresh prompts.

    posttrain train --recipe recipes/grpo/tiny-cpu.yaml training.refill_zero_variance_groups=2

A group whose completions all earn the same reward has advantage 0 everywhere (GRPO's and GSPO's
group-normalised advantage, RLOO's leave-one-out baseline): it costs a generation and a training
pass and teaches nothing, while it still dilutes the loss's normaliser. DAPO's dynamic sampling
(Yu et al. 2025, arXiv:2503.14476; verl's `filter_groups`), OpenRLHF's dynamic filtering and
prime-rl's online difficulty filter drop such groups and draw more prompts until the batch is full;
TRL 1.16 has no such hook, so posttrain wraps the trainer's `_generate_and_score_completions`
(posttrain/internals.py) on the trained instance:

1. the step's own generation batch is generated and scored as TRL does;
2. from the recipe's rewards (TRL's `_calculate_rewards`, gathered over every process) each group
   is marked: it has signal unless its weighted reward sum is the same for all its completions
   (with `multi_objective_aggregation=normalize_then_sum`: unless every reward is), the rule
   behind TRL's `frac_reward_zero_std`; a group whose completions are all unscorable has none;
3. while some process holds fewer groups with signal than its batch has room for, and fewer than
   `training.refill_zero_variance_groups` extra draws were made, every process draws a fresh
   generation batch of prompts (a seeded shuffle of the training prompts, keyed by seed, step and
   draw, so a resumed run draws the same ones) and generates and scores it;
4. each process keeps its first groups with signal, in the order drawn; where the draws ran out,
   the batch is topped up with dropped groups (advantage 0: trained exactly as TRL trains them), so
   every step has the batch size TRL planned, and that is said once and counted every step;
5. `num_items_in_batch` (the token count DAPO's and BNPO's losses divide by) is recounted over the
   kept rows of every process.

Every process computes the same decisions from the same gathered rewards, so all of them draw
the same number of times and stay in step through TRL's collective calls; each keeps the groups
it generated, which needs whole groups per process (recipe/rl_section.py checks it). A step whose
first batch has signal in every group on every process returns TRL's batch untouched.

Departures from DAPO: rewards here are the recipe's (RLOO's KL penalty is not part of the test);
with `scale_rewards=batch` each draw's advantages are normalised over its own batch; the batch is
topped up rather than the step failing when the draws run out (verl raises). Logged per generation
(metrics.jsonl, like `frac_reward_zero_std`, which with refill covers every group drawn):
`refill/draws` (extra generation batches), `refill/groups_drawn`, `refill/groups_kept` (groups
with signal in the trained batch) and `refill/groups_short` (groups topped up without signal),
counted over all processes.
"""

from __future__ import annotations

import hashlib

KEY = "training.refill_zero_variance_groups"


def has_signal(rewards_per_func, weights, group_size: int, per_function: bool = False):
    """Which groups have reward variance: a bool per group of `group_size` consecutive rows.

    >>> import torch
    >>> r = torch.tensor([[1., 0.], [1., 0.], [0., 1.], [1., 0.], [float("nan")] * 2, [float("nan")] * 2])
    >>> has_signal(r, torch.tensor([1., 1.]), 2).tolist()  # sums 1,1 | 1,1 | nan,nan
    [False, False, False]
    >>> has_signal(r, torch.tensor([1., 1.]), 2, per_function=True).tolist()
    [False, True, False]
    >>> has_signal(r, torch.tensor([2., 1.]), 2).tolist()
    [False, True, False]
    """
    import torch

    unscorable = torch.isnan(rewards_per_func).all(dim=1)
    if per_function:
        grouped = rewards_per_func.view(-1, group_size, rewards_per_func.shape[1])
    else:
        rewards = (rewards_per_func * weights.to(rewards_per_func.device).unsqueeze(0)).nansum(dim=1)
        rewards[unscorable] = torch.nan
        grouped = rewards.view(-1, group_size, 1)
    present = (~torch.isnan(grouped)).sum(dim=1)
    mean = torch.nanmean(grouped, dim=1, keepdim=True)
    variance = torch.nansum((grouped - mean) ** 2, dim=1) / (present - 1)  # n - 1 = 0: nan, no signal
    std = variance.sqrt()
    constant = torch.isclose(std, torch.zeros_like(std)) | torch.isnan(std)
    return ~constant.all(dim=1)


def choose_groups(signals: list, room: int) -> list[list[int]]:
    """The local groups kept from each draw: the first `room` groups with signal in the order drawn, then
    (draws spent) the first dropped ones until the batch is full.

    >>> choose_groups([[False, True, False], [True, True, True]], 3)
    [[1], [0, 1]]
    >>> choose_groups([[False, True, False], [False, False, False]], 2)
    [[0, 1], []]
    """
    kept = [[i for i, s in enumerate(signal) if s] for signal in signals]
    chosen, left = [], room
    for groups in kept:
        chosen.append(groups[:left])
        left -= len(chosen[-1])
    for d, signal in enumerate(signals):
        extra = [i for i, s in enumerate(signal) if not s][:left]
        chosen[d] = sorted(chosen[d] + extra)
        left -= len(extra)
    return chosen


def assemble(outputs: list[dict], rows: list, pad_token_id: int) -> dict:
    """One batch from the chosen rows of several scored generation batches (TRL's output dicts): prompts
    left-padded, completion-length tensors right-padded to the longest, with TRL's own padding values."""
    import torch
    import torch.nn.functional as F

    out = {}
    for key, first in outputs[0].items():
        if isinstance(first, torch.Tensor) and first.ndim == 0:
            out[key] = first  # num_items_in_batch: recounted by the caller
            continue
        parts = [o[key][r] if isinstance(o[key], torch.Tensor) else [o[key][i] for i in r.tolist()]
                 for o, r in zip(outputs, rows)]
        if not isinstance(first, torch.Tensor):
            out[key] = [x for part in parts for x in part]
            continue
        if first.ndim >= 2:
            width = max(p.shape[1] for p in parts)
            left = key in ("prompt_ids", "prompt_mask")
            value = pad_token_id if key in ("prompt_ids", "completion_ids") else 1 if key == "tool_mask" else 0
            # F.pad lists the last dimension first: dimension 1's padding comes after the trailing ones'
            parts = [F.pad(p, (0, 0) * (p.ndim - 2) + ((width - p.shape[1], 0) if left else (0, width - p.shape[1])),
                           value=value) if p.shape[1] < width else p for p in parts]
        out[key] = torch.cat(parts, dim=0)
    return out


def _draw_seed(seed: int, step: int, draw: int) -> int:
    return int.from_bytes(hashlib.sha256(f"{seed}/{step}/{draw}".encode()).digest()[:8], "little") & (2**63 - 1)


def fresh_prompts(dataset, seed: int, step: int, draw: int, rank: int, groups: int, group_size: int) -> list[dict]:
    """This process's share of a fresh generation batch: `groups` prompts from a shuffle keyed by (seed, step,
    draw), each repeated `group_size` times in a row as TRL's RepeatSampler does."""
    import torch

    order = torch.randperm(len(dataset), generator=torch.Generator().manual_seed(_draw_seed(seed, step, draw)))
    picks = [int(order[(rank * groups + i) % len(order)]) for i in range(groups)]
    return [dict(dataset[i]) for i in picks for _ in range(group_size)]


def attach_refill(trainer, max_draws: int, log=print) -> str:
    """Wrap this trainer's generation so that groups without reward variance are replaced (module docstring);
    returns the start-up line."""
    import torch

    from posttrain.errors import UserError
    from posttrain.internals import require

    score = require(trainer, "_generate_and_score_completions")
    calculate = require(trainer, "_calculate_rewards")
    metrics = require(trainer, "_metrics")
    dataset = trainer.train_dataset
    if not (hasattr(dataset, "__len__") and hasattr(dataset, "__getitem__")):
        raise UserError(f"{KEY}: drawing fresh prompts needs a dataset with random access, and this one streams; "
                        f"remove the key.")
    size = trainer.num_generations
    accelerator, args = trainer.accelerator, trainer.args
    world, rank = accelerator.num_processes, accelerator.process_index
    local_rows = args.per_device_train_batch_size * args.steps_per_generation
    if local_rows % size:
        raise UserError(f"{KEY}: each process's generation batch ({local_rows} rows) must hold whole groups of "
                        f"num_generations={size}; make per_device_train_batch_size x steps_per_generation a multiple of it.")
    per_function = getattr(args, "multi_objective_aggregation", "sum_then_normalize") == "normalize_then_sum"
    pad_token_id = trainer.processing_class.pad_token_id if hasattr(trainer.processing_class, "pad_token_id") \
        else trainer.processing_class.tokenizer.pad_token_id
    scored = []
    said = []

    def remembered(*a, **kw):
        rewards = calculate(*a, **kw)
        scored[:] = [rewards]
        return rewards

    def refilled(inputs):
        if not trainer.model.training:
            return score(inputs)
        groups = len(inputs) // size
        outputs, signals = [], []
        kept = torch.zeros(world, dtype=torch.long)
        batch, draws = inputs, 0
        while True:
            outputs.append(score(batch))
            signal = has_signal(scored[-1], trainer.reward_weights, size, per_function).cpu().view(world, groups)
            signals.append(signal[rank].tolist())
            kept += signal.sum(dim=1)
            if int(kept.min()) >= groups or draws >= max_draws:
                break
            draws += 1
            batch = fresh_prompts(dataset, args.seed, trainer.state.global_step, draws, rank, groups, size)
        kept_global = int(kept.clamp(max=groups).sum())
        short = world * groups - kept_global
        record = metrics["train"]
        record["refill/draws"].append(float(draws))
        record["refill/groups_drawn"].append(float((draws + 1) * world * groups))
        record["refill/groups_kept"].append(float(kept_global))
        record["refill/groups_short"].append(float(short))
        if short and not said:
            said.append(True)
            log(f"refill: step {trainer.state.global_step + 1}: {kept_global} of {world * groups} groups had reward variance "
                f"after {draws} extra draw(s) ({KEY}={max_draws}); the batch is topped up with groups whose advantages are 0 "
                "(said once; refill/groups_short counts it every step)")
        if len(outputs) == 1 and short == 0:
            return outputs[0]  # every group on every process had signal: TRL's batch as it was
        chosen = choose_groups(signals, groups)
        rows = [torch.tensor([g * size + j for g in c for j in range(size)], dtype=torch.long) for c in chosen]
        used = [(o, r) for o, r in zip(outputs, rows) if len(r)]
        out = assemble([o for o, _ in used], [r.to(o["advantages"].device) for o, r in used], pad_token_id)
        if "num_items_in_batch" in out:
            mask = out["completion_mask"] if "tool_mask" not in out else out["completion_mask"] * out["tool_mask"]
            out["num_items_in_batch"] = accelerator.gather(mask.sum()).sum()
        return out

    trainer._calculate_rewards = remembered
    trainer._generate_and_score_completions = refilled
    return (f"refill: groups whose rewards are all equal are replaced by fresh prompts, up to {max_draws} extra "
            f"generation batch(es) a step ({KEY}={max_draws}); refill/* in metrics.jsonl")
