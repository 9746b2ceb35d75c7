"""Report math on hand-built records: per-arm counts, McNemar pairs and verdicts, rendering."""

from __future__ import annotations

import importlib.util
import json

import pytest

from posttrain.errors import UserError
from posttrain.evaluation.report import build_report, pairwise, plot_accuracy, render_markdown, summarize_arm, wilson_interval

N = 12


def records(arm, strict_ids, loose_ids, **overrides):
    rows = [{"id": f"q{i}", "arm": arm, "strict": i in strict_ids, "loose": i in loose_ids, "format": 1.0,
             "completion_tokens": 10, "finish_reason": "stop", "cached": False} for i in range(N)]
    for i, fields in overrides.items():
        rows[int(i[1:])].update(fields)
    return rows


# strict: A right on q0-q3; B on q0-q2 and q6-q11 (fixes 6, breaks q3); C on everything.
# loose:  A and B right everywhere, C nowhere.
ALL = set(range(N))
RECORDS = {
    "A": records("A", {0, 1, 2, 3}, ALL, q1={"format": 0.5}, q2={"format": 0.5, "finish_reason": "length"},
                 q3={"finish_reason": "length"}, q4={"completion_tokens": None}),
    "B": records("B", {0, 1, 2, *range(6, 12)}, ALL),
    "C": records("C", ALL, set()),
}
ARMS = [{"name": name, "spec": f"model-{name.lower()}"} for name in RECORDS]


def test_wilson_interval_matches_hand_computed_bounds():
    # 0/10 at 95%: upper bound z^2 / (n + z^2) = 3.8415 / 13.8415
    assert wilson_interval(0, 10) == (0.0, pytest.approx(0.27753, abs=1e-5))
    low, high = wilson_interval(10, 10)
    assert (low, high) == (pytest.approx(1 - 0.27753, abs=1e-5), 1.0)
    assert wilson_interval(5, 10)[0] == pytest.approx(1 - wilson_interval(5, 10)[1])
    assert wilson_interval(5, 10, alpha=0.01)[0] < wilson_interval(5, 10, alpha=0.05)[0]


def test_summary_counts_accuracy_format_tokens_truncation_and_errors():
    row = summarize_arm(ARMS[0], RECORDS["A"])
    assert (row["arm"], row["spec"], row["n"]) == ("A", "model-a", 12)
    assert (row["strict_correct"], row["strict_acc"]) == (4, pytest.approx(4 / 12))
    assert (row["loose_correct"], row["loose_acc"]) == (12, 1.0)
    assert row["format_mean"] == pytest.approx((10 * 1.0 + 2 * 0.5) / 12)
    assert row["completion_tokens_mean"] == 10  # an answer without a token count is left out of the mean
    assert (row["truncated"], row["errors"], row["cached"]) == (2, 0, 0)
    assert row["strict_ci"] == list(wilson_interval(4, 12))


def test_pairwise_covers_every_pair_and_metric_with_hand_computed_counts():
    rows = {(r["metric"], r["arm_a"], r["arm_b"]): r for r in pairwise(RECORDS, alpha=0.05)}
    assert list(rows) == [("strict", "A", "B"), ("loose", "A", "B"), ("strict", "A", "C"), ("loose", "A", "C"),
                          ("strict", "B", "C"), ("loose", "B", "C")]

    ab = rows["strict", "A", "B"]
    assert (ab["fixed"], ab["broken"]) == (6, 1)
    assert ab["p_value"] == pytest.approx(2 * (1 + 7) / 2**7)  # 2 * P(X <= 1), X ~ Bin(7, 1/2)
    assert ab["verdict"] == "no measurable difference"
    assert ab["delta"] == pytest.approx(5 / 12)

    ac = rows["strict", "A", "C"]
    assert (ac["fixed"], ac["broken"], ac["p_value"]) == (8, 0, 2 / 2**8)
    assert ac["verdict"] == "significant improvement"
    assert ac["ci_low"] > 0  # significant, so the interval excludes 0

    loose_ac = rows["loose", "A", "C"]
    assert (loose_ac["fixed"], loose_ac["broken"], loose_ac["verdict"]) == (0, 12, "significant regression")

    bc = rows["strict", "B", "C"]
    assert (bc["fixed"], bc["broken"], bc["p_value"]) == (3, 0, 0.25)
    assert rows["loose", "A", "B"]["verdict"] == "no measurable difference"
    assert rows["loose", "A", "B"]["p_value"] == 1.0


def test_a_stricter_alpha_changes_the_verdict_not_the_counts():
    strict_ac = next(r for r in pairwise(RECORDS, alpha=0.005) if (r["metric"], r["arm_b"], r["arm_a"]) == ("strict", "C", "A"))
    assert (strict_ac["fixed"], strict_ac["broken"], strict_ac["verdict"]) == (8, 0, "no measurable difference")


def test_pairs_are_matched_by_id_not_by_position():
    shuffled = list(reversed(RECORDS["B"]))
    rows = pairwise({"A": RECORDS["A"], "B": shuffled})
    assert (rows[0]["fixed"], rows[0]["broken"]) == (6, 1)
    with pytest.raises(ValueError, match="arms 'A' and 'B' answered different items"):
        pairwise({"A": RECORDS["A"], "B": RECORDS["B"][:-1]})


