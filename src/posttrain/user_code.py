"""The one rule for importing the user's own code named `package.module:attribute`.

Custom rewards (`training.rewards: [{name: my_rewards:brevity}]`), tools (`training.tools:
[my_tools:calculator]`), environments (`training.environment: my_envs:Shop`) and their evaluation
twins (`posttrain eval --tools ...`) all resolve through `import_object`, so a spec that imports in
one place imports in every other, and fails everywhere with the same message. The tool worker
subprocess (posttrain.tools.worker) imports with it too, on the parent's own sys.path.

Standard library only: `posttrain validate` uses it without torch.

>>> import_object("json:dumps", "tool").__name__
'dumps'
"""

from __future__ import annotations

import importlib
import os
import sys
from pathlib import Path
from typing import Any

_SEARCHED: list[str] = []  # the folders add_search_paths put on sys.path, named in import errors


def add_search_paths(recipe_path: str | Path | None) -> list[str]:
    """Make user code importable the same way for `train`, `validate` and every rank: the recipe's
    folder and the working directory join sys.path (after the installed packages, so a file there
    never shadows one). The `posttrain` console script does not have the working directory on its
    path (only `python -m posttrain` does), so `my_rewards:fn` beside the recipe used to import
    under one and not the other. Returns the folders added."""
    folders = [Path(recipe_path).expanduser().resolve().parent] if recipe_path else []
    folders.append(Path.cwd())
    added = []
    for folder in dict.fromkeys(str(f) for f in folders):
        if folder not in _SEARCHED:
            _SEARCHED.append(folder)
        if folder not in sys.path:
            sys.path.append(folder)
            added.append(folder)
    return added


def searched() -> str:
    """Where a module is looked for, for messages."""
    places = " and ".join(_SEARCHED) if _SEARCHED else os.getcwd() + " (if on the path)"
    return f"looked for in the installed packages and in {places}"


def split_spec(spec: str, what: str = "reward") -> tuple[str, str]:
    """(module, attribute path) of 'package.module:attribute'; ValueError naming the expected shape."""
    module_name, _, attr_path = spec.partition(":")
    if not module_name or not attr_path:
        raise ValueError(f"{what} import path {spec!r} must look like 'package.module:function'")
    return module_name, attr_path


def import_object(spec: str, what: str = "reward", *, callable_required: bool = True) -> Any:
    """The object `spec` names ('package.module:attr', attributes may be dotted: 'mod:Class.method').

    Every failure is a ValueError whose message starts with `what` and the spec: a module that
    does not import (including one that raises or calls sys.exit while importing), an attribute
    that is missing, or (with `callable_required`) one that cannot be called.
    """
    module_name, attr_path = split_spec(spec, what)
    try:
        target: Any = importlib.import_module(module_name)
    except ImportError as exc:
        where = f"; {searched()}" if isinstance(exc, ModuleNotFoundError) and exc.name == module_name.split(".")[0] else ""
        raise ValueError(f"{what} {spec!r}: cannot import module {module_name!r} ({exc}{where})") from exc
    except (Exception, SystemExit) as exc:  # noqa: BLE001 - the user's module failed while importing
        raise ValueError(f"{what} {spec!r}: importing module {module_name!r} failed ({type(exc).__name__}: {exc})") from exc
    for attr in attr_path.split("."):
        if not hasattr(target, attr):
            owner = getattr(target, "__name__", type(target).__name__)
            raise ValueError(f"{what} {spec!r}: {owner!r} has no attribute {attr!r}")
        target = getattr(target, attr)
    if callable_required and not callable(target):
        raise ValueError(f"{what} {spec!r}: {attr_path!r} is not callable")
    return target
