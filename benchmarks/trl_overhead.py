"""posttrain's overhead over plain TRL for the same run (same model, data, steps, seed).

    python benchmarks/trl_overhead.py --algorithm sft  [--repeats 3] [--steps 30] [--size 2m]
    python benchmarks/trl_overhead.py --algorithm grpo [--repeats 3] [--steps 10] [--size 2m]

Runs `posttrain train --recipe recipes/<algorithm>/tiny-cpu.yaml` and the same run written
directly against TRL (`_direct_trl.py`) alternately, each as a fresh process (imports included, as
a user experiences it), and reports median wall time, peak RSS, their ratios and the training
metrics of both (equal numbers show the two really are the same run). GRPO uses a reward the
random tiny model earns (overhead_rewards.py: the share of digits) at lr 1e-3, so the policy moves
and the metrics compared (loss, reward, KL, grad norm, ...) are those of real learning; the output
says how far it moved. Writes results/<algorithm>_overhead.json. Goal: wall-time ratio <= 1.05.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
REPO = HERE.parent


def timed(cmd: list[str], env: dict | None = None) -> tuple[float, float, float, str]:
    """Wall seconds, CPU seconds (user + system), peak RSS (MB) and stdout of one child process.
    CPU time is reported beside wall time because it barely moves when the machine is shared."""
    start = time.perf_counter()
    proc = subprocess.Popen(cmd, cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True, env=env)
    out = proc.stdout.read()
    _, status, usage = os.wait4(proc.pid, 0)
    seconds = time.perf_counter() - start
    if os.waitstatus_to_exitcode(status) != 0:
        raise SystemExit(f"failed: {' '.join(cmd)}\n{out[-2000:]}")
    return seconds, usage.ru_utime + usage.ru_stime, usage.ru_maxrss / 1024, out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--algorithm", choices=["sft", "grpo"], default="sft")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--steps", type=int, default=None, help="default: 30 for sft, 10 for grpo")
    parser.add_argument("--size", default="2m", choices=["1m", "2m", "6m"])
    args = parser.parse_args()

    sys.path.insert(0, str(REPO / "src"))
    from posttrain.data.synthetic import write_all
    from posttrain.data.task_prompts import MATH_SYSTEM_PROMPT
    from posttrain.models.tiny import resolve_tiny

    steps = args.steps or {"sft": 30, "grpo": 10}[args.algorithm]
    model_dir = resolve_tiny(f"tiny:qwen2-{args.size}")
    work = Path(tempfile.mkdtemp(prefix=f"{args.algorithm}-overhead-"))
    data = write_all(work / "data", n=200, seed=0)["sft" if args.algorithm == "sft" else "problems"]
    (work / "system.txt").write_text(MATH_SYSTEM_PROMPT)
    posttrain_cmd = [sys.executable, "-m", "posttrain", "train", "--recipe", f"recipes/{args.algorithm}/tiny-cpu.yaml",
                     f"model.base_model_name=tiny:qwen2-{args.size}", f"data.datasets[0].name={data}",
                     f"training.max_steps={steps}", f"training.output_dir={work / 'posttrain'}",
                     "training.resume_from_checkpoint=false",  # every repeat trains from scratch
                     "training.bf16=false"]  # _direct_trl.py's precision, on any CPU
    env = None
    if args.algorithm == "grpo":  # a reward the random tiny model earns (overhead_rewards.py), in both runs
        posttrain_cmd += ["training.rewards=[{name: 'overhead_rewards:digit_share'}]", "training.learning_rate=1e-3",
                          "data.max_prompt_length=null"]
        env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [str(HERE), str(REPO / "src"), os.environ.get("PYTHONPATH")]))}
    trl_cmd = [sys.executable, str(HERE / "_direct_trl.py"), args.algorithm, str(model_dir), str(data), str(work / "trl"), str(steps), str(work / "system.txt")]

    runs: dict[str, list[tuple[float, float, float]]] = {"posttrain": [], "trl": []}
    losses: dict[str, float] = {}
    last_logs: dict[str, dict] = {}
    for i in range(args.repeats):
        for name, cmd in (("trl", trl_cmd), ("posttrain", posttrain_cmd)) if i % 2 == 0 else (("posttrain", posttrain_cmd), ("trl", trl_cmd)):
            shutil.rmtree(work / name, ignore_errors=True)
            seconds, cpu, rss, out = timed(cmd, env)
            runs[name].append((seconds, cpu, rss))
            if name == "trl":
                report = json.loads(out.strip().splitlines()[-1])
                losses[name], last_logs[name] = report["train_loss"], report["last_log"]
            else:
                losses[name] = json.loads((work / "posttrain" / "run_summary.json").read_text())["train_loss"]
                records = [json.loads(line) for line in (work / "posttrain" / "metrics.jsonl").read_text().splitlines()]
                last_logs[name] = [r for r in records if "loss" in r][-1]
            print(f"  run {i + 1}/{args.repeats} {name:<9} {seconds:6.2f} s wall  {cpu:6.2f} s cpu  {rss:7.1f} MB", flush=True)

    med = {k: (statistics.median(w for w, _, _ in v), statistics.median(c for _, c, _ in v), max(r for _, _, r in v)) for k, v in runs.items()}
    result = {
        "algorithm": args.algorithm, "model": f"tiny:qwen2-{args.size}", "steps": steps, "repeats": args.repeats,
        "posttrain_seconds": round(med["posttrain"][0], 3), "trl_seconds": round(med["trl"][0], 3),
        "wall_ratio": round(med["posttrain"][0] / med["trl"][0], 3),
        "posttrain_cpu_seconds": round(med["posttrain"][1], 3), "trl_cpu_seconds": round(med["trl"][1], 3),
        "cpu_ratio": round(med["posttrain"][1] / med["trl"][1], 3),
        "posttrain_peak_rss_mb": round(med["posttrain"][2], 1), "trl_peak_rss_mb": round(med["trl"][2], 1),
        "rss_ratio": round(med["posttrain"][2] / med["trl"][2], 3),
        "posttrain_train_loss": losses["posttrain"], "trl_train_loss": losses["trl"],
        "metrics_compared": compare_logs(last_logs["posttrain"], last_logs["trl"]),
    }
    print()
    print(f"| run       | wall s (median of {args.repeats}) | CPU s (median) | peak RSS MB | train loss |")
    print("|-----------|------------------|----------------|-------------|------------|")
    print(f"| TRL       | {result['trl_seconds']:16.2f} | {result['trl_cpu_seconds']:14.2f} | {result['trl_peak_rss_mb']:11.1f} | {losses['trl']:10.4f} |")
    print(f"| posttrain | {result['posttrain_seconds']:16.2f} | {result['posttrain_cpu_seconds']:14.2f} | {result['posttrain_peak_rss_mb']:11.1f} | {losses['posttrain']:10.4f} |")
    print(f"| ratio     | {result['wall_ratio']:16.3f} | {result['cpu_ratio']:14.3f} | {result['rss_ratio']:11.3f} |            |")
    agree = result["metrics_compared"]
    print(f"\nlast logged step, metrics present in both runs: {len(agree['equal'])} equal, {len(agree['different'])} different")
    for key, (a, b) in agree["different"].items():
        print(f"  {key}: posttrain {a} vs TRL {b}")
    if args.algorithm == "grpo":  # equal metrics only mean something if the policy moved at all
        records = [json.loads(line) for line in (work / "posttrain" / "metrics.jsonl").read_text().splitlines()]
        logged = [r for r in records if "reward" in r]
        moved = {"reward_first_step": logged[0]["reward"], "reward_last_step": logged[-1]["reward"],
                 "kl_last_step": logged[-1].get("kl"), "grad_norm_last_step": logged[-1].get("grad_norm")}
        result["learning"] = moved
        print(f"learning (posttrain run): reward {moved['reward_first_step']:.4f} at step 1 -> {moved['reward_last_step']:.4f} "
              f"at step {steps}; kl at step {steps}: {moved['kl_last_step']}; grad norm: {moved['grad_norm_last_step']}")
        if not moved["kl_last_step"]:
            print("WARNING: kl is 0: the policy never moved, so equal metrics prove nothing")
    (HERE / "results").mkdir(exist_ok=True)
    (HERE / "results" / f"{args.algorithm}_overhead.json").write_text(json.dumps(result, indent=2) + "\n")


def compare_logs(ours: dict, theirs: dict) -> dict:
    """Which numeric metrics of the last logged step agree (to 1e-6 relative) between the two runs."""
    equal, different = [], {}
    for key in sorted(set(ours) & set(theirs)):
        a, b = ours[key], theirs[key]
        if not isinstance(a, (int, float)) or not isinstance(b, (int, float)) or key in ("step_time", "step"):
            continue
        if abs(a - b) <= 1e-6 * max(1.0, abs(a), abs(b)):
            equal.append(key)
        else:
            different[key] = (a, b)
    return {"equal": equal, "different": different}


if __name__ == "__main__":
    main()
