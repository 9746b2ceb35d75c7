"""Padding waste: real (non-padding) tokens per second of SFT and DPO batching choices, side by side.

    python benchmarks/padding.py --size 1m             # SFT: one interleaved pass over 160 rows per contestant
    python benchmarks/padding.py --size 6m --rows 400 --default   # bigger, plus posttrain's own choice as a contestant
    python benchmarks/padding.py --algorithm dpo --size 1m   # DPO: grouping and precomputed reference log-probs

SFT data: prompt/completion rows whose length varies ~14x (1 to 10 arithmetic problems per row,
long-tailed like real chat data: most rows short, a few long). Contestants, all built by posttrain
in one process (`build_run`: the run's own trainer, collator and sampler); each takes one pass over
the rows, timed batch by batch with the contestants alternating (forward + backward of the trainer's
`compute_loss`), so a shared machine's load swings hit all of them alike:

- padded:            TRL's default: random batches padded to the longest row.
- grouped:           `train_sampling_strategy=group_by_length` (rows of similar length share a batch).
- padding_free:      `padding_free=true`: each batch flattened into one row with per-row position ids.
- bfd_packing:       `packing=true, packing_strategy=bfd`: rows packed into bins of max_length,
                     padding-free; a "row" is then a bin, so its batch size is cut to hold about as
                     many real tokens per step as the others.
- posttrain_default (--default): no batching key set: what posttrain chooses on this machine (printed).

Reported: real tokens/s (tokens counted as TRL's `num_tokens` counts them: no padding), the ratio
to `padded`, and the share of token slots that were padding. Whether the choices learn the same
is a test (tests/e2e/test_padding_free.py), not a timing. Writes benchmarks/results/padding_sft.json.

DPO contestants, built the same way, LoRA (the recipe's; reference = adapter off) and full
fine-tuning (reference = a frozen copy): padded (TRL's default), grouped (`group_by_length`), and
`precompute_ref_log_probs=true` (one reference pass over the data while the trainer is built,
then no reference forward per step). Reported: build time (the reference pass included), seconds
per step, real tokens/s. TRL 1.16 refuses DPO padding-free ("temporarily unavailable"): not a
contestant. Writes benchmarks/results/padding_dpo.json. On a shared machine compare ratios.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import platform
import random
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
REPO = HERE.parent

FULL = ["model.use_lora=false", "model.lora_r=null", "model.lora_alpha=null"]
SFT_CONTESTANTS: dict[str, list[str]] = {
    "padded": ["training.train_sampling_strategy=random", "training.padding_free=false"],
    "grouped": ["training.train_sampling_strategy=group_by_length", "training.padding_free=false"],
    "padding_free": ["training.train_sampling_strategy=random", "training.padding_free=true"],
    "bfd_packing": ["training.train_sampling_strategy=random", "training.packing=true", "training.packing_strategy=bfd"],
}


def chat_rows(n: int, seed: int) -> list[dict]:
    """prompt/completion rows of k problems each, k long-tailed in 1..10 (log-uniform): lengths vary ~10x."""
    sys.path.insert(0, str(REPO / "src"))
    from posttrain.data.synthetic import problem

    rng = random.Random(seed)
    rows = []
    for _ in range(n):
        k = min(10, int(math.exp(rng.uniform(0, math.log(11)))))
        ps = [problem(rng) for _ in range(k)]
        rows.append({"prompt": " ".join(p["question"] for p in ps), "completion": " " + " ".join(p["solution"] for p in ps)})
    return rows


def preference_rows(n: int, seed: int) -> list[dict]:
    """prompt/chosen/rejected with the same long-tailed number of problems per row."""
    sys.path.insert(0, str(REPO / "src"))
    from posttrain.data.synthetic import problem, wrong_solution

    rng = random.Random(seed)
    rows = []
    for _ in range(n):
        k = min(10, int(math.exp(rng.uniform(0, math.log(11)))))
        ps = [problem(rng) for _ in range(k)]
        rows.append({"prompt": " ".join(p["question"] for p in ps), "chosen": " " + " ".join(p["solution"] for p in ps),
                     "rejected": " " + " ".join(wrong_solution(p, rng) for p in ps)})
    return rows


def sft_contestants(rows: list[dict], size: str, batch: int, max_length: int) -> tuple[dict[str, list[str]], str]:
    """The SFT contestants' recipe overrides; bfd packing gets a batch of bins holding about `batch` rows' tokens."""
    from transformers import AutoTokenizer

    from posttrain.models.tiny import resolve_tiny

    tok = AutoTokenizer.from_pretrained(resolve_tiny(f"tiny:qwen2-{size}"))
    lengths = [len(tok(r["prompt"] + r["completion"])["input_ids"]) for r in rows]
    mean_len = statistics.mean(lengths)
    contestants = {k: list(v) for k, v in SFT_CONTESTANTS.items()}
    bins = max(1, round(batch * mean_len / max_length))
    contestants["bfd_packing"].append(f"training.per_device_train_batch_size={bins}")
    note = f"{len(rows)} rows, tokens per row min {min(lengths)} / mean {mean_len:.0f} / max {max(lengths)} (max_length {max_length})"
    return contestants, note


def real_tokens(batch) -> int:
    """Non-padding tokens of a collated batch, counted as TRL's `num_tokens` counts them."""
    if "attention_mask" in batch:
        return int(batch["attention_mask"].sum())
    return int(batch["position_ids"].numel())


