"""Rows of any JSON shape as a `datasets.Dataset`, every value kept as the file holds it.

Arrow keeps one type per column, so a column whose type differs between rows (12 in one row,
"1,400" in another; a number beside a list; chat messages whose extra fields differ) makes
`Dataset.from_list` raise. `datasets` has a `Json` feature for such columns, but its encoder
guesses: a string that parses as JSON is stored as that JSON, so the text "2" comes back as the
number 2 and "true" as True (datasets 5.2, `datasets.utils.json.json_encode_field`). Here each
value of such a column is encoded with `json.dumps`, so it decodes to exactly what it was.
"""

from __future__ import annotations

import json
from pathlib import Path


def dataset_from_rows(rows: list[dict]):
    """A `datasets.Dataset` of `rows` (the keys of the first row are its columns). Columns Arrow can
    type stay ordinary columns; the others become `Json` columns that decode to the original values."""
    import datasets
    import pyarrow as pa

    try:
        return datasets.Dataset.from_list(rows)
    except (pa.ArrowInvalid, pa.ArrowTypeError):
        pass
    columns = {name: [row.get(name) for row in rows] for name in rows[0]}
    mixed = {name for name, values in columns.items() if not _one_arrow_type(values)}
    encoded = {name: [None if v is None else json.dumps(v) for v in values] if name in mixed else values
               for name, values in columns.items()}
    ds = datasets.Dataset.from_dict(encoded)
    return ds.cast(datasets.Features({name: datasets.Json() if name in mixed else feature for name, feature in ds.features.items()}))


def same_column_types(parts: list) -> list:
    """Datasets whose shared columns agree in type, so they can be concatenated: a column typed
    differently in two of them (numbers in one file, text in another) becomes a `Json` column in each."""
    differ = {name for name in set.intersection(*(set(p.column_names) for p in parts))
              if len({repr(p.features[name]) for p in parts}) > 1}
    return [_as_json(p, differ) for p in parts] if differ else parts


def _as_json(ds, names: set[str]):
    import datasets

    order = ds.column_names
    for name in names:
        values = [None if v is None else json.dumps(v) for v in ds[name]]
        ds = ds.remove_columns(name).add_column(name, values)
    ds = ds.select_columns(order)
    return ds.cast(datasets.Features({name: datasets.Json() if name in names else feature for name, feature in ds.features.items()}))


def _one_arrow_type(values: list) -> bool:
    import datasets
    import pyarrow as pa

    try:
        datasets.Dataset.from_dict({"v": values})
    except (pa.ArrowInvalid, pa.ArrowTypeError):
        return False
    return True


def holds_json(features) -> bool:
    """Whether `datasets` typed any column (or field inside one) as `Json`: a column of mixed types."""
    return "Json(" in repr(features)


def exact_json_rows(ds, path: Path, split: str):
    """`ds`, a local .jsonl/.json file as `datasets` read it, rebuilt from the file's own values when
    datasets stored a column of mixed types (whose text values it may have turned into numbers);
    `split` ("train", "train[:64]") slices the rows as datasets did. Unchanged otherwise."""
    import datasets

    if not holds_json(ds.features):
        return ds
    text = path.read_text(encoding="utf-8")
    if path.suffix.lower() == ".jsonl":
        rows = [json.loads(line) for line in text.splitlines() if line.strip()]
    else:
        rows = json.loads(text)
    if not (isinstance(rows, list) and rows and all(isinstance(r, dict) for r in rows)):
        return ds  # a .json file of another layout ({"data": [...]}): as datasets read it
    (part,) = datasets.ReadInstruction.from_spec(split).to_absolute({"train": len(rows)})
    rows = [{name: row.get(name) for name in ds.column_names} for row in rows[part.from_:part.to]]
    return dataset_from_rows(rows) if rows else ds
