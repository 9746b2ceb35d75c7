"""Paired significance for "did post-training help?" on one fixed eval set.

Both models answer the same items, so the comparison is paired: only the *discordant* items
carry information --

* ``fixed``  (McNemar ``b``): model A wrong, model B right;
* ``broken`` (McNemar ``c``): model A right, model B wrong.

Given ``m = b + c`` discordant items, ``b ~ Binomial(m, pi)`` where ``pi`` is the chance that a
discordant item is a fix; "no difference" is ``pi = 1/2``.

* ``mcnemar_exact`` is the exact two-sided McNemar test: the binomial test of ``pi = 1/2``,
  ``p = min(1, 2 P(X <= min(b, c)))``. Exact integer arithmetic, summed from ``min(b, c)`` down
  and stopped once the rest provably cannot move the result by 2^-70 of itself, so 30,000
  discordant pairs take milliseconds instead of minutes.
* ``conditional_ci`` inverts *that same test*: the Clopper-Pearson interval ``[L, U]`` of ``pi``
  (every ``pi`` that neither one-sided exact test rejects at ``alpha/2``), mapped to the accuracy
  difference ``B - A = (m / n)(2 pi - 1)``. Because the verdict and the interval come from one test,
  they cannot contradict each other: **the interval excludes 0 if and only if p < alpha**, and its
  sign is the verdict's direction (tests/evaluation/test_statistics.py checks every table up to
  120 discordant pairs at three alphas). What it does not do: it is conditional on the number of
  discordant items, i.e. it treats the discordance rate ``m / n`` as known. At ``B - A = 0`` that
  changes nothing (the conditional and unconditional variances agree there); far from 0 with few
  discordant items it is narrower than an unconditional interval would be. With no discordant
  item at all it is the single point 0: the data hold no evidence of a difference either way.
* Where the conditional interval is degenerate on one side, that side comes from an
  unconditional interval instead. When every discordant item goes one way (all fixed, none broken)
  the conditional upper bound is the observed difference itself: given m discordant items, all m
  fixed is the most there can be, but with more discordant items the difference could be larger.
  With no discordant item both bounds are 0. There, the degenerate bound is replaced by Newcombe's
  hybrid score interval for paired proportions (``newcombe_paired_ci``; Newcombe 1998, Stat Med
  17:2635, method 10: Wilson intervals of both accuracies, combined with the correlation of the
  paired outcomes), and the record says so (``ci_note``). Only the bound away from 0 moves, so the
  interval still excludes 0 exactly when the verdict is significant.

``paired_comparison`` puts both into one record, always stated as B relative to A.

Across training seeds (arms trained several times, ``posttrain.evaluation.pooled``), the unit of
replication is the training run, not the answer: ``seed_level_test`` is Welch's t-test on the
per-seed accuracies (``welch_t_test``), with Student's t tail from ``student_t_sf``. Standard
library only.
"""

from __future__ import annotations

import math
import statistics as stats
from dataclasses import dataclass
from fractions import Fraction
from statistics import NormalDist
from typing import Sequence

__all__ = ["PairedComparison", "SeedLevelTest", "binomial_cdf", "clopper_pearson", "conditional_ci", "mcnemar_exact",
           "newcombe_paired_ci", "paired_comparison", "seed_level_test", "student_t_sf", "welch_t_test", "wilson_interval"]

_TAIL_BITS = 70  # the truncated exact tail is within 2^-70 of the full one (a float resolves 2^-53)


def _check_count(name: str, value) -> None:
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise ValueError(f"{name} must be a non-negative integer count, got {value!r}")


