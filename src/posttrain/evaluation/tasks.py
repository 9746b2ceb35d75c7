"""Evaluation tasks: where the problems come from, how they are asked, what their gold answers are.

    items = load_task("arithmetic", n=100)                     # offline, generated, seed 1234
    items = load_task("gsm8k", n=200)                          # hub openai/gsm8k (main, test)
    items = load_task("gsm8k", data="gsm8k_test.jsonl")        # local copy: question/answer columns
    items = load_task("custom", data="my.csv", prompt_column="q", answer_column="a")

Every item is a plain dict (JSON-ready, written into samples.jsonl):

* ``id``     -- stable across runs, shuffles and ``--n``: the source's ``id`` column when it has one,
  else ``<task>-<row index>``; paired statistics match arms on it.
* ``prompt`` -- chat messages: the system prompt of ``prompts.py`` (the one GRPO trains with), then
  the question.
* ``gold``   -- the reference answer as a string: a number ("1400") or a choice letter ("B").
* ``task``, ``scorer`` -- ``"number"``, ``"choice"``, ``"text"`` or ``"math"`` (LaTeX, by math-verify): which
  comparison ``scoring.py`` applies.
* metadata -- ``question``; ``choices`` and ``subject`` for mmlu.

``n`` takes the first N items after a shuffle seeded by ``seed``: every arm of a comparison gets
the identical items, and a smaller N is always a subset of a larger one with the same seed.
Local files are .jsonl, .json (a list of objects), .csv or .parquet (or s3:// ones), read by the one
data reader training uses (posttrain.data.sources).
"""

from __future__ import annotations

import difflib
import json
import random
import string
from collections import Counter
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable

from posttrain.data.task_prompts import choice_prompt, latex_prompt, math_prompt
from posttrain.errors import UserError
from posttrain.rewards.answers import extract_gsm8k_gold, parse_number

__all__ = ["ARITHMETIC_SEED", "TASKS", "Task", "TaskOptions", "get_task", "held_out_items", "load_task", "select_items"]

# The arithmetic task draws only questions that posttrain.data.synthetic reserves for evaluation
# (a fixed hash-chosen share of the problem space that its training problems never contain), so it
# never overlaps training problems of any seed at any size. Seeds alone could not promise that: the
# problem space is small and every long enough stream holds every question.
ARITHMETIC_SEED = 1234
ARITHMETIC_DEFAULT_N = 500



@dataclass(frozen=True)
class TaskOptions:
    """What a task may need besides its name (the CLI's --data, --prompt-column, ...)."""

    data: str | None = None  # local file instead of the hub (required by custom)
    prompt_column: str = "prompt"  # custom only
    answer_column: str = "answer"  # custom only
    image_columns: tuple[str, ...] = ()  # custom only: columns with each row's images
    data_seed: int = ARITHMETIC_SEED  # arithmetic only: the generator's seed
    n: int | None = None  # arithmetic only: how many problems to generate


@dataclass(frozen=True)
class Task:
    name: str
    scorer: str  # "number" | "choice"
    summary: str  # one line for --help
    load: Callable[[TaskOptions], list[dict]]
    # Tokens per answer when --max-new-tokens is not given: room for the reasoning the task's answers need
    # (every token past the answer costs a decoding step, and a model that rambles costs that on every item).
    max_new_tokens: int = 512


# ---------------------------------------------------------------------------------------------
# reading local files


def _rows(task: str, data: str | None, hub: tuple[str, str, str] | None = None) -> list[dict]:
    """The task's rows from --data, else from its hub dataset (name, subset, split), through the
    one data reader (posttrain.data.sources)."""
    from posttrain.data.sources import read_rows

    if data is not None:
        return read_rows(data, "--data")
    name, subset, split = hub
    try:
        return read_rows(name, f"--task {task}", subset=subset, split=split)
    except UserError as e:
        raise UserError(f"{e}. Offline? Pass a local copy with --data FILE, or use --task arithmetic, which needs "
                        "no hub.") from None


def _field(row: dict, column: str, index: int, source: str, hint: str = "") -> Any:
    if column not in row or row[column] is None:
        close = difflib.get_close_matches(column, [str(k) for k in row], n=1)
        maybe = f" Did you mean {close[0]!r}?" if close else ""
        raise UserError(f"{source}: row {index} has no {column!r} column (it has {sorted(map(str, row))}).{maybe}{hint}")
    return row[column]


