"""What a split means for a local data file (no heavy imports: preflight uses it too).

A local .jsonl/.json/.csv/.parquet file is one split, which `datasets` calls "train"; slices of it
(`train[:64]`, `train[10%:]`) apply. Any other split name (`test[:100]`) used to be replaced by
"train" silently, so the whole file trained; it is an error now, as is a hub `subset` on a file.
"""

from __future__ import annotations

import re
from pathlib import Path

DATA_SUFFIXES = (".jsonl", ".json", ".csv", ".parquet")
_TRAIN = re.compile(r"^train(\[.*\])?$")


def local_file_problems(spec) -> list[tuple[str, str]]:
    """(key under the dataset, message) for settings a local file cannot honour."""
    out = []
    if not _TRAIN.match(spec.split.strip()):
        out.append(("split", f"{spec.split!r}: a local file has a single split, 'train'; slice it instead "
                             f"(e.g. 'train[:100]', 'train[90%:]') or point name at the file that holds that split."))
    if spec.subset is not None:
        out.append(("subset", f"{spec.subset!r}: a local file has no subsets (that is a hub dataset's configuration); remove it."))
    return out


def looks_local(name: str) -> bool:
    """A data or model name that refers to the local disk rather than a hub id or s3:// URI."""
    if name.startswith("s3://"):
        return False
    return name.startswith((".", "/", "~")) or name.endswith(DATA_SUFFIXES) or Path(name).expanduser().exists()