def mcnemar_exact(b: int, c: int) -> float:
    """Exact two-sided McNemar p-value for ``b`` fixed and ``c`` broken discordant pairs.

    ``p = min(1, 2 * P(X <= min(b, c)))`` with ``X ~ Binomial(b + c, 1/2)``; ``b = c = 0`` gives 1.0.
    Symmetric in ``b`` and ``c``.

    >>> mcnemar_exact(0, 3)  # 2 * P(X = 0) = 2 * (1/8)
    0.25

    How it stays exact and fast: the tail ``sum_{i <= k} C(n, i)`` is built from ``C(n, k)`` downward
    with the exact integer step ``C(n, i-1) = C(n, i) * i / (n - i + 1)``. The step ratio shrinks
    as ``i`` falls, so once the current term times ``r / (1 - r)`` (a geometric bound on everything
    left) is below 2^-70 of the sum, the rest is dropped: the float result is then the correctly
    rounded value or one ulp from it. Far from the centre that is a handful of terms; at the centre
    about ``9 sqrt(n)``.
    """
    _check_count("b", b)
    _check_count("c", c)
    n, k = b + c, min(b, c)
    if 2 * k >= n:  # b == c: the tail holds at least half the mass, p is capped at 1
        return 1.0
    term = math.comb(n, k)
    tail = term
    for i in range(k, 0, -1):
        term = term * i // (n - i + 1)
        tail += term
        # The next step's ratio is a / d, later ones are smaller: the rest is at most
        # term * a / (d - a). Compared in integers (these numbers have n bits).
        a, d = i - 1, n - i + 2
        if term * a << _TAIL_BITS <= tail * (d - a):
            break
    # Exact rational until the final float conversion: no underflow or cancellation for large n.
    return float(min(Fraction(1), Fraction(2 * tail, 2**n)))


# ---------------------------------------------------------------------------------------------
# binomial tails for any success probability (Loader's saddle-point form, as R and Boost use)

_STIRLING = (1 / 12, 1 / 360, 1 / 1260, 1 / 1680, 1 / 1188)


def _stirlerr(n: float) -> float:
    """``log(n!) - log(sqrt(2 pi n) (n/e)^n)``: the error of Stirling's formula, accurately."""
    if n <= 15:
        return math.lgamma(n + 1) - (n + 0.5) * math.log(n) + n - 0.5 * math.log(2 * math.pi)
    nn = n * n
    s0, s1, s2, s3, s4 = _STIRLING
    return (s0 - (s1 - (s2 - (s3 - s4 / nn) / nn) / nn) / nn) / n


def _bd0(x: float, np_: float) -> float:
    """``x log(x / np) + np - x``, without the cancellation of the direct formula when x ~ np."""
    if abs(x - np_) < 0.1 * (x + np_):
        v = (x - np_) / (x + np_)
        s = (x - np_) * v
        ej = 2 * x * v
        j = 1
        while True:
            ej *= v * v
            s1 = s + ej / (2 * j + 1)
            if s1 == s:
                return s
            s, j = s1, j + 1
    return x * math.log(x / np_) + np_ - x


def _binomial_pmf(x: int, n: int, p: float) -> float:
    """``P(X = x)`` for ``X ~ Binomial(n, p)``, to about 1e-14 relative (Loader 2000)."""
    q = 1 - p
    if p == 0:
        return 1.0 if x == 0 else 0.0
    if q == 0:
        return 1.0 if x == n else 0.0
    if x == 0:
        return math.exp(n * math.log1p(-p))
    if x == n:
        return math.exp(n * math.log(p))
    lc = _stirlerr(n) - _stirlerr(x) - _stirlerr(n - x) - _bd0(x, n * p) - _bd0(n - x, n * q)
    return math.exp(lc) * math.sqrt(n / (2 * math.pi * x * (n - x)))


def _sum_down(k: int, n: int, p: float) -> float:
    """``P(X <= k)`` summed from ``x = k`` down; meant for ``k`` at or below the mean, where the
    terms fall (geometric bound on the rest, as in mcnemar_exact)."""
    term = _binomial_pmf(k, n, p)
    total = term
    odds = (1 - p) / p
    for i in range(k, 0, -1):
        term *= i / (n - i + 1) * odds
        total += term
        ratio = (i - 1) / (n - i + 2) * odds
        if term == 0 or (ratio < 1 and term * ratio <= total * (1 - ratio) * 1e-17):
            break
    return total


