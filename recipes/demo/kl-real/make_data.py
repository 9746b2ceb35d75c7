"""The data of the real-model KL experiment (committed beside this script; rerun it to rebuild them, same bytes).

    python recipes/demo/kl-real/make_data.py

The files benchmarks/kl_real.py generated at run time (kl_ablation.build_data at the plan's sizes, 2026-12-02),
now committed so that the plan (experiments/kl-real.yaml) and its lock can name and hash them. Arithmetic
word problems from `posttrain.data.synthetic` (GSM8K's shape), every prompt opening with grpo.yaml's
`data.system_prompt`:

- heldout-chats.jsonl: the test set, the 300 items of `posttrain compare --task arithmetic --n 300 --seed 0
  --data-seed 1234`, asked as chats with the experiment's system prompt (`--task custom --data ...`).
- base.jsonl: 960 training problems (seed 0, every held-out and dev question removed) in 120 chats of 8 after
  the system prompt; 271 of the answers (tag share 0.3, random.Random(2)) written
  `<think>WORK</think>\\n<answer>N</answer>`, the rest free-form ("WORK The answer is N.").
- grpo.jsonl: the next 512 such problems, question/answer with GSM8K's '#### N' gold.

The dev items (data seed 99) are only excluded from training, never asked: no file. The script stops if a
held-out or dev question is in a training file.
"""

from __future__ import annotations

import json
import random
from pathlib import Path

import yaml

from posttrain.data.synthetic import problems
from posttrain.evaluation.tasks import load_task

HERE = Path(__file__).resolve().parent
N_BASE, TURNS, N_GRPO, N_TEST = 960, 8, 512, 300
TAG_SHARE = 0.3
TRAIN_SEED, HELDOUT_SEED, DEV_SEED, EVAL_SEED, TAG_SEED = 0, 1234, 99, 0, 2


def tagged(solution: str, answer: int) -> str:
    """A worked solution in the <think>/<answer> format the experiment's system prompt asks for."""
    return f"<think>{solution.rsplit(' The answer is', 1)[0]}</think>\n<answer>{answer}</answer>"


def main() -> None:
    system = yaml.safe_load((HERE / "grpo.yaml").read_text())["data"]["system_prompt"]
    heldout = load_task("arithmetic", n=N_TEST, seed=EVAL_SEED, data_seed=HELDOUT_SEED)
    dev = load_task("arithmetic", n=N_TEST, seed=EVAL_SEED, data_seed=DEV_SEED)
    excluded = {item["question"] for item in heldout + dev}
    pool, seen = [], set()
    for p in problems(2 * (N_BASE + N_GRPO), TRAIN_SEED):  # seed 0 is one stream: a longer draw extends a shorter one
        if p["question"] not in excluded and p["question"] not in seen:
            seen.add(p["question"])
            pool.append(p)
    base, grpo = pool[:N_BASE], pool[N_BASE:N_BASE + N_GRPO]
    rng = random.Random(TAG_SEED)
    chats = []
    for start in range(0, N_BASE, TURNS):
        messages = [{"role": "system", "content": system}]
        for p in base[start:start + TURNS]:
            answer = tagged(p["solution"], p["answer"]) if rng.random() < TAG_SHARE else p["solution"]
            messages += [{"role": "user", "content": p["question"]}, {"role": "assistant", "content": answer}]
        chats.append({"messages": messages})
    files = {
        "base": chats,
        "grpo": [{"question": p["question"], "answer": f"{p['solution']}\n#### {p['answer']}"} for p in grpo],
        "heldout-chats": [{"id": i["id"], "prompt": [{"role": "system", "content": system}, {"role": "user", "content": i["question"]}],
                           "answer": i["gold"]} for i in heldout],
    }
    text = {name: "".join(json.dumps(r) + "\n" for r in rows) for name, rows in files.items()}
    leaked = [q for q in sorted(excluded) if json.dumps(q)[1:-1] in text["base"] + text["grpo"]]
    if leaked:
        raise SystemExit(f"{len(leaked)} held-out/dev question(s) in the training files, e.g. {leaked[0]!r}")
    (HERE / "data").mkdir(exist_ok=True)
    for name, content in text.items():
        (HERE / "data" / f"{name}.jsonl").write_text(content)
        print(f"{HERE / 'data' / name}.jsonl: {len(files[name])} rows")


if __name__ == "__main__":
    main()