def test_report_renders_markdown_tables_and_json():
    steps = {"run": [{"step": 0, "arm": "A"}, {"step": 10, "arm": "B"}, {"step": "final", "arm": "C"}]}
    report = build_report(ARMS, RECORDS, task="arithmetic", alpha=0.05, settings={"decoding": "greedy"}, steps=steps)
    assert json.loads(json.dumps(report)) == report
    assert [a["arm"] for a in report["arms"]] == ["A", "B", "C"] and report["n"] == 12
    md = render_markdown(report)
    assert "## arithmetic: 12 items (decoding=greedy)" in md
    assert "| A | `model-a` | 12 | 33.3% (4/12) [13.8, 60.9] | 100.0% (12/12) [75.8, 100.0] | 0.92 | 10.0 | 2 | 0 |" in md
    assert "| 10 | B | 75.0% | 100.0% | 1.00 |" in md and "| final | C | 100.0% | 0.0% | 1.00 |" in md
    assert "| strict | A | C | 12 | 33.3% | 100.0% | +66.7 pts |" in md
    assert "| 8 | 0 | 0.00781 | significant improvement |" in md
    assert "| loose | A | C | 12 | 100.0% | 0.0% | -100.0 pts | [-100.0, -47.1] | 0 | 12 | 0.000488 | significant regression |" in md
    with pytest.raises(UserError, match="--alpha 1.5: must be between 0 and 1"):
        build_report(ARMS, RECORDS, task="t", alpha=1.5, settings={})


def test_cached_arms_are_marked_in_the_table():
    cached = [{**r, "cached": True} for r in RECORDS["A"]]
    md = render_markdown(build_report(ARMS[:1], {"A": cached}, task="t", alpha=0.05, settings={}))
    assert "| A (cached) |" in md


def test_plot_draws_a_png_or_says_how_to_install_matplotlib(tmp_path):
    report = build_report(ARMS, RECORDS, task="arithmetic", alpha=0.05, settings={})
    target = tmp_path / "acc.png"
    if importlib.util.find_spec("matplotlib") is None:
        with pytest.raises(UserError, match="pip install matplotlib"):
            plot_accuracy(report, str(target))
        assert not target.exists()
    else:
        plot_accuracy(report, str(target))
        assert target.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def failing(arm, rows, ids):
    """`rows` with the requests of `ids` failed: no answer, scored wrong on both metrics as the scorer leaves them."""
    return [{**r, "strict": False, "loose": False, "finish_reason": "error", "completion_tokens": None, "error": "HTTP 500"}
            if int(r["id"][1:]) in ids else r for r in rows]


def test_failed_requests_are_left_out_of_accuracy_not_scored_wrong():
    row = summarize_arm(ARMS[1], failing("B", RECORDS["B"], {0, 6, 7}))  # B was right on all three
    assert (row["n"], row["items"], row["errors"]) == (9, 12, 3)
    assert (row["strict_correct"], row["strict_acc"]) == (6, pytest.approx(6 / 9))
    assert (row["loose_correct"], row["loose_acc"]) == (9, 1.0)
    assert row["strict_ci"] == list(wilson_interval(6, 9))


def test_an_item_either_arm_failed_on_leaves_the_pair_for_both_and_many_failures_withhold_the_verdict():
    a, c = failing("A", RECORDS["A"], {0}), failing("C", RECORDS["C"], {5})
    rows = {(r["metric"], r["arm_a"], r["arm_b"]): r for r in pairwise({"A": a, "C": c}, alpha=0.05)}
    strict = rows["strict", "A", "C"]
    assert (strict["n"], strict["excluded"]) == (10, 2)
    assert (strict["fixed"], strict["broken"]) == (7, 0)  # q5 (A wrong, C right) is gone for both; q0 (both right) too
    assert strict["verdict"] == "no verdict: 2 of 12 items (16.7%) failed in A or B, more than 5%"
    allowed = {(r["metric"], r["arm_a"], r["arm_b"]): r for r in pairwise({"A": a, "C": c}, alpha=0.05, max_error_share=0.2)}
    assert allowed["strict", "A", "C"]["verdict"] == "significant improvement"  # p = 2 / 2^7
    assert allowed["strict", "A", "C"]["p_value"] == pytest.approx(2 / 2**7)


def test_an_outage_is_not_a_regression():
    """Every request of B rate-limited (--on-error continue): before, 0.0% (0/12) and 'significant regression'."""
    outage = failing("B", RECORDS["B"], set(range(N)))
    report = build_report(ARMS[:2], {"A": RECORDS["A"], "B": outage}, task="t", alpha=0.05, settings={})
    assert all(c["verdict"] == "no verdict: every one of the 12 items failed in A or B" for c in report["comparisons"])
    assert report["arms"][1]["n"] == 0 and report["arms"][1]["errors"] == 12
    md = render_markdown(report)
    assert "| B | `model-b` | 0 | - (no item scored) | - (no item scored) |" in md and "significant regression" not in md
    assert "| strict | A | B | 0 (12 left out) | - |" in md and "not counted as wrong answers" in md


def test_seed_groups_leave_out_items_any_seed_failed_on():
    arms = [{"name": "A", "spec": "a"}, {"name": "G@run-0", "spec": "g0", "group": "G"}, {"name": "G@run-1", "spec": "g1", "group": "G"}]
    records_by_arm = {"A": RECORDS["A"], "G@run-0": failing("G@run-0", RECORDS["C"], {11}), "G@run-1": RECORDS["C"]}
    report = build_report(arms, records_by_arm, task="t", alpha=0.05, settings={}, max_error_share=0.1)
    pooled = next(c for c in report["pooled_comparisons"] if c["metric"] == "strict")
    assert pooled["excluded"] == 1 and pooled["verdict"] != "" and not pooled["verdict"].startswith("no verdict")
    group = report["seed_groups"][0]
    assert group["strict"]["per_seed"] == [1.0, 1.0]  # seed 0's failed item is not a wrong answer