def binomial_cdf(k: int, n: int, p: float) -> float:
    """``P(X <= k)`` for ``X ~ Binomial(n, p)``, accurate to about 1e-13 relative in the smaller tail.

    >>> round(binomial_cdf(1, 3, 0.5), 12)
    0.5
    """
    if k < 0:
        return 0.0
    if k >= n:
        return 1.0
    if k <= n * p:
        return min(1.0, _sum_down(k, n, p))
    # The upper tail P(X >= k + 1) = P(n - X <= n - k - 1) is the small one: sum it, subtract.
    return max(0.0, 1.0 - _sum_down(n - k - 1, n, 1 - p))


def _solve(f, target: float) -> float:
    """The ``x`` in [0, 1] where the increasing function ``f`` crosses ``target`` (bisection to 1e-15;
    the first step is x = 1/2 exactly, so which side of 1/2 the answer lies on is decided by f(1/2))."""
    low, high = 0.0, 1.0
    while high - low > 1e-15:
        mid = (low + high) / 2
        low, high = (mid, high) if f(mid) < target else (low, mid)
    return (low + high) / 2


def clopper_pearson(successes: int, trials: int, alpha: float = 0.05) -> tuple[float, float]:
    """Exact (Clopper-Pearson) interval of a binomial probability at level ``1 - alpha``: every
    ``pi`` that neither one-sided exact test rejects at ``alpha / 2``.

    >>> [round(x, 4) for x in clopper_pearson(6, 6)]  # L = 0.025 ** (1 / 6)
    [0.5407, 1.0]
    """
    _check_count("successes", successes)
    _check_count("trials", trials)
    if successes > trials or trials == 0:
        raise ValueError(f"need 0 <= successes <= trials and trials > 0, got {successes} of {trials}")
    if not 0 < alpha < 1:
        raise ValueError(f"alpha must be in (0, 1), got {alpha}")
    x, n = successes, trials
    # P(X >= x; pi) rises with pi: L is where it reaches alpha/2. P(X <= x; pi) falls: U likewise.
    low = 0.0 if x == 0 else _solve(lambda pi: 1.0 - binomial_cdf(x - 1, n, pi), alpha / 2)
    high = 1.0 if x == n else _solve(lambda pi: -binomial_cdf(x, n, pi), -alpha / 2)
    return low, high


def conditional_ci(fixed: int, broken: int, n: int, alpha: float = 0.05) -> tuple[float, float]:
    """Interval of the accuracy difference ``B - A`` that agrees with ``mcnemar_exact`` (see the
    module docstring): the Clopper-Pearson interval of ``pi`` on the discordant items, as
    ``(m / n)(2 pi - 1)``. It excludes 0 exactly when ``mcnemar_exact(fixed, broken) < alpha``.

    >>> [round(x, 3) for x in conditional_ci(6, 0, 6)]  # all six items fixed: p = 0.031
    [0.081, 1.0]
    """
    _check_count("fixed", fixed)
    _check_count("broken", broken)
    m = fixed + broken
    if m > n or n == 0:
        raise ValueError(f"need fixed + broken <= n and n > 0, got {fixed} + {broken} of {n}")
    if m == 0:
        return 0.0, 0.0
    low, high = clopper_pearson(fixed, m, alpha)
    # The bisection works in floats; the decision itself is exact. Where the two could differ (p
    # within about 1e-13 of alpha) the exact test wins, so interval and verdict never disagree.
    significant = mcnemar_exact(fixed, broken) < alpha
    if significant and low <= 0.5 <= high:
        low, high = (math.nextafter(0.5, 1), high) if fixed > broken else (low, math.nextafter(0.5, 0))
    elif not significant:
        low, high = min(low, 0.5), max(high, 0.5)
    scale = m / n
    return scale * (2 * low - 1), scale * (2 * high - 1)


