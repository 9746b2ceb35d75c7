"""Map each dataset to TRL's standard columns and drop rows that cannot train anything.

Formats (TRL's names): `text` -> {"text"}; `prompt_completion` -> {"prompt", "completion"};
`messages` -> {"messages"}: a list of {"role", "content"} (tool calls allowed, with an optional
`tools` column of function schemas); `preference` -> {"prompt", "chosen", "rejected"}, as text or
chats; `unpaired` (KTO) -> {"prompt", "completion", "label"}: one response and whether it is desirable. Empty or malformed rows, and preference pairs whose two answers are equal, are dropped and
counted per reason; a dataset that ends up empty is an error naming it.
"""

from __future__ import annotations

import json
from collections import Counter
from dataclasses import dataclass, field

from posttrain.errors import UserError

from .json_rows import dataset_from_rows, same_column_types
from .sources import load_split
from .token_audit import ROW_COLUMN, SOURCE_COLUMN

ROLES = {"system", "user", "assistant", "tool"}


@dataclass
class DataReport:
    key: str  # data.datasets[i]
    name: str
    format: str
    rows_in: int
    rows_kept: int
    dropped: Counter = field(default_factory=Counter)
    rows_by_reason: dict = field(default_factory=dict)  # reason -> indices of the dropped rows (0-based)
    rows_total: int | None = None  # rows in the file, when reading stopped at max_samples before the end (rows_in read)

    def render(self) -> str:
        line = f"{self.key} ({self.name}, {self.format}): kept {self.rows_kept} of {self.rows_in} rows"
        if self.rows_total is not None and self.rows_total > self.rows_in:
            line += f" (max_samples reached: {self.rows_in} of {self.rows_total} rows read)"
        if self.dropped:
            line += "; dropped " + ", ".join(f"{n} {why}{self._rows(why)}" for why, n in self.dropped.most_common())
        return line

    def _rows(self, why: str, shown: int = 10) -> str:
        rows = self.rows_by_reason.get(why)
        if not rows:
            return ""
        more = f", ... {len(rows) - shown} more" if len(rows) > shown else ""
        return f" (row{'s' if len(rows) > 1 else ''} {', '.join(map(str, rows[:shown]))}{more})"


def detect_format(spec, columns: list[str], fixed: str | None = None) -> str:
    """The dataset's format: `fixed` when the algorithm reads one format only (its data shape:
    posttrain.recipe.algorithms), else the spec's, else guessed from the columns."""
    if fixed is not None:
        return fixed
    if spec.format != "auto":
        return spec.format
    if spec.messages_column in columns:
        return "messages"
    if spec.prompt_column in columns and spec.completion_column in columns:
        return "prompt_completion"
    return "text"


def _columns_for(spec, fmt: str) -> dict[str, str]:
    """TRL column -> the dataset's column."""
    return {
        "text": {"text": spec.text_column},
        "prompt_completion": {"prompt": spec.prompt_column, "completion": spec.completion_column},
        "messages": {"messages": spec.messages_column},
        "preference": {"prompt": spec.prompt_column, "chosen": spec.chosen_column, "rejected": spec.rejected_column},
        "unpaired": {"prompt": spec.prompt_column, "completion": spec.completion_column, "label": spec.label_column},
    }[fmt]


LABEL_WORDS = {True: True, False: False, 1: True, 0: False, "true": True, "false": False, "1": True, "0": False}


def _label(value) -> bool | None:
    """An unpaired row's label as a bool, or None when it is not one (a float like 0.5 is no label)."""
    if isinstance(value, str):
        value = value.strip().lower()
    elif isinstance(value, float) and value in (0.0, 1.0):
        value = int(value)
    try:
        return LABEL_WORDS.get(value)
    except TypeError:  # unhashable (a list)
        return None


