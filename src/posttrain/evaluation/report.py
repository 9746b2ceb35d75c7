"""Turn per-sample records into the answer to "did the change really help?": tables and JSON.

    report = build_report(arms, records_by_arm, task="gsm8k", alpha=0.05, settings={...})
    print(render_markdown(report)); json.dumps(report)

* Per arm: n (the items scored), strict and loose accuracy with their count and a Wilson confidence
  interval, mean format score, mean completion tokens, how many answers hit the token limit, failed
  requests.
* A failed request (an API error under ``--on-error continue``) is not a wrong answer: the model never
  answered. It is left out of its arm's accuracy, and an item a pair's A or B failed on is left out of
  that pair's comparison (for both arms: dropping it from one side only would compare different
  items). When more than ``max_error_share`` of a pair's items are left out, the pair gets no verdict:
  an outage that hit the hard items (long prompts time out first) can make either arm look better.
* Every pair of arms (A listed before B), for strict and for loose: ``fixed`` (A wrong, B right),
  ``broken`` (A right, B wrong), the exact McNemar p-value on those discordant items, the verdict
  at ``alpha`` and the CI (level 1 - alpha) of the accuracy difference B - A that inverts the same
  exact test, so it excludes 0 exactly when the verdict is significant
  (``posttrain.evaluation.statistics``). Arms are paired item by item on ``id``.
* Optionally accuracy over training steps, for arms that are checkpoints of one run.

Every comparison is tested at ``alpha`` on its own; with many arms, expect about ``alpha`` of the
"significant" verdicts between equally good models to be chance.
"""

from __future__ import annotations

import itertools
from dataclasses import asdict
from statistics import fmean

from posttrain.errors import UserError
from posttrain.evaluation.pooled import pooled_comparison, seed_spread
from posttrain.evaluation.statistics import paired_comparison, wilson_interval

__all__ = ["METRICS", "MAX_ERROR_SHARE", "build_report", "pairwise", "plot_accuracy", "render_markdown", "summarize_arm",
           "wilson_interval"]

METRICS = ("strict", "loose")
# Above this share of failed items a pair's verdict is withheld. 5%: a few lost requests move the
# accuracy difference by less than its own CI's width on any eval set of a few hundred items, while
# a larger share is no longer a random sample of the items (timeouts and refusals cluster on long
# or odd prompts) and can create or hide a difference on its own.
MAX_ERROR_SHARE = 0.05


def failed(record: dict) -> bool:
    """A request that failed (no answer at all), as opposed to a wrong answer."""
    return record.get("finish_reason") == "error"


def summarize_arm(arm: dict, records: list[dict], alpha: float = 0.05) -> dict:
    """One row of the per-arm table; ``arm`` holds at least ``name`` and ``spec``. Accuracy is over the
    items scored (``n``); failed requests are counted in ``errors``, not as wrong answers."""
    items = len(records)
    errors = sum(failed(r) for r in records)
    records = [r for r in records if not failed(r)]
    n = len(records)
    row = {"arm": arm["name"], "spec": arm["spec"], "n": n, "items": items}
    for metric in METRICS:
        correct = sum(bool(r[metric]) for r in records)
        row[f"{metric}_correct"] = correct
        row[f"{metric}_acc"] = correct / n if n else 0.0
        row[f"{metric}_ci"] = list(wilson_interval(correct, n, alpha))
    tokens = [r["completion_tokens"] for r in records if r["completion_tokens"] is not None]
    row["format_mean"] = fmean(r["format"] for r in records) if n else 0.0
    row["completion_tokens_mean"] = fmean(tokens) if tokens else None
    row["truncated"] = sum(r["finish_reason"] == "length" for r in records)
    row["errors"] = errors
    row["cached"] = sum(bool(r.get("cached")) for r in records)
    if any(r.get("prompt_form") == "plain" for r in records):
        row["prompt_form"] = "plain"  # asked without a chat template (generation/plain_prompts.py)
    counts = [r["tools"] for r in records if isinstance(r.get("tools"), dict)]
    if counts:  # generated with tools (posttrain.generation.tool_loop)
        row["tool_use"] = {"rate": sum(c.get("calls", 0) > 0 for c in counts) / len(counts),
                           "calls": sum(c.get("calls", 0) for c in counts), "errors": sum(c.get("errors", 0) for c in counts),
                           "timeouts": sum(c.get("timeouts", 0) for c in counts), "cut_off": sum(bool(c.get("cut_off")) for c in counts),
                           "turns_mean": fmean(1 + c.get("rounds", 0) for c in counts)}
    return row


