"""GPU benchmark: SFT throughput and MFU, GRPO step time, generation speed, QLoRA, peak memory.

    python benchmarks/gpu.py                       # on one CUDA GPU, Qwen2.5-0.5B and -1.5B shapes (< 8 min)
    python benchmarks/gpu.py --device cpu --tiny   # the toy version the test suite runs (tiny:qwen2-1m, seconds)

No model hub: the models are randomly initialised with the shapes of Qwen2.5-0.5B / -1.5B (their
published config.json dimensions) and use posttrain's locally built tokenizer; the data is
posttrain's generated arithmetic. Random weights train and generate at the same speed as real
ones (the arithmetic is identical), so throughput, MFU and memory are meaningful; losses are not.

Each case runs in a fresh child process (`gpu.py --case NAME`), which reports its own numbers and
peak memory (torch.cuda.max_memory_allocated on GPU, peak RSS on CPU):

| case | what |
|---|---|
| sft_posttrain / sft_posttrain_packed | `posttrain train` SFT, packing off / on: tokens/s, MFU |
| sft_trl | the same run written directly against TRL's SFTTrainer (no posttrain) |
| grpo_hf / grpo_vllm | `posttrain train` GRPO, generation by transformers / vLLM colocate: s/step |
| gen_hf / gen_vllm | posttrain's generation engines, same prompts: completion tokens/s |
| qlora | 20 SFT steps with a 4-bit base (bitsandbytes) + LoRA |

sft_posttrain and sft_trl must log the same loss at step 1 (same model, data order, seed and
hyper-parameters): the table shows it, as the proof that the two are the same run.
A case that cannot run here (no vLLM, no bitsandbytes, no GPU) is reported as skipped with the
reason; nothing is estimated. Prints one markdown table and writes benchmarks/results/gpu.json
(or --out). MFU = 6 x parameters x tokens/s / the GPU's dense bf16 peak (table below; "n/a" on
CPU or an unknown GPU).
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
REPO = HERE.parent

# Dense bf16 peak FLOP/s by GPU name fragment (vendor data sheets, without sparsity).
PEAK_BF16 = {"H200": 989e12, "H100": 989e12, "A100": 312e12, "L40S": 362e12, "A10G": 70e12, "L4": 121e12}
# Qwen2.5 shapes from their config.json (hidden, intermediate, layers, heads, kv heads), vocab 151936, tied embeddings.
SHAPES = {"qwen2.5-0.5b": (896, 4864, 24, 14, 2), "qwen2.5-1.5b": (1536, 8960, 28, 12, 2)}
CASES = ["sft_posttrain", "sft_posttrain_packed", "sft_trl", "grpo_hf", "grpo_vllm", "gen_hf", "gen_vllm", "qlora"]


def build_model(out: Path, shape: str, tiny: bool) -> Path:
    """A random model directory with posttrain's local tokenizer (tiny: the tiny model itself)."""
    sys.path.insert(0, str(REPO / "src"))
    from posttrain.models.tiny import resolve_tiny

    tiny_dir = resolve_tiny("tiny:qwen2-1m")
    if tiny:
        return tiny_dir
    import torch
    from transformers import AutoTokenizer, Qwen2Config, Qwen2ForCausalLM

    hidden, inter, layers, heads, kv = SHAPES[shape]
    config = Qwen2Config(hidden_size=hidden, intermediate_size=inter, num_hidden_layers=layers, num_attention_heads=heads,
                         num_key_value_heads=kv, vocab_size=151936, tie_word_embeddings=True, max_position_embeddings=4096,
                         torch_dtype="bfloat16")
    torch.manual_seed(0)
    model = Qwen2ForCausalLM(config).to(torch.bfloat16)
    tokenizer = AutoTokenizer.from_pretrained(tiny_dir)
    model.config.pad_token_id, model.config.eos_token_id = tokenizer.pad_token_id, tokenizer.eos_token_id
    model.save_pretrained(out / shape)
    tokenizer.save_pretrained(out / shape)
    return out / shape


