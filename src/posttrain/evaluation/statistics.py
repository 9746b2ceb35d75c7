"""Paired significance for "did post-training help?" on one fixed eval set.

Both models answer the same items, so the comparison is paired: only the *discordant* items
carry information --

* ``fixed``  (McNemar ``b``): model A wrong, model B right;
* ``broken`` (McNemar ``c``): model A right, model B wrong.

``mcnemar_exact`` is the exact two-sided binomial test on those counts (exact integer arithmetic,
so it stays precise for thousands of discordant pairs). ``bootstrap_ci`` is a paired percentile
bootstrap of ``acc_b - acc_a``. ``paired_comparison`` puts both into one verdict, always stated as
B relative to A. Standard library only.
"""

from __future__ import annotations

import math
import random
from dataclasses import dataclass
from fractions import Fraction
from typing import Sequence

__all__ = ["PairedComparison", "bootstrap_ci", "mcnemar_exact", "paired_comparison"]


def mcnemar_exact(b: int, c: int) -> float:
    """Exact two-sided McNemar p-value for ``b`` fixed and ``c`` broken discordant pairs.

    ``p = min(1, 2 * P(X <= min(b, c)))`` with ``X ~ Binomial(b + c, 1/2)``; ``b = c = 0`` gives 1.0.
    Symmetric in ``b`` and ``c``.

    >>> mcnemar_exact(0, 3)  # 2 * P(X = 0) = 2 * (1/8)
    0.25
    """
    for name, value in (("b", b), ("c", c)):
        if isinstance(value, bool) or not isinstance(value, int) or value < 0:
            raise ValueError(f"{name} must be a non-negative integer count, got {value!r}")
    n = b + c
    tail = sum(math.comb(n, i) for i in range(min(b, c) + 1))
    # Exact rational until the final float conversion: no underflow or cancellation for large n.
    return float(min(Fraction(1), Fraction(2 * tail, 2**n)))


def _as_outcomes(a: Sequence[bool], b: Sequence[bool]) -> tuple[list[int], list[int]]:
    if len(a) != len(b):
        raise ValueError(f"paired outcomes need equal lengths, got {len(a)} and {len(b)}")
    if not a:
        raise ValueError("paired outcomes are empty")
    for name, values in (("a", a), ("b", b)):
        # Reject scores such as 0.5: bool(0.5) would silently count as correct.
        if any(v not in (0, 1) for v in values):
            raise ValueError(f"{name} must hold booleans (correct / incorrect)")
    return [int(v) for v in a], [int(v) for v in b]


def _quantile(sorted_values: list[float], q: float) -> float:
    """Linear-interpolation quantile (numpy's default) of already sorted values."""
    position = q * (len(sorted_values) - 1)
    low = math.floor(position)
    high = min(low + 1, len(sorted_values) - 1)
    return sorted_values[low] + (sorted_values[high] - sorted_values[low]) * (position - low)


def bootstrap_ci(
    a: Sequence[bool],
    b: Sequence[bool],
    n_resamples: int = 2000,
    seed: int = 0,
    level: float = 0.95,
) -> tuple[float, float]:
    """Paired percentile-bootstrap confidence interval of ``acc_b - acc_a``.

    Items are resampled with replacement as pairs (the same draw for A and B), using
    ``random.Random(seed)`` so the interval is reproducible.
    """
    xs, ys = _as_outcomes(a, b)
    if n_resamples < 1:
        raise ValueError(f"n_resamples must be >= 1, got {n_resamples}")
    if not 0 < level < 1:
        raise ValueError(f"level must be in (0, 1), got {level}")
    n = len(xs)
    # Resampling the per-item differences is the same as resampling pairs, and cheaper.
    diffs = [y - x for x, y in zip(xs, ys)]
    rng = random.Random(seed)
    deltas = sorted(sum(rng.choices(diffs, k=n)) / n for _ in range(n_resamples))
    tail = (1 - level) / 2
    return _quantile(deltas, tail), _quantile(deltas, 1 - tail)


@dataclass(frozen=True)
class PairedComparison:
    """Model B compared with model A on the same items (``dataclasses.asdict`` for JSON)."""

    n: int
    acc_a: float
    acc_b: float
    delta: float  # acc_b - acc_a
    fixed: int  # A wrong, B right (McNemar b)
    broken: int  # A right, B wrong (McNemar c)
    p_value: float
    ci_low: float  # bootstrap CI of delta at level 1 - alpha
    ci_high: float
    alpha: float
    verdict: str  # "significant improvement" | "significant regression" | "no measurable difference"


def paired_comparison(
    a: Sequence[bool],
    b: Sequence[bool],
    alpha: float = 0.05,
    *,
    n_resamples: int = 2000,
    seed: int = 0,
) -> PairedComparison:
    """Compare per-item correctness of model B against model A (same items, same order).

    The verdict is significant when the McNemar p-value is below ``alpha``; its direction is
    whichever of fixed / broken is larger.
    """
    xs, ys = _as_outcomes(a, b)
    n = len(xs)
    fixed = sum(1 for x, y in zip(xs, ys) if not x and y)
    broken = sum(1 for x, y in zip(xs, ys) if x and not y)
    p_value = mcnemar_exact(fixed, broken)
    if p_value < alpha and fixed > broken:
        verdict = "significant improvement"
    elif p_value < alpha and broken > fixed:
        verdict = "significant regression"
    else:
        verdict = "no measurable difference"
    acc_a, acc_b = sum(xs) / n, sum(ys) / n
    ci_low, ci_high = bootstrap_ci(xs, ys, n_resamples=n_resamples, seed=seed, level=1 - alpha)
    return PairedComparison(
        n=n,
        acc_a=acc_a,
        acc_b=acc_b,
        delta=(sum(ys) - sum(xs)) / n,
        fixed=fixed,
        broken=broken,
        p_value=p_value,
        ci_low=ci_low,
        ci_high=ci_high,
        alpha=alpha,
        verdict=verdict,
    )