def interleaved_pass(trainers: dict, progress: bool = False) -> dict[str, dict]:
    """One pass of every contestant over its training batches, one batch at a time in rotating order
    (forward, loss, backward): seconds, real tokens, token slots and batches each."""
    names = list(trainers)
    steps = {name: len(trainers[name][0].get_train_dataloader()) for name in names}
    totals = {name: {"seconds": 0.0, "real_tokens": 0, "token_slots": 0, "batches": 0} for name in names}
    for i in range(max(steps.values())):
        for name in names[i % len(names):] + names[:i % len(names)]:
            if i >= steps[name]:
                continue
            trainer, batches = trainers[name]
            start = time.perf_counter()
            batch = trainer._prepare_inputs(next(batches))
            loss = trainer.compute_loss(trainer.model, batch)
            loss.backward()
            trainer.model.zero_grad(set_to_none=True)
            t = totals[name]
            t["seconds"] += time.perf_counter() - start
            t["real_tokens"] += real_tokens(batch)
            t["token_slots"] += batch["input_ids"].numel()
            t["batches"] += 1
        if progress and (i + 1) % 5 == 0:
            print(f"  batch {i + 1}: " + "  ".join(f"{n} {totals[n]['real_tokens'] / max(totals[n]['seconds'], 1e-9):.0f}" for n in names), flush=True)
    return totals


def bench_sft(args, work: Path, data: Path, contestants: dict[str, list[str]]) -> tuple[dict, list[str]]:
    """All contestants in this process, built by posttrain (`build_run`, so its start-up choices apply),
    timed batch by batch in rotating order: forward + backward of the trainer's own `compute_loss` on
    its own dataloader's batches. Interleaving keeps a shared machine's load swings out of the ratios."""
    import contextlib
    import io

    from posttrain.algorithms.run import build_run
    from posttrain.recipe.load import load_recipe

    trainers, choices = {}, []
    for name, overrides in contestants.items():
        loaded = load_recipe("recipes/sft/tiny-cpu.yaml", [
            f"model.base_model_name=tiny:qwen2-{args.size}", f"data.datasets[0].name={data}", f"training.output_dir={work / name}",
            f"training.per_device_train_batch_size={args.batch}", f"training.max_length={args.max_length}",
            "training.resume_from_checkpoint=false", *overrides])
        log = io.StringIO()
        with contextlib.redirect_stdout(log):
            run, trainer = build_run(loaded)
        run.lock.release()
        if name == "posttrain_default":
            choices = [line.strip() for line in log.getvalue().splitlines() if "posttrain at start-up" in line and
                       any(k in line for k in ("padding_free", "sampling_strategy", "packing"))]
        trainer.model.train()
        trainers[name] = (trainer, iter(trainer.get_train_dataloader()))

    # Every contestant takes one pass over the training rows (grouping changes the row lengths from
    # batch to batch, so a few batches would say nothing), one batch at a time in rotating order.
    names = list(contestants)
    totals = interleaved_pass(trainers, progress=True)
    runs = {name: [{**t, "tokens_per_s": t["real_tokens"] / t["seconds"]}] for name, t in totals.items()}
    table = {}
    for name in names:
        rs = runs[name]
        table[name] = {"tokens_per_s": statistics.median(r["tokens_per_s"] for r in rs), "batches": rs[0]["batches"],
                       "real_tokens": sum(r["real_tokens"] for r in rs),
                       "padding_share": round(1 - sum(r["real_tokens"] for r in rs) / sum(r["token_slots"] for r in rs), 3),
                       "overrides": contestants[name]}
    for name in names:
        table[name]["ratio"] = round(table[name]["tokens_per_s"] / table["padded"]["tokens_per_s"], 3)
    print()
    print(f"| SFT batching (tiny:qwen2-{args.size}, batch {args.batch}, one pass over {args.rows} rows) | real tok/s | ratio vs padded | "
          "padding share of token slots | batches | real tokens |")
    print("|---|---|---|---|---|---|")
    for name, t in table.items():
        print(f"| {name} | {t['tokens_per_s']:.0f} | {t['ratio']:.2f} | {t['padding_share']:.0%} | {t['batches']} | {t['real_tokens']} |")
    if choices:
        print("\nposttrain's default here: " + "; ".join(choices))
    return {"contestants": table, "runs": runs}, choices


DPO_CONTESTANTS: dict[str, list[str]] = {
    # LoRA (the tiny recipe's): the reference is the base with the adapter off
    "lora_padded": ["training.train_sampling_strategy=random", "training.precompute_ref_log_probs=false"],
    "lora_grouped": ["training.train_sampling_strategy=group_by_length", "training.precompute_ref_log_probs=false"],
    "lora_precomputed_ref": ["training.train_sampling_strategy=random", "training.precompute_ref_log_probs=true"],
    # full fine-tuning: a frozen copy of the model, or none with precomputed reference log-probs
    "full_padded": ["training.train_sampling_strategy=random", "training.precompute_ref_log_probs=false", *FULL],
    "full_precomputed_ref": ["training.train_sampling_strategy=random", "training.precompute_ref_log_probs=true", *FULL],
}