def _paired_outcomes(a_name: str, a: list[dict], b_name: str, b: list[dict], metric: str) -> tuple[list[bool], list[bool]]:
    """Both arms' outcomes on the items neither failed on, in A's order."""
    by_id = {r["id"]: r for r in b}
    if len(a) != len(b) or set(by_id) != {r["id"] for r in a}:
        raise ValueError(f"arms {a_name!r} and {b_name!r} answered different items; a paired comparison needs the same ids")
    both = [(r, by_id[r["id"]]) for r in a if not failed(r) and not failed(by_id[r["id"]])]
    return [bool(x[metric]) for x, _ in both], [bool(y[metric]) for _, y in both]


def no_verdict(excluded: int, items: int, max_error_share: float) -> str | None:
    """Why a comparison gets no verdict (too many items failed in one arm or the other), or None."""
    if items and excluded == items:
        return f"no verdict: every one of the {items} items failed in A or B"
    if items and excluded / items > max_error_share:
        return f"no verdict: {excluded} of {items} items ({100 * excluded / items:.1f}%) failed in A or B, more than {100 * max_error_share:g}%"
    return None


def pairwise(records_by_arm: dict[str, list[dict]], alpha: float = 0.05, max_error_share: float = MAX_ERROR_SHARE) -> list[dict]:
    """Every pair (A before B in ``records_by_arm``'s order) x every metric: B compared with A, on the
    items both answered (``n``; ``excluded`` failed in one or both); no verdict above ``max_error_share``."""
    rows = []
    for (a_name, a), (b_name, b) in itertools.combinations(records_by_arm.items(), 2):
        for metric in METRICS:
            xs, ys = _paired_outcomes(a_name, a, b_name, b, metric)
            excluded = len(a) - len(xs)
            withheld = no_verdict(excluded, len(a), max_error_share)
            if not xs:
                rows.append({"metric": metric, "arm_a": a_name, "arm_b": b_name, "n": 0, "excluded": excluded, "verdict": withheld})
                continue
            row = {"metric": metric, "arm_a": a_name, "arm_b": b_name, **asdict(paired_comparison(xs, ys, alpha)), "excluded": excluded}
            if withheld:
                row["verdict"] = withheld
            rows.append(row)
    return rows


def _units(arms: list[dict]) -> list[tuple[str, list[str]]]:
    """(name, member arm names) in display order: a several-seed arm is one unit, any other arm its own."""
    units: list[tuple[str, list[str]]] = []
    index: dict[str, int] = {}
    for arm in arms:
        group = arm.get("group")
        if group is None:
            units.append((arm["name"], [arm["name"]]))
        elif group in index:
            units[index[group]][1].append(arm["name"])
        else:
            index[group] = len(units)
            units.append((group, [arm["name"]]))
    return units


def _aligned(records_by_arm: dict[str, list[dict]], names: list[str], ids: list, metric: str) -> list[list[bool]]:
    out = []
    for name in names:
        by_id = {r["id"]: r for r in records_by_arm[name]}
        if not set(ids) <= set(by_id):
            raise ValueError(f"arm {name!r} answered different items; a paired comparison needs the same ids")
        out.append([bool(by_id[i][metric]) for i in ids])
    return out