def wilson_interval(correct: int, n: int, alpha: float = 0.05) -> tuple[float, float]:
    """Wilson score interval of one accuracy ``correct / n`` at level ``1 - alpha``.

    Chosen over the normal approximation because it stays inside [0, 1] and is sensible at 0/n
    and n/n, the common case for small evaluation sets.

    >>> [round(x, 3) for x in wilson_interval(1, 8)]
    [0.022, 0.471]
    """
    if n == 0:
        return 0.0, 1.0
    z = NormalDist().inv_cdf(1 - alpha / 2)
    p = correct / n
    centre = (p + z * z / (2 * n)) / (1 + z * z / n)
    half = z * math.sqrt(p * (1 - p) / n + z * z / (4 * n * n)) / (1 + z * z / n)
    # Exact at the edges (0/n and n/n), where rounding would otherwise leave 1e-17 instead of 0.
    low = 0.0 if correct == 0 else max(0.0, centre - half)
    high = 1.0 if correct == n else min(1.0, centre + half)
    return low, high


def newcombe_paired_ci(both: int, fixed: int, broken: int, neither: int, alpha: float = 0.05) -> tuple[float, float]:
    """Newcombe's hybrid score interval (1998, method 10) of ``acc_B - acc_A`` from a paired 2x2 table:
    ``both`` right, ``fixed`` (only B right), ``broken`` (only A right), ``neither``.

    Each accuracy gets its Wilson interval; the two are combined ("square and add") with the
    estimated correlation ``phi`` of the paired outcomes, whose numerator ``both*neither -
    fixed*broken`` is shrunk by n/2 towards 0 when positive (Newcombe's correction). Unconditional:
    it does not take the number of discordant items as known.

    >>> [round(x, 4) for x in newcombe_paired_ci(59, 16, 6, 80)]  # Fagerland et al. 2017, chapter 8 (Cavo et al. 2012)
    [0.0046, 0.1186]
    """
    for name, value in (("both", both), ("fixed", fixed), ("broken", broken), ("neither", neither)):
        _check_count(name, value)
    n = both + fixed + broken + neither
    if n == 0:
        raise ValueError("an empty table has no interval")
    right_b, right_a = both + fixed, both + broken
    p_b, p_a = right_b / n, right_a / n
    low_b, high_b = wilson_interval(right_b, n, alpha)
    low_a, high_a = wilson_interval(right_a, n, alpha)
    margins = (right_b, n - right_b, right_a, n - right_a)
    phi = 0.0
    if all(margins):
        cross = both * neither - fixed * broken
        cross = cross - n / 2 if cross > n / 2 else 0.0 if cross >= 0 else cross
        phi = cross / math.sqrt(math.prod(margins))
    delta = p_b - p_a
    low = delta - math.sqrt(max(0.0, (p_b - low_b) ** 2 + (high_a - p_a) ** 2 - 2 * phi * (p_b - low_b) * (high_a - p_a)))
    high = delta + math.sqrt(max(0.0, (high_b - p_b) ** 2 + (p_a - low_a) ** 2 - 2 * phi * (high_b - p_b) * (p_a - low_a)))
    return max(-1.0, low), min(1.0, high)


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
    ci_low: float  # CI of delta at level 1 - alpha: conditional_ci, a degenerate side from newcombe_paired_ci
    ci_high: float
    alpha: float
    verdict: str  # "significant improvement" | "significant regression" | "no measurable difference"
    ci_note: str | None = None  # which bound(s) came from Newcombe's unconditional interval, when any


def paired_comparison(a: Sequence[bool], b: Sequence[bool], alpha: float = 0.05) -> PairedComparison:
    """Compare per-item correctness of model B against model A (same items, same order).

    The verdict is significant when the McNemar p-value is below ``alpha``; its direction is
    whichever of fixed / broken is larger. The CI excludes 0 exactly when the verdict is significant.
    """
    if not 0 < alpha < 1:
        raise ValueError(f"alpha must be in (0, 1), got {alpha}")
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
    ci_low, ci_high = conditional_ci(fixed, broken, n, alpha)
    ci_note = None
    # A conditional bound on the observed difference (every discordant item one way, or none), unless that is
    # already the end of the scale (all n items fixed, or all broken): see the module docstring.
    upper, lower = broken == 0 and fixed < n, fixed == 0 and broken < n
    if upper or lower:
        both = sum(1 for x, y in zip(xs, ys) if x and y)
        low, high = newcombe_paired_ci(both, fixed, broken, n - both - fixed - broken, alpha)
        sides = []
        if upper:
            ci_high, sides = max(ci_high, high), sides + ["upper"]
        if lower:
            ci_low, sides = min(ci_low, low), ["lower"] + sides
        ci_note = f"{' and '.join(sides)} bound{'s' if len(sides) > 1 else ''}: Newcombe's unconditional paired interval"
    return PairedComparison(
        n=n,
        acc_a=sum(xs) / n,
        acc_b=sum(ys) / n,
        delta=(fixed - broken) / n,
        fixed=fixed,
        broken=broken,
        p_value=p_value,
        ci_low=ci_low,
        ci_high=ci_high,
        alpha=alpha,
        verdict=verdict,
        ci_note=ci_note,
    )


