"""The recipe's rewards called on completions outside TRL's trainer, with the keywords TRL's GRPOTrainer passes.

The start-up reward trial (rewards/checks.py), the difficulty pre-pass (algorithms/difficulty.py) and anything else
that scores completions itself build the call here, so a reward sees the same arguments as while training:
`prompts`, `completions` (chat turns for chat prompts, text otherwise), `completion_ids`, every dataset column but
the prompt (one entry per completion), `trainer_state`, `log_extra` and `log_metric`.

Standard library only: `posttrain validate` runs the trial without torch.
"""

from __future__ import annotations

import asyncio
import inspect
import math
from typing import Any, Callable

NOT_COLUMNS = ("prompt", "completion", "completion_ids")  # what TRL passes under its own names, not as columns


def reward_kwargs(rows: list[dict], texts: list[str], completion_ids: list[list[int]], trainer_state: Any = None) -> dict:
    """TRL's keywords for one completion per row (`rows[i]` is the dataset row `texts[i]` answers)."""
    prompts = [row.get("prompt") for row in rows]
    completions = [[{"role": "assistant", "content": t}] if isinstance(p, list) else t for p, t in zip(prompts, texts)]
    columns = {key: [row[key] for row in rows] for key in (rows[0] if rows else {}) if key not in NOT_COLUMNS}
    return {"prompts": prompts, "completions": completions, "completion_ids": completion_ids, **columns,
            "trainer_state": trainer_state, "log_extra": lambda column, values: None, "log_metric": lambda name, value: None}


def call(fn: Callable, kwargs: dict) -> Any:
    """Call a reward as TRL does (keywords only); an async one is run to completion."""
    out = fn(**kwargs)
    return asyncio.run(out) if inspect.isawaitable(out) else out


def weighted_sums(functions: list[Callable], weights: list[float], kwargs: dict, n: int) -> list[float | None]:
    """Each completion's weighted reward sum as TRL sums it (nansum: a None or NaN is left out); None where no reward
    scored the completion (TRL's NaN row)."""
    totals: list[float | None] = [None] * n
    for weight, fn in zip(weights, functions):
        for j, value in enumerate(call(fn, kwargs)):
            if value is not None and not math.isnan(value):
                totals[j] = (totals[j] or 0.0) + weight * float(value)
    return totals
