"""The pooled multi-seed test (CMH stratified by item) against statsmodels and against McNemar."""

import random

import numpy as np
import pytest
from scipy.stats import chi2
from statsmodels.stats.contingency_tables import StratifiedTable, mcnemar

from posttrain.evaluation.pooled import cmh_test, item_tables, pooled_comparison, seed_spread


def random_arm(rng, seeds, items, p):
    return [[rng.random() < p[i] for i in range(items)] for _ in range(seeds)]


def statsmodels_cmh(tables):
    """statsmodels wants 2x2xK: rows arm A/B, columns correct/wrong; it needs informative strata only."""
    informative = [(a, n_a, b, n_b) for a, n_a, b, n_b in tables if 0 < a + b < n_a + n_b]
    arr = np.array([[[a, n_a - a], [b, n_b - b]] for a, n_a, b, n_b in informative], dtype=float).transpose(1, 2, 0)
    result = StratifiedTable(arr).test_null_odds(correction=False)
    return result.statistic, result.pvalue


@pytest.mark.parametrize("trial", range(40))
def test_cmh_equals_statsmodels_on_random_tables(trial):
    rng = random.Random(trial)
    items = rng.randint(5, 200)
    difficulty = [rng.random() for _ in range(items)]
    shift = rng.uniform(-0.3, 0.3)
    a = random_arm(rng, rng.randint(1, 5), items, difficulty)
    b = random_arm(rng, rng.randint(1, 5), items, [min(1, max(0, d + shift)) for d in difficulty])
    tables = item_tables(a, b)
    if not any(0 < x + y < na + nb for x, na, y, nb in tables):
        pytest.skip("no informative item in this draw")
    statistic, p = cmh_test(tables)
    ref_stat, ref_p = statsmodels_cmh(tables)
    assert statistic == pytest.approx(ref_stat, rel=1e-9)
    # statsmodels computes p as 1 - cdf, which loses digits below ~1e-12; the tail itself agrees to 1e-9
    assert p == pytest.approx(ref_p, abs=1e-12)
    assert p == pytest.approx(chi2.sf(ref_stat, 1), rel=1e-9)


@pytest.mark.parametrize("trial", range(20))
def test_one_seed_per_arm_is_mcnemar_chi_square(trial):
    rng = random.Random(100 + trial)
    items = rng.randint(10, 300)
    a = random_arm(rng, 1, items, [0.5] * items)
    b = random_arm(rng, 1, items, [0.6] * items)
    fixed = sum(1 for x, y in zip(a[0], b[0]) if not x and y)
    broken = sum(1 for x, y in zip(a[0], b[0]) if x and not y)
    reference = mcnemar(np.array([[0, broken], [fixed, 0]]), exact=False, correction=False)
    statistic, p = cmh_test(item_tables(a, b))
    assert statistic == pytest.approx(reference.statistic, rel=1e-12)
    assert p == pytest.approx(reference.pvalue, rel=1e-9)


def test_hand_computed_example():
    # 2 seeds each, 3 items. Item 1: A 2/2, B 0/2 -> E[a] = 2*2/4 = 1, V = 2*2*2*2/(16*3) = 1/3.
    # Item 2: A 1/2, B 1/2 -> E = 1, deviation 0, V = 1/3. Item 3: all wrong, dropped.
    statistic, p = cmh_test([(2, 2, 0, 2), (1, 2, 1, 2), (0, 2, 0, 2)])
    assert statistic == pytest.approx(1 / (2 / 3))  # (1 + 0)^2 / (1/3 + 1/3) = 1.5
    assert p == pytest.approx(0.2206713619, rel=1e-8)  # chi2(1).sf(1.5)


def test_pooled_comparison_verdicts_and_counts():
    # B fixes items 0-29 in every seed, breaks none: a clear improvement
    a = [[False] * 30 + [True] * 70 for _ in range(3)]
    b = [[True] * 100 for _ in range(3)]
    result = pooled_comparison(a, b)
    assert result.verdict == "significant improvement" and result.delta == pytest.approx(0.3)
    assert (result.seeds_a, result.seeds_b, result.n, result.informative_items) == (3, 3, 100, 30)
    assert pooled_comparison(b, a).verdict == "significant regression"
    assert pooled_comparison(a, a).p_value == 1.0 and pooled_comparison(a, a).verdict == "no measurable difference"


def test_bad_input_is_refused():
    with pytest.raises(ValueError, match="different numbers of items"):
        item_tables([[True, False]], [[True]])
    with pytest.raises(ValueError, match="no seeds"):
        item_tables([], [[True]])


def test_seed_spread():
    spread = seed_spread([0.5, 0.6, 0.7])
    assert spread["mean"] == pytest.approx(0.6) and spread["sd"] == pytest.approx(0.1)
    assert (spread["min"], spread["max"]) == (0.5, 0.7)
    assert seed_spread([0.4])["sd"] is None


def test_a_single_model_enters_the_pooled_tests_once_however_many_seeds_the_other_arm_has():
    """By construction: one deterministic start model and three seeds that each fix 12 and break 6 of its 100 answers
    (the same items: seeds that agree). Entering the start once per seed triples its answers and makes the same evidence
    look far stronger; `posttrain compare`'s report enters it once, so its CMH p is the once-entered one."""
    from posttrain.evaluation.pooled import item_level_test
    from posttrain.evaluation.report import seed_groups

    start = [i < 50 for i in range(100)]
    seed = [(i < 50 and i not in range(6)) or 50 <= i < 62 for i in range(100)]  # 12 fixed, 6 broken
    once = pooled_comparison([start], [seed] * 3)
    copied = pooled_comparison([start] * 3, [seed] * 3)
    assert copied.p_value < once.p_value / 5  # what copying would claim: the error this test guards against
    assert once.p_value == pytest.approx(0.0143, abs=1e-4) and copied.p_value == pytest.approx(0.00157, abs=1e-5)

    records = {"start": [{"id": str(i), "strict": s, "loose": s} for i, s in enumerate(start)],
               **{f"grpo@{k}": [{"id": str(i), "strict": s, "loose": s} for i, s in enumerate(seed)] for k in range(3)}}
    arms = [{"name": "start", "spec": "start"}, *({"name": f"grpo@{k}", "spec": f"s{k}", "group": "grpo"} for k in range(3))]
    _, [strict, _] = seed_groups(arms, records, alpha=0.05)
    assert (strict["seeds_a"], strict["seeds_b"]) == (1, 3)
    assert strict["p_value"] == once.p_value and strict["p_value"] > copied.p_value
    # the item as the unit: 18 items moved, 12 one way; the seeds' agreement adds nothing (CMH counts it three times
    # over, which is why the item-level test stands beside it): the exact McNemar p of 12 against 6 is 0.238
    delta, p = item_level_test([start], [seed] * 3)
    assert delta == pytest.approx(0.06) and strict["item_p_value"] == p and p == pytest.approx(0.238, abs=0.01)