# ---------------------------------------------------------------------------------------------
# across training seeds: Welch's t-test on per-seed accuracies


def _betacf(a: float, b: float, x: float) -> float:
    """Continued fraction of the regularized incomplete beta function (modified Lentz; Numerical
    Recipes 6.4), converged to 1e-16 relative. Meant for ``x < (a + 1) / (a + b + 2)``."""
    tiny = 1e-300
    qab, qap, qam = a + b, a + 1.0, a - 1.0
    c, d = 1.0, 1.0 - qab * x / qap
    d = 1.0 / (d if abs(d) > tiny else tiny)
    h = d
    for m in range(1, 10_000):
        m2 = 2 * m
        aa = m * (b - m) * x / ((qam + m2) * (a + m2))
        d = 1.0 + aa * d
        d = 1.0 / (d if abs(d) > tiny else tiny)
        c = 1.0 + aa / c
        c = c if abs(c) > tiny else tiny
        h *= d * c
        aa = -(a + m) * (qab + m) * x / ((a + m2) * (qap + m2))
        d = 1.0 + aa * d
        d = 1.0 / (d if abs(d) > tiny else tiny)
        c = 1.0 + aa / c
        c = c if abs(c) > tiny else tiny
        delta = d * c
        h *= delta
        if abs(delta - 1.0) < 1e-16:
            return h
    raise ArithmeticError(f"incomplete beta continued fraction did not converge (a={a}, b={b}, x={x})")


def _betainc(a: float, b: float, x: float, y: float) -> float:
    """Regularized incomplete beta ``I_x(a, b)`` with ``y = 1 - x`` given separately (computed by the
    caller without cancellation: near x = 1 the subtraction would lose half the digits). Continued
    fraction on the side where it converges fast, the other side by symmetry ``1 - I_y(b, a)``."""
    if x <= 0.0:
        return 0.0
    if y <= 0.0:
        return 1.0
    log_front = math.lgamma(a + b) - math.lgamma(a) - math.lgamma(b) + a * math.log(x) + b * math.log(y)
    if x < (a + 1.0) / (a + b + 2.0):
        return math.exp(log_front) * _betacf(a, b, x) / a
    return 1.0 - math.exp(log_front) * _betacf(b, a, y) / b


def student_t_sf(t: float, df: float) -> float:
    """``P(T > t)`` for Student's t with ``df`` degrees of freedom (any real ``df`` > 0, as Welch's
    test needs), to about 1e-13 relative: ``I_{df/(df+t^2)}(df/2, 1/2) / 2`` for ``t >= 0``.

    >>> round(student_t_sf(2.0, 4.0), 10)   # scipy.stats.t.sf(2, 4)
    0.0580582618
    """
    if not df > 0:
        raise ValueError(f"degrees of freedom must be positive, got {df!r}")
    if math.isinf(t):
        return 0.0 if t > 0 else 1.0
    # P(|T| > |t|) / 2 = I_x(df/2, 1/2) / 2 with x = df / (df + t^2); 1 - x = t^2 / (df + t^2) directly
    tail = 0.5 * _betainc(df / 2.0, 0.5, df / (df + t * t), t * t / (df + t * t))
    return tail if t >= 0 else 1.0 - tail


