"""The power analysis: exact McNemar power against a simulation of the test itself, and the items it asks for."""

from __future__ import annotations

import math
import random

import pytest

from posttrain.evaluation.statistics import mcnemar_exact
from posttrain.experiment.power import TARGET, items_needed, mcnemar_power, rule_power


@pytest.mark.parametrize("n, effect, discordance", [(300, 0.05, 0.15), (120, 0.1, 0.2), (1000, 0.02, 0.1)])
def test_exact_power_agrees_with_simulating_the_test(n, effect, discordance):
    draws = 3000
    rng = random.Random(n)
    fix, brk = (discordance + effect) / 2, (discordance - effect) / 2
    hits = 0
    for _ in range(draws):
        fixed = broken = 0
        for _ in range(n):
            u = rng.random()
            fixed += u < fix
            broken += fix <= u < fix + brk
        hits += fixed > broken and mcnemar_exact(fixed, broken) < 0.05
    power = mcnemar_power(n, effect, discordance, 0.05)
    # a simulated share is within 4 standard errors of the true power (false failure about 1 in 16,000)
    assert abs(hits / draws - power) <= 4 * math.sqrt(power * (1 - power) / draws) + 1e-9


def test_items_needed_is_the_fewest_that_reach_the_target():
    expected = {"effect": 0.05, "discordance": 0.15}
    n = items_needed(1, "per_seed", 0.05, expected)
    assert rule_power(n, 1, "per_seed", 0.05, expected) >= TARGET
    assert rule_power(int(n * 0.98), 1, "per_seed", 0.05, expected) < TARGET
    # every one of 3 seeds significant asks for more items than one seed, and a Holm-corrected alpha more still
    assert items_needed(3, "per_seed", 0.05, expected) > n
    assert items_needed(1, "per_seed", 0.05 / 4, expected) > n


def test_no_power_without_an_effect_to_find():
    assert mcnemar_power(300, 0.0, 0.15, 0.05) < 0.05  # the one-sided share of a two-sided test's false positives
    assert mcnemar_power(300, 0.10, 0.15, 0.05) > mcnemar_power(300, 0.05, 0.15, 0.05)