def _answered_by_all(records_by_arm: dict[str, list[dict]], names: list[str], ids: list) -> list:
    """The ids no arm of ``names`` failed on."""
    failed_ids = {r["id"] for name in names for r in records_by_arm[name] if failed(r)}
    for name in names:
        if {r["id"] for r in records_by_arm[name]} != set(ids) or len(records_by_arm[name]) != len(ids):
            raise ValueError(f"arm {name!r} answered different items; a paired comparison needs the same ids")
    return [i for i in ids if i not in failed_ids]


def seed_groups(arms: list[dict], records_by_arm: dict[str, list[dict]], alpha: float,
                max_error_share: float = MAX_ERROR_SHARE) -> tuple[list[dict], list[dict]]:
    """Several-seed arms: per-group rows (per-seed accuracy, mean, spread) and pooled comparisons
    (CMH by item, ``posttrain.evaluation.pooled``) of every pair of units where one has several seeds."""
    if not any(arm.get("group") for arm in arms):
        return [], []
    units = _units(arms)
    specs = {arm["name"]: arm["spec"] for arm in arms}
    grouped = {arm["group"] for arm in arms if arm.get("group")}
    ids = [r["id"] for r in records_by_arm[arms[0]["name"]]]
    groups = []
    for name, members in units:
        if name not in grouped:
            continue
        row = {"arm": name, "seeds": len(members), "members": [{"arm": m, "spec": specs[m]} for m in members]}
        for metric in METRICS:
            accs = [sum(o) / len(o) if o else 0.0 for o in
                    (_aligned(records_by_arm, [m], _answered_by_all(records_by_arm, [m], ids), metric)[0] for m in members)]
            row[metric] = {"per_seed": accs, **seed_spread(accs)}
        groups.append(row)
    rows = []
    for (a_name, a_members), (b_name, b_members) in itertools.combinations(units, 2):
        if a_name not in grouped and b_name not in grouped:
            continue  # two single models: the exact McNemar table has them
        answered = _answered_by_all(records_by_arm, a_members + b_members, ids)
        withheld = no_verdict(len(ids) - len(answered), len(ids), max_error_share)
        for metric in METRICS:
            if not answered:
                rows.append({"metric": metric, "arm_a": a_name, "arm_b": b_name, "excluded": len(ids), "verdict": withheld})
                continue
            result = pooled_comparison(_aligned(records_by_arm, a_members, answered, metric),
                                       _aligned(records_by_arm, b_members, answered, metric), alpha)
            rows.append({"metric": metric, "arm_a": a_name, "arm_b": b_name, **asdict(result), "excluded": len(ids) - len(answered)})
            if withheld:
                rows[-1]["verdict"] = rows[-1]["conservative_verdict"] = withheld
    return groups, rows


def build_report(arms: list[dict], records_by_arm: dict[str, list[dict]], *, task: str, alpha: float,
                 settings: dict, steps: dict[str, list[dict]] | None = None, max_error_share: float = MAX_ERROR_SHARE) -> dict:
    """The whole report as JSON-ready data.

    ``arms``: dicts with ``name`` and ``spec``, in display order. ``steps``: run name -> rows
    ``{"step": int | "final", "arm": name}`` for accuracy over training steps.
    """
    if not 0 < alpha < 1:
        raise UserError(f"--alpha {alpha}: must be between 0 and 1 (0.05 is the usual choice)")
    if not 0 <= max_error_share < 1:
        raise UserError(f"--max-error-share {max_error_share}: must be in [0, 1) (the share of items that may fail before a verdict is withheld)")
    summaries = [summarize_arm(arm, records_by_arm[arm["name"]], alpha) for arm in arms]
    # seeds of a several-seed arm are compared pooled (seed_groups), not pair by pair
    ordered = {arm["name"]: records_by_arm[arm["name"]] for arm in arms if not arm.get("group")}
    groups, pooled = seed_groups(arms, records_by_arm, alpha, max_error_share)
    return {
        "task": task,
        "n": summaries[0]["items"] if summaries else 0,
        "alpha": alpha,
        "max_error_share": max_error_share,
        "settings": settings,
        "arms": summaries,
        "comparisons": pairwise(ordered, alpha, max_error_share),
        "seed_groups": groups,
        "pooled_comparisons": pooled,
        "steps": steps or {},
    }