def bench_dpo(args, work: Path, data: Path) -> dict:
    """DPO contestants built by posttrain in this process. Building one with precompute_ref_log_probs
    runs TRL's reference pass over the data (timed: `build_s`); then each takes one pass over the
    rows, batch by batch with the contestants alternating (forward + backward of `compute_loss`,
    which runs the reference forward unless the log-probs were precomputed)."""
    import contextlib
    import io

    from posttrain.algorithms.run import build_run
    from posttrain.recipe.load import load_recipe

    contestants = {k: v for k, v in DPO_CONTESTANTS.items() if not args.only or k in args.only}
    trainers, build_s = {}, {}
    for name, overrides in contestants.items():
        loaded = load_recipe("recipes/dpo/tiny-cpu.yaml", [
            f"model.base_model_name=tiny:qwen2-{args.size}", f"data.datasets[0].name={data}", f"training.output_dir={work / name}",
            f"training.per_device_train_batch_size={args.batch}", f"training.max_length={args.max_length}",
            "training.eval_strategy=no", "training.eval_steps=null", "data.eval_fraction=null", "training.per_device_eval_batch_size=null",
            "training.resume_from_checkpoint=false", *overrides])
        start = time.perf_counter()
        with contextlib.redirect_stdout(io.StringIO()):
            run, trainer = build_run(loaded)
        build_s[name] = time.perf_counter() - start
        run.lock.release()
        trainer.model.train()
        trainers[name] = (trainer, iter(trainer.get_train_dataloader()))
        print(f"  built {name:<22} in {build_s[name]:6.1f} s", flush=True)

    names = list(contestants)
    totals = interleaved_pass(trainers)
    table = {}
    for name in names:
        t = totals[name]
        table[name] = {"build_s": round(build_s[name], 2), "step_s": round(t["seconds"] / t["batches"], 4),
                       "tokens_per_s": t["real_tokens"] / t["seconds"], "padding_share": round(1 - t["real_tokens"] / t["token_slots"], 3),
                       "epoch_s": round(t["seconds"], 2), "batches": t["batches"], "overrides": contestants[name]}
    print()
    print(f"| DPO (tiny:qwen2-{args.size}, batch {args.batch}, {args.rows} pairs) | build s (incl. reference pass) | s per step | "
          "real tok/s | padding share | one epoch of steps, s |")
    print("|---|---|---|---|---|---|")
    for name, t in table.items():
        print(f"| {name} | {t['build_s']:.1f} | {t['step_s']:.3f} | {t['tokens_per_s']:.0f} | {t['padding_share']:.0%} | {t['epoch_s']:.1f} |")
    return {"contestants": table}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--algorithm", choices=["sft", "dpo"], default="sft")
    parser.add_argument("--size", default="6m", choices=["1m", "2m", "6m"])
    parser.add_argument("--batch", type=int, default=16)
    parser.add_argument("--max-length", type=int, default=512)
    parser.add_argument("--rows", type=int, default=160, help="SFT: training rows (each contestant takes one pass)")
    parser.add_argument("--default", action="store_true", help="SFT: add posttrain's default as a contestant")
    parser.add_argument("--only", nargs="*", help="DPO contestants to run (default: all)")
    args = parser.parse_args()

    sys.path.insert(0, str(REPO / "src"))
    os.chdir(REPO)
    work = Path(tempfile.mkdtemp(prefix=f"padding-{args.algorithm}-"))
    rows = chat_rows(args.rows, 0) if args.algorithm == "sft" else preference_rows(args.rows, 0)
    data = work / "data.jsonl"
    data.write_text("".join(json.dumps(r) + "\n" for r in rows))
    header = {"algorithm": args.algorithm, "model": f"tiny:qwen2-{args.size}", "rows": args.rows, "batch": args.batch,
              "cpus": os.cpu_count(), "machine": platform.machine(),
              "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime())}
    if args.algorithm == "sft":
        contestants, note = sft_contestants(rows, args.size, args.batch, args.max_length)
        if args.default:
            contestants["posttrain_default"] = []
        print(f"data: {note}; model tiny:qwen2-{args.size}; {os.cpu_count()} CPUs", flush=True)
        result, choices = bench_sft(args, work, data, contestants)
        result["posttrain_default"] = choices
    else:
        note = f"{len(rows)} preference rows, 1-10 problems each"
        print(f"data: {note}; model tiny:qwen2-{args.size}; {os.cpu_count()} CPUs", flush=True)
        result = bench_dpo(args, work, data)
    result = {**header, "data": note, **result}
    (HERE / "results").mkdir(exist_ok=True)
    path = HERE / "results" / f"padding_{args.algorithm}.json"
    path.write_text(json.dumps(result, indent=2) + "\n")
    print(f"\nwrote {path}")
    shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
