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
that minimises the estimated step time, passes(m) x fixed + token slots(m) x per token, over the
run's own token lengths, with `fixed` and `per token` timed on the run's own model at start-up
(`pass_costs`: a forward and backward at two lengths, a few seconds on a real model). A split is
taken when it is estimated at least MIN_GAIN faster (the linear model underestimates what a split
gains: padded batches also hold more activations). The decision rests on a timing, so two runs on a
busy machine may pick different splits: the same losses either way, and the start-up line and
trl_config.json say which. Only one CPU process decides alone (several would
have to agree; a GPU's batches are rows in parallel, where padding costs far less); the recipe's
`training.micro_batching: false` keeps the batches as they are.
"""

from __future__ import annotations

import random
import time

MIN_GAIN = 1.05  # estimated speed-up from which the batches are split: below it, noise in the timing decides
WORTH_TIMING = 0.1  # padding share below which no split can gain enough to be worth timing the model
PROBE_TOKENS = (16, 128)  # the two pass lengths timed: short enough to be quick, apart enough to separate the costs
REPEATS = 3


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


def choose(asked: list[int], batch: int, fixed_s: float, per_token_s: float, rows_per_entry: int = 1,
           seed: int = 0) -> tuple[int, float]:
    """(micro-batch size, estimated speed-up over whole batches): the divisor of `batch` whose epoch
    costs least, passes x fixed_s + slots x rows_per_entry x per_token_s; ties go to the larger m."""
    cost = {m: passes * fixed_s + slots * rows_per_entry * per_token_s
            for m, (passes, slots) in slots_by_micro_batch(asked, batch, seed).items()}
    best = min(sorted(cost, reverse=True), key=cost.get)
    return best, (cost[batch] / cost[best] if cost[best] > 0 else 1.0)


def pass_costs(model, vocab_size: int, lengths: tuple[int, int] = PROBE_TOKENS) -> tuple[float, float]:
    """(fixed seconds per forward+backward pass, seconds per token) of `model` on one row, from timing
    passes of two lengths (after a warm-up; the fastest of three each: a busy machine slows some). The gradients are cleared (none exist
    before training) and the global random state restored, so the run trains exactly as it would have."""
    import torch

    rng = torch.get_rng_state()
    generator = torch.Generator().manual_seed(0)
    timed = []
    try:
        for n in (lengths[0], *lengths * REPEATS):  # the first pass warms up and is not counted
            ids = torch.randint(vocab_size, (1, n), generator=generator)
            started = time.perf_counter()
            model(input_ids=ids, labels=ids).loss.backward()
            timed.append((n, time.perf_counter() - started))
    finally:
        model.zero_grad(set_to_none=True)
        torch.set_rng_state(rng)
    (short, short_s), (long, long_s) = ((n, min(s for k, s in timed[1:] if k == n)) for n in lengths)
    per_token = max((long_s - short_s) / (long - short), 1e-9)
    return max(short_s - per_token * short, 0.0), per_token


def split_if_faster(trainer, setting, device_kind: str, world: int) -> str | None:
    """Split the trainer's batches into the micro-batches `choose` picks for this run, before it
    trains. Returns the start-up line saying what was decided and why, or None when the rule does not
    apply (not one CPU process, batches of one, padding-free or packed batches, under 10% padding)."""
    from posttrain.data.padding import padding_share, row_lengths, sample_rows

    from .trl_internals import require

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
    if padding_share(asked, real, batch, rows_per_entry, seed=args.seed) < WORTH_TIMING:
        return None
    import torch

    with torch.autocast("cpu", dtype=torch.bfloat16, enabled=bool(args.bf16)):  # the precision the run trains in
        fixed, per_token = pass_costs(trainer.model, trainer.model.get_input_embeddings().num_embeddings)
    m, gain = choose(asked, batch, fixed, per_token, rows_per_entry, seed=args.seed)
    what = "pairs" if pairs else "rows"
    measured = f"a pass here costs {fixed * 1e3:.0f} ms + {per_token * 1e3:.2f} ms per token"
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