def _row_id(row: dict, index: int, task: str) -> str:
    return str(row["id"]) if row.get("id") not in (None, "") else f"{task}-{index}"


def _number_gold(value: Any, index: int, source: str, column: str) -> str:
    """The gold answer as a numeric string; a row whose answer is not one number is a data error."""
    gold = extract_gsm8k_gold(str(value))
    if parse_number(gold) is None:
        raise UserError(
            f"{source}: row {index}: {column} {str(value)[-60:]!r} does not end in a single number "
            "(expected '42' or GSM8K's '... #### 42'); numeric scoring needs one"
        )
    return gold


# ---------------------------------------------------------------------------------------------
# the tasks


def _gsm8k(opts: TaskOptions) -> list[dict]:
    source = f"--data {opts.data}" if opts.data else "openai/gsm8k"
    rows = _rows("gsm8k", opts.data, ("openai/gsm8k", "main", "test"))
    items = []
    for i, row in enumerate(rows):
        question = str(_field(row, "question", i, source))
        gold = _number_gold(_field(row, "answer", i, source), i, source, "answer")
        items.append({"id": _row_id(row, i, "gsm8k"), "prompt": math_prompt(question), "gold": gold,
                      "task": "gsm8k", "scorer": "number", "question": question})
    return items


def _choice_letter(answer: Any, n_choices: int, where: str) -> str:
    """MMLU gold as a letter: the hub stores an index (2 -> "C"); files may store a letter or index."""
    letters = string.ascii_uppercase[:n_choices]
    if isinstance(answer, int) and not isinstance(answer, bool) and 0 <= answer < n_choices:
        return letters[answer]
    if isinstance(answer, str):
        text = answer.strip().upper()
        if len(text) == 1 and text in letters:
            return text
        if text.isdigit() and int(text) < n_choices:
            return letters[int(text)]
    raise UserError(f"{where}: answer {answer!r} is neither a choice index 0-{n_choices - 1} nor a letter {letters[0]}-{letters[-1]}")


def _choices(value: Any, where: str) -> list[str]:
    if isinstance(value, str) and value.strip().startswith("["):  # CSV cells hold lists as JSON text
        try:
            value = json.loads(value)
        except ValueError:
            pass
    if not isinstance(value, (list, tuple)) or not 2 <= len(value) <= 26:
        raise UserError(f"{where}: choices must be a list of 2 to 26 options (in CSV, JSON text like [\"a\", \"b\"]), got {str(value)[:80]!r}")
    return [str(c) for c in value]


def _mmlu(opts: TaskOptions) -> list[dict]:
    source = f"--data {opts.data}" if opts.data else "cais/mmlu"
    rows = _rows("mmlu", opts.data, ("cais/mmlu", "all", "test"))
    items = []
    for i, row in enumerate(rows):
        question = str(_field(row, "question", i, source))
        choices = _choices(_field(row, "choices", i, source), f"{source}: row {i}")
        gold = _choice_letter(_field(row, "answer", i, source), len(choices), f"{source}: row {i}")
        items.append({"id": _row_id(row, i, "mmlu"), "prompt": choice_prompt(question, choices), "gold": gold,
                      "task": "mmlu", "scorer": "choice", "question": question, "choices": choices,
                      "subject": row.get("subject")})
    return items


def _arithmetic(opts: TaskOptions) -> list[dict]:
    from posttrain.data.synthetic import problem_stream

    wanted = opts.n or ARITHMETIC_DEFAULT_N
    items: list[dict] = []
    seen: set[str] = set()
    for draw, p in problem_stream(opts.data_seed, held_out=True):
        if len(items) == wanted:
            break
        if p["question"] in seen:
            continue  # a repeat within this set
        seen.add(p["question"])
        items.append({"id": f"arithmetic-s{opts.data_seed}-{draw}", "prompt": math_prompt(p["question"]),
                      "gold": str(p["answer"]), "task": "arithmetic", "scorer": "number",
                      "question": p["question"], "expression": p["expression"]})
    return items


