"""How many test items a plan needs for power 0.8 under its own decision rule, stated before any run.

The plan gives the expected effect (the arm's accuracy minus the baseline's, as a share) and discordance
(the share of items on which the two models disagree). For one seed, the exact McNemar test's power is
computed exactly: the discordant count D ~ Binomial(n, discordance) and, given D, the items the arm fixed
F ~ Binomial(D, (discordance + effect) / (2 discordance)); the test rejects where F reaches the critical
count of D. A hypothesis that needs every one of k seeds significant has power p^k (seeds drawn
independently). Holm is planned at its first step, alpha / hypotheses, so the stated power is a floor.

The pooled rule (CMH, seed-level and item-level tests all significant) has no closed form: it is
simulated (fixed generator, 200 runs) with the baseline one model and each seed changing items on its
own, at the plan's `baseline_accuracy` (default 0.5). Seeds that agree with each other more than that
(the usual case) make the item-level test weaker than simulated: read it as an upper bound.
"""

from __future__ import annotations

import functools
import math
import random
from dataclasses import dataclass

from posttrain.evaluation.statistics import binomial_cdf, mcnemar_exact

TARGET = 0.8
MAX_ITEMS = 100_000


@dataclass(frozen=True)
class Power:
    hypothesis: str
    rule: str
    seeds: int
    alpha: float  # per test, after the planned correction
    items: int  # as planned
    power: float  # at the planned items
    needed: int | None  # items for TARGET power (None: more than MAX_ITEMS)
    expected: dict

    @property
    def underpowered(self) -> bool:
        return self.power < TARGET


def _critical(m: int, alpha: float) -> int | None:
    """The fewest fixed items of m discordant ones at which exact McNemar rejects with the arm ahead."""
    lo, hi = m // 2 + 1, m
    if m == 0 or mcnemar_exact(m, 0) >= alpha:
        return None
    while lo < hi:
        mid = (lo + hi) // 2
        if mcnemar_exact(mid, m - mid) < alpha:
            hi = mid
        else:
            lo = mid + 1
    return lo


def mcnemar_power(n: int, effect: float, discordance: float, alpha: float) -> float:
    """Exact power of one two-sided exact McNemar test at n items, significant with the arm ahead."""
    q = (discordance + effect) / (2 * discordance)
    mean, sd = n * discordance, math.sqrt(n * discordance * (1 - discordance))
    total = 0.0
    for m in range(max(0, int(mean - 9 * sd)), min(n, int(mean + 9 * sd) + 1) + 1):
        weight = math.exp(math.lgamma(n + 1) - math.lgamma(m + 1) - math.lgamma(n - m + 1)
                          + (m * math.log(discordance) if m else 0.0) + ((n - m) * math.log1p(-discordance) if n - m else 0.0))
        c = _critical(m, alpha)
        if c is not None and weight > 1e-15:
            total += weight * (1.0 - binomial_cdf(c - 1, m, q))
    return min(1.0, total)


@functools.lru_cache(maxsize=None)  # hypotheses with the same inputs (a plan's twins) are simulated once
def _simulated_power(n: int, seeds: int, effect: float, discordance: float, accuracy: float, alpha: float, rule: str,
                     runs: int = 200) -> float:
    from posttrain.evaluation.pooled import cmh_test, item_level_test, item_tables
    from posttrain.evaluation.statistics import seed_level_test

    fix = (discordance + effect) / 2 / (1 - accuracy)  # P(a seed is right | the baseline is wrong)
    break_ = (discordance - effect) / 2 / accuracy
    if not (0 <= fix <= 1 and 0 <= break_ <= 1):
        raise ValueError("expected effect and discordance do not fit the baseline accuracy")
    rng = random.Random(0)
    hits = 0
    for _ in range(runs):
        base = [rng.random() < accuracy for _ in range(n)]
        arm = [[(rng.random() >= break_) if b else (rng.random() < fix) for b in base] for _ in range(seeds)]
        ok = True
        if rule in ("pooled", "both"):
            # pooled.pooled_comparison's three tests, the item-level one with fewer sign flips (its p to about 0.007)
            delta = sum(map(sum, arm)) / seeds / n - sum(base) / n
            seed_p = seed_level_test([sum(base) / n], [sum(r) / n for r in arm]).p_value
            ok = (delta > 0 and cmh_test(item_tables([base], arm))[1] < alpha and (seed_p is None or seed_p < alpha)
                  and item_level_test([base], arm, draws=999, seed=rng.randrange(2**31))[1] < alpha)
        if ok and rule in ("per_seed", "both"):
            for run in arm:
                fixed = sum(r and not b for r, b in zip(run, base))
                broken = sum(b and not r for r, b in zip(run, base))
                ok = ok and fixed > broken and mcnemar_exact(fixed, broken) < alpha
        hits += ok
    return hits / runs


def rule_power(n: int, seeds: int, rule: str, alpha: float, expected: dict) -> float:
    effect, discordance = abs(expected["effect"]), expected["discordance"]
    if rule == "per_seed":
        return mcnemar_power(n, effect, discordance, alpha) ** seeds
    return _simulated_power(n, seeds, effect, discordance, expected.get("baseline_accuracy", 0.5), alpha, rule)


def items_needed(seeds: int, rule: str, alpha: float, expected: dict) -> int | None:
    """The fewest items (to 1% for the exact rule, 5% simulated) that reach TARGET power; None above MAX_ITEMS."""
    hi = 16
    while rule_power(hi, seeds, rule, alpha, expected) < TARGET:
        hi *= 2
        if hi > MAX_ITEMS:
            return None
    lo = hi // 2
    step = 0.01 if rule == "per_seed" else 0.05
    while hi - lo > max(1, int(lo * step)):
        mid = (lo + hi) // 2
        lo, hi = (lo, mid) if rule_power(mid, seeds, rule, alpha, expected) >= TARGET else (mid, hi)
    return hi


def plan_power(plan, items: int) -> list[Power]:
    """Each hypothesis's power at the plan's items, and the items it needs; [] when the plan expects nothing."""
    alpha = plan.alpha / len(plan.hypotheses) if plan.correction == "holm" else plan.alpha
    out = []
    for h in plan.hypotheses.values():
        expected = {**plan.expected, **h.expected}
        if not {"effect", "discordance"} <= set(expected):
            continue
        seeds = max(len(plan.seeds(h.arm)), len(plan.seeds(h.baseline)))
        out.append(Power(h.name, plan.rule, seeds, alpha, items, rule_power(items, seeds, plan.rule, alpha, expected),
                         items_needed(seeds, plan.rule, alpha, expected), expected))
    return out


def render(powers: list[Power]) -> str:
    if not powers:
        return ("power: the plan states no expected effect, so no power analysis; add `expected: {effect: 0.05, discordance: 0.2}` "
                "(the gain you hope for and the share of items the models will disagree on)")
    lines = [f"power (target {TARGET:.0%}):"]
    for p in powers:
        needed = f"{p.needed} items" if p.needed else f"more than {MAX_ITEMS} items"
        flag = "  UNDERPOWERED" if p.underpowered else ""
        lines.append(f"  {p.hypothesis}: {p.power:.2f} at {p.items} items (expected {100 * p.expected['effect']:+.1f} pts, discordance "
                     f"{100 * p.expected['discordance']:.0f}%; {p.rule}, {p.seeds} seed(s), alpha {p.alpha:.3g}); "
                     f"{TARGET:.0%} needs {needed}{flag}")
    return "\n".join(lines)
