"""Start-up: how long `posttrain train` takes to reach its first training step, against a plain TRL script.

    python benchmarks/startup.py                 # 5 alternated rounds (about 2 min on 2 idle cores)
    python benchmarks/startup.py --repeats 1 --warmup 0 --out /tmp/startup.json   # the test suite's toy run

Each round starts, as fresh processes and in alternating order, `posttrain train --recipe
recipes/sft/tiny-cpu.yaml` and `_direct_trl.py sft` (the same run written directly against TRL: same
tiny model, data, hyper-parameters and seed), both under `_startup_probe.py`, which records when
each reached its first optimizer step and ends it there. Reported, as medians over the rounds:

- seconds from process start to the end of step 1, for both, and their ratio (goal: 1.0);
- posttrain's own recipe handling inside that run (reading the YAML, overrides, defaults, schema
  validation, preflight, the diff against the defaults, the output_dir lock, the resolved recipe,
  provenance; goal: < 0.2 s), split into the CLI's part and what the run does later;
- `posttrain validate` on the same recipe, start to exit, beside `python -c pass` (the interpreter's
  own start) for scale.

The proof that both ran the same step: they start from identical weights, and each parameter's
update in step 1 is TRL's to within UPDATE_TOL of its size (below: what float rounding can and
cannot move; posttrain's CPU LM head sums the vocabulary in another order than TRL's tiles, and
AVX2, avx512 and AMX kernels round differently).
A warm-up round first (not counted) fills the OS file cache and the bytecode caches, as on any
machine that has run posttrain before. `--baseline SRC` adds posttrain from another source tree
as a third contestant (before/after a change, in one alternated run). Writes
results/startup.json (or --out).
"""

from __future__ import annotations

import argparse
import json
import math
import os
import platform
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
REPO = HERE.parent
RECIPE = "recipes/sft/tiny-cpu.yaml"


def child_env(src: Path = REPO / "src") -> dict:
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [str(src), os.environ.get("PYTHONPATH")]))}
    env.pop("PYTHONDONTWRITEBYTECODE", None)  # a user's install has its .pyc files: let the warm-up write them
    return env


