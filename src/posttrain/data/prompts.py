"""Prompt datasets for GRPO/GSPO, and the token-length checks of prompt-based data (GRPO, DPO).

GRPO rows: prompts (chat or text), a gold `answer`, every other column kept.

TRL 1.x has no prompt-length key (`max_prompt_length` was removed), so posttrain enforces
`data.max_prompt_length` here, on the prompt as the model will see it (after the chat template),
and reports how many prompts it dropped or truncated. Columns other than the prompt reach the
reward functions as keyword lists, so user rewards can read any of them.
"""

from __future__ import annotations

from collections import Counter

from posttrain.errors import UserError
from posttrain.rewards.answers import gold_is_comparable

from .formats import DataReport, chat_problem, mix, one_kind
from .json_rows import dataset_from_rows
from .sources import load_split
from .templates import build_prompt, gold_answer

ANSWER_TAG = "<answer>"
# chats among text prompts: data.use_chat_template=false leaves text prompts as they are
MIXED_PROMPTS_FIX = "write every prompt the same way, or set data.use_chat_template=true to send text as a chat"


def untagged_prompt_warning(ds, reward_names) -> str | None:
    """A warning when format-paying rewards meet prompts that never ask for the <answer> format."""
    from posttrain.rewards.builtin import TAG_REWARDS

    tagged = [n for n in reward_names if n in TAG_REWARDS]
    if not tagged or ds is None:
        return None
    text = lambda p: p if isinstance(p, str) else " ".join(str(m.get("content") or "") for m in p)  # noqa: E731
    if any(ANSWER_TAG in text(p) for p in ds["prompt"]):
        return None
    return (f"warning: training.rewards {', '.join(tagged)} pay only for a <think>...</think><answer>...</answer> reply, but no "
            "prompt asks for it (no data.datasets[i].template, no data.system_prompt, no '<answer>' in the prompts): the "
            "model may earn nothing for a long time. Set a template (gsm8k, openmathinstruct2) or a system_prompt that asks for the tags.")


def read_prompt_data(data_cfg, seed: int, numeric_columns=()):
    """Training prompts, reports, and evaluation prompts (None unless the recipe asks for them).

    numeric_columns: the columns a reward compares as numbers ("answer" is the mapped gold column;
    `rewards.builtin.numeric_gold_columns`), so rows where one does not parse as a number (LaTeX
    such as \\frac{1}{2}, tuples, expressions, 3.5e2) are dropped and counted here, under
    data.max_drop_fraction, instead of crashing the reward at the first batch that holds one.
    """
    from .formats import hold_out

    train, reports = read_prompt_rows(data_cfg, data_cfg.datasets, "data.datasets", seed, numeric_columns)
    evaluation = None
    if data_cfg.eval_datasets:
        evaluation, eval_reports = read_prompt_rows(data_cfg, data_cfg.eval_datasets, "data.eval_datasets", seed, numeric_columns)
        reports += eval_reports
    train, evaluation = hold_out(train, evaluation, data_cfg.eval_fraction, seed)
    return train, reports, evaluation


def read_prompt_rows(data_cfg, specs, key_prefix: str, seed: int, numeric_columns=()):
    """Datasets as rows {prompt, answer, ...original columns}; rows without a usable prompt or answer
    dropped and counted. The numeric gold columns are kept as text, as `posttrain eval` reads them."""
    parts, reports = [], []
    for i, spec in enumerate(specs):
        key = f"{key_prefix}[{i}]"
        raw = load_split(spec, key)
        for column in (spec.prompt_column, spec.answer_column):
            if column not in raw.column_names:
                setting = "prompt_column" if column == spec.prompt_column else "answer_column"
                raise UserError(f"{key} ({spec.name}): column {column!r} not found; the data has columns {raw.column_names}. "
                                f"Map yours with {key}.{setting}=<column>.")
        missing = sorted(set(numeric_columns) - {"answer", *raw.column_names})
        if missing:
            raise UserError(f"{key} ({spec.name}): a reward compares column {missing[0]!r} as numbers (its answer_column option), "
                            f"and the data has no such column (it has {raw.column_names}).")
        rows, dropped, by_reason, bad_gold = [], Counter(), {}, {}  # bad_gold: column -> its reason, with the first example
        for index, record in enumerate(raw):
            question, answer = record[spec.prompt_column], gold_answer(spec.template, record[spec.answer_column])
            # the columns rewards compare as numbers, as text the way `posttrain eval` reads a gold column
            golds = {c: answer if c == "answer" else gold_answer(spec.template, record[c]) for c in sorted(numeric_columns)}
            if (why := _drop_reason(spec, question, answer, golds, bad_gold)) is not None:
                dropped[why] += 1
                by_reason.setdefault(why, []).append(index)
                continue
            extra = {k: v for k, v in record.items() if k not in ("prompt", "answer")}
            prompt = build_prompt(question, template=spec.template, system_prompt=data_cfg.system_prompt,
                                  few_shot=data_cfg.few_shot, use_chat_template=data_cfg.use_chat_template)
            one_kind(prompt, rows[0]["prompt"] if rows else None, f"{key} ({spec.name}): row {index} column {spec.prompt_column!r}", MIXED_PROMPTS_FIX)
            rows.append({**extra, **golds, "prompt": prompt, "answer": answer})
        if not rows:
            raise UserError(f"{key} ({spec.name}): no usable rows ({'; '.join(f'{n} {w}' for w, n in dropped.items()) or 'no rows'})")
        ds = dataset_from_rows(rows)
        if spec.max_samples is not None and len(ds) > spec.max_samples:
            ds = ds.shuffle(seed=seed).select(range(spec.max_samples))
        parts.append(ds)
        reports.append(DataReport(key, spec.name, "prompt", len(raw), len(ds), dropped, by_reason))
    for part, report in zip(parts[1:], reports[1:]):
        one_kind(part[0]["prompt"], parts[0][0]["prompt"], f"{report.key} ({report.name}): its first prompt", MIXED_PROMPTS_FIX)
    shared = sorted(set.intersection(*(set(p.column_names) for p in parts)))
    return mix([p.select_columns(shared) for p in parts], specs, seed), reports


