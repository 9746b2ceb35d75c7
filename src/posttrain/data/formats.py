"""Map each dataset to TRL's standard columns and drop rows that cannot train anything.

Formats (TRL's names): `text` -> {"text"}; `prompt_completion` -> {"prompt", "completion"};
`messages` -> {"messages"}: a list of {"role", "content"} (tool calls allowed). Empty or malformed
rows are dropped and counted per reason; a dataset that ends up empty is an error naming it.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field

from posttrain.errors import UserError

from .sources import load_split

ROLES = {"system", "user", "assistant", "tool"}


@dataclass
class DataReport:
    key: str  # data.datasets[i]
    name: str
    format: str
    rows_in: int
    rows_kept: int
    dropped: Counter = field(default_factory=Counter)

    def render(self) -> str:
        line = f"{self.key} ({self.name}, {self.format}): kept {self.rows_kept} of {self.rows_in} rows"
        if self.dropped:
            line += "; dropped " + ", ".join(f"{n} {why}" for why, n in self.dropped.most_common())
        return line


def detect_format(spec, columns: list[str], algorithm: str) -> str:
    if algorithm == "cpt":
        return "text"
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
    }[fmt]


def _problem(fmt: str, row: dict) -> str | None:
    """Why a row (already in TRL columns) cannot train, or None if it can."""
    if fmt == "messages":
        msgs = row["messages"]
        if not isinstance(msgs, list) or not msgs:
            return "empty or non-list 'messages'"
        for m in msgs:
            if not isinstance(m, dict) or m.get("role") not in ROLES:
                return "message without a valid role"
            if not (isinstance(m.get("content"), str) and m["content"].strip()) and not m.get("tool_calls"):
                return "message with empty content"
        if not any(m["role"] == "assistant" for m in msgs):
            return "no assistant turn"
        return None
    for col, value in row.items():
        if not isinstance(value, str):
            return f"non-text '{col}'"
        if not value.strip():
            return f"empty '{col}'"
    return None


def prepare_dataset(spec, key: str, algorithm: str, seed: int):
    """Load one dataset spec and return (dataset in TRL columns, DataReport)."""
    raw = load_split(spec, key)
    fmt = detect_format(spec, raw.column_names, algorithm)
    mapping = _columns_for(spec, fmt)
    missing = [src for src in mapping.values() if src not in raw.column_names]
    if missing:
        raise UserError(
            f"{key} ({spec.name}): column {missing[0]!r} not found for format {fmt!r}; the file has columns "
            f"{raw.column_names}. Map yours with {key}.{_key_for(spec, missing[0], fmt)}=<column>."
        )
    raw = raw.select_columns(list(mapping.values()))
    reasons: Counter = Counter()
    rows = []
    for record in raw:
        row = {trl: record[src] for trl, src in mapping.items()}
        why = _problem(fmt, row)
        if why:
            reasons[why] += 1
        else:
            rows.append(row)
    if not rows:
        detail = "; ".join(f"{n} {why}" for why, n in reasons.most_common()) or "no rows"
        raise UserError(f"{key} ({spec.name}): no usable rows ({detail})")
    import datasets

    ds = datasets.Dataset.from_list(rows)
    if spec.max_samples is not None and len(ds) > spec.max_samples:
        ds = ds.shuffle(seed=seed).select(range(spec.max_samples))
    return ds, DataReport(key, spec.name, fmt, len(raw), len(ds), reasons)


def _key_for(spec, column: str, fmt: str) -> str:
    for name in ("text_column", "prompt_column", "completion_column", "messages_column"):
        if getattr(spec, name) == column:
            return name
    return "format"


def prepare_training_data(data_cfg, algorithm: str, seed: int):
    """All datasets of the recipe, concatenated (they must share one format), and their reports."""
    import datasets

    parts, reports = [], []
    for i, spec in enumerate(data_cfg.datasets):
        ds, report = prepare_dataset(spec, f"data.datasets[{i}]", algorithm, seed)
        parts.append(ds)
        reports.append(report)
    formats = {r.format for r in reports}
    if len(formats) > 1:
        listing = ", ".join(f"{r.key}: {r.format}" for r in reports)
        raise UserError(f"data.datasets mix formats ({listing}); one run trains on one format. Set format per dataset or split the run.")
    merged = parts[0] if len(parts) == 1 else datasets.concatenate_datasets(parts)
    return merged, reports[0].format, reports
