"""The KL experiments' data: arithmetic word problems split into training chats, GRPO prompts and two
held-out sets, with no held-out question in any training file.

    python benchmarks/kl_data.py            # the KL ablation's files (experiments/kl-ablation.yaml), checked
                                            # against the committed recipes/demo/kl-ablation/data/manifest.json

The KL ablation's plan trains on these files and tests on heldout.jsonl; recipes/demo/kl-real/make_data.py
writes kl-real's committed files with its own copy of the same steps (it ships with the recipes, which cannot
import benchmarks/). Everything is drawn from `posttrain.data.synthetic`:

* held-out: exactly the items `posttrain compare --task arithmetic --n N --seed 0` answers (generator seed
  1234); dev: the same from seed 99, the split the ablation was tuned on (tuning.md);
* training: seed 0's stream with every held-out and dev question removed; the base's share in chats of
  `turns` problems after one system prompt (a `tag_share` of the answers in <think>/<answer> tags), the rest
  as GRPO prompts. The files as written are searched for every held-out and dev question; one found stops it.

The committed manifest pins every file's sha256. base.jsonl (30,000 problems, 7 MB) is not committed: this
script writes it, and refuses when what it would write differs from the manifest (the generator moved, as it
did once between the ablation's first run and its dose-response: tuning.md section 5).
"""

from __future__ import annotations

import argparse
import hashlib
import json
import random
import shutil
import sys
import tempfile
from dataclasses import dataclass, field
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
DATA = REPO / "recipes" / "demo" / "kl-ablation" / "data"  # the KL ablation's files

TRAIN_SEED = 0  # posttrain.data.synthetic seed of every training problem
HELDOUT_SEED = 1234  # the arithmetic task's generator seed (posttrain's default): the held-out set
DEV_SEED = 99  # a second held-out generator seed, used only for tuning
EVAL_SEED = 0  # compare --seed: which N items of the task
TAG_SEED = 2  # which chat examples are written with <think>/<answer> tags
TRAINING_FILES = ("base", "grpo")  # data/NAME.jsonl that any stage trains on


@dataclass(frozen=True)
class Scale:
    """Sizes of one variant of an experiment's data (and, for the scripts that use them, its runs)."""

    model_size: str  # tiny:qwen2-SIZE
    n_base: int  # training problems for the base
    turns: int  # problems per base chat (user/assistant turns after one system prompt)
    n_grpo: int  # GRPO prompts (other training problems)
    n_eval: int  # held-out problems every arm answers
    max_new_tokens: int
    base: tuple[str, ...] = ()  # overrides of the base recipe
    arms: dict[str, tuple[str, ...]] = field(default_factory=dict)  # overrides per arm


# The KL ablation (tuning.md): 30,000 base problems, 2,000 GRPO prompts, 500 held-out items, a 20% tag share.
ABLATION = Scale(model_size="2m", n_base=30_000, turns=8, n_grpo=2_000, n_eval=500, max_new_tokens=48)
ABLATION_TAG_SHARE = 0.2


def tagged(solution: str, answer: int) -> str:
    """A worked solution in the <think>/<answer> format the evaluation asks for."""
    work = solution.rsplit(" The answer is", 1)[0]
    return f"<think>{work}</think>\n<answer>{answer}</answer>"


def _write_jsonl(path: Path, rows: list[dict]) -> None:
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))


