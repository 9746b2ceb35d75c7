"""Every table and the verdict of an experiment, from its kept answers alone: `posttrain experiment tables DIR`.

Reads DIR/plan.yaml (the plan as locked), DIR/lock.json, DIR/meta.json, DIR/samples/ and DIR/health.json;
writes DIR/results.json and DIR/results.md, byte for byte the same on every rebuild (no clock, no path of
the machine that rebuilt them). The statistics never overstate:

* per seed: exact McNemar of each seed against the baseline (a several-seed baseline: its seed of the same
  number), with the interval `posttrain compare` gives;
* pooled: a single-model baseline (the start, a forced-format control) enters once. CMH stratified by item,
  the seed-level t-test (each run one observation) and the item-level sign-flip test (each item one
  observation, its mean over the seeds) are all reported;
* a hypothesis holds when every test its rule names is significant in the planned direction: its p is the
  largest of them (an intersection-union test, exact at alpha), and Holm adjusts those p across hypotheses
  when the plan asks.
"""

from __future__ import annotations

import json
from pathlib import Path
from statistics import fmean

from posttrain.experiment.plan import Hypothesis, Plan, load_plan

UNITS = ("strict", "loose")


def _read_jsonl(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def models(plan: Plan, out: Path) -> tuple[dict[str, list[dict[str, dict] | None]], list[str]]:
    """Each model of the plan -> its runs, one per seed in the plan's order, each {id: record} or None where that
    seed left no answers; and those missing runs by name (a partial experiment)."""
    arms = json.loads((out / "samples" / "arms.json").read_text())
    kept = {a["name"]: {r["id"]: r for r in _read_jsonl(out / "samples" / f"{a['name']}.jsonl")} for a in arms}
    runs: dict[str, list[dict[str, dict] | None]] = {}
    missing = []
    for name in ["start", "base", *plan.arms, *plan.controls]:
        seeds = plan.seeds(name)
        names = [f"{name}@run-{i}" for i in range(len(seeds))] if len(seeds) > 1 else [name]
        if name == "base" and "base" not in kept:
            continue
        runs[name] = [kept.get(n) for n in names]
        missing += [f"{name} seed {s}" for n, s in zip(names, seeds) if n not in kept]
    for name, source in plan.forced_format.items():  # strict = the source's loose: its last number put in the tags
        runs[name] = [run and {i: {**r, "strict": bool(r["loose"])} for i, r in run.items()} for run in runs.get(source, [None])]
    return runs, missing


def _ok(record: dict) -> bool:
    return not record.get("error")


def _aligned(runs: list[dict[str, dict]], ids: list[str], metric: str) -> list[list[bool]]:
    return [[bool(run[i][metric]) for i in ids] for run in runs]


def _common(*runs: dict[str, dict]) -> list[str]:
    return sorted(set.intersection(*({i for i, r in run.items() if _ok(r)} for run in runs)))


def per_seed(h: Hypothesis, plan: Plan, runs: dict, alpha: float) -> list[dict]:
    from posttrain.evaluation.statistics import paired_comparison

    arm, base = runs.get(h.arm) or [None], runs.get(h.baseline) or [None]
    seeds = max(plan.seeds(h.arm), plan.seeds(h.baseline), key=len)
    tests = []
    for k, seed in enumerate(seeds):  # seed k of a several-seed model meets seed k of the other, or its one model
        a, b = base[k] if len(base) > 1 else base[0], arm[k] if len(arm) > 1 else arm[0]
        if a is None or b is None:
            continue
        ids = _common(a, b)
        c = paired_comparison(*[[bool(run[i][h.metric]) for i in ids] for run in (a, b)], alpha=alpha)
        tests.append({"seed": seed, "n": len(ids), "baseline": c.acc_a, "arm": c.acc_b, "delta": c.delta, "fixed": c.fixed,
                      "broken": c.broken, "p": c.p_value, "ci": [c.ci_low, c.ci_high]})
    return tests


def pooled(h: Hypothesis, runs: dict, alpha: float) -> dict | None:
    from posttrain.evaluation.pooled import pooled_comparison

    arm, base = [r for r in runs.get(h.arm, []) if r], [r for r in runs.get(h.baseline, []) if r]
    if not arm or not base or len(arm) + len(base) < 3:
        return None  # one model each: the per-seed test is the whole story
    ids = _common(*arm, *base)
    c = pooled_comparison(_aligned(base, ids, h.metric), _aligned(arm, ids, h.metric), alpha=alpha)
    return {"n": len(ids), "baseline_models": len(base), "arm_models": len(arm), "baseline": c.acc_a, "arm": c.acc_b,
            "delta": c.delta, "cmh_p": c.p_value, "seed_test": c.seed_test, "seed_p": c.seed_p_value, "item_p": c.item_p_value}


def decide(plan: Plan, tests: dict[str, dict], missing: list[str]) -> dict:
    """Each hypothesis's decisive p (the largest its rule names), Holm's adjustment when planned, and the verdicts."""
    rows = {}
    for name, h in plan.hypotheses.items():
        t = tests[name]
        sign = 1 if h.direction == "greater" else -1
        ps, deltas = [], []
        if plan.rule in ("per_seed", "both"):
            ps += [s["p"] for s in t["per_seed"]]
            deltas += [s["delta"] for s in t["per_seed"]]
            complete = len(t["per_seed"]) == max(len(plan.seeds(h.arm)), len(plan.seeds(h.baseline)))
        else:
            complete = True
        if plan.rule in ("pooled", "both"):
            p = t["pooled"]
            if p is None:  # one model on each side: the pooled tests are the McNemar test
                ps += [s["p"] for s in t["per_seed"]]
                deltas += [s["delta"] for s in t["per_seed"]]
            else:
                ps += [p["cmh_p"], p["item_p"]] + ([p["seed_p"]] if p["seed_p"] is not None else [])
                deltas.append(p["delta"])
        rows[name] = {"p": max(ps) if ps else 1.0, "direction_ok": bool(deltas) and all(sign * d > 0 for d in deltas),
                      "complete": complete, "positive": sum(sign * s["delta"] > 0 for s in t["per_seed"]),
                      "significant": sum(sign * s["delta"] > 0 and s["p"] < plan.alpha for s in t["per_seed"]),
                      "seeds": len(t["per_seed"])}
    adjusted = holm({k: r["p"] for k, r in rows.items()}) if plan.correction == "holm" else {k: r["p"] for k, r in rows.items()}
    for k, r in rows.items():
        r["p_adjusted"] = adjusted[k]
        r["holds"] = r["complete"] and r["direction_ok"] and adjusted[k] < plan.alpha
    goal = "met" if all(r["holds"] for r in rows.values()) else "not met"
    if missing:
        goal += f" (partial: no answers from {', '.join(missing)})"
    return {"hypotheses": rows, "goal": goal}


def holm(ps: dict[str, float]) -> dict[str, float]:
    """Holm's step-down adjusted p-values (each at most 1, never below an earlier one in the order)."""
    order = sorted(ps, key=lambda k: (ps[k], k))
    out, running = {}, 0.0
    for rank, k in enumerate(order):
        running = max(running, min(1.0, (len(order) - rank) * ps[k]))
        out[k] = running
    return out


def describe(runs: list[dict[str, dict] | None], measures: dict[str, str]) -> dict:
    import re

    from posttrain.rewards.answers import extract_answer

    def share(run, f):
        return fmean(f(r) for r in run.values())

    runs = [r for r in runs if r]
    return {"seeds": len(runs), "n": len(runs[0]),
            **{m: fmean(share(run, lambda r, m=m: bool(r[m])) for run in runs) for m in UNITS},
            "per_seed_loose": [share(run, lambda r: bool(r["loose"])) for run in runs],
            "tags": fmean(share(run, lambda r: extract_answer(r["completion"] or "") is not None) for run in runs),
            "tokens": fmean(share(run, lambda r: r["completion_tokens"] or 0) for run in runs),
            **{k: fmean(share(run, lambda r, p=re.compile(p): bool(p.search(r["completion"] or ""))) for run in runs)
               for k, p in measures.items()}}


def by_subset(runs: dict[str, list], inside: set[str]) -> dict:
    """Each model's accuracy (mean over its seeds) on the test items inside a subset and on the rest: descriptive."""
    def share(run, ids, metric):
        return fmean(bool(run[i][metric]) for i in ids) if ids else None

    out = {}
    for name, seeds in runs.items():
        seeds = [r for r in seeds if r]
        if not seeds:
            continue
        ids = sorted(seeds[0])
        part = {"in": [i for i in ids if i in inside], "out": [i for i in ids if i not in inside]}
        out[name] = {where: {"n": len(items), **{m: None if not items else fmean(share(run, items, m) for run in seeds) for m in UNITS}}
                     for where, items in part.items()}
    return out


def build(out: Path) -> dict:
    """results.json and results.md from the kept files; returns what results.json holds."""
    plan = load_plan(out / "plan.yaml", check_files=False)
    lock = json.loads((out / "lock.json").read_text())
    meta = json.loads((out / "meta.json").read_text())
    if meta.get("fast"):
        plan = plan.with_fast()
    runs, missing = models(plan, out)
    tests = {name: {"per_seed": per_seed(h, plan, runs, plan.alpha), "pooled": pooled(h, runs, plan.alpha)}
             for name, h in {**plan.hypotheses, **plan.descriptive}.items()}
    health = json.loads((out / "health.json").read_text()) if (out / "health.json").is_file() else {}
    gate = json.loads((out / "gate.json").read_text()) if (out / "gate.json").is_file() else None
    subsets = json.loads((out / "samples" / "subsets.json").read_text()) if (out / "samples" / "subsets.json").is_file() else {}
    result = {"experiment": plan.name, "question": plan.question, "lock": lock, "meta": meta, **({"gate": gate} if gate else {}),
              "decision": {"rule": plan.rule, "alpha": plan.alpha, "correction": plan.correction},
              "models": {name: describe(r, plan.measures) for name, r in runs.items() if any(r)}, "tests": tests, "health": health,
              **({"subsets": {name: by_subset(runs, set(ids)) for name, ids in subsets.items()}} if subsets else {}),
              "verdict": decide(plan, tests, missing)}
    (out / "results.json").write_text(json.dumps(result, indent=1) + "\n")
    (out / "results.md").write_text(render(plan, result))
    return result


def _pct(x: float | None) -> str:
    return "-" if x is None else f"{100 * x:.1f}%"


def _p(p: float | None) -> str:
    return "-" if p is None else f"{p:.2g}"


def _mcnemar(t: dict) -> str:
    return (f"{_pct(t['baseline'])} -> {_pct(t['arm'])} ({100 * t['delta']:+.1f} pts [{100 * t['ci'][0]:+.1f}, {100 * t['ci'][1]:+.1f}], "
            f"{t['fixed']} fixed / {t['broken']} broken, p = {t['p']:.2g})")


def render(plan: Plan, result: dict) -> str:
    lock, meta, verdict = result["lock"], result["meta"], result["verdict"]
    rule = {"per_seed": "every seed's exact McNemar test significant", "pooled": "the pooled CMH, seed-level and item-level tests "
            "all significant", "both": "every seed's test and the pooled tests all significant"}[plan.rule]
    lines = [f"# {plan.name}: results" + (" (fast toy version)" if meta.get("fast") else ""), ""]
    lines += [plan.question, ""] if plan.question else []
    lines += [f"Plan `{lock['plan']}` (sha256 {lock['plan_sha256'][:12]}), locked {lock.get('locked_at')} at commit "
              f"{lock.get('commit')}. Test set {lock['test_set']} (sha256 {lock['test_set_sha256'][:12]}). These tables are rebuilt "
              "from the kept answers by `posttrain experiment tables DIR`.", ""]
    if meta.get("date"):  # an experiment run before `posttrain experiment` (its script's meta.json)
        lines += [f"Measured {meta['date']} on {meta.get('machine')}; `{meta.get('command')}`, commit {meta.get('commit')} at the end, "
                  f"wall time {meta.get('wall')}.", ""]
    if meta.get("stages"):
        lines += ["| stage | started | commit | machine | minutes |", "|---|---|---|---|---|"]
        lines += [f"| {name} | {s.get('started', '-')} | {s.get('commit', '-')} | {s.get('machine', '-')} | "
                  f"{s['seconds'] / 60:.1f} |" if s.get("seconds") is not None else f"| {name} | {s.get('started', '-')} | "
                  f"{s.get('commit', '-')} | {s.get('machine', '-')} | - |" for name, s in meta["stages"].items()]
        lines.append("")
    if result.get("gate"):
        g = result["gate"]
        reached = g[f"pass@{g['k']}"]
        lines += [f"Gate (before any arm, on {g['items']} dev items): the start's {g['metric']} pass@{g['k']} at temperature "
                  f"{g['temperature']:g} is {_pct(reached)}, greedy {_pct(g['greedy'])}: headroom {100 * g['headroom']:+.1f} points "
                  f"against the {100 * g['min_headroom']:.0f} asked: {'passed' if g['passed'] else 'FAILED'}.", ""]
    test = plan.test
    lines += [f"Test: task {test['task']}, {next(iter(result['models'].values()))['n']} items, greedy, at most "
              f"{test.get('max_new_tokens', 'the task budget of')} new tokens. Decision: {rule}, alpha {plan.alpha}, "
              f"correction {plan.correction}.", ""]
    lines += ["## Accuracy per model (mean over seeds)", "",
              "| model | seeds | strict | loose (per seed) | answers in one <answer> block | mean tokens |"
              + "".join(f" {k} |" for k in plan.measures), "|---|---|---|---|---|---|" + "---|" * len(plan.measures)]
    for name, d in result["models"].items():
        seeds = f" ({', '.join(_pct(x) for x in d['per_seed_loose'])})" if d["seeds"] > 1 else ""
        lines.append(f"| {name} | {d['seeds']} | {_pct(d['strict'])} | {_pct(d['loose'])}{seeds} | {_pct(d['tags'])} | {d['tokens']:.1f} |"
                     + "".join(f" {_pct(d[k])} |" for k in plan.measures))
    if plan.measures:
        lines += ["", "Measures: " + "; ".join(f"{k} is the share of answers matching `{p}`" for k, p in plan.measures.items()) + "."]
    if plan.forced_format:
        lines += ["", "Forced-format controls: " + "; ".join(f"{k} is {v}'s answers with their last number put in `<answer>` tags "
                                                           "(its strict is the source's loose)" for k, v in plan.forced_format.items()) + "."]
    lines += ["", "## Each hypothesis seed by seed (exact McNemar, 95% interval of the difference)", "",
              "| hypothesis | seed | baseline -> arm |", "|---|---|---|"]
    for name, h in {**plan.hypotheses, **plan.descriptive}.items():
        label = f"{name}: {h.arm} vs {h.baseline}, {h.metric}" + (" (descriptive)" if name in plan.descriptive else "")
        lines += [f"| {label} | {s['seed']} | {_mcnemar(s)} |" for s in result["tests"][name]["per_seed"]]
    pooled_rows = [(name, t["pooled"]) for name, t in result["tests"].items() if t["pooled"]]
    if pooled_rows:
        lines += ["", "## Pooled over seeds (a single model enters once)", "",
                  "CMH stratified by item; the seed-level t-test (each run one observation); the item-level sign-flip test "
                  "(each item one observation, its mean over the seeds).", "",
                  "| hypothesis | models (baseline / arm) | arm - baseline | CMH p | seed-level p | item-level p |", "|---|---|---|---|---|---|"]
        lines += [f"| {name}{' (descriptive)' if name in plan.descriptive else ''} | {p['baseline_models']} / {p['arm_models']} | {100 * p['delta']:+.1f} pts | {_p(p['cmh_p'])} | "
                  f"{_p(p['seed_p'])} | {_p(p['item_p'])} |" for name, p in pooled_rows]
    for name, models in result.get("subsets", {}).items():
        first = next(iter(models.values()))
        lines += ["", f"## Accuracy inside and outside subset {name} (descriptive)", "",
                  f"{first['in']['n']} test items are in {name} (the test file's `{plan.subsets.get(name, name)}` is true), "
                  f"{first['out']['n']} are not; mean over seeds.", "",
                  "| model | strict in | strict out | loose in | loose out |", "|---|---|---|---|---|"]
        lines += [f"| {m} | {_pct(d['in']['strict'])} | {_pct(d['out']['strict'])} | {_pct(d['in']['loose'])} | {_pct(d['out']['loose'])} |"
                  for m, d in models.items()]
    if result["health"]:
        lines += ["", "## Health flags raised during training", ""]
        for name, flags in result["health"].items():
            shown = [f"{f['name']} (steps {f['first_step']}-{f['last_step']}: {f['detail']})" for f in flags]
            lines.append(f"- {name}: {'; '.join(shown) if shown else 'none'}")
    lines += ["", "## Verdict", ""]
    for name, h in plan.hypotheses.items():
        r = verdict["hypotheses"][name]
        word = "above" if h.direction == "greater" else "below"
        adjusted = f", Holm-adjusted {_p(r['p_adjusted'])}" if plan.correction == "holm" else ""
        lines.append(f"- **{name}** ({h.arm} {word} {h.baseline}, {h.metric}): {'holds' if r['holds'] else 'does not hold'}; "
                     f"decisive p {_p(r['p'])}{adjusted}; {r['significant']} of {r['seeds']} seeds significant, {r['positive']} in the "
                     f"planned direction")
    lines += ["", f"**Goal: {verdict['goal']}.**", ""]
    return "\n".join(lines)
