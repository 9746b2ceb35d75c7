"""Exact McNemar test, the interval that agrees with it, and the paired-comparison verdict."""

from __future__ import annotations

import dataclasses
import doctest
import time
from fractions import Fraction
from math import comb

import pytest

from posttrain.evaluation import statistics
from posttrain.evaluation.statistics import binomial_cdf, clopper_pearson, conditional_ci, mcnemar_exact, newcombe_paired_ci, paired_comparison


# Published exact McNemar results on discordant counts (b, c), checked against these bounds.
@pytest.mark.parametrize(
    "b, c, low, high",
    [
        (5, 32, 0.0, 0.0001),  # p < 0.0001
        (11, 18, 0.2645, 0.2655),  # p = 0.265
        (23, 3, 0.00005, 0.0001),  # p = 0.00009
        (17, 4, 0.00715, 0.00725),  # p = 0.0072
    ],
    ids=["5_32", "11_18", "23_3", "17_4"],
)
def test_published_results(b, c, low, high):
    assert low < mcnemar_exact(b, c) < high


@pytest.mark.parametrize(
    "b, c, expected",
    [
        (0, 0, 1.0),
        # Hand check: n = 3, P(X <= 0) = 1/8, so p = 2 * 1/8 = 0.25.
        (0, 3, 0.25),
        (0, 10, 2 / 1024),  # 0.001953125
        (1, 1, 1.0),  # 2 * P(X <= 1) = 2 * 3/4 > 1, capped
        (11, 18, 0.26493089646101),  # 2 * sum(C(29, i), i <= 11) / 2**29
        (23, 3, 2 * (1 + 26 + 325 + 2600) / 2**26),
        (17, 4, 2 * (1 + 21 + 210 + 1330 + 5985) / 2**21),
    ],
    ids=["none", "0_3_hand", "0_10", "1_1_capped", "11_18_exact", "23_3_exact", "17_4_exact"],
)
def test_exact_values(b, c, expected):
    assert mcnemar_exact(b, c) == pytest.approx(expected, rel=1e-12)


@pytest.mark.parametrize("b, c", [(5, 32), (11, 18), (0, 10), (3, 7), (400, 480)])
def test_symmetric(b, c):
    assert mcnemar_exact(b, c) == mcnemar_exact(c, b)


def test_precise_for_thousands_of_pairs():
    b, c = 1400, 1600
    exact = Fraction(2 * sum(comb(3000, i) for i in range(b + 1)), 2**3000)
    p = mcnemar_exact(b, c)
    assert 0 < p < 1e-3
    assert p == float(exact)
    assert mcnemar_exact(2000, 2000) == 1.0
    # 2 / 2**1000 is far below what 1 - (upper tail) in floats could resolve, yet exact here.
    assert mcnemar_exact(0, 1000) == 2.0**-999


@pytest.mark.parametrize(
    "b, c", [(-1, 3), (1.5, 2), (True, 2), (2, "3")], ids=["negative", "float", "bool", "str"]
)
def test_rejects_non_counts(b, c):
    with pytest.raises(ValueError):
        mcnemar_exact(b, c)


# --------------------------------------------------------------------------- paired comparison


def outcomes(both_right: int, fixed: int, broken: int, both_wrong: int) -> tuple[list[bool], list[bool]]:
    """Per-item correctness lists for A and B with the given cell counts."""
    a = [True] * both_right + [False] * fixed + [True] * broken + [False] * both_wrong
    b = [True] * both_right + [True] * fixed + [False] * broken + [False] * both_wrong
    return a, b


@pytest.mark.parametrize(
    "cells, verdict",
    [
        ((50, 23, 3, 24), "significant improvement"),
        ((50, 3, 23, 24), "significant regression"),
        ((50, 11, 18, 21), "no measurable difference"),
        ((100, 0, 0, 0), "no measurable difference"),
        ((0, 0, 0, 10), "no measurable difference"),
    ],
    ids=["improvement", "regression", "not_significant", "identical_all_right", "identical_all_wrong"],
)
def test_verdicts(cells, verdict):
    a, b = outcomes(*cells)
    result = paired_comparison(a, b)
    assert result.verdict == verdict
    both_right, fixed, broken, both_wrong = cells
    n = sum(cells)
    assert (result.n, result.fixed, result.broken) == (n, fixed, broken)
    assert result.acc_a == pytest.approx((both_right + broken) / n)
    assert result.acc_b == pytest.approx((both_right + fixed) / n)
    assert result.delta == pytest.approx(result.acc_b - result.acc_a)
    assert result.p_value == mcnemar_exact(fixed, broken)
    assert result.ci_low <= result.delta <= result.ci_high


def test_alpha_decides_significance():
    a, b = outcomes(50, 17, 4, 29)  # p = 0.0072
    assert paired_comparison(a, b, alpha=0.01).verdict == "significant improvement"
    assert paired_comparison(a, b, alpha=0.005).verdict == "no measurable difference"


