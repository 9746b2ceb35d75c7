"""Read a recipe's datasets: local .jsonl/.json/.csv/.parquet files or hub datasets."""

from __future__ import annotations

from pathlib import Path

from posttrain.errors import UserError
from posttrain.recipe.preflight import looks_local

LOADERS = {".jsonl": "json", ".json": "json", ".csv": "csv", ".parquet": "parquet"}


def load_split(spec, key: str):
    """One `datasets.Dataset` for a DatasetSpec; `key` names it in errors (data.datasets[0])."""
    import datasets

    datasets.disable_progress_bars()
    try:
        if looks_local(spec.name):
            path = Path(spec.name).expanduser()
            if not path.is_file():
                raise UserError(f"{key}.name: data file {spec.name!r} does not exist")
            if path.stat().st_size == 0:
                raise UserError(f"{key}.name: data file {spec.name!r} is empty")
            # A local file has one split, "train"; slices such as train[:64] still apply.
            split = spec.split if spec.split.startswith("train") else "train"
            return datasets.load_dataset(LOADERS[path.suffix], data_files=str(path), split=split)
        return datasets.load_dataset(spec.name, spec.subset, split=spec.split)
    except UserError:
        raise
    except (FileNotFoundError, ValueError, datasets.exceptions.DatasetNotFoundError) as e:
        raise UserError(f"{key}: cannot load {spec.name!r} (split {spec.split!r}): {e}") from None
    except Exception as e:  # malformed JSON/CSV/parquet: pyarrow and datasets raise many kinds
        raise UserError(f"{key}: cannot read {spec.name!r}: {type(e).__name__}: {e}") from None