def chat_problem(msgs, column: str, need_assistant: bool = True) -> str | None:
    """Why `msgs` is no chat a template can render (messages with a role and text content), or None."""
    if not isinstance(msgs, list) or not msgs:
        return f"empty or non-list '{column}'"
    for m in msgs:
        if not isinstance(m, dict) or m.get("role") not in ROLES:
            return f"message without a valid role in '{column}'"
        if not (isinstance(m.get("content"), str) and m["content"].strip()) and not m.get("tool_calls"):
            return f"message with empty content in '{column}'"
    if need_assistant and not any(m["role"] == "assistant" for m in msgs):
        return f"no assistant turn in '{column}'"
    return None


def _problem(fmt: str, row: dict) -> str | None:
    """Why a row (already in TRL columns) cannot train, or None if it can."""
    if fmt == "unpaired":
        label = _label(row["label"])
        if label is None:
            return "'label' not true/false"
        row["label"] = label
        pair = {"prompt": row["prompt"], "completion": row["completion"]}
        if all(isinstance(v, list) for v in pair.values()):
            return chat_problem(row["prompt"], "prompt", need_assistant=False) or chat_problem(row["completion"], "completion")
        fmt, row = "prompt_completion", pair
    if fmt == "messages":
        return chat_problem(row["messages"], "messages")
    if fmt == "preference":
        kinds = {type(row[c]).__name__ for c in ("chosen", "rejected")}
        if kinds == {"list"}:
            for col in ("chosen", "rejected"):
                if why := chat_problem(row[col], col):
                    return why
            if not (isinstance(row["prompt"], str) or chat_problem(row["prompt"], "prompt", need_assistant=False) is None):
                return "malformed 'prompt'"
        elif kinds != {"str"}:
            return "'chosen' and 'rejected' of different or non-text types"
        elif isinstance(row["prompt"], list):  # TRL would add a text answer to a list of messages
            return "chat 'prompt' with text 'chosen' and 'rejected'"
        elif not isinstance(row["prompt"], str):
            return "non-text 'prompt'"
        elif not row["chosen"].strip() or not row["rejected"].strip():
            return "empty 'chosen' or 'rejected'"
        if not row["prompt"]:
            return "empty 'prompt'"
        if row["chosen"] == row["rejected"]:
            return "'chosen' equal to 'rejected'"
        if kinds == {"list"} and isinstance(row["prompt"], str):  # the user's turn, as `posttrain eval` sends a text prompt
            row["prompt"] = [{"role": "user", "content": row["prompt"]}]
        return None
    for col, value in row.items():
        if not isinstance(value, str):
            return f"non-text '{col}'"
        if not value.strip():
            return f"empty '{col}'"
    return None


# formats whose rows may be chats or text, and the column that tells which (TRL decides from a dataset's first row)
CHAT_OR_TEXT = {"preference": "chosen", "unpaired": "completion"}


def one_kind(value, first, where: str, fix: str = "write every row as a chat or every row as text") -> None:
    """Refuse a chat among text rows or text among chats (`where` names the row and column): TRL reads
    a dataset's first row to choose between chat templates and plain text for every row."""
    if first is not None and isinstance(value, list) != isinstance(first, list):
        kind = "a chat" if isinstance(value, list) else "text"
        earlier = "chats" if isinstance(first, list) else "text"
        raise UserError(f"{where} is {kind} but the rows before it are {earlier}, and a run trains on one kind: {fix}.")


def check_template_columns(templates: dict[str, str], columns: list[str], key: str) -> None:
    """A template naming a column the data lacks is an error (FAI-RL silently trained on the
    unrendered template text instead)."""
    from string import Formatter

    for setting, template in templates.items():
        for name in {f for _, f, _, _ in Formatter().parse(template) if f is not None}:
            if name not in columns:
                raise UserError(f"{key}.{setting}: column {name!r} not found; the data has columns {columns}.")