def _drop_reason(spec, question, answer: str, golds: dict[str, str], bad_gold: dict[str, str]) -> str | None:
    """Why a row cannot train (its question, an empty gold, a gold a reward cannot compare), or None.
    `bad_gold` keeps one reason per column, worded with the column's first such value."""
    if why := _question_problem(question, spec.prompt_column):
        return why
    if not answer:
        return f"empty '{spec.answer_column}'"
    unreadable = next((c for c, gold in golds.items() if not gold_is_comparable(gold)), None)
    if unreadable is None:
        return None
    column = spec.answer_column if unreadable == "answer" else unreadable
    return bad_gold.setdefault(column, f"'{column}' not a number the rewards can compare (e.g. {golds[unreadable][:40]!r})")


def _question_problem(question, column: str) -> str | None:
    """Why a row's question cannot be a prompt (it must be text or a chat), or None; the row is
    dropped and counted, as the other formats drop a row whose field is not text."""
    if isinstance(question, list):
        return chat_problem(question, column, need_assistant=False)
    if not isinstance(question, str):
        return f"non-text '{column}'"
    return None if question.strip() else f"empty '{column}'"


def prompt_token_count(prompt, tokenizer, tools: list | None = None) -> list[int]:
    """The prompt's token ids as the model sees them: a chat through the chat template, with the tool
    schemas it renders when the run offers tools."""
    if isinstance(prompt, list) and tokenizer.chat_template:
        return tokenizer.apply_chat_template(prompt, tools=tools or None, add_generation_prompt=True, tokenize=True,
                                             return_dict=True)["input_ids"]
    text = prompt if isinstance(prompt, str) else "\n".join(m["content"] for m in prompt)
    return tokenizer(text, add_special_tokens=False)["input_ids"]


def enforce_prompt_length(ds, tokenizer, max_tokens: int | None, mode: str, tools: list | None = None):
    """Drop prompts over `max_tokens` tokens, or keep their last `max_tokens` tokens ('left').

    Left-truncated prompts are passed to TRL as text (the chat template already applied), so every
    prompt is rendered to text in that mode: a column cannot mix chats and strings.
    Returns (dataset, a line for the log).
    """
    if max_tokens is None:
        return ds, None
    ids = [prompt_token_count(p, tokenizer, tools) for p in ds["prompt"]]
    over = sum(len(i) > max_tokens for i in ids)
    if mode == "drop":
        keep = [n for n, i in enumerate(ids) if len(i) <= max_tokens]
        if not keep:
            raise UserError(f"data.max_prompt_length={max_tokens}: every prompt is longer (shortest {min(map(len, ids))} tokens); raise it.")
        return ds.select(keep), f"data.max_prompt_length={max_tokens}: dropped {over} of {len(ids)} prompts (longest {max(map(len, ids))} tokens)"
    if "chosen" in ds.column_names and any(isinstance(p, list) for p in ds["prompt"]):
        raise UserError("data.prompt_truncation=left renders prompts to text, which DPO chats cannot mix with chat answers; "
                        "use data.prompt_truncation=drop for chat preference data.")
    texts = [tokenizer.decode(i[-max_tokens:]) for i in ids]
    ds = ds.remove_columns("prompt").add_column("prompt", texts)
    return ds, f"data.max_prompt_length={max_tokens}: left-truncated {over} of {len(ids)} prompts (longest {max(map(len, ids))} tokens)"
