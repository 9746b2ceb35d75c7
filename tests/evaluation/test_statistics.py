"""Exact McNemar test, paired bootstrap and the paired-comparison verdict."""

from __future__ import annotations

import dataclasses
import doctest
from fractions import Fraction
from math import comb

import pytest

from posttrain.evaluation import statistics
from posttrain.evaluation.statistics import bootstrap_ci, mcnemar_exact, paired_comparison


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
    with pytest.raises(ValueError, match=message):
        bootstrap_ci(a, b)


def test_bootstrap_reproducible_and_seeded():
    a, b = outcomes(40, 15, 5, 40)
    assert bootstrap_ci(a, b) == bootstrap_ci(a, b, seed=0)
    # The seed matters (visible with few resamples; with 2000 the percentiles often coincide).
    assert len({bootstrap_ci(a, b, n_resamples=20, seed=seed) for seed in range(5)}) > 1


def test_bootstrap_covers_delta_and_narrows_with_level():
    a, b = outcomes(400, 100, 50, 450)  # delta = +0.05
    low, high = bootstrap_ci(a, b)
    assert low < 0.05 < high
    assert 0 < low  # 100 vs 50 discordant is a clear improvement
    low90, high90 = bootstrap_ci(a, b, level=0.90)
    assert low <= low90 and high90 <= high


def test_bootstrap_degenerate_when_no_discordance():
    a, b = outcomes(7, 0, 0, 3)
    assert bootstrap_ci(a, b) == (0.0, 0.0)


@pytest.mark.parametrize(
    "kwargs", [{"n_resamples": 0}, {"level": 1.0}, {"level": 0}], ids=["resamples", "level_1", "level_0"]
)
def test_bootstrap_rejects_bad_settings(kwargs):
    with pytest.raises(ValueError):
        bootstrap_ci([True], [False], **kwargs)


def test_docstring_examples():
    result = doctest.testmod(statistics)
    assert result.attempted > 0 and result.failed == 0
