"""Batched vs one-at-a-time greedy generation with the transformers engine, side by side.

    python benchmarks/generation_batching.py                       # tiny:qwen2-6m, 64 prompts, 32 new tokens
    python benchmarks/generation_batching.py --model tiny:qwen2-2m --prompts 32

Both modes run in the same process on the same prompts (word problems of varied length, so
batches need real padding), each `--repeats` times, interleaved; the best time of each counts,
because these machines are shared and noisy. Also checks that greedy outputs are identical in both
modes (text and token counts), which is what makes batched evaluation trustworthy. Prints a table
and writes JSON to benchmarks/results/generation_batching.json.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import random
import time
from pathlib import Path

RESULTS = Path(__file__).resolve().parent / "results" / "generation_batching.json"


def make_prompts(n: int, seed: int = 0) -> list[str]:
    """Word problems from 1 to 4 sentences long: prompt lengths vary about 4x."""
    rng = random.Random(seed)
    names, items = ["Tom", "Anna", "Omar", "Mia", "Ravi", "Zoe"], ["apples", "books", "coins", "shells", "cards"]
    prompts = []
    for _ in range(n):
        sentences = [f"{rng.choice(names)} has {rng.randint(2, 99)} {rng.choice(items)}." for _ in range(rng.randint(1, 4))]
        prompts.append(" ".join(sentences) + " How many are there in total?")
    return prompts


def timed(engine, prompts, params, batch_size: int):
    engine.batch_size = batch_size
    start = time.perf_counter()
    out = engine.generate(prompts, params)
    return time.perf_counter() - start, out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--model", default="tiny:qwen2-6m", help="model spec (default: tiny:qwen2-6m)")
    parser.add_argument("--prompts", type=int, default=64, help="number of prompts (default: 64)")
    parser.add_argument("--max-new-tokens", type=int, default=32, help="tokens generated per prompt (default: 32)")
    parser.add_argument("--batch-size", type=int, default=16, help="batch size of the batched mode (default: 16)")
    parser.add_argument("--repeats", type=int, default=2, help="runs per mode; the best counts (default: 2)")
    parser.add_argument("--out", type=Path, default=RESULTS, help=f"JSON output (default: {RESULTS})")
    args = parser.parse_args()

    import torch

    from posttrain.generation.base import SamplingParams
    from posttrain.generation.local import TransformersEngine

    engine = TransformersEngine(args.model, progress=False)
    prompts = make_prompts(args.prompts)
    params = SamplingParams(max_new_tokens=args.max_new_tokens)
    timed(engine, prompts[:4], params, 2)  # warm-up: first calls pay one-off allocation costs
    modes = {"one-at-a-time": 1, f"batched ({args.batch_size})": args.batch_size}
    best: dict[str, float] = {}
    outputs: dict[str, list] = {}
    for _ in range(args.repeats):
        for mode, batch_size in modes.items():
            seconds, outputs[mode] = timed(engine, prompts, params, batch_size)
            best[mode] = min(best.get(mode, float("inf")), seconds)

    single, batched = outputs.values()
    identical = [(c.text, c.completion_tokens) for c in single] == [(c.text, c.completion_tokens) for c in batched]
    tokens = sum(c.completion_tokens for c in single)
    baseline = best["one-at-a-time"]
    rows = [{"mode": mode, "batch_size": modes[mode], "seconds": round(s, 3), "samples_per_s": round(len(prompts) / s, 2),
             "tokens_per_s": round(tokens / s, 1), "ratio": round(baseline / s, 2)} for mode, s in best.items()]

    print(f"{args.model}: {len(prompts)} prompts, {args.max_new_tokens} new tokens each, greedy, "
          f"{torch.get_num_threads()} torch threads, {engine.model.device}, best of {args.repeats}")
    print(f"{'mode':<16}{'samples/s':>11}{'tokens/s':>10}{'seconds':>9}{'ratio':>7}")
    for r in rows:
        print(f"{r['mode']:<16}{r['samples_per_s']:>11.2f}{r['tokens_per_s']:>10.1f}{r['seconds']:>9.2f}{r['ratio']:>6.2f}x")
    print(f"identical outputs: {'yes' if identical else 'no'}")

    result = {
        "benchmark": "generation_batching", "model": args.model, "prompts": len(prompts),
        "max_new_tokens": args.max_new_tokens, "repeats": args.repeats, "rows": rows, "identical_outputs": identical,
        "speedup": rows[1]["ratio"], "device": str(engine.model.device), "torch_threads": torch.get_num_threads(),
        "cpu_count": os.cpu_count(), "torch": torch.__version__, "python": platform.python_version(), "machine": platform.machine(),
    }
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(result, indent=2) + "\n")
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
