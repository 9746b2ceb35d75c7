"""Held-out accuracy against training time for runs from one start: one figure, one table, one JSON.

    python benchmarks/time_to_accuracy.py runs/experiments/rl-from-plateau/arms/{grpo-s0,rft-s0,more-sft} \
        --out benchmarks/results/rl_from_plateau/time-to-accuracy

Each run's held-out evaluations (metrics.jsonl) are placed on its training clock (posttrain/evaluation/train_clock.py:
held-out scoring left out, the difficulty pre-pass and RFT's sampling counted; older runs reconstructed from their
mean step, marked estimated). `--before RUN=SECONDS` adds a cost the run folder does not hold: a difficulty pre-pass
read from a cache written before its seconds were kept (the value must come from a committed log).
"""

from __future__ import annotations

import argparse
import json
import re
from pathlib import Path


def curves(paths: list[Path], before: dict[str, float], metric: str) -> dict[str, list[dict]]:
    from posttrain.evaluation.telemetry import load_run
    from posttrain.evaluation.train_clock import held_out_ticks

    out = {}
    for path in paths:
        run = load_run(path)
        scores = {r["step"]: r[f"held_out/{metric}"] for r in run.records if isinstance(r.get(f"held_out/{metric}"), (int, float))}
        out[run.name] = [{"step": t.step, "minutes": round((t.seconds + before.get(run.name, 0.0)) / 60, 2), metric: scores[t.step],
                          "estimated": t.estimated} for t in held_out_ticks(run.records, run.summary)]
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("runs", nargs="+", type=Path)
    parser.add_argument("--out", type=Path, required=True, help="writes OUT.png, OUT.md and OUT.json")
    parser.add_argument("--metric", choices=("loose", "strict"), default="loose")
    parser.add_argument("--before", action="append", default=[], metavar="RUN=SECONDS")
    args = parser.parse_args()
    before = {name: float(seconds) for name, seconds in (item.split("=", 1) for item in args.before)}
    data = curves(args.runs, before, args.metric)

    lines = [f"| run | {args.metric} accuracy at training minutes (step) |", "|---|---|"]
    for name, points in data.items():
        cells = ", ".join(f"{100 * p[args.metric]:.0f}% at {'~' if p['estimated'] else ''}{p['minutes']:.1f} ({p['step']})" for p in points)
        lines.append(f"| {name} | {cells} |")
    if any(p["estimated"] for points in data.values() for p in points):
        lines += ["", "~: estimated (the run predates time/train_s: its mean step times the step)."]
    if before:
        lines += ["", "Added before the first step: " + ", ".join(f"{k} {v:g} s" for k, v in before.items()) + "."]
    text = "\n".join(lines) + "\n"
    print(text)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.with_suffix(".md").write_text(text)
    args.out.with_suffix(".json").write_text(json.dumps({"metric": args.metric, "before_s": before, "runs": data}, indent=1) + "\n")

    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(7, 4))
    groups = list(dict.fromkeys(re.sub(r"-s\d+$", "", name) for name in data))
    colours = dict(zip(groups, plt.rcParams["axes.prop_cycle"].by_key()["color"]))  # one colour a method, its seeds alike
    for name, points in data.items():
        ax.plot([p["minutes"] for p in points], [100 * p[args.metric] for p in points], marker="o", label=name,
                color=colours[re.sub(r"-s\d+$", "", name)], alpha=0.8)
    ax.set_xlabel("training minutes (held-out scoring left out; one thread)")
    ax.set_ylabel(f"held-out {args.metric} accuracy (%)")
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(args.out.with_suffix(".png"), dpi=90)
    print(f"wrote {args.out.with_suffix('.png')}, .md, .json")


if __name__ == "__main__":
    main()