def _pct(x: float) -> str:
    return f"{100 * x:.1f}%"


def _acc_cell(row: dict, metric: str) -> str:
    if not row["n"]:
        return "- (no item scored)"
    low, high = row[f"{metric}_ci"]
    return f"{_pct(row[f'{metric}_acc'])} ({row[f'{metric}_correct']}/{row['n']}) [{100 * low:.1f}, {100 * high:.1f}]"


def _table(header: list[str], rows: list[list[str]]) -> str:
    lines = ["| " + " | ".join(header) + " |", "|" + "|".join("---" for _ in header) + "|"]
    lines += ["| " + " | ".join(map(str, row)) + " |" for row in rows]
    return "\n".join(lines)


def render_markdown(report: dict) -> str:
    """The per-arm table, the paired-comparison table and (if any) the steps tables, as markdown."""
    level = f"{100 * (1 - report['alpha']):g}%"
    settings = ", ".join(f"{k}={v}" for k, v in report["settings"].items())
    parts = [f"## {report['task']}: {report['n']} items ({settings})", ""]
    arm_rows = [[
        r["arm"] + (" (cached)" if r["cached"] == r.get("items", r["n"]) and r["n"] else ""), f"`{r['spec']}`", r["n"],
        _acc_cell(r, "strict"), _acc_cell(r, "loose"), f"{r['format_mean']:.2f}",
        "-" if r["completion_tokens_mean"] is None else f"{r['completion_tokens_mean']:.1f}",
        r["truncated"], r["errors"],
    ] for r in report["arms"]]
    parts += [_table(["arm", "model", "n scored", f"strict acc ({level} CI)", f"loose acc ({level} CI)", "format",
                      "tokens", "hit max tokens", "errors"], arm_rows), ""]
    if any(r["errors"] for r in report["arms"]):
        parts += ["errors: failed requests (the model never answered). They are left out of n scored and of the "
                  "accuracy, not counted as wrong answers; re-running the command retries them (failures are not cached).", ""]
    plain = [r["arm"] for r in report["arms"] if r.get("prompt_form") == "plain"]
    if plain:
        parts += [f"prompts: {', '.join(plain)} asked in plain text, without a chat template (the model has none, or "
                  "--no-chat-template): the system prompt, then 'User: <question>' and 'Assistant:', zero-shot; each answer "
                  "ends where the model began the user's next turn."
                  + (" The other arms were asked through their chat templates." if len(plain) < len(report["arms"]) else ""), ""]
    parts += ["strict: the single <answer> block equals gold (what the GRPO answer_match reward pays for; math: equal "
              "as mathematics by math-verify, what math_match pays for); loose: the last number (mmlu: choice letter; math: "
              "the final answer) anywhere equals gold, format ignored. "
              "format: mean format_score in [0, 1].", ""]
    tool_rows = [r for r in report["arms"] if r.get("tool_use")]
    if tool_rows:
        parts += ["## tool use", ""]
        parts += [_table(["arm", "items calling a tool", "calls", "failed calls", "timeouts", "turns per item", "cut off at the turn limit"], [
            [r["arm"], f"{_pct(t['rate'])} ({round(t['rate'] * r['n'])}/{r['n']})", t["calls"],
             f"{t['errors']} ({_pct(t['errors'] / t['calls']) if t['calls'] else '-'})", t["timeouts"], f"{t['turns_mean']:.2f}",
             t["cut_off"]] for r in tool_rows for t in [r["tool_use"]]]), ""]
        parts += ["Every call and result is in the samples (`turns`); failed calls reached the model as the tool's error.", ""]
    for group, rows in report["steps"].items():
        by_arm = {r["arm"]: r for r in report["arms"]}
        parts += [f"### accuracy over training steps: {group}", ""]
        parts += [_table(["step", "arm", "strict", "loose", "format"], [
            [row["step"], row["arm"], _pct(by_arm[row["arm"]]["strict_acc"]), _pct(by_arm[row["arm"]]["loose_acc"]),
             f"{by_arm[row['arm']]['format_mean']:.2f}"] for row in rows]), ""]
    if report["comparisons"]:
        parts += [f"## paired comparison: B against A on the same items (exact McNemar, alpha={report['alpha']:g})", ""]
        parts += [_table(["metric", "A", "B", "n", "acc A", "acc B", "B - A", f"{level} CI of B - A", "fixed", "broken",
                          "p-value", "verdict"], [_comparison_cells(c) for c in report["comparisons"]]), ""]
        if any(c.get("excluded") for c in report["comparisons"]):
            parts += [f"n: the items both A and B answered; an item either failed on (a failed request, not a wrong answer) "
                      f"is left out for both. Above {100 * report.get('max_error_share', MAX_ERROR_SHARE):g}% left out, no verdict.", ""]
        if any(c.get("ci_note") for c in report["comparisons"]):
            parts += ["*: every discordant item went one way (or there was none), so the conditional interval ends at the "
                      "observed difference on that side; that bound is Newcombe's unconditional paired interval (1998, "
                      "method 10) instead. The bound nearer 0, and the verdict, are the exact test's.", ""]
        parts += ["fixed: A wrong, B right; broken: A right, B wrong. Only these discordant items carry evidence; "
                  "the verdict is significant when p < alpha, and then (only then) the CI, which inverts the same exact test "
                  "on the discordant items, excludes 0. Each pair is tested on its own (no correction for "
                  "multiple comparisons).", ""]
    parts += _render_seed_groups(report)
    if report.get("pass_at_k"):
        from posttrain.evaluation.pass_at_k import render

        parts += [render(report["pass_at_k"])]
    return "\n".join(parts)


