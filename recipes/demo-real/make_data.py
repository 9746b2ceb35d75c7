"""The data of `make demo-real` (committed beside this script; rerun it to rebuild them, same bytes).

    python recipes/demo-real/make_data.py

Word problems from `posttrain.data.synthetic` (3-digit sums and differences, products, a product
plus a sum), all with one short system prompt that asks for the number in <answer> tags:

- sft.jsonl: 600 training chats. The assistant shows its one line of work, then answers; in 3 of
  4 answers plainly ("... The answer is 413."), in 1 of 4 in the tags the prompt asks for
  ("<answer>413</answer>"). SFT teaches the arithmetic; greedy decoding then mostly answers plainly
  (loose accuracy, not strict), and sampling sometimes uses the tags: a signal for GRPO.
- grpo.jsonl: 400 other training problems, question/answer (the gold number), for GRPO.
- eval.jsonl: 100 held-out problems (the share of the problem space training data never holds)
  as chats with the same system prompt: the dev set. GRPO scores it while it trains (held_out in
  grpo.yaml), and recipes were tuned on it.
- test.jsonl: 300 other held-out problems (no question of eval.jsonl, none repeated), the same chats:
  the test set of `make demo-real`'s compare and of the pre-registered experiment
  (benchmarks/results/grpo_real/plan.md). No recipe was tuned on it.
- test-1500.jsonl: 1,500 further held-out problems (no question of eval.jsonl or test.jsonl, none repeated), the same
  chats, each marked `fact_in_sft`: whether its arithmetic (e.g. "7 * 23", whatever the story) is worked in sft.jsonl.
  The test set of experiments/rl-from-plateau.yaml.
"""

from __future__ import annotations

import json
import random
from pathlib import Path

from posttrain.data.synthetic import problems

SYSTEM = "Solve the problem. Give the final number in <answer> </answer> tags."
HERE = Path(__file__).resolve().parent / "data"


def answer(p: dict, tagged: bool) -> str:
    work = p["solution"].rsplit(" The answer is", 1)[0]
    return f"{work} <answer>{p['answer']}</answer>" if tagged else p["solution"]


def main() -> None:
    rng = random.Random(0)
    train = problems(1000, seed=11)
    sft = [{"messages": [{"role": "system", "content": SYSTEM}, {"role": "user", "content": p["question"]},
                         {"role": "assistant", "content": answer(p, rng.random() < 0.25)}]} for p in train[:600]]
    grpo = [{"question": p["question"], "answer": str(p["answer"])} for p in train[600:]]
    held_out = problems(100, seed=12, held_out=True)
    evaluation = [{"id": f"real-{i}", "prompt": [{"role": "system", "content": SYSTEM}, {"role": "user", "content": p["question"]}],
                   "answer": p["answer"]} for i, p in enumerate(held_out)]
    dev = {p["question"] for p in held_out}
    test, seen = [], set(dev)
    for p in problems(2000, seed=13, held_out=True):
        if len(test) < 300 and p["question"] not in seen:
            seen.add(p["question"])
            test.append({"id": f"test-{len(test)}", "prompt": [{"role": "system", "content": SYSTEM},
                                                             {"role": "user", "content": p["question"]}], "answer": p["answer"]})
    facts = {p["expression"] for p in train[:600]}
    larger = []
    for p in problems(20000, seed=14, held_out=True):
        if len(larger) < 1500 and p["question"] not in seen:
            seen.add(p["question"])
            larger.append({"id": f"t1500-{len(larger)}", "prompt": [{"role": "system", "content": SYSTEM},
                                                                   {"role": "user", "content": p["question"]}],
                           "answer": p["answer"], "fact_in_sft": p["expression"] in facts})
    HERE.mkdir(exist_ok=True)
    for name, rows in (("sft", sft), ("grpo", grpo), ("eval", evaluation), ("test", test), ("test-1500", larger)):
        (HERE / f"{name}.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
        print(f"{HERE / name}.jsonl: {len(rows)} rows")


if __name__ == "__main__":
    main()
