"""How much of a run's batches is padding, said at start-up with what removes it on this device.

TRL pads each SFT/DPO batch to its longest row. posttrain removes padding by default where that
cannot change what the run learns (docs/guides/cpu-performance.md): on one CPU process the micro-batch
rule (`algorithms.micro_batching`) splits batches when that is measured faster; elsewhere the run
says how much it pays and the exact alternative (micro-batches of one row with gradient
accumulation train the same rows per optimizer step with no padding at all; with flash attention on
CUDA, padding-free batches).
"""

from __future__ import annotations

import random

NOTE_FROM = 0.3  # padding share from which the run says so
SAMPLE = 20_000  # rows read to estimate it: the share of random batches needs no more


def sample_rows(dataset, seed: int):
    """The dataset, or SAMPLE of its rows when it is larger: padding shares need no more."""
    if len(dataset) <= SAMPLE:
        return dataset
    return dataset.select(sorted(random.Random(seed).sample(range(len(dataset)), SAMPLE)))


def row_lengths(dataset, max_length: int | None) -> tuple[list[int], list[int]] | None:
    """(padded length each row asks of its batch, real tokens it holds) of a TRL-prepared dataset, or None.

    SFT rows are `input_ids`; a DPO pair is two rows (prompt + chosen, prompt + rejected) padded
    together, so it asks for prompt + the longer answer and holds both.
    """
    cap = max_length or float("inf")
    names = dataset.column_names
    if "input_ids" in names:
        lengths = [min(len(ids), cap) for ids in dataset["input_ids"]]
        return lengths, lengths
    if {"prompt_ids", "chosen_ids", "rejected_ids"} <= set(names):
        asked, real = [], []
        for p, c, r in zip(dataset["prompt_ids"], dataset["chosen_ids"], dataset["rejected_ids"]):
            asked.append(min(len(p) + max(len(c), len(r)), cap))
            real.append(min(len(p) + len(c), cap) + min(len(p) + len(r), cap))
        return asked, real
    return None


def padding_share(asked: list[int], real: list[int], batch_size: int, rows_per_entry: int = 1, seed: int = 0) -> float:
    """Share of the token slots that are padding over one epoch of random batches of `batch_size` entries."""
    order = list(range(len(asked)))
    random.Random(seed).shuffle(order)
    slots = tokens = 0
    for start in range(0, len(order), batch_size):
        batch = order[start:start + batch_size]
        slots += rows_per_entry * len(batch) * max(asked[i] for i in batch)
        tokens += sum(real[i] for i in batch)
    return 1 - tokens / slots if slots else 0.0


def padding_note(dataset, args, device_kind: str, advise: bool = True) -> str | None:
    """One start-up line when padded batches are mostly padding, naming what removes it here
    (`advise=False`: only the share, when the micro-batch rule has already weighed the alternative)."""
    batch = args.per_device_train_batch_size
    if dataset is None or batch < 2 or getattr(args, "padding_free", False) or getattr(args, "packing", False):
        return None
    dataset = sample_rows(dataset, args.seed)
    lengths = row_lengths(dataset, args.max_length)
    if lengths is None:
        return None
    asked, real = lengths
    pairs = "prompt_ids" in dataset.column_names
    share = padding_share(asked, real, batch, rows_per_entry=2 if pairs else 1, seed=args.seed)
    if share < NOTE_FROM:
        return None
    accumulation = args.gradient_accumulation_steps * batch
    what = "pairs" if pairs else "rows"
    line = (f"padding: {share:.0%} of the token slots in batches of {batch} {what} "
            f"({what} of {min(asked)}-{max(asked)} tokens)")
    if not advise:
        return line
    if device_kind == "cpu":
        return (line + f"; on a CPU, training.per_device_train_batch_size=1 training.gradient_accumulation_steps={accumulation} "
                f"trains the same {what} per step with none (faster on long rows, slower on short ones: `posttrain docs cpu-performance`)")
    if device_kind == "cuda" and not pairs:
        return line + "; model.attn_implementation=flash_attention_2 makes SFT batches padding-free (`posttrain docs cpu-performance`)"
    return line
