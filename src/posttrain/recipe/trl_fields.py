"""The fields of TRL's config classes, snapshotted so recipes validate without importing TRL.

Importing TRL costs seconds (it pulls in torch and transformers), but `posttrain validate` must
answer in about one. So the names, types, choices, defaults and help of every field of
the TRL config class of every algorithm family (`recipe/algorithms.py`) are stored in `trl_fields.json`, generated from the
installed TRL by::

    python -m posttrain.recipe.trl_fields      # rewrite the snapshot after upgrading TRL

and `tests/recipe/test_trl_fields.py` fails when the snapshot and the installed TRL disagree, so
a TRL upgrade can never leave a field unknown (rejected) or a removed field accepted.
"""

from __future__ import annotations

import dataclasses
import enum
import functools
import json
import types
import typing
from pathlib import Path

from .algorithms import CONFIG_CLASSES  # noqa: F401  (family -> TRL config class; importable from here)

SNAPSHOT = Path(__file__).with_name("trl_fields.json")



def _kinds(tp) -> tuple[list[str], list | None, str | None]:
    """Reduce a dataclass annotation to JSON kinds, enum choices and a list's item kind."""
    kinds: list[str] = []
    choices: list | None = None
    item: str | None = None
    for arg in typing.get_args(tp) if typing.get_origin(tp) in (typing.Union, types.UnionType) else (tp,):
        origin = typing.get_origin(arg)
        if arg is type(None):
            kinds.append("null")
        elif origin is typing.Literal:
            kinds.append("bool" if all(isinstance(v, bool) for v in typing.get_args(arg)) else "str")
        elif arg in (bool, int, float, str):
            kinds.append(arg.__name__)
        elif isinstance(arg, type) and issubclass(arg, enum.Enum):
            kinds.append("str")
            choices = [m.value for m in arg]
        elif arg is dict or origin is dict:
            kinds.append("dict")
        elif arg is list or origin is list:
            kinds.append("list")
            sub = typing.get_args(arg)
            item = sub[0].__name__ if sub and sub[0] in (bool, int, float, str) else None
        else:
            kinds.append("any")
    return sorted(set(kinds)), choices, item


def _jsonable(value):
    if isinstance(value, enum.Enum):
        return value.value
    try:
        json.dumps(value)
        return value
    except TypeError:
        return repr(value)


def snapshot_from_installed() -> dict:
    """Read every field of the installed TRL configs (imports TRL: seconds)."""
    import trl

    out: dict = {"trl_version": trl.__version__, "configs": {}}
    for family, cls_name in CONFIG_CLASSES.items():
        cls = getattr(trl, cls_name)
        hints = typing.get_type_hints(cls)
        fields = {}
        for f in dataclasses.fields(cls):
            if not f.init:
                continue
            kinds, choices, item = _kinds(hints[f.name])
            if f.default is not dataclasses.MISSING:
                default = f.default
            elif f.default_factory is not dataclasses.MISSING:
                default = f.default_factory()
            else:
                default = None
            choices = f.metadata.get("choices", choices)
            help_text = " ".join(str(f.metadata.get("help", "")).split())
            fields[f.name] = {
                "kinds": kinds,
                "item": item,
                "choices": [_jsonable(c) for c in choices] if choices else None,
                "default": _jsonable(default),
                "help": help_text,
            }
        out["configs"][family] = {"class": cls_name, "fields": fields}
    return out


@functools.cache
def load_snapshot() -> dict:
    return json.loads(SNAPSHOT.read_text())


def trl_fields(family: str) -> dict[str, dict]:
    """Field specs of the TRL config used by an algorithm family ('sft', 'dpo' or 'grpo')."""
    return load_snapshot()["configs"][family]["fields"]


def trl_version() -> str:
    return load_snapshot()["trl_version"]


if __name__ == "__main__":
    SNAPSHOT.write_text(json.dumps(snapshot_from_installed(), indent=1, sort_keys=True) + "\n")
    print(f"wrote {SNAPSHOT}")
