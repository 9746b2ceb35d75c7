"""`held_out_regression`: held-out accuracy fell below step 0's, by more than repeated looks explain.

A run with a `held_out:` section scores the same items at step 0 and at every evaluation after it
(posttrain.algorithms.held_out), and each evaluation tests two metrics, strict and loose, with an
exact McNemar test against step 0. Testing 2 x K times at p < 0.05 makes a false alarm likely in a
run whose accuracy never changes: in simulation, 7% of runs at 100 items x 10 evaluations and
21-25% at 200 items x 25-50 (tests/monitoring/test_held_out_fall.py). So the flag spends its alpha
over every planned look (Bonferroni): each of the 2 x K tests runs at alpha / (2 K), and by the
union bound the chance that such a run raises the flag at any look is at most alpha, however the
looks depend on each other (the exact test is conservative, which only lowers it).

K is the number of evaluations the run's schedule plans after step 0 (`held_out/looks` in each
record: every `held_out.every` steps and the last). A record without it (metrics.jsonl of an older
run) spends alpha * 6 / (pi^2 i^2) at its i-th look, a series that sums to alpha over any number
of looks. A run continued past its schedule plans its new looks afresh: the bound then holds for
each schedule, at most alpha per extension.

The flag fires once, at the first fall past the bound; if a later evaluation is back at or above
step 0 on the metric that fell, the flag says so (a dip, not a trend).
"""

from __future__ import annotations

import math

ALPHA = 0.05  # the family-wise false-alarm rate over all the run's looks and both metrics
PREFIX = "held_out/"  # keys of the records posttrain.algorithms.held_out logs (one record per evaluation)
METRICS = ("strict", "loose")
LOOKS_KEY = f"{PREFIX}looks"


def planned_looks(max_steps: int, every: int) -> int:
    """Evaluations after step 0 that a schedule of `max_steps` plans: every `every` steps, and the last.

    >>> planned_looks(80, 20), planned_looks(90, 20), planned_looks(5, 20)
    (4, 5, 1)
    """
    return max_steps // every + (1 if max_steps % every else 0)


def per_test_alpha(look: int, looks: int | None) -> float:
    """The alpha each of the two tests of the `look`-th evaluation (1-based) spends.

    >>> per_test_alpha(3, 25)
    0.001
    """
    if looks:
        return ALPHA / (len(METRICS) * looks)
    return ALPHA * 6 / (math.pi ** 2 * look ** 2) / len(METRICS)


def _number(value) -> float | None:
    return float(value) if isinstance(value, (int, float)) and not isinstance(value, bool) else None


class HeldOutFall:
    """Fed the held-out records one at a time (the first is step 0's); `fired()` is (step, detail) once the flag fired."""

    def __init__(self):
        self.start: dict | None = None
        self.look = 0
        self.fall: tuple[str, int, str] | None = None  # (metric, step, detail) of the first fall past the bound
        self.recovery: str | None = None

    def add(self, record: dict) -> None:
        if self.start is None:
            self.start = record
            return
        self.look += 1
        if self.fall is None:
            self._test(record)
        elif self.recovery is None:
            metric, _, _ = self.fall
            now, then = _number(record.get(PREFIX + metric)), _number(self.start.get(PREFIX + metric))
            if None not in (now, then) and now >= then:
                self.recovery = (f"; recovered at step {record.get('step', 0)}: {metric} {100 * now:.1f}%, at or above step "
                                 f"{self.start.get('step', 0)}'s {100 * then:.1f}%")

    def _test(self, record: dict) -> None:
        looks = record.get(LOOKS_KEY)
        looks = looks if isinstance(looks, int) and looks >= self.look else None
        alpha = per_test_alpha(self.look, looks)
        step = record.get("step", 0)
        for metric in METRICS:
            key = PREFIX + metric
            now, then, p = _number(record.get(key)), _number(self.start.get(key)), _number(record.get(f"{key}_p"))
            fixed, broken = record.get(f"{key}_fixed"), record.get(f"{key}_broken")
            if None in (now, then, p) or not isinstance(fixed, int) or not isinstance(broken, int):
                continue
            if p < alpha and broken > fixed:
                plan = (f"{looks} planned evaluations" if looks else f"evaluation {self.look}, series spending")
                detail = (f"held-out {metric} accuracy {100 * now:.1f}% at step {step}, against {100 * then:.1f}% at step "
                          f"{self.start.get('step', 0)} on the same {record.get(PREFIX + 'n')} items ({fixed} fixed, {broken} "
                          f"broken, exact McNemar p = {p:.2g} < {alpha:.2g}: alpha {ALPHA} over 2 metrics x {plan}, Bonferroni)")
                self.fall = (metric, step, detail)
                return

    def fired(self) -> tuple[int, str] | None:
        if self.fall is None:
            return None
        _, step, detail = self.fall
        return step, (detail + (self.recovery or "") + "; lower the learning rate, check what the rewards pay for, or keep "
                      "the best model (output_dir/best).")
