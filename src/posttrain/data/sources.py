"""Read a recipe's datasets: local .jsonl/.json/.csv/.parquet files or hub datasets."""

from __future__ import annotations

import logging
from pathlib import Path

from posttrain.errors import UserError
from posttrain.recipe.preflight import looks_local

LOADERS = {".jsonl": "json", ".json": "json", ".csv": "csv", ".parquet": "parquet"}


def _local_copy(uri: str) -> Path:
    """An s3:// data file, downloaded once per machine into the cache (keeps its name and suffix)."""
    from posttrain.storage.cache import cached_download

    path = cached_download(uri)
    if path.suffix not in LOADERS:
        raise UserError(f"{uri}: not a data file with one of the suffixes {', '.join(LOADERS)}")
    return path


def load_split(spec, key: str):
    """One `datasets.Dataset` for a DatasetSpec; `key` names it in errors (data.datasets[0])."""
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
                raise UserError(f"{key}.name: data file {spec.name!r} does not exist")
            if path.stat().st_size == 0:
                raise UserError(f"{key}.name: data file {spec.name!r} is empty")
            from .splits import local_file_problems

            for field, message in local_file_problems(spec):  # one split, "train"; slices such as train[:64] apply
                raise UserError(f"{key}.{field}: {message}")
            return datasets.load_dataset(LOADERS[path.suffix], data_files=str(path), split=spec.split)
        return datasets.load_dataset(spec.name, spec.subset, split=spec.split)
    except UserError:
        raise
    except (FileNotFoundError, ValueError, datasets.exceptions.DatasetNotFoundError) as e:
        raise UserError(f"{key}: cannot load {spec.name!r} (split {spec.split!r}): {e}") from None
    except Exception as e:  # malformed JSON/CSV/parquet: pyarrow and datasets raise many kinds
        cause = e.__cause__ or e.__context__ or e  # DatasetGenerationError wraps the parser's own message
        raise UserError(f"{key}: cannot read {spec.name!r}: {type(cause).__name__}: {cause}") from None