def peak_memory() -> float:
    """Peak memory of this process in MB: GPU allocations on CUDA, resident set on CPU."""
    import resource

    import torch

    if torch.cuda.is_available():
        return torch.cuda.max_memory_allocated() / 2**20
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def posttrain_train(recipe: str, overrides: list[str], out: Path) -> list[dict]:
    from posttrain.cli import main

    rc = main(["train", "--recipe", recipe, f"training.output_dir={out}", "training.resume_from_checkpoint=false", *overrides])
    if rc != 0:
        raise SystemExit(f"posttrain train failed with exit code {rc}")
    return [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()]


def run_case(case: str, model: str, work: Path, steps: int, tiny: bool) -> dict:
    """One case in this process; returns its numbers (or {'skipped': reason})."""
    import importlib.util

    import torch

    sys.path.insert(0, str(REPO / "src"))
    from posttrain.data.synthetic import write_all

    data = write_all(work / "data", n=400, seed=0)
    cuda = torch.cuda.is_available()
    if case.endswith("vllm") and (importlib.util.find_spec("vllm") is None or not cuda):
        return {"skipped": "vllm not installed" if importlib.util.find_spec("vllm") is None else "no CUDA GPU"}
    if case == "qlora" and (not cuda or importlib.util.find_spec("bitsandbytes") is None):
        return {"skipped": "no CUDA GPU" if not cuda else "bitsandbytes not installed"}
    batch, length = (8, 64) if tiny else (8, 1024)
    sft = [f"model.base_model_name={model}", f"data.datasets[0].name={data['sft']}", f"training.max_steps={steps}",
           f"training.per_device_train_batch_size={batch}", f"training.max_length={length}", "training.logging_steps=1",
           f"training.save_steps={steps * 10}", "training.activation_checkpointing=false",
           "training.train_sampling_strategy=random"]  # TRL's batches (not posttrain's grouping): sft_trl's first loss must match
    # The CPU toy compares the two contestants' first losses in float32 on every CPU kind: under bf16 autocast their
    # attention kernels (posttrain's eager for short rows, TRL's sdpa) may round apart by up to 2e-3 of the loss (a
    # bf16 step of these logits, 2^-7, on each token), too loose to show the same first batch of an untrained model,
    # whose losses all lie near log(1152).
    float32_toy = tiny and not cuda
    sft += ["training.bf16=false"] if float32_toy else []
    if case in ("sft_posttrain", "sft_posttrain_packed", "qlora"):
        extra = ["training.packing=true"] if case == "sft_posttrain_packed" else []
        if case == "qlora":
            extra = ["model.use_lora=true", "model.load_in_4bit=true", "training.max_steps=20"]
        records = posttrain_train("recipes/sft/tiny-cpu.yaml", sft + extra, work / case)
        final = records[-1]
        tokens = max(r.get("num_tokens", 0) for r in records)
        return {"steps": final["step"], "train_seconds": final["train_runtime"], "tokens": tokens, "tokens_per_s": tokens / final["train_runtime"],
                "first_loss": next(r["loss"] for r in records if "loss" in r)}
    if case == "sft_trl":
        from datasets import load_dataset
        from transformers import AutoModelForCausalLM, AutoTokenizer
        from trl import SFTConfig, SFTTrainer

        from posttrain.models.loading import DeviceInfo

        # the precision posttrain picks here (a CPU with native bf16: autocast, fp32 weights), float32 in the CPU toy
        bf16 = DeviceInfo.detect().bf16 and not float32_toy
        dtype = torch.bfloat16 if cuda else torch.float32
        trainer = SFTTrainer(model=AutoModelForCausalLM.from_pretrained(model, dtype=dtype), processing_class=AutoTokenizer.from_pretrained(model),
                             train_dataset=load_dataset("json", data_files=str(data["sft"]), split="train"),
                             args=SFTConfig(output_dir=str(work / case), max_steps=steps, per_device_train_batch_size=batch, max_length=length,
                                            learning_rate=3e-3, logging_steps=1, save_strategy="no", bf16=bf16, use_cpu=not cuda,
                                            activation_checkpointing=False, report_to="none", seed=0, dataloader_pin_memory=cuda))
        result = trainer.train()
        tokens = max(r.get("num_tokens", 0) for r in trainer.state.log_history)
        return {"steps": result.global_step, "train_seconds": result.metrics["train_runtime"], "tokens": tokens,
                "tokens_per_s": tokens / result.metrics["train_runtime"],
                "first_loss": next(r["loss"] for r in trainer.state.log_history if "loss" in r)}
    if case in ("grpo_hf", "grpo_vllm"):
        grpo = [f"model.base_model_name={model}", f"data.datasets[0].name={data['problems']}", f"training.max_steps={steps}",
                "training.logging_steps=1", f"training.save_steps={steps * 10}", "training.per_device_train_batch_size=8",
                "training.num_generations=4", f"training.max_completion_length={32 if tiny else 256}"]
        if case == "grpo_vllm":
            grpo += ["training.use_vllm=true", "training.vllm_mode=colocate", "training.vllm_gpu_memory_utilization=0.3"]
        records = posttrain_train("recipes/grpo/tiny-cpu.yaml", grpo, work / case)
        final = records[-1]
        return {"steps": final["step"], "train_seconds": final["train_runtime"], "seconds_per_step": final["train_runtime"] / final["step"]}
    if case in ("gen_hf", "gen_vllm"):
        from posttrain.generation.base import SamplingParams
        from posttrain.generation.engines import make_engine

        prompts = [json.loads(line)["prompt"] for line in Path(data["sft"]).read_text().splitlines()[: 16 if tiny else 256]]
        engine = make_engine(("vllm:" if case == "gen_vllm" else "") + str(model))
        params = SamplingParams(max_new_tokens=32 if tiny else 256, temperature=0.0)
        engine.generate(prompts[:2], params)  # warm-up (CUDA graphs, kernels)
        t0 = time.perf_counter()
        completions = engine.generate(prompts, params)
        seconds = time.perf_counter() - t0
        tokens = sum(c.completion_tokens for c in completions)
        return {"prompts": len(prompts), "completion_tokens": tokens, "seconds": seconds, "tokens_per_s": tokens / seconds}
    raise SystemExit(f"unknown case {case}; one of {', '.join(CASES)}")