def render_row(templates: dict[str, str], record: dict) -> dict:
    """One row from str.format templates: {'text'} (text_template) or the chat pair {'prompt', 'completion'}
    (an optional system turn and the user turn; the assistant turn)."""
    def fill(template: str) -> str:
        return template.format(**{k: "" if v is None else v for k, v in record.items()})

    if "text_template" in templates:
        return {"text": fill(templates["text_template"])}
    prompt = [{"role": "system", "content": fill(templates["system_template"])}] if "system_template" in templates else []
    prompt.append({"role": "user", "content": fill(templates["prompt_template"])})
    return {"prompt": prompt, "completion": [{"role": "assistant", "content": fill(templates["completion_template"])}]}


def render_templates(raw, spec, key: str):
    """Rows built from the spec's str.format templates: {'text'} or chat {'prompt', 'completion'}.
    Returns (dataset, format) or (raw, None) without templates."""
    templates = spec.row_templates
    if not templates:
        return raw, None
    check_template_columns(templates, raw.column_names, key)
    rows = [render_row(templates, record) for record in raw]
    return dataset_from_rows(rows), ("text" if "text_template" in templates else "prompt_completion")


def _chat_pair_problem(row: dict) -> str | None:
    for col in ("prompt", "completion"):
        if not row[col][-1]["content"].strip():
            return f"empty '{col}' after the template"
    return None


def prepare_dataset(spec, key: str, fixed_format: str | None, seed: int):
    """Load one dataset spec and return (dataset in TRL columns, DataReport)."""
    raw, templated = render_templates(load_split(spec, key), spec, key)
    if templated:
        return _prepared(raw, spec, key, templated, {c: c for c in raw.column_names}, seed, templated=True)
    fmt = detect_format(spec, raw.column_names, fixed_format)
    mapping = _columns_for(spec, fmt)
    missing = [src for src in mapping.values() if src not in raw.column_names]
    if missing:
        raise UserError(column_message(spec, key, fmt, missing, raw.column_names))
    if fmt == "messages" and spec.tools_column in raw.column_names:
        mapping["tools"] = spec.tools_column
    return _prepared(raw.select_columns(list(mapping.values())), spec, key, fmt, mapping, seed)


def column_message(spec, key: str, fmt: str, missing: list[str], columns: list[str]) -> str:
    """What to set when the data's columns do not fit its format: the key for each missing column,
    or, when the format was guessed (format: auto) and nothing fitted, every format's keys."""
    keys = " ".join(f"{key}.{_key_for(spec, column, fmt)}=<column>" for column in missing)
    text = f"{key} ({spec.name}): column{'s' if len(missing) > 1 else ''} {', '.join(map(repr, missing))} not found for format {fmt!r}; the file has columns {columns}."
    if fmt == "text" and getattr(spec, "format", None) == "auto":
        return (f"{text} No format fits them. For prompt/completion pairs set {key}.prompt_column=<column> "
                f"{key}.completion_column=<column>; for chats {key}.messages_column=<column>; for raw text {key}.text_column=<column>.")
    return f"{text} Map yours with {keys}."


def _prepared(raw, spec, key: str, fmt: str, mapping: dict, seed: int, templated: bool = False):
    reasons: Counter = Counter()
    rows, rows_by_reason = [], {}
    for index, record in enumerate(raw):
        row = {trl: record[src] for trl, src in mapping.items()}
        tools = row.pop("tools", None)
        chat_pair = templated and fmt == "prompt_completion"
        why = _chat_pair_problem(row) if chat_pair else _problem(fmt, row)
        if why:
            reasons[why] += 1
            rows_by_reason.setdefault(why, []).append(index)
            continue
        if (column := CHAT_OR_TEXT.get(fmt)) is not None:
            one_kind(row[column], rows[0][column] if rows else None, f"{key} ({spec.name}): row {index} column {mapping[column]!r}")
        if "tools" in mapping:  # JSON text: function schemas differ in shape, which Arrow cannot hold as structs
            row["tools"] = tools if isinstance(tools, str) or tools is None else json.dumps(tools)
        rows.append({**row, SOURCE_COLUMN: key, ROW_COLUMN: index})  # where each row came from, for the token audit
    if not rows:
        detail = "; ".join(f"{n} {why}" for why, n in reasons.most_common()) or "no rows"
        raise UserError(f"{key} ({spec.name}): no usable rows ({detail})")
    ds = dataset_from_rows(rows)
    if spec.max_samples is not None and len(ds) > spec.max_samples:
        ds = ds.shuffle(seed=seed).select(range(spec.max_samples))
    return ds, DataReport(key, spec.name, fmt, len(raw), len(ds), reasons, rows_by_reason)


