"""The one data reader: local .jsonl/.json/.csv/.parquet files, s3:// files or hub datasets, for
recipes (training), `generate --dataset` and the evaluation tasks' --data alike."""

from __future__ import annotations

import logging
from pathlib import Path

from posttrain.errors import UserError

from .json_rows import exact_json_rows
from .splits import looks_local

LOADERS = {".jsonl": "json", ".json": "json", ".csv": "csv", ".parquet": "parquet"}


def _local_copy(uri: str) -> Path:
    """An s3:// data file, downloaded once per machine into the cache (keeps its name and suffix)."""
    from posttrain.storage.cache import cached_download

    path = cached_download(uri)
    if path.suffix.lower() not in LOADERS:
        raise UserError(f"{uri}: not a data file with one of the suffixes {', '.join(LOADERS)}")
    return path


def _field_key(key: str, field: str) -> str:
    """How errors name a spec's field: ``data.datasets[0].name`` for a recipe, the flag itself
    (``--data``) or its sibling flag (``--split``) for a command line."""
    if key.startswith("--"):
        return key if field == "name" else f"--{field}"
    return f"{key}.{field}"


def _root_cause(exc: BaseException) -> BaseException:
    """The innermost exception: datasets wraps pyarrow's precise parse error in a vague one."""
    seen = set()
    while (exc.__cause__ or exc.__context__) is not None and id(exc) not in seen:
        seen.add(id(exc))
        exc = exc.__cause__ or exc.__context__
    return exc


def load_split(spec, key: str):
    """One `datasets.Dataset` for a DatasetSpec (or anything with name, subset, split); `key` names
    it in errors: a recipe key (data.datasets[0]) or a flag (--data)."""
    import datasets

    datasets.disable_progress_bars()
    # A file datasets cannot parse makes it log its own error (with a traceback when logging fails);
    # the UserError below says the same with the key, so its logger is quiet while we load.
    logger = logging.getLogger("datasets")
    level = logger.level
    logger.setLevel(logging.CRITICAL)
    try:
        return _load(spec, key, datasets)
    finally:
        logger.setLevel(level)


def _load(spec, key: str, datasets):
    from posttrain.storage.location import is_s3_uri

    try:
        if is_s3_uri(spec.name) or looks_local(spec.name):
            path = _local_copy(spec.name) if is_s3_uri(spec.name) else Path(spec.name).expanduser()
            if not path.is_file():
                raise UserError(f"{_field_key(key, 'name')}: data file {spec.name!r} does not exist")
            if path.suffix.lower() not in LOADERS:
                raise UserError(f"{_field_key(key, 'name')}: {spec.name!r} is not a data file; use one of {', '.join(LOADERS)}")
            if path.stat().st_size == 0:
                raise UserError(f"{_field_key(key, 'name')}: data file {spec.name!r} is empty")
            from .splits import local_file_problems

            for field, message in local_file_problems(spec):  # one split, "train"; slices such as train[:64] apply
                raise UserError(f"{_field_key(key, field)}: {message}")
            ds = datasets.load_dataset(LOADERS[path.suffix.lower()], data_files=str(path), split=spec.split)
            return exact_json_rows(ds, path, spec.split) if LOADERS[path.suffix.lower()] == "json" else ds
        return datasets.load_dataset(spec.name, spec.subset, split=spec.split)
    except UserError:
        raise
    except (FileNotFoundError, ValueError, datasets.exceptions.DatasetNotFoundError) as e:
        raise UserError(f"{key}: cannot load {spec.name!r} (split {spec.split!r}): {e}") from None
    except Exception as e:  # malformed JSON/CSV/parquet: pyarrow and datasets raise many kinds
        cause = _root_cause(e)
        detail = _bad_jsonl_line(spec.name) or f"{type(cause).__name__}: {cause}"
        raise UserError(f"{key}: cannot read {spec.name!r}: {detail}") from None


def _bad_jsonl_line(name: str) -> str | None:
    """For a local .jsonl file that failed to load: the first line that is not a JSON object, named
    (datasets' own message points at a byte offset of its pandas fallback)."""
    import json

    path = Path(name).expanduser()
    if path.suffix.lower() != ".jsonl" or not path.is_file():
        return None
    with path.open(encoding="utf-8", errors="replace") as f:
        for number, line in enumerate(f, 1):
            if not line.strip():
                continue
            try:
                row = json.loads(line)
            except ValueError as e:
                return f"line {number} is not valid JSON ({e})"
            if not isinstance(row, dict):
                return f"line {number} is a JSON {type(row).__name__}, not an object (one row per line)"
    return None


def read_rows(name: str, where: str, *, subset: str | None = None, split: str = "train") -> list[dict]:
    """Every row of a data source as a dict: a local .jsonl/.json/.csv/.parquet file, an s3:// file
    or a hub dataset, read by `load_split` -- the one reader of training, generate and the
    evaluation tasks, so a file that one command reads every command reads the same way.
    ``where`` names the source in errors (``--data``, ``--dataset``)."""
    from types import SimpleNamespace

    rows = load_split(SimpleNamespace(name=name, subset=subset, split=split), where).to_list()
    if not rows:
        raise UserError(f"{where} {name}: holds no rows")
    return rows