def _sha(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def build_data(out: Path, scale: Scale, tag_share: float, system_prompt: str | None = None) -> dict:
    """Write the training splits and the held-out record; return the manifest (also data/manifest.json).

    The base's chats open with the evaluation task's system prompt (MATH_SYSTEM_PROMPT), or with
    ``system_prompt``: then the held-out and dev items are also written as chats that open with it
    (heldout-chats.jsonl, dev-chats.jsonl: `posttrain compare --task custom --data ...`; the same items
    as `--task arithmetic`, asked with the other prompt), for GRPO's `data.system_prompt`."""
    from posttrain.data.synthetic import problems
    from posttrain.data.task_prompts import MATH_SYSTEM_PROMPT
    from posttrain.evaluation.tasks import load_task

    system = MATH_SYSTEM_PROMPT if system_prompt is None else system_prompt

    out.mkdir(parents=True, exist_ok=True)
    # Exactly the items `posttrain compare --task arithmetic --n N --seed 0 [--data-seed S]` answers.
    heldout = load_task("arithmetic", n=scale.n_eval, seed=EVAL_SEED, data_seed=HELDOUT_SEED)
    dev = load_task("arithmetic", n=scale.n_eval, seed=EVAL_SEED, data_seed=DEV_SEED)
    excluded = {item["question"] for item in heldout + dev}
    wanted = scale.n_base + scale.n_grpo
    draw = wanted + wanted // 10 + 100
    while True:  # seed 0 is one stream: a longer draw extends a shorter one
        pool, seen = [], set()
        for drawn, p in enumerate(problems(draw, TRAIN_SEED), 1):
            if p["question"] not in excluded and p["question"] not in seen:
                seen.add(p["question"])
                pool.append(p)
                if len(pool) == wanted:
                    break
        if len(pool) == wanted:
            break
        draw *= 2
    base, grpo = pool[: scale.n_base], pool[scale.n_base:]

    rng = random.Random(TAG_SEED)
    chats, n_tagged = [], 0
    for start in range(0, len(base), scale.turns):
        messages = [{"role": "system", "content": system}]
        for p in base[start: start + scale.turns]:
            tag = rng.random() < tag_share
            n_tagged += tag
            messages += [{"role": "user", "content": p["question"]},
                         {"role": "assistant", "content": tagged(p["solution"], p["answer"]) if tag else p["solution"]}]
        chats.append({"messages": messages})
    files = {
        "base": (out / "base.jsonl", chats),
        "grpo": (out / "grpo.jsonl", [{"question": p["question"], "answer": f"{p['solution']}\n#### {p['answer']}"} for p in grpo]),
        "heldout": (out / "heldout.jsonl", [{"id": i["id"], "question": i["question"], "answer": i["gold"]} for i in heldout]),
        "dev": (out / "dev.jsonl", [{"id": i["id"], "question": i["question"], "answer": i["gold"]} for i in dev]),
    }
    if system_prompt is not None:
        for name, items in (("heldout", heldout), ("dev", dev)):
            files[f"{name}-chats"] = (out / f"{name}-chats.jsonl", [
                {"id": i["id"], "prompt": [{"role": "system", "content": system}, {"role": "user", "content": i["question"]}],
                 "answer": i["gold"]} for i in items])
    for path, rows in files.values():
        _write_jsonl(path, rows)

    # The promise, checked on the files as written: no held-out (or dev) question in training data.
    training_text = "".join(files[name][0].read_text() for name in TRAINING_FILES)
    leaked = [q for q in sorted(excluded) if json.dumps(q)[1:-1] in training_text]  # as JSON writes it
    if leaked:
        raise SystemExit(f"data: {len(leaked)} held-out/dev question(s) found in the training files, e.g. {leaked[0]!r}")
    trained = {p["expression"] for p in pool}  # the computation, whatever the story around it
    manifest = {
        "seeds": {"train": TRAIN_SEED, "heldout": HELDOUT_SEED, "dev": DEV_SEED, "eval_shuffle": EVAL_SEED, "tags": TAG_SEED},
        "counts": {"base": len(base), "base_chats": len(chats), "base_tagged": n_tagged, "grpo": len(grpo),
                   "heldout": len(heldout), "dev": len(dev), "seed0_problems_drawn": drawn},
        "tag_share": tag_share,
        "system_prompt": system,
        "heldout_questions_in_training": len(leaked),  # 0, or the run stopped above
        "heldout_same_numbers_in_training": sum(i["expression"] in trained for i in heldout),
        "dev_same_numbers_in_training": sum(i["expression"] in trained for i in dev),
        "files": {name: {"path": str(path.relative_to(out.parent)), "sha256": _sha(path)} for name, (path, _) in files.items()},
    }
    (out / "manifest.json").write_text(json.dumps(manifest, indent=1) + "\n")
    return manifest


def ablation_files(out: Path = DATA) -> dict:
    """Write the KL ablation's files into ``out`` when they reproduce its committed manifest; SystemExit(2) naming
    the files that differ otherwise (nothing written)."""
    with tempfile.TemporaryDirectory() as tmp:
        fresh = Path(tmp) / out.name
        manifest = build_data(fresh, ABLATION, ABLATION_TAG_SHARE)
        committed = out / "manifest.json"
        if committed.is_file():
            pinned = json.loads(committed.read_text())
            moved = sorted(k for k in {**pinned["files"], **manifest["files"]}
                           if pinned["files"].get(k, {}).get("sha256") != manifest["files"].get(k, {}).get("sha256"))
            if moved or pinned != manifest:
                print(f"error: the generator no longer writes the committed KL ablation data ({committed}): "
                      f"{', '.join(moved) or 'the manifest'} differ(s). posttrain.data.synthetic or this script changed; "
                      "the plan's lock pins heldout.jsonl, and the experiment's numbers came from the committed files. "
                      "Restore the generator, or regenerate deliberately (delete the manifest) and lock the plan again.",
                      file=sys.stderr)
                raise SystemExit(2)
        out.mkdir(parents=True, exist_ok=True)
        for f in fresh.iterdir():
            shutil.copyfile(f, out / f.name)
    return manifest


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--out", type=Path, default=DATA, help=f"folder (default {DATA.relative_to(REPO)})")
    args = parser.parse_args(argv)
    sys.path.insert(0, str(REPO / "src"))
    manifest = ablation_files(args.out)
    counts = manifest["counts"]
    print(f"{args.out}: base.jsonl ({counts['base']} problems in {counts['base_chats']} chats, {counts['base_tagged']} tagged), "
          f"grpo.jsonl ({counts['grpo']}), heldout.jsonl ({counts['heldout']}), dev.jsonl ({counts['dev']}); "
          "no held-out or dev question in the training files; every sha256 as committed")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
