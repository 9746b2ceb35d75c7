"""The data of the tool-use example (committed beside this script; rerun it to rebuild them, same bytes).

    python recipes/tool-use/make_data.py

Word problems from `posttrain.data.synthetic` (3-digit sums and differences, products, a product
plus a sum), every chat offering the calculator tool (`posttrain.tools.calculator`, the schema
`synthetic.CALCULATOR`):

- sft.jsonl: 2,000 of synthetic's tool-calling chats (the assistant calls the calculator with the
  expression, reads the result, answers "The answer is N."), packed 8 to a chat: one system turn
  with the tool's schema (~220 tokens for the tiny tokenizer) is then computed once per 8 problems
  instead of once per problem, and problem 1 of each chat is exactly what GRPO and evaluation ask.
- grpo.jsonl: 600 other training problems, question/answer (the gold number), for GRPO.
- eval.jsonl: 200 held-out problems (the share of the problem space training data never holds) as
  chats, for `posttrain compare --task custom --tools posttrain.tools.calculator:calculator`.
"""

from __future__ import annotations

import json
from pathlib import Path

from posttrain.data.synthetic import CALCULATOR, problems, tool_chat

HERE = Path(__file__).resolve().parent / "data"


PER_CHAT = 8


def packed_chat(group: list[dict]) -> dict:
    """Several of synthetic's tool-calling chats as one conversation, the calculator offered once."""
    return {"messages": [m for p in group for m in tool_chat(p)["messages"]], "tools": [CALCULATOR]}


def main() -> None:
    train = problems(2600, seed=21)
    sft = [packed_chat(train[i:i + PER_CHAT]) for i in range(0, 2000, PER_CHAT)]
    grpo = [{"question": p["question"], "answer": str(p["answer"])} for p in train[2000:]]
    held_out = problems(200, seed=22, held_out=True)
    evaluation = [{"id": f"tool-{i}", "prompt": [{"role": "user", "content": p["question"]}], "answer": p["answer"]}
                  for i, p in enumerate(held_out)]
    HERE.mkdir(exist_ok=True)
    for name, rows in (("sft", sft), ("grpo", grpo), ("eval", evaluation)):
        (HERE / f"{name}.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
        print(f"{HERE / name}.jsonl: {len(rows)} rows")


if __name__ == "__main__":
    main()