def welch_t_test(a: Sequence[float], b: Sequence[float]) -> tuple[float, float, float]:
    """Welch's unequal-variance t-test of ``mean(b) - mean(a)``: ``(t, df, two-sided p)``.

    ``a`` with a single value is a fixed reference (no variance of its own): the test is then the
    one-sample t-test of ``b`` against it, ``df = len(b) - 1`` (Welch's formula in that limit).
    Needs at least two values in ``b`` (and in ``a`` unless it has one) and some spread between them;
    otherwise ``ValueError`` saying why.

    >>> t, df, p = welch_t_test([0.638, 0.646, 0.630], [0.680, 0.656, 0.652])
    >>> round(t, 3), round(df, 2), round(p, 3)
    (2.495, 3.04, 0.087)
    """
    if len(a) < 1 or len(b) < 2:
        raise ValueError(f"Welch's t-test needs at least 1 value in a and 2 in b, got {len(a)} and {len(b)}")
    # each arm with seeds contributes its squared standard error s^2 / n, with n - 1 degrees of freedom
    errors = [(stats.variance(x) / len(x), len(x) - 1) for x in (a, b) if len(x) > 1]
    se2 = sum(e for e, _ in errors)
    if se2 == 0:
        raise ValueError("no spread between seeds in either arm: the t statistic is undefined")
    # Welch-Satterthwaite; the terms of an arm without spread are 0 and drop out
    df = se2 * se2 / sum(e * e / dof for e, dof in errors)
    t = (stats.fmean(b) - stats.fmean(a)) / math.sqrt(se2)
    return t, df, min(1.0, 2.0 * student_t_sf(abs(t), df))


@dataclass(frozen=True)
class SeedLevelTest:
    """Arm B's per-seed accuracies against arm A's: Welch's t-test (``dataclasses.asdict`` for JSON)."""

    test: str  # "welch" (both arms have seeds), "one-sample" (A is one fixed model) or "none"
    statistic: float | None  # t of B - A
    df: float | None
    p_value: float | None
    note: str  # why the test is undefined, when it is


def seed_level_test(acc_a: Sequence[float], acc_b: Sequence[float]) -> SeedLevelTest:
    """The seed-level test of two arms given their per-seed accuracies (the order of B minus A).

    Why Welch's t on per-seed accuracies: the question "does beta change accuracy?" is about
    training runs, so each run (seed) is one observation; its accuracy over the same fixed items
    already averages the item-level noise that the pooled CMH test counts as evidence. Pooling
    answers treats 3 seeds x 300 items as 900 independent draws, which is optimistic when runs differ
    more than answers do (docs/guides/evaluation-protocol.md). Welch rather than Student because the
    arms need not share a seed-to-seed spread (a KL term may well change how stable training is),
    and rather than an exact permutation test because with 3 + 3 seeds there are only 20 labellings,
    so no permutation p-value can fall below 0.1: the test could never reject. A mixed-effects
    logistic model (item and seed effects) would use both sources at once but has no exact reference
    in the stack and fits poorly with 3 seeds; the t-test is the standard, checkable choice
    (``scipy.stats.ttest_ind(equal_var=False)`` / ``ttest_1samp``, tests/evaluation/test_seed_level.py).
    Its assumption: per-seed accuracies roughly normal around the arm's mean; with 2-3 seeds it has
    little power, which is the point: it claims only what the seeds support.

    An arm with one model (the base all runs start from) is a fixed reference: one-sample t-test of
    the other arm's seeds against its accuracy. Two single models, or no spread in either arm:
    test "none" with the reason.
    """
    if len(acc_a) < 2 and len(acc_b) < 2:
        return SeedLevelTest("none", None, None, None, "one model per arm: no seed-to-seed variation to test against")
    if len(acc_b) < 2:  # keep B - A: a fixed B against A's seeds is the mirror image
        flipped = seed_level_test(acc_b, acc_a)
        return SeedLevelTest(flipped.test, None if flipped.statistic is None else -flipped.statistic, flipped.df,
                             flipped.p_value, flipped.note)
    form = "one-sample" if len(acc_a) == 1 else "welch"
    try:
        t, df, p = welch_t_test(acc_a, acc_b)
    except ValueError as e:
        return SeedLevelTest("none", None, None, None, str(e))
    return SeedLevelTest(form, t, df, p, "")