def test_result_is_json_ready():
    a, b = outcomes(5, 2, 1, 2)
    record = dataclasses.asdict(paired_comparison(a, b))
    assert set(record) >= {"n", "acc_a", "acc_b", "fixed", "broken", "p_value", "verdict"}


@pytest.mark.parametrize(
    "a, b, message",
    [([True], [True, False], "equal lengths"), ([], [], "empty"), ([0.5], [1], "booleans")],
    ids=["unequal", "empty", "not_boolean"],
)
def test_paired_inputs_validated(a, b, message):
    with pytest.raises(ValueError, match=message):
        paired_comparison(a, b)


# --------------------------------------------------------------------------- large n, reference


LARGE = [(14800, 15200), (14990, 15010), (14000, 16000), (14700, 15300), (9000, 9300), (200, 260), (5, 32), (1400, 1600)]


def test_matches_scipy_binomtest_to_1e_12_up_to_30000_discordant_pairs():
    binomtest = pytest.importorskip("scipy.stats").binomtest
    for b, c in LARGE + [(b, 60 - b) for b in range(61)]:
        reference = binomtest(b, b + c, 0.5).pvalue
        assert mcnemar_exact(b, c) == pytest.approx(reference, rel=1e-12, abs=0), (b, c)


def test_30000_discordant_pairs_take_milliseconds_and_equal_the_full_exact_sum():
    start = time.perf_counter()
    values = [mcnemar_exact(b, c) for b, c in LARGE]
    assert time.perf_counter() - start < 10.0  # ~0.1 s idle; the full-sum implementation took ~110 s for one of them
    b, c = 14800, 15200  # the untruncated exact sum, by the cheap integer recurrence
    n, term = b + c, comb(b + c, b)
    tail = term
    for i in range(b, 0, -1):
        term = term * i // (n - i + 1)
        tail += term
    assert values[0] == float(Fraction(2 * tail, 2**n)) and 0.02 < values[0] < 0.022


# --------------------------------------------------------------------------- interval vs verdict


def test_binomial_cdf_and_clopper_pearson_match_scipy():
    stats = pytest.importorskip("scipy.stats")
    for k, n, p in [(3, 10, 0.3), (50, 200, 0.2), (150, 200, 0.7), (12000, 30000, 0.41), (10, 30000, 0.001), (0, 7, 0.9)]:
        assert binomial_cdf(k, n, p) == pytest.approx(stats.binom.cdf(k, n, p), rel=1e-11), (k, n, p)
    for x, n in [(6, 6), (0, 5), (3, 10), (140, 300), (14800, 30000), (1, 1000)]:
        ref = stats.binomtest(x, n).proportion_ci(0.95, "exact")
        low, high = clopper_pearson(x, n, 0.05)
        assert low == pytest.approx(ref.low, abs=1e-12) and high == pytest.approx(ref.high, abs=1e-12), (x, n)


@pytest.mark.parametrize("alpha, largest", [(0.01, 40), (0.05, 70), (0.1, 40)])
def test_interval_excludes_zero_exactly_when_p_is_below_alpha_on_every_table(alpha, largest):
    """Every table with up to `largest` discordant items (and, at 0.05, large ones): the CI of B - A
    excludes 0 iff p < alpha, lies on the side of the verdict and holds the observed difference;
    and Clopper-Pearson itself agrees with the test (before conditional_ci's rounding guard)."""
    tables = [(b, m - b) for m in range(largest + 1) for b in range(m + 1)]
    tables += (LARGE + [(c, b) for b, c in LARGE]) if alpha == 0.05 else []
    for fixed, broken in tables:
        m = fixed + broken
        p = mcnemar_exact(fixed, broken)
        for n in {m, m + 13} - {0}:
            low, high = conditional_ci(fixed, broken, n, alpha)
            assert (low > 0 or high < 0) == (p < alpha), (fixed, broken, n, low, high, p)
            assert low > 0 if p < alpha and fixed > broken else high < 0 if p < alpha else low <= 0 <= high
            assert low <= (fixed - broken) / n <= high
        if m:
            cp_low, cp_high = clopper_pearson(fixed, m, alpha)
            assert (not cp_low <= 0.5 <= cp_high) == (p < alpha), (fixed, broken)
    for cells in [(3, 9, 1, 2), (0, 4, 0, 0), (5, 0, 6, 1), (2, 1, 1, 2)]:  # and the record says the same
        r = paired_comparison(*outcomes(*cells), alpha=alpha)
        assert (r.ci_low > 0) == (r.verdict == "significant improvement")
        assert (r.ci_high < 0) == (r.verdict == "significant regression")