def probe(cmd: list[str], out: Path, src: Path) -> dict:
    """One fresh process under the probe: its milestones (seconds after it was started)."""
    env = {**child_env(src), "STARTUP_T0": repr(time.time())}
    proc = subprocess.run([sys.executable, str(HERE / "_startup_probe.py"), str(out), *cmd], cwd=REPO, env=env,
                          stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    if proc.returncode != 0 or not out.exists():
        raise SystemExit(f"failed: {' '.join(cmd)}\n{proc.stderr[-3000:]}")
    return json.loads(out.read_text())


def wall(cmd: list[str], src: Path) -> float:
    start = time.perf_counter()
    proc = subprocess.run(cmd, cwd=REPO, env=child_env(src), stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    seconds = time.perf_counter() - start
    if proc.returncode != 0:
        raise SystemExit(f"failed: {' '.join(cmd)}\n{proc.stderr[-3000:]}")
    return seconds


# How far apart two float32 computations of the same first step may end, parameter by parameter.
# AdamW's first step moves each weight by lr * g / (|g| + eps) (bias-corrected m / sqrt(v) = g / |g|):
# by lr, with g's sign, wherever |g| >> eps = 1e-8, however g was rounded. Two summation orders of the
# same loss (posttrain's CPU LM head against TRL's tiles; AVX2, avx512 and AMX kernels) round g
# differently, which moves only the weights whose |g| lies within that rounding of 0 or of eps: by at
# most 2 lr each. So the two updates of a parameter differ, relative to the update, by at most
# 2 sqrt(f), f the share of such weights. UPDATE_TOL = 0.05 lets f reach 1/1,600 of a parameter's
# weights; a step with another learning rate, batch or seed changes every weight's update (a relative
# difference near 1), so it cannot pass.
UPDATE_TOL = 0.05


def step_difference(a: Path, b: Path) -> dict:
    """The two probes' (OUT paths') first steps compared parameter by parameter: the weights they started
    from must be identical (the same folder, loaded the same way), and for each parameter the relative
    difference of the updates, |u_a - u_b| / |u_b| (L2 norms), is reported; its worst is `worst`."""
    from safetensors.torch import load_file

    before = {who: load_file(f"{p}.before.safetensors") for who, p in (("a", a), ("b", b))}
    after = {who: load_file(f"{p}.after.safetensors") for who, p in (("a", a), ("b", b))}
    if before["a"].keys() != before["b"].keys():
        return {"same_start": False, "worst": math.inf, "why": "different trainable parameters"}
    same_start = all(before["a"][k].equal(before["b"][k]) for k in before["a"])
    relative = {}
    for name in before["a"]:
        u_a, u_b = after["a"][name] - before["a"][name], after["b"][name] - before["b"][name]
        scale = float(u_b.double().norm())
        relative[name] = float((u_a - u_b).double().norm()) / scale if scale else (0.0 if float(u_a.double().norm()) == 0 else math.inf)
    worst = max(relative, key=relative.get)
    return {"same_start": same_start, "worst": relative[worst], "worst_parameter": worst, "parameters": len(relative)}


def same_step(differences: list[dict]) -> bool:
    """Every round trained the same first step: same start, every parameter's update within UPDATE_TOL."""
    return all(d["same_start"] and d["worst"] <= UPDATE_TOL for d in differences)


def main(argv: list[str] | None = None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--repeats", type=int, default=5, help="alternated rounds (medians are taken over them)")
    parser.add_argument("--warmup", type=int, default=1, help="rounds run first and not counted (0 in the test suite's toy run)")
    parser.add_argument("--size", default="1m", choices=["1m", "2m", "6m"], help="the tiny model (recipes/sft/tiny-cpu.yaml uses 1m)")
    parser.add_argument("--out", type=Path, default=HERE / "results" / "startup.json")
    parser.add_argument("--baseline", type=Path, metavar="SRC", help="also run posttrain from this source folder (e.g. an older "
                        "commit's src/, from `git archive`), alternated with the others: before/after in one run")
    args = parser.parse_args(argv)

    sys.path.insert(0, str(REPO / "src"))
    from posttrain.models.tiny import resolve_tiny

    model = f"tiny:qwen2-{args.size}"
    model_dir = resolve_tiny(model)  # built once and cached: both contestants load the same folder
    data = REPO / "examples" / "data" / "sft.jsonl"
    work = Path(tempfile.mkdtemp(prefix="startup-"))

    src = REPO / "src"
    srcs = {"posttrain": src, "trl": src, "baseline": args.baseline}

    def contestants(i: int) -> dict[str, list[str]]:
        train = ["-m", "posttrain", "train", "--recipe", RECIPE, f"model.base_model_name={model}", f"data.datasets[0].name={data}",
                 "training.bf16=false",  # _direct_trl.py's precision, on any CPU: the same step 1
                 "training.padding_free=false"]  # and its padded batches (posttrain flattens SFT batches on a CPU by default)
        out = {"trl": [str(HERE / "_direct_trl.py"), "sft", str(model_dir), str(data), str(work / f"trl-{i}"), "30"],
               "posttrain": [*train, f"training.output_dir={work / f'posttrain-{i}'}"]}
        if args.baseline:
            out["baseline"] = [*train, f"training.output_dir={work / f'baseline-{i}'}"]
        return out

    validate = [sys.executable, "-m", "posttrain", "validate", RECIPE, f"model.base_model_name={model}"]
    simple = {"validate": (validate, src), "python": ([sys.executable, "-c", "pass"], src)}
    if args.baseline:
        simple["validate_baseline"] = (validate, args.baseline)
    runs: dict[str, list[dict]] = {name: [] for name in contestants(0)}
    walls: dict[str, list[float]] = {name: [] for name in simple}
    differences: dict[str, list[dict]] = {name: [] for name in runs if name != "trl"}  # each round's step against TRL's
    try:
        for i in range(-args.warmup, args.repeats):  # negative rounds: the warm-up
            names = list(contestants(i))
            order = names[i % len(names):] + names[:i % len(names)]  # each contestant goes first in turn
            for name in order:
                result = probe(contestants(i)[name], work / f"{name}-{i}.json", srcs[name])
                if i >= 0:
                    runs[name].append(result)
                    print(f"  round {i + 1}/{args.repeats} {name:<9} step 1 at {result['marks']['step1']:6.2f} s"
                          + (f"  (own recipe handling {result['own_s']:.3f} s)" if "own_s" in result else ""), flush=True)
            for name in differences if i >= 0 else ():
                differences[name].append(step_difference(work / f"{name}-{i}.json", work / f"trl-{i}.json"))
            for name in (list(simple) if i % 2 == 0 else list(reversed(simple))):
                seconds = wall(*simple[name])
                if i >= 0:
                    walls[name].append(seconds)
    finally:
        shutil.rmtree(work, ignore_errors=True)

    def med(name: str, key: str, kind: str = "marks") -> float:
        return round(statistics.median(r[kind][key] for r in runs[name]), 3)

    own_parts = {k: round(statistics.median(r["own_parts"].get(k, 0.0) for r in runs["posttrain"]), 4)
                 for k in runs["posttrain"][0]["own_parts"]}
    sums = {name: [r["param_sum"] for r in rs] for name, rs in runs.items()}
    report = {
        "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()), "machine": f"{platform.machine()}, {os.cpu_count()} CPUs",
        "load_average_1min": round(os.getloadavg()[0], 2), "recipe": RECIPE, "model": model, "repeats": args.repeats,
        "step1_s": {"posttrain": med("posttrain", "step1"), "trl": med("trl", "step1")},
        "step1_cpu_s": {"posttrain": med("posttrain", "step1", "cpu"), "trl": med("trl", "step1", "cpu")},
        "train_begin_s": {"posttrain": med("posttrain", "train_begin"), "trl": med("trl", "train_begin")},
        "train_begin_cpu_s": {"posttrain": med("posttrain", "train_begin", "cpu"), "trl": med("trl", "train_begin", "cpu")},
        "own_s": round(statistics.median(r["own_s"] for r in runs["posttrain"]), 4),
        "own_cpu_s": round(statistics.median(r["own_cpu_s"] for r in runs["posttrain"]), 4),
        "own_parts_s": own_parts,
        "validate_s": round(statistics.median(walls["validate"]), 3), "python_s": round(statistics.median(walls["python"]), 3),
        "same_step": same_step(differences["posttrain"]),
        "step_difference": max(differences["posttrain"], key=lambda d: d["worst"]),
        "param_sum_after_step1": {name: s[0] for name, s in sums.items()},
    }
    if args.baseline:
        report["baseline"] = {
            "src": str(args.baseline), "step1_s": med("baseline", "step1"), "step1_cpu_s": med("baseline", "step1", "cpu"),
            "own_s": round(statistics.median(r["own_s"] for r in runs["baseline"]), 4),
            "own_cpu_s": round(statistics.median(r["own_cpu_s"] for r in runs["baseline"]), 4),
            "validate_s": round(statistics.median(walls["validate_baseline"]), 3),
            "same_step": same_step(differences["baseline"]),
        }
    report["step1_ratio"] = round(report["step1_s"]["posttrain"] / report["step1_s"]["trl"], 3)
    report["step1_cpu_ratio"] = round(report["step1_cpu_s"]["posttrain"] / report["step1_cpu_s"]["trl"], 3)
    print(render(report))
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(report, indent=2) + "\n")
    return report


def render(r: dict) -> str:
    n = r["repeats"]
    def row(label: str, key: str) -> str:
        wall, cpu = r[f"{key}_s"], r[f"{key}_cpu_s"]
        return (f"| {label} | {wall['posttrain']:.2f} s ({cpu['posttrain']:.2f} s CPU) | {wall['trl']:.2f} s ({cpu['trl']:.2f} s CPU) | "
                f"{wall['posttrain'] / wall['trl']:.3f} ({cpu['posttrain'] / cpu['trl']:.3f} CPU) |")

    rows = [
        f"| start-up, {r['model']}, median of {n} | posttrain | plain TRL | ratio |",
        "|---|---|---|---|",
        row("process start -> end of step 1", "step1"),
        row("process start -> trainer's on_train_begin", "train_begin"),
        f"| posttrain's own recipe handling in that run | {r['own_s']:.3f} s ({r['own_cpu_s']:.3f} s CPU) | - | |",
        f"| `posttrain validate` (vs `python -c pass`) | {r['validate_s']:.3f} s | {r['python_s']:.3f} s | |",
        "",
        "recipe handling, median seconds by part: " + ", ".join(f"{k} {v:.4f}" for k, v in r["own_parts_s"].items() if v >= 0.0005),
        f"same step trained: {r['same_step']} (same starting weights: {r['step_difference']['same_start']}; the updates of "
        f"{r['step_difference']['parameters']} parameters differ by at most {r['step_difference']['worst']:.2g} of TRL's, in "
        f"{r['step_difference']['worst_parameter']}, bound {UPDATE_TOL}; weights' checksum after step 1: posttrain "
        f"{r['param_sum_after_step1']['posttrain']!r}, TRL {r['param_sum_after_step1']['trl']!r})",
        f"load average (1 min) at the end: {r['load_average_1min']} on {r['machine']}",
    ]
    b = r.get("baseline")
    if b:
        rows += ["", f"| posttrain: this tree vs {b['src']}, median of {n} | this tree | baseline | ratio |", "|---|---|---|---|",
                 f"| own recipe handling | {r['own_s']:.3f} s ({r['own_cpu_s']:.3f} s CPU) | {b['own_s']:.3f} s ({b['own_cpu_s']:.3f} s CPU) "
                 f"| {r['own_s'] / b['own_s']:.3f} ({r['own_cpu_s'] / b['own_cpu_s']:.3f} CPU) |",
                 f"| `posttrain validate` | {r['validate_s']:.3f} s | {b['validate_s']:.3f} s | {r['validate_s'] / b['validate_s']:.3f} |",
                 f"| process start -> end of step 1 | {r['step1_s']['posttrain']:.2f} s ({r['step1_cpu_s']['posttrain']:.2f} s CPU) | "
                 f"{b['step1_s']:.2f} s ({b['step1_cpu_s']:.2f} s CPU) | {r['step1_s']['posttrain'] / b['step1_s']:.3f} |",
                 f"baseline trained the same step too: {b['same_step']}"]
    return "\n".join(rows)


if __name__ == "__main__":
    main()
