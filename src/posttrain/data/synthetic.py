"""Arithmetic word problems generated offline with a seed (GSM8K's shape: a short story, one or two
operations, an integer answer). They are the data of the tiny demos and tests, so nothing needs a hub.

    python -m posttrain.data.synthetic OUT_DIR [--n 200] [--seed 0]

writes `sft.jsonl` (prompt/completion), `messages.jsonl` (chats), `text.jsonl` (raw text for CPT),
`problems.jsonl` (question/answer, GSM8K-style `#### 19` gold), `preferences.jsonl`
(prompt/chosen/rejected: the right worked answer preferred over one with a wrong result) and
`tool_calls.jsonl` (OpenAI-format chats in which the assistant calls a calculator tool, with the
tool's schema in a `tools` column).

Held-out problems: the problem space is small (mostly the ~50,000 distinct multiplication stories),
so two seeds' streams collide, and a long enough stream of any seed holds every question. Seeds
alone can therefore never keep evaluation items out of training data. Instead 1 question in
HELD_OUT_SHARE (chosen by a hash of its text, so the split is the same on every machine and for
every seed) is reserved: `problems()` never returns a reserved question, `problems(...,
held_out=True)` returns only reserved ones (the `arithmetic` evaluation task draws from these). The
two sets are disjoint at any size and any seeds.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import random
from pathlib import Path

NAMES = ["Tom", "Ana", "Ravi", "Mei", "Olu", "Sara", "Ken", "Lena", "Omar", "Ines"]
ITEMS = ["apples", "pencils", "stickers", "marbles", "books", "coins", "cards", "shells"]


def problem(rng: random.Random) -> dict:
    """One problem: {'question', 'answer' (int), 'solution' (worked text ending 'The answer is N.'), 'expression'}."""
    name, item = rng.choice(NAMES), rng.choice(ITEMS)
    kind = rng.choice(["add", "sub", "mul", "add_mul"])
    if kind == "add":
        a, b = rng.randint(10, 499), rng.randint(10, 499)
        q = f"{name} has {a} {item} and gets {b} more. How many {item} does {name} have now?"
        work, ans, expr = f"{a} + {b} = {a + b}.", a + b, f"{a} + {b}"
    elif kind == "sub":
        a = rng.randint(50, 999)
        b = rng.randint(1, a)
        q = f"{name} has {a} {item} and gives away {b}. How many {item} are left?"
        work, ans, expr = f"{a} - {b} = {a - b}.", a - b, f"{a} - {b}"
    elif kind == "mul":
        a, b = rng.randint(2, 12), rng.randint(2, 60)
        q = f"{name} buys {a} boxes with {b} {item} in each box. How many {item} is that?"
        work, ans, expr = f"{a} * {b} = {a * b}.", a * b, f"{a} * {b}"
    else:
        a, b, c = rng.randint(2, 9), rng.randint(2, 20), rng.randint(1, 50)
        q = f"{name} has {c} {item} and buys {a} packs of {b}. How many {item} does {name} have?"
        work, ans, expr = f"{a} * {b} = {a * b}. {a * b} + {c} = {a * b + c}.", a * b + c, f"{a} * {b} + {c}"
    return {"question": q, "answer": ans, "solution": f"{work} The answer is {ans}.", "expression": expr}


def wrong_solution(p: dict, rng: random.Random) -> str:
    """The worked solution with a wrong final result (off by a small non-zero amount)."""
    wrong = p["answer"] + rng.choice([-1, 1]) * rng.randint(1, 9)
    work = p["solution"].rsplit(" The answer is", 1)[0]
    head, _, _ = work.rpartition("= ")
    return f"{head}= {wrong}. The answer is {wrong}."


# The schema of posttrain.tools.calculator:calculator, as transformers' get_json_schema writes it (a test
# keeps them equal): the SFT chats offer the very tool GRPO and evaluation call.
CALCULATOR = {
    "type": "function",
    "function": {
        "name": "calculator",
        "description": "Evaluate an arithmetic expression.",
        "parameters": {"type": "object", "properties": {"expression": {"type": "string", "description": "An arithmetic expression such as '12 * 7 + 5'."}},
                       "required": ["expression"]},
    },
}


def tool_chat(p: dict) -> dict:
    """A chat where the assistant calls the calculator, reads the result and answers."""
    return {
        "messages": [
            {"role": "user", "content": p["question"]},
            {"role": "assistant", "content": "", "tool_calls": [{"type": "function", "function": {"name": "calculator", "arguments": {"expression": p["expression"]}}}]},
            {"role": "tool", "name": "calculator", "content": str(p["answer"])},
            {"role": "assistant", "content": f"The answer is {p['answer']}."},
        ],
        "tools": [CALCULATOR],
    }


HELD_OUT_SHARE = 16  # 1 question in 16 is reserved for evaluation


def is_held_out(question: str) -> bool:
    """Whether ``question`` is in the share of the problem space reserved for evaluation."""
    return hashlib.sha256(question.encode()).digest()[0] % HELD_OUT_SHARE == 0


def problem_stream(seed: int, *, held_out: bool = False):
    """(draw index, problem) for the problems of ``seed``'s stream on one side of the held-out split."""
    rng = random.Random(seed)
    draw = 0
    while True:
        p = problem(rng)
        if is_held_out(p["question"]) == held_out:
            yield draw, p
        draw += 1


def problems(n: int, seed: int, *, held_out: bool = False) -> list[dict]:
    """The first ``n`` training problems of ``seed`` (a shorter list is a prefix of a longer one);
    ``held_out=True``: the first ``n`` reserved ones instead. Repeats are possible within a list."""
    stream = problem_stream(seed, held_out=held_out)
    return [next(stream)[1] for _ in range(n)]


def write_all(out_dir: Path, n: int = 200, seed: int = 0) -> dict[str, Path]:
    out_dir.mkdir(parents=True, exist_ok=True)
    items = problems(n, seed)
    rng = random.Random(seed + 1)
    rows = {
        "sft": [{"prompt": p["question"], "completion": " " + p["solution"]} for p in items],
        "messages": [{"messages": [{"role": "user", "content": p["question"]}, {"role": "assistant", "content": p["solution"]}]} for p in items],
        "text": [{"text": f"{p['question']} {p['solution']}"} for p in items],
        "problems": [{"question": p["question"], "answer": f"{p['solution']}\n#### {p['answer']}"} for p in items],
        "tool_calls": [tool_chat(p) for p in items[: max(1, n // 2)]],
        "preferences": [{"prompt": p["question"], "chosen": " " + p["solution"], "rejected": " " + wrong_solution(p, rng)} for p in items],
    }
    paths = {}
    for name, data in rows.items():
        paths[name] = out_dir / f"{name}.jsonl"
        paths[name].write_text("".join(json.dumps(r) + "\n" for r in data))
    return paths


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("out_dir", type=Path)
    parser.add_argument("--n", type=int, default=200)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
    for name, path in write_all(args.out_dir, args.n, args.seed).items():
        print(f"{name}: {path}")