def child(args) -> None:
    work = Path(args.work)
    started = time.perf_counter()
    result = run_case(args.case, args.model, work, args.steps, args.tiny)
    if "skipped" not in result:
        result["peak_memory_mb"] = round(peak_memory(), 1)
        result["wall_seconds"] = round(time.perf_counter() - started, 2)
    print("RESULT " + json.dumps(result), flush=True)


def mfu(tokens_per_s: float, params: int, gpu: str | None) -> float | None:
    peak = next((v for k, v in PEAK_BF16.items() if gpu and k in gpu), None)
    return None if peak is None else 6 * params * tokens_per_s / peak


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--device", choices=["cuda", "cpu"], default="cuda")
    parser.add_argument("--tiny", action="store_true", help="tiny:qwen2-1m, few steps: the toy run of the test suite")
    parser.add_argument("--shapes", nargs="+", default=list(SHAPES), choices=list(SHAPES))
    parser.add_argument("--cases", nargs="+", default=CASES, choices=CASES)
    parser.add_argument("--steps", type=int, default=None, help="training steps per case (default 20; 3 with --tiny)")
    parser.add_argument("--timeout", type=int, default=150, help="seconds per case before it is reported as timed out")
    parser.add_argument("--out", type=Path, default=HERE / "results" / "gpu.json")
    parser.add_argument("--case", help=argparse.SUPPRESS)
    parser.add_argument("--model", help=argparse.SUPPRESS)
    parser.add_argument("--work", help=argparse.SUPPRESS)
    args = parser.parse_args()
    args.steps = args.steps or (3 if args.tiny else 20)
    if args.case:
        return child(args)

    env = {**os.environ, "TOKENIZERS_PARALLELISM": "false", "PYTHONPATH": f"{REPO / 'src'}{os.pathsep}{os.environ.get('PYTHONPATH', '')}"}
    if args.device == "cpu":
        env["CUDA_VISIBLE_DEVICES"] = ""
    gpu = None
    if args.device == "cuda":
        gpu = subprocess.run(["nvidia-smi", "--query-gpu=name", "--format=csv,noheader"], capture_output=True, text=True).stdout.strip().splitlines()
        gpu = gpu[0] if gpu else None
        if gpu is None:
            raise SystemExit("no GPU visible (nvidia-smi found none); run with --device cpu --tiny for the toy version")
    work = Path(tempfile.mkdtemp(prefix="posttrain-gpu-bench-"))
    rows = []
    shapes = ["tiny:qwen2-1m"] if args.tiny else args.shapes
    try:
        for shape in shapes:
            model_dir = build_model(work / "models", shape, args.tiny)
            params = _params(model_dir)
            for case in args.cases:
                cmd = [sys.executable, __file__, "--case", case, "--model", str(model_dir), "--work", str(work / shape.replace(":", "-") / case),
                       "--steps", str(args.steps)] + (["--tiny"] if args.tiny else [])
                try:
                    proc = subprocess.run(cmd, cwd=REPO, env=env, capture_output=True, text=True, timeout=args.timeout)
                    line = next((l for l in proc.stdout.splitlines() if l.startswith("RESULT ")), None)
                    result = json.loads(line[7:]) if line else {"failed": (proc.stderr or proc.stdout)[-300:].strip()}
                except subprocess.TimeoutExpired:
                    result = {"failed": f"timed out after {args.timeout} s"}
                if "tokens_per_s" in result and case.startswith("sft"):  # full training only: 6N FLOPs per token
                    result["mfu"] = mfu(result["tokens_per_s"], params, gpu)
                rows.append({"model": shape, "params": params, "case": case, **result})
                print(f"  {shape} {case}: {_summary(rows[-1])}", flush=True)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    report = {"date": time.strftime("%Y-%m-%d"), "device": gpu or "cpu", "tiny": args.tiny, "steps": args.steps, "rows": rows}
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(report, indent=2) + "\n")
    print(f"\n{report['date']}, {report['device']}\n")
    print("| model | case | tokens/s | MFU | s/step | peak MB | loss at step 1 | note |")
    print("|---|---|---|---|---|---|---|---|")
    for r in rows:
        tps = f"{r['tokens_per_s']:.0f}" if "tokens_per_s" in r else ""
        m = f"{r['mfu']:.1%}" if r.get("mfu") is not None else ("n/a" if "mfu" in r else "")
        sps = f"{r['seconds_per_step']:.2f}" if "seconds_per_step" in r else ""
        mem = f"{r['peak_memory_mb']:.0f}" if "peak_memory_mb" in r else ""
        note = r.get("skipped") and f"skipped: {r['skipped']}" or r.get("failed") and f"failed: {r['failed'][:80]}" or ""
        loss = f"{r['first_loss']:.4f}" if "first_loss" in r else ""
        print(f"| {r['model']} | {r['case']} | {tps} | {m} | {sps} | {mem} | {loss} | {note} |")
    print(f"\nwritten to {args.out}")


def _params(model_dir: Path) -> int:
    from safetensors import safe_open

    total = 0
    for f in Path(model_dir).glob("*.safetensors"):
        with safe_open(str(f), "pt") as st:
            for k in st.keys():
                shape = st.get_slice(k).get_shape()
                n = 1
                for d in shape:
                    n *= d
                total += n
    return total


def _summary(r: dict) -> str:
    if "skipped" in r or "failed" in r:
        return r.get("skipped") and f"skipped ({r['skipped']})" or f"FAILED: {r['failed'][-200:]}"
    return ", ".join(f"{k}={v:.4g}" if isinstance(v, float) else f"{k}={v}" for k, v in r.items() if k not in ("model", "params", "case"))


if __name__ == "__main__":
    main()