def _comparison_cells(c: dict) -> list:
    n = str(c["n"]) + (f" ({c['excluded']} left out)" if c.get("excluded") else "")
    if not c["n"]:
        return [c["metric"], c["arm_a"], c["arm_b"], n, "-", "-", "-", "-", "-", "-", "-", c["verdict"]]
    mark = " *" if c.get("ci_note") else ""
    return [c["metric"], c["arm_a"], c["arm_b"], n, _pct(c["acc_a"]), _pct(c["acc_b"]), f"{100 * c['delta']:+.1f} pts",
            f"[{100 * c['ci_low']:+.1f}, {100 * c['ci_high']:+.1f}]{mark}", c["fixed"], c["broken"], f"{c['p_value']:.3g}", c["verdict"]]


def _spread_cell(stats: dict) -> str:
    sd = "-" if stats["sd"] is None else f"{100 * stats['sd']:.1f}"
    return f"{_pct(stats['mean'])} (sd {sd}, {100 * stats['min']:.1f}-{100 * stats['max']:.1f})"


def _seed_cell(c: dict) -> str:
    if c.get("seed_statistic") is None:
        return "-"
    form = " one-sample" if c["seed_test"] == "one-sample" else ""
    return f"{c['seed_statistic']:+.2f} ({c['seed_df']:.1f}{form})"


