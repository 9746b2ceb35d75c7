"""held_out_regression holds its false-alarm rate over every look, and still catches a real fall.

Simulated runs feed posttrain's own health check (check_health) the records posttrain.algorithms.held_out
writes: 200 items, 25 evaluations after step 0, strict and loose, each with the exact McNemar p against
step 0. Under "no change" every evaluation redraws each item's outcome from the same per-item
probability, independently of the last look: the least correlated looks, so the most chances for a
false alarm. The old rule (p < 0.05 at every look) fires in about a fifth of such runs; the test checks
that too, so it can tell the two rules apart.
"""

from __future__ import annotations

import numpy as np
import pytest

from posttrain.evaluation.statistics import mcnemar_exact
from posttrain.monitoring.health import check_health
from posttrain.monitoring.held_out_fall import ALPHA, planned_looks

ITEMS, LOOKS, RUNS = 200, 25, 2000


def _record(step: int, now: dict, start: dict | None, looks: int | None) -> dict:
    record = {"step": step, "held_out/n": ITEMS, **({"held_out/looks": looks} if looks else {})}
    for metric, right in now.items():
        record[f"held_out/{metric}"] = float(right.mean())
        if start is not None:
            fixed, broken = int((right & ~start[metric]).sum()), int((~right & start[metric]).sum())
            record.update({f"held_out/{metric}_fixed": fixed, f"held_out/{metric}_broken": broken,
                           f"held_out/{metric}_p": mcnemar_exact(fixed, broken)})
    return record


def _run(rng, loose_p, *, looks=LOOKS, announce=True) -> list[dict]:
    """One run's held-out records: loose_p(look) gives each item's chance of a right answer at that look
    (look 0 is step 0); an answer is strict when it is right and tagged (a coin per item and look)."""
    outcomes = []
    for look in range(looks + 1):
        loose = rng.random(ITEMS) < loose_p(look)
        outcomes.append({"strict": loose & (rng.random(ITEMS) < 0.5), "loose": loose})
    return [_record(10 * look, now, outcomes[0] if look else None, looks if announce else None)
            for look, now in enumerate(outcomes)]


def _fires(records: list[dict]) -> bool:
    return any(f.name == "held_out_regression" for f in check_health(records, rl=False))


def _fires_naively(records: list[dict]) -> bool:
    """The rule before: any look, either metric, p < 0.05 and more broken than fixed."""
    return any(r.get(f"held_out/{m}_p", 1) < 0.05 and r[f"held_out/{m}_broken"] > r[f"held_out/{m}_fixed"]
               for r in records[1:] for m in ("strict", "loose"))


def test_no_true_change_raises_the_flag_in_at_most_alpha_of_runs():
    rng = np.random.default_rng(0)
    per_item = rng.uniform(0.1, 0.9, size=(RUNS, ITEMS))  # each run's items: some easy, some hard, none certain
    runs = [_run(rng, lambda look, p=p: p) for p in per_item]
    rate = sum(map(_fires, runs)) / RUNS
    naive = sum(map(_fires_naively, runs)) / RUNS
    # 2,000 runs: a rate of exactly 0.05 would be seen above 0.05 + 2 standard errors (0.0097) once in 40
    assert rate <= ALPHA, rate
    assert naive > 0.15, naive  # the simulation does produce the false alarms the old rule raised


def test_runs_without_planned_looks_spend_a_series_that_also_holds_alpha():
    """metrics.jsonl of an older run has no held_out/looks: alpha * 6 / (pi^2 i^2) at the i-th look."""
    rng = np.random.default_rng(1)
    runs = [_run(rng, lambda look, p=p: p, announce=False) for p in rng.uniform(0.1, 0.9, size=(RUNS // 2, ITEMS))]
    assert sum(map(_fires, runs)) / len(runs) <= ALPHA


def test_a_real_fall_is_still_caught():
    """Accuracy 70% -> 50% from the 5th evaluation on: the flag fires in nearly every run (a 15-point fall: about 9 in 10), never before the fall
    in most of them, and names the bound it used."""
    rng = np.random.default_rng(2)
    runs = [_run(rng, lambda look: 0.7 if look < 5 else 0.5) for _ in range(200)]
    caught = [r for r in runs if _fires(r)]
    assert len(caught) >= 0.95 * len(runs)
    flags = [next(f for f in check_health(r, rl=False) if f.name == "held_out_regression") for r in caught]
    assert sum(f.first_step >= 50 for f in flags) >= 0.95 * len(flags)
    assert "< 0.001: alpha 0.05 over 2 metrics x 25 planned evaluations, Bonferroni" in flags[0].detail


def test_the_flag_says_when_accuracy_recovers():
    start = {"strict": np.zeros(ITEMS, bool), "loose": np.arange(ITEMS) < 140}  # 70% loose
    dip = {"strict": start["strict"], "loose": np.arange(ITEMS) < 100}  # 50%: 40 broken, 0 fixed
    back = {"strict": start["strict"], "loose": np.arange(ITEMS) < 142}  # 71%
    records = [_record(0, start, None, 3), _record(10, dip, start, 3), _record(20, back, start, 3), _record(30, dip, start, 3)]
    [flag] = check_health(records, rl=False)
    assert (flag.first_step, flag.last_step) == (10, 10)
    assert "held-out loose accuracy 50.0% at step 10, against 70.0% at step 0" in flag.detail
    assert "recovered at step 20: loose 71.0%, at or above step 0's 70.0%" in flag.detail


@pytest.mark.parametrize("max_steps, every, looks", [(80, 20, 4), (81, 20, 5), (12, 2, 6), (3, 50, 1)])
def test_planned_looks_follow_the_schedule(max_steps, every, looks):
    """held_out.py evaluates at every `every` steps and at the last step: the looks the alpha is spread over."""
    assert planned_looks(max_steps, every) == looks