def _key_for(spec, column: str, fmt: str) -> str:
    """The recipe key that names `column` for this format (data.datasets[i].<key>=<column>)."""
    for trl, source in _columns_for(spec, fmt).items():
        if source == column:
            return f"{trl}_column"
    return "format"


def prepare_datasets(specs, key: str, fixed_format: str | None, seed: int):
    """Datasets `specs` (found at recipe key `key`), concatenated; they must share one format."""
    import datasets

    parts, reports = [], []
    for i, spec in enumerate(specs):
        ds, report = prepare_dataset(spec, f"{key}[{i}]", fixed_format, seed)
        parts.append(ds)
        reports.append(report)
    formats = {r.format for r in reports}
    if len(formats) > 1:
        listing = ", ".join(f"{r.key}: {r.format}" for r in reports)
        raise UserError(f"{key} mix formats ({listing}); one run trains on one format. Set format per dataset or split the run.")
    if column := CHAT_OR_TEXT.get(reports[0].format):
        for part, report in zip(parts[1:], reports[1:]):
            one_kind(part[0][column], parts[0][0][column], f"{report.key} ({report.name}): column {column!r}")
    return mix(parts, specs, seed), reports[0].format, reports


def mix(parts: list, specs, seed: int):
    """Concatenate, or with weights interleave in proportion (seeded, until every dataset is used up once)."""
    import datasets

    if len(parts) == 1:
        return parts[0]
    parts = same_column_types(parts)
    weights = [spec.weight for spec in specs]
    if all(w is None for w in weights):
        return datasets.concatenate_datasets(parts)
    weights = [1.0 if w is None else w for w in weights]
    total = sum(weights)
    return datasets.interleave_datasets(parts, probabilities=[w / total for w in weights], seed=seed, stopping_strategy="all_exhausted")


def prepare_training_data(data_cfg, fixed_format: str | None, seed: int):
    """Training data, its format, per-dataset reports, and evaluation data (None unless asked for)."""
    train, fmt, reports = prepare_datasets(data_cfg.datasets, "data.datasets", fixed_format, seed)
    evaluation = None
    if data_cfg.eval_datasets:
        evaluation, eval_fmt, eval_reports = prepare_datasets(data_cfg.eval_datasets, "data.eval_datasets", fixed_format, seed)
        if eval_fmt != fmt:
            raise UserError(f"data.eval_datasets are {eval_fmt!r} but the training data is {fmt!r}; evaluation data must have the training format.")
        reports += eval_reports
    train, evaluation = hold_out(train, evaluation, data_cfg.eval_fraction, seed)
    return train, fmt, reports, evaluation


def hold_out(train, evaluation, fraction: float | None, seed: int):
    """Split `fraction` of the training rows off for evaluation (seeded), if the recipe asks."""
    if fraction is None:
        return train, evaluation
    n_eval = round(len(train) * fraction)
    if n_eval < 1 or n_eval >= len(train):
        raise UserError(f"data.eval_fraction={fraction} of {len(train)} rows leaves {n_eval} for evaluation; choose a fraction that keeps both sides non-empty.")
    split = train.train_test_split(test_size=n_eval, seed=seed, shuffle=True)
    return split["train"], split["test"]