def test_the_issue_examples_no_longer_contradict():
    # n = 6, all fixed: the bootstrap said [+100, +100]; p = 2/64
    six = paired_comparison(*outcomes(0, 6, 0, 0))
    assert six.p_value == 2 / 64 and six.verdict == "significant improvement"
    assert 0.08 < six.ci_low < 0.09 and six.ci_high == 1.0
    # p ~ 0.065 ("no measurable difference") now comes with an interval that holds 0
    fixed, broken = 19, 8
    result = paired_comparison(*outcomes(150, fixed, broken, 23))
    assert 0.05 < result.p_value < 0.07 and result.verdict == "no measurable difference"
    assert result.ci_low <= 0 <= result.ci_high
    # no discordant item: no evidence either way; the conditional interval would be the point 0, Newcombe's holds 0
    same = paired_comparison(*outcomes(7, 0, 0, 3))
    assert same.p_value == 1.0 and same.ci_low < 0 < same.ci_high
    assert (same.ci_low, same.ci_high) == newcombe_paired_ci(7, 0, 0, 3)
    assert same.ci_note == "lower and upper bounds: Newcombe's unconditional paired interval"


def test_newcombe_paired_interval_matches_the_published_example_and_its_formula():
    """Fagerland, Lydersen & Laake (2017), Statistical Analysis of Contingency Tables, chapter 8: complete
    response before/after consolidation therapy (Cavo et al. 2012), table [[59, 6], [16, 80]]: estimate
    -0.0621, Newcombe square-and-add 95% CI -0.1186 to -0.0046. And the formula (Newcombe 1998, method 10)
    worked by hand on a second table, with statsmodels' Wilson intervals as the reference for its parts."""
    low, high = newcombe_paired_ci(59, 6, 16, 80)  # B = "before", fixed = n12 = 6, broken = n21 = 16
    assert (round(low, 4), round(high, 4)) == (-0.1186, -0.0046)
    assert newcombe_paired_ci(59, 16, 6, 80) == pytest.approx((0.0046251, 0.1186212), abs=1e-7)  # A and B swapped: mirrored

    proportion_confint = pytest.importorskip("statsmodels.stats.proportion").proportion_confint
    both, fixed, broken, neither = 1, 1, 7, 12  # Bentur et al. 2009, [[1, 1], [7, 12]]
    n = 21
    p1, p2 = (both + fixed) / n, (both + broken) / n
    l1, u1 = proportion_confint(both + fixed, n, 0.05, method="wilson")
    l2, u2 = proportion_confint(both + broken, n, 0.05, method="wilson")
    cross = both * neither - fixed * broken  # 12 - 7 = 5 <= n / 2: phi = 0
    assert cross <= n / 2
    phi = 0.0
    by_hand = ((p1 - p2) - ((p1 - l1) ** 2 + (u2 - p2) ** 2 - 2 * phi * (p1 - l1) * (u2 - p2)) ** 0.5,
               (p1 - p2) + ((p2 - l2) ** 2 + (u1 - p1) ** 2 - 2 * phi * (p2 - l2) * (u1 - p1)) ** 0.5)
    assert newcombe_paired_ci(both, fixed, broken, neither) == pytest.approx(by_hand, abs=1e-12)


def test_a_one_sided_table_takes_its_far_bound_from_newcombe_and_keeps_the_verdict():
    """12 fixed, 0 broken of 200: the conditional interval ends at the observed +6 points (all 12 discordant items
    fixed is the most 12 can do); the unconditional bound goes past it. The bound near 0, and so the verdict, stay."""
    result = paired_comparison(*outcomes(150, 12, 0, 38))
    conditional = conditional_ci(12, 0, 200)
    assert conditional[1] == pytest.approx(0.06) and result.delta == pytest.approx(0.06)
    assert result.ci_low == conditional[0] > 0 and result.verdict == "significant improvement"
    assert result.ci_high == newcombe_paired_ci(150, 12, 0, 38)[1] > 0.06
    assert result.ci_note == "upper bound: Newcombe's unconditional paired interval"
    mirrored = paired_comparison(*outcomes(150, 0, 12, 38))
    assert (mirrored.ci_low, mirrored.ci_high) == pytest.approx((-result.ci_high, -result.ci_low))
    assert mirrored.ci_note == "lower bound: Newcombe's unconditional paired interval"
    assert paired_comparison(*outcomes(150, 12, 3, 35)).ci_note is None  # both kinds of discordant item: conditional


def test_clopper_pearson_covers_at_least_the_level_for_every_pi():
    """Exact coverage: sum over outcomes of P(b) * [pi in CI(b)] >= 1 - alpha (Clopper-Pearson's promise)."""
    m = 25
    intervals = [clopper_pearson(b, m, 0.05) for b in range(m + 1)]
    for pi in (0.03, 0.2, 0.5, 0.61, 0.9):
        pmf = [comb(m, b) * pi**b * (1 - pi) ** (m - b) for b in range(m + 1)]
        assert sum(p for p, (low, high) in zip(pmf, intervals) if low <= pi <= high) >= 0.95


def test_docstring_examples():
    result = doctest.testmod(statistics)
    assert result.attempted > 0 and result.failed == 0
