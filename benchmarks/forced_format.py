"""What the answer format alone costs a model: the same problems, answered freely and with the
answer's first text forced (prefilled) to a prefix such as `<think>`.

    python benchmarks/forced_format.py runs/experiments/kl-ablation/start --n 500 --data-seed 1234
    python benchmarks/forced_format.py MODEL --data items.jsonl --prefix '<think>' --prefix $'<think></think>\n<answer>' \
        --out forced.jsonl                # custom items (chat prompts); every answer written to --out

A diagnostic for the KL ablation: the base writes free-form answers, so its strict score is 0 and
its loose score is measured in a format the GRPO arms no longer use. Forcing `<think>` shows the
base's accuracy *in the tag format* before any GRPO step, which separates the cost of the format
from the cost of GRPO's updates. Greedy decoding, posttrain's batched engine and answer parser,
the items of `posttrain compare --task arithmetic` (same --n, --seed and --data-seed), or of
`--task custom --data FILE` with --data. The real-model KL experiment (experiments/kl-real.yaml) used it
to measure the base with and without its reasoning (run by hand now: the plan does not; its header gives the command): forced to open `<think>` (worked, tagged) and
forced to `<think></think>\n<answer>` (no reasoning: what a policy that games the format reward
writes).
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "src"))

from posttrain.evaluation.scoring import score_completion  # noqa: E402
from posttrain.evaluation.tasks import ARITHMETIC_SEED, load_task  # noqa: E402
from posttrain.generation.base import SamplingParams  # noqa: E402
from posttrain.generation.local import TransformersEngine  # noqa: E402


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("model", help="model directory (or tiny:..., hub id)")
    parser.add_argument("--n", type=int, default=500)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--data-seed", type=int, default=ARITHMETIC_SEED)
    parser.add_argument("--max-new-tokens", type=int, default=48)
    parser.add_argument("--prefix", action="append", help="forced start of the answer (repeatable; default '<think>')")
    parser.add_argument("--data", help="items of `--task custom` (prompt: chat messages, answer) instead of the arithmetic task")
    parser.add_argument("--out", type=Path, help="write every scored answer here (JSONL, one record per item and prefix)")
    args = parser.parse_args(argv)

    task = "custom" if args.data else "arithmetic"
    items = load_task(task, n=args.n, seed=args.seed, data=args.data, **({} if args.data else {"data_seed": args.data_seed}))
    engine = TransformersEngine(args.model, use_chat_template=False, progress=False)
    rendered = [engine.tokenizer.apply_chat_template(i["prompt"], tokenize=False, add_generation_prompt=True) for i in items]
    params = SamplingParams(max_new_tokens=args.max_new_tokens)
    source = f"custom {args.data}" if args.data else f"arithmetic, data seed {args.data_seed}"
    print(f"{args.model}: {source}, n={len(items)}, greedy, {args.max_new_tokens} new tokens\n")
    print("| answer starts with | strict | loose | format |\n|---|---|---|---|")
    records = []
    for prefix in ["", *(args.prefix or ["<think>"])]:
        completions = engine.generate([r + prefix for r in rendered], params)
        # scored as `posttrain eval` scores, on the whole answer: the forced prefix included
        rows = [score_completion(i, prefix or "free", dataclasses.replace(c, text=prefix + c.text)) for i, c in zip(items, completions)]
        strict, loose, fmt = (sum(r[k] for r in rows) / len(rows) for k in ("strict", "loose", "format"))
        print(f"| {f'`{prefix}`' if prefix else '(free)'} | {strict:.1%} | {loose:.1%} | {fmt:.2f} |".replace("\n", "⏎"))
        records += [{**r, "prefix": prefix} for r in rows]
    if args.out:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text("".join(json.dumps(r, default=str) + "\n" for r in records))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