def _math(opts: TaskOptions) -> list[dict]:
    """MATH-style problems whose answers are LaTeX (\\frac{1}{2}, intervals, sets), scored by math-verify."""
    from posttrain.rewards.math_answers import missing_extra, parse_gold

    missing = missing_extra("--task math")
    if missing:
        raise UserError(missing)
    source = f"--data {opts.data}" if opts.data else "HuggingFaceH4/MATH-500"
    rows = _rows("math", opts.data, ("HuggingFaceH4/MATH-500", None, "test"))
    items = []
    for i, row in enumerate(rows):
        question = str(_field(row, "problem", i, source))
        gold = str(_field(row, "answer", i, source)).strip()
        try:
            parse_gold(gold)
        except ValueError as e:
            raise UserError(f"{source}: row {i}: {e}") from None
        row_id = str(row["unique_id"]) if row.get("unique_id") not in (None, "") else _row_id(row, i, "math")
        items.append({"id": row_id, "prompt": latex_prompt(question), "gold": gold, "task": "math", "scorer": "math",
                      "question": question, "subject": row.get("subject"), "level": row.get("level")})
    return items


def _custom(opts: TaskOptions) -> list[dict]:
    if not opts.data:
        raise UserError("--task custom needs --data FILE (.jsonl/.json/.csv/.parquet) with a prompt and an answer column")
    source = f"--data {opts.data}"
    rows = _rows("custom", opts.data)
    items = []
    for i, row in enumerate(rows):
        prompt = _field(row, opts.prompt_column, i, source, " Name the column with --prompt-column.")
        answer = _field(row, opts.answer_column, i, source, " Name the column with --answer-column.")
        if isinstance(prompt, str) and not opts.image_columns:
            question, messages = prompt, math_prompt(prompt)
        elif isinstance(prompt, str):  # an image question is asked as written: the math prompt is for numbers
            question, messages = prompt, [{"role": "user", "content": prompt}]
        elif isinstance(prompt, list) and all(isinstance(m, dict) and "role" in m and "content" in m for m in prompt):
            question, messages = str(prompt[-1]["content"]), prompt  # a chat is sent as written
        else:
            raise UserError(f"{source}: row {i}: {opts.prompt_column} must be text or a list of "
                            "{\"role\": ..., \"content\": ...} messages")
        gold, scorer = _custom_gold(answer, i, source, opts.answer_column)
        item = {"id": _row_id(row, i, "custom"), "prompt": messages, "gold": gold, "task": "custom", "scorer": scorer,
                "question": question}
        if opts.image_columns:
            item["prompt"] = _with_images(messages, row, i, opts, source)
        items.append(item)
    return items


def _custom_gold(value: Any, index: int, source: str, column: str) -> tuple[str, str]:
    """(gold, scorer): a number is scored as a number; any other answer ('red') as text."""
    gold = extract_gsm8k_gold(str(value))
    if parse_number(gold) is not None:
        return gold, "number"
    text = str(value).strip()
    if not text:
        raise UserError(f"{source}: row {index}: {column} is empty")
    return text, "text"


def _with_images(messages: list[dict], row: dict, index: int, opts: TaskOptions, source: str) -> list[dict]:
    """The chat with an image part per image of the row's image columns, placed as in training
    (`posttrain.data.vision`). Each part holds the image's reference (an absolute path, URL or data
    URI), so the prompt stays JSON (samples.jsonl, the generation cache key) and the image is read
    when the prompt is generated (`load_prompt_images`)."""
    import base64

    from posttrain.data.vision import DropRow, content_parts, place_media

    refs = []
    base = Path(opts.data).expanduser().resolve().parent
    for column in opts.image_columns:
        cell = _field(row, column, index, source, " Name the image column with --image-column.")
        for ref in cell if isinstance(cell, list) else [cell]:
            if isinstance(ref, dict) and ref.get("bytes"):  # a parquet-embedded image
                ref = ref["bytes"]
            elif isinstance(ref, dict) and ref.get("path"):
                ref = ref["path"]
            if isinstance(ref, (bytes, bytearray)):
                ref = "data:image;base64," + base64.b64encode(bytes(ref)).decode()
            elif not isinstance(ref, str):
                raise UserError(f"{source}: row {index}: {column} holds a {type(ref).__name__}, not an image reference")
            elif "://" not in ref and not ref.startswith("data:") and not Path(ref).expanduser().is_absolute():
                ref = str(base / ref)
            refs.append(ref)
    chat = [{"role": m["role"], "content": content_parts(m["content"])} for m in messages]
    try:
        placed, ordered = place_media(chat, refs, [])
    except DropRow as e:
        raise UserError(f"{source}: row {index}: {e.detail or e.reason}") from None
    out, refs_left = [], iter(ordered)
    for m in placed:
        parts = [{"type": "image", "image": next(refs_left)} if p["type"] == "image" else {"type": "text", "text": p["text"]}
                 for p in m["content"]]
        out.append({"role": m["role"], "content": parts})
    return out


