"""Big vocabularies on a CPU: the training loss through the full [tokens x vocabulary] float32 logits,
through TRL's fused LM head (`add_fused_lm_head`, which every TRL 1.16 trainer uses: tiles of 4,096
tokens x 32,768 vocabulary rows, never the whole matrix), and through the same head with posttrain's
CPU blocks in place of the tiles (models/cpu_lm_head.py: the whole vocabulary for 2^25 / V tokens
at a time, recomputed in the backward pass), posttrain's default on a CPU. One training step (forward + backward, LoRA r=16 on every linear layer) per
measurement (float32, and bf16 autocast over float32 weights as posttrain trains on CPUs
with native bf16), each in a fresh process so its peak resident memory is its own:

    python benchmarks/big_vocab.py --models gemma3=PATH.gguf smollm2=PATH.gguf --tokens 1024 4096

Prints tokens/s, peak RSS and the loss of the three paths side by side (the losses must agree), and writes benchmarks/results/big_vocab.json.
"""

from __future__ import annotations

import argparse
import json
import platform
import resource
import subprocess
import sys
import time
from pathlib import Path

MODES = ("full logits", "TRL tiles", "posttrain blocks")
ROW = 256  # tokens per row


def one(model_path: str, mode: str, tokens: int, dtype: str, steps: int) -> dict:
    import torch
    from peft import LoraConfig, get_peft_model
    from transformers import AutoModelForCausalLM, AutoTokenizer
    from trl.trainer.utils import add_fused_lm_head

    from posttrain.models.loading import resolve_source

    torch.manual_seed(0)
    folder = resolve_source(model_path)
    tokenizer = AutoTokenizer.from_pretrained(folder)
    model = AutoModelForCausalLM.from_pretrained(folder, dtype=torch.float32)
    if mode != "full logits":
        add_fused_lm_head(model, outputs=("log_probs", "entropy", "is_top1"))  # as TRL's SFTTrainer does
    if mode == "posttrain blocks":
        from posttrain.models import cpu_lm_head

        cpu_lm_head.use_on_cpu()  # as a posttrain run on a CPU does
    model = get_peft_model(model, LoraConfig(r=16, lora_alpha=32, target_modules="all-linear", lora_dropout=0.0))
    text = "\n".join(json.loads(line)["text"] for line in Path("examples/data/text.jsonl").read_text().splitlines())
    ids = tokenizer(text * 20, add_special_tokens=False)["input_ids"]
    rows = tokens // ROW
    batch = torch.tensor(ids[: rows * ROW]).view(rows, ROW)
    kwargs = {"input_ids": batch, "attention_mask": torch.ones_like(batch), "labels": batch}
    if mode != "full logits":
        kwargs["fused_lm_head"] = True
    losses, times = [], []
    for _ in range(steps + 1):  # the first is a warm-up
        start = time.perf_counter()
        with torch.autocast("cpu", dtype=torch.bfloat16, enabled=dtype == "bf16"):  # posttrain's CPU bf16: float32 weights
            loss = model(**kwargs).loss
        loss.backward()
        times.append(time.perf_counter() - start)
        losses.append(loss.item())
        model.zero_grad(set_to_none=True)
    step_s = sum(times[1:]) / steps
    return {"mode": mode, "tokens": tokens, "dtype": dtype, "vocab": model.config.get_text_config().vocab_size, "loss": losses[0],
            "step_s": step_s, "tokens_per_s": tokens / step_s,
            "peak_rss_gb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024 ** 2}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--models", nargs="+", default=[], help="name=path (a .gguf file or a model folder)")
    parser.add_argument("--tokens", nargs="+", type=int, default=[1024, 4096], help="tokens per step (rows of 256)")
    parser.add_argument("--dtypes", nargs="+", default=["float32", "bf16"], choices=["float32", "bf16"],
                        help="bf16: mixed precision with float32 weights, posttrain's default on CPUs with native bf16")
    parser.add_argument("--steps", type=int, default=3)
    parser.add_argument("--out", default="benchmarks/results/big_vocab.json")
    parser.add_argument("--one", nargs=4, metavar=("PATH", "MODE", "TOKENS", "DTYPE"), help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.one:
        print(json.dumps(one(args.one[0], args.one[1], int(args.one[2]), args.one[3], args.steps)))
        return
    results = []
    for spec in args.models:
        name, path = spec.split("=", 1)
        for dtype in args.dtypes:
            for tokens in args.tokens:
                for mode in MODES:
                    run = subprocess.run([sys.executable, __file__, "--one", path, mode, str(tokens), dtype, "--steps", str(args.steps)],
                                         capture_output=True, text=True, check=True)
                    results.append({"model": name, **json.loads(run.stdout.strip().splitlines()[-1])})
                    print(f"{name} {dtype} {tokens} {mode}: {results[-1]['tokens_per_s']:.0f} tok/s, "
                          f"{results[-1]['peak_rss_gb']:.2f} GB", flush=True)
    lines = ["| model | vocabulary | dtype | tokens/step | path | loss | tokens/s | peak RSS GB |", "|---|---|---|---|---|---|---|---|"]
    for r in results:
        lines.append(f"| {r['model']} | {r['vocab']:,} | {r['dtype']} | {r['tokens']} | {r['mode']} | {r['loss']:.5f} | "
                     f"{r['tokens_per_s']:.0f} | {r['peak_rss_gb']:.2f} |")
    table = "\n".join(lines)
    print(table)
    cpu = next((line.split(":", 1)[1].strip() for line in Path("/proc/cpuinfo").read_text().splitlines()
                if line.startswith("model name")), platform.processor())
    flags = Path("/proc/cpuinfo").read_text()
    kind = "AMX" if "amx_bf16" in flags else "avx512" if "avx512f" in flags else "AVX2"
    import torch

    Path(args.out).write_text(json.dumps({"cpu": cpu, "cpu_kind": kind, "threads": torch.get_num_threads(), "torch": torch.__version__,
                                          "lora": "r=16, every linear layer", "row_tokens": ROW,
                                          "results": results, "table": table}, indent=1) + "\n")


if __name__ == "__main__":
    main()