def _render_seed_groups(report: dict) -> list[str]:
    groups, pooled = report.get("seed_groups") or [], report.get("pooled_comparisons") or []
    if not groups:
        return []
    parts = ["## arms with several seeds", ""]
    parts += [_table(["arm", "seeds", "strict per seed", "strict mean (sd, range)", "loose per seed", "loose mean (sd, range)"], [
        [g["arm"], g["seeds"], ", ".join(_pct(x) for x in g["strict"]["per_seed"]), _spread_cell(g["strict"]),
         ", ".join(_pct(x) for x in g["loose"]["per_seed"]), _spread_cell(g["loose"])] for g in groups]), ""]
    parts += ["members: " + "; ".join(f"{m['arm']} = `{m['spec']}`" for g in groups for m in g["members"]), ""]
    if pooled:
        parts += [f"## pooled paired comparison across seeds: B against A (Cochran-Mantel-Haenszel by item; seed-level "
                  f"Welch's t on per-seed accuracy; alpha={report['alpha']:g})", ""]
        parts += [_table(["metric", "A", "B", "seeds A/B", "mean acc A", "mean acc B", "B - A", "informative items",
                          "CMH chi2", "CMH p", "seed-level t (df)", "seed-level p", "item-level p", "CMH verdict",
                          "verdict (both tests)"], [
            [c["metric"], c["arm_a"], c["arm_b"], f"{c['seeds_a']}/{c['seeds_b']}", _pct(c["acc_a"]), _pct(c["acc_b"]),
             f"{100 * c['delta']:+.1f} pts", c["informative_items"], f"{c['statistic']:.3g}", f"{c['p_value']:.3g}",
             _seed_cell(c), "-" if c.get("seed_p_value") is None else f"{c['seed_p_value']:.3g}",
             "-" if c.get("item_p_value") is None else f"{c['item_p_value']:.3g}", c["verdict"],
             c["conservative_verdict"]] if "p_value" in c else [c["metric"], c["arm_a"], c["arm_b"], *["-"] * 10, c["verdict"],
                                                               c["verdict"]] for c in pooled]), ""]
        parts += ["CMH: each item is a stratum, arm x correct counted over each arm's seeds; items on which every seed of both "
                  "arms agrees carry no evidence (informative items are the rest). With one seed per arm this is McNemar's "
                  "chi-square. Chi-square(1) approximation, no continuity correction. It counts answers, so it treats seed-to-seed "
                  "variation as per-item noise. Seed-level: Welch's t-test on the per-seed accuracies, each training run one "
                  "observation (one-sample t against an arm that is a single model). Item-level: each item one observation, its "
                  "accuracy averaged over each arm's seeds; a two-sided sign-flip test of the mean difference (20,000 draws, "
                  "a fixed generator), the test to quote when the claim is about items. A single model enters every test "
                  "once, however many seeds the other arm has. verdict (both tests): significant only "
                  "when both p-values are below alpha; claims across seeds follow it. No multiple-comparison correction.", ""]
        notes = sorted({f"{c['arm_a']} vs {c['arm_b']}: {c['seed_note']}" for c in pooled if c.get("seed_note")})
        parts += [f"seed-level test undefined for {n}" for n in notes] + ([""] if notes else [])
    return parts


def plot_accuracy(report: dict, path: str) -> None:
    """Bar chart of strict and loose accuracy per arm with their confidence intervals, saved to ``path``."""
    try:
        import matplotlib

        matplotlib.use("Agg")  # files only: works without a display
        import matplotlib.pyplot as plt
    except ImportError:
        raise UserError(f"--plot {path}: drawing needs matplotlib, which is not installed; run "
                        "'pip install matplotlib', or drop --plot (report.md and report.json have the numbers)") from None
    arms = report["arms"]
    width = 0.4
    fig, ax = plt.subplots(figsize=(max(4.0, 1.2 * len(arms) + 1), 3.5))
    for offset, metric in ((-width / 2, "strict"), (width / 2, "loose")):
        acc = [100 * r[f"{metric}_acc"] for r in arms]
        err = [[a - 100 * r[f"{metric}_ci"][0] for a, r in zip(acc, arms)],
               [100 * r[f"{metric}_ci"][1] - a for a, r in zip(acc, arms)]]
        ax.bar([i + offset for i in range(len(arms))], acc, width, yerr=err, capsize=3, label=metric)
    ax.set_xticks(range(len(arms)), [r["arm"] for r in arms], rotation=30, ha="right")
    ax.set_ylabel(f"accuracy (%), {100 * (1 - report['alpha']):g}% CI")
    ax.set_ylim(0, 100)
    ax.set_title(f"{report['task']}, n={report['n']}")
    ax.legend()
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)
