"""On a CPU, padded SFT/DPO batches are split into micro-batches when that is faster: the same run, less padding.

SFT on a CPU is padding-free by default (`trl_config.batching_defaults`), which this rule leaves
alone; it decides for DPO, and for SFT run with `padding_free: false` or a named attention.

    line = split_if_faster(trainer, recipe.training.micro_batching, device.kind, world)   # after the trainer is built

TRL pads each batch to its longest row, and on a CPU a padded token costs what a real one costs.
Micro-batches of m rows with gradient accumulation train the same rows per optimizer step with the
same loss (TRL's sampler draws the same permutation whatever the batch size; SFT's loss is
normalised over the accumulated tokens; DPO's is a mean over pairs: tests/e2e/test_padding_note.py,
every step's loss equal to 1e-5) and pad only within each micro-batch. But every forward and
backward pass also has a fixed cost (Python and kernel launches per layer) that more, smaller passes
pay more often: measured 1.3x and 1.7x faster as 1 x 8 (SFT, DPO; tiny:qwen2-6m, rows of 55-480
tokens) and 2.4x *slower* as 1 x 16 (the demo's 30-48-token chats, 1M model).

So the split is chosen, not assumed: `choose` takes the micro-batch size m (a divisor of the batch)
that minimises the estimated epoch, passes(m) x PASS_COST_TOKENS + token slots(m), over the run's own
token lengths. A split is taken when it is estimated at least MIN_GAIN faster (the linear model
underestimates what a split gains: padded batches also hold more activations). The estimate is a
constant, not a timing: the rule once timed the run's own model at start-up, so two runs on a busy
machine could pick different splits and, with dropout (whose masks are drawn over the padded
batch), learn different models. Now the same recipe and data give the same split on every machine;
the start-up line and trl_config.json say which.

A DPO loss computed over the whole batch is never split (`why_not_exact`: `aot` and `aot_unpaired`
sort the batch's pairs, `sft` averages its tokens); the line says why the batches stay. It runs in
one CPU process only (a GPU's batches are rows in parallel, where padding costs far less; several
processes' splits are untested); the recipe's `training.micro_batching: false` keeps the batches.
"""

from __future__ import annotations

import random

MIN_GAIN = 1.05  # estimated speed-up from which the batches are split: below it, the estimate's error decides
WORTH_SPLITTING = 0.1  # padding share below which no split gains enough
# A pass's fixed cost in tokens' work: timed passes put it at 44-190 tokens on tiny models and SmolLM2,
# full and LoRA, float32 and bf16, one thread (benchmarks/results/pass_costs_*.json); a short pass reads
# every weight whatever its tokens, so the ratio varies far less between models than either cost does
PASS_COST_TOKENS = 100
# TRL 1.16's DPO losses that are a mean of one term per pair: micro-batches of pairs accumulate to the same loss
PER_PAIR_DPO_LOSSES = {"sigmoid", "hinge", "ipo", "exo_pair", "nca_pair", "robust", "bco_pair", "sppo_hard", "apo_zero",
                       "apo_down", "discopop", "sigmoid_norm"}


def slots_by_micro_batch(asked: list[int], batch: int, seed: int = 0) -> dict[int, tuple[int, int]]:
    """{m: (passes, token slots)} for one epoch of random batches of `batch` entries split into
    micro-batches of m consecutive entries (each padded to its longest), for every divisor m of `batch`."""
    order = list(range(len(asked)))
    random.Random(seed).shuffle(order)
    out = {}
    for m in (d for d in range(1, batch + 1) if batch % d == 0):
        passes = slots = 0
        for start in range(0, len(order), batch):
            rows = order[start:start + batch]
            for i in range(0, len(rows), m):
                chunk = rows[i:i + m]
                passes += 1
                slots += len(chunk) * max(asked[j] for j in chunk)
        out[m] = (passes, slots)
    return out


def choose(asked: list[int], batch: int, pass_tokens: float = PASS_COST_TOKENS, rows_per_entry: int = 1,
           seed: int = 0) -> tuple[int, float]:
    """(micro-batch size, estimated speed-up over whole batches): the divisor of `batch` whose epoch
    costs least, in tokens' work: passes x pass_tokens + slots x rows_per_entry; ties go to the larger m."""
    cost = {m: passes * pass_tokens + slots * rows_per_entry
            for m, (passes, slots) in slots_by_micro_batch(asked, batch, seed).items()}
    best = min(sorted(cost, reverse=True), key=cost.get)
    return best, (cost[batch] / cost[best] if cost[best] > 0 else 1.0)


def why_not_exact(trainer, pairs: bool) -> str | None:
    """Why splitting this trainer's batches would change its loss, or None when it would not."""
    from posttrain.internals import require

    whole_batch = [t for t in require(trainer, "loss_types") or () if t not in PER_PAIR_DPO_LOSSES] if pairs else []
    if whole_batch:
        return f"loss_type {', '.join(whole_batch)} is computed over the whole batch, so a split would change the loss"
    return None


def split_if_faster(trainer, setting, device_kind: str, world: int) -> str | None:
    """Split the trainer's batches into the micro-batches `choose` picks for this run, before it
    trains. Returns the start-up line saying what was decided and why, or None when the rule does not
    apply (not one CPU process, batches of one, padding-free or packed batches, under 10% padding)."""
    from posttrain.data.padding import padding_share, row_lengths, sample_rows

    from posttrain.internals import require

    args = trainer.args
    batch = args.per_device_train_batch_size
    if setting is False or device_kind != "cpu" or world > 1 or batch < 2 or trainer.train_dataset is None \
            or any(getattr(args, key, None) for key in ("padding_free", "packing", "deepspeed", "fsdp")):
        return None
    lengths = row_lengths(sample_rows(trainer.train_dataset, args.seed), args.max_length)
    if lengths is None:
        return None
    asked, real = lengths
    pairs = "prompt_ids" in trainer.train_dataset.column_names
    rows_per_entry = 2 if pairs else 1  # a DPO pair is two rows padded together
    if padding_share(asked, real, batch, rows_per_entry, seed=args.seed) < WORTH_SPLITTING:
        return None
    what = "pairs" if pairs else "rows"
    reason = why_not_exact(trainer, pairs)
    if reason:
        return f"micro-batching: batches of {batch} {what} kept ({reason})"
    m, gain = choose(asked, batch, rows_per_entry=rows_per_entry, seed=args.seed)
    measured = f"a pass's fixed cost counted as {PASS_COST_TOKENS} tokens' work"
    if m == batch or gain < MIN_GAIN:
        return (f"micro-batching: batches of {batch} {what} kept ({measured}; "
                + ("every split estimated slower)" if m == batch else f"micro-batches of {m} estimated only {gain:.2f}x faster)"))
    accumulation = args.gradient_accumulation_steps * batch // m
    args.per_device_train_batch_size, args.gradient_accumulation_steps = m, accumulation
    require(trainer, "_train_batch_size")  # what the trainer read from args when it was built
    trainer._train_batch_size = args.train_batch_size
    return (f"training.per_device_train_batch_size = {m}, gradient_accumulation_steps = {accumulation}  (posttrain at start-up: "
            f"cpu: the same {batch} {what} per optimizer step as micro-batches of {m}, estimated {gain:.2f}x faster than padded "
            f"batches of {batch} on these {what} of {min(asked)}-{max(asked)} tokens ({measured}); training.micro_batching=false "
            f"keeps the batches)")