TASKS: dict[str, Task] = {
    t.name: t
    for t in (
        # one or two operations: the worked answer in the <think>/<answer> format is 41 tokens on average, 52 at most
        # (SmolLM2's tokenizer, benchmarks/eval_speed.py), so 128 leaves room for a wordier model
        Task("arithmetic", "number", "offline generated word problems (seed 1234, from the share of questions training data never holds)", _arithmetic,
             max_new_tokens=128),
        # multi-step word problems (2 to 8 steps each, as the GSM8K paper counts them)
        Task("gsm8k", "number", "GSM8K test set (hub openai/gsm8k, or --data FILE with question/answer columns)", _gsm8k,
             max_new_tokens=512),
        # one letter, after reasoning about one question
        Task("mmlu", "choice", "MMLU test set (hub cais/mmlu 'all', or --data FILE with question/choices/answer columns)", _mmlu,
             max_new_tokens=256),
        # LaTeX answers after a worked solution, as long as GSM8K's (the default 512)
        Task("math", "math", "MATH-500 (hub HuggingFaceH4/MATH-500, or --data FILE with problem/answer columns): LaTeX answers "
             "compared by math-verify (pip install 'posttrain[math]')", _math),
        # answers of unknown length: the most any built-in task needs
        Task("custom", "number", "any --data FILE with a prompt and an answer column (--prompt-column, --answer-column; images: --image-column); numbers are scored as numbers, other answers as text", _custom,
             max_new_tokens=512),
    )
}


def get_task(name: str) -> Task:
    if name not in TASKS:
        close = difflib.get_close_matches(name, TASKS, n=1)
        maybe = f" Did you mean {close[0]!r}?" if close else ""
        raise UserError(f"--task {name}: unknown task.{maybe} Tasks: {', '.join(TASKS)}")
    return TASKS[name]


def select_items(items: list[dict], n: int | None, seed: int) -> list[dict]:
    """The first ``n`` items after a shuffle seeded by ``seed`` (all of them, shuffled, when n is None)."""
    if n is not None and n < 1:
        raise UserError(f"--n {n}: must be at least 1")
    if n is not None and n > len(items):
        raise UserError(f"--n {n}: the task has only {len(items)} items; use --n {len(items)} or less, or omit --n")
    order = list(range(len(items)))
    random.Random(seed).shuffle(order)
    return [items[i] for i in order[: n if n is not None else len(items)]]


def load_task(name: str, *, n: int | None = None, seed: int = 0, data: str | None = None,
              prompt_column: str = "prompt", answer_column: str = "answer",
              data_seed: int = ARITHMETIC_SEED, image_columns: tuple[str, ...] = ()) -> list[dict]:
    """The items of task ``name`` (see the module docstring); UserError for any bad input."""
    task = get_task(name)
    if data is not None and name == "arithmetic":
        raise UserError("--task arithmetic is generated and takes no --data; use --task custom or gsm8k for a file")
    if image_columns and name != "custom":
        raise UserError(f"--image-column applies to --task custom only, not {name}")
    options = TaskOptions(data=data, prompt_column=prompt_column, answer_column=answer_column, data_seed=data_seed, n=n,
                          image_columns=tuple(image_columns))
    items = task.load(options)
    repeated = [i for i, count in Counter(item["id"] for item in items).items() if count > 1]
    if repeated:
        duplicate = repeated[0]
        raise UserError(f"--task {name}: id {duplicate!r} appears more than once; ids must be unique to pair arms")
    return select_items(items, n, seed)


def held_out_items(spec) -> list[dict]:
    """The items a recipe's `held_out` section names: those `posttrain eval --task ... --n ... --seed ...` scores.
    A problem is a UserError naming the recipe keys (held_out.n), not eval's flags (--n)."""
    import re

    try:
        return load_task(spec.task, n=spec.n, seed=spec.seed, data=spec.data, prompt_column=spec.prompt_column,
                         answer_column=spec.answer_column, data_seed=ARITHMETIC_SEED if spec.data_seed is None else spec.data_seed)
    except UserError as e:
        message = re.sub(r"--(task|data|n|prompt-column|answer-column)\b", lambda m: "held_out." + m[1].replace("-", "_"), str(e))
        raise UserError(message) from None
