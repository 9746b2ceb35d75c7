"""`key.path=value` overrides applied to the recipe's raw mapping before validation.

Paths address mappings by name and lists by index, written `a.b[0].c` or `a.b.0.c`. A value is
read as one YAML 1.2 core-schema scalar (see `yaml12`): `true`/`false`, `null`/`~`, integers
(`0123` is 123, `0x1F`, `0o17`), floats (`1e-5`, `.inf`); anything else is the text exactly as
typed, `#` and `:` included (`run_name=exp #3`, `1:30`). A value starting with `[` or `{` is a YAML
flow collection (`[a, b]`, `{k: v}`); a quoted value (`'007'`) is a string. An empty value (`key=`)
means the empty string. Whether a *name* exists is the schema's business (it knows
every valid key and suggests the closest); this module only reports what it can see itself:
malformed paths and list indexes out of range.
"""

from __future__ import annotations

import re

import yaml

from . import yaml12
from .errors import Problem, RecipeError

_SEGMENT = re.compile(r"([^.\[\]]+)|\[(\d+)\]")


def parse_value(text: str):
    """An override's value: a YAML 1.2 scalar, a flow collection, a quoted string, else the text itself."""
    stripped = text.strip()
    if not stripped:
        return ""
    if stripped[0] in "[{'\"":
        try:
            return yaml12.load(stripped)
        except yaml.YAMLError:
            return text
    return yaml12.scalar(stripped)


def parse_path(path: str) -> list[str | int]:
    """'data.datasets[0].name' or 'data.datasets.0.name' -> ['data', 'datasets', 0, 'name']."""
    parts: list[str | int] = []
    pos = 0
    for m in _SEGMENT.finditer(path):
        gap = path[pos : m.start()]
        if gap not in ("", ".") or (gap == "" and pos > 0 and m.group(1)) or (gap == "." and pos == 0):
            raise ValueError(f"malformed key path {path!r}")
        name, index = m.group(1), m.group(2)
        parts.append(int(index) if index is not None else (int(name) if name.isdigit() else name))
        pos = m.end()
    if not parts or pos != len(path):
        raise ValueError(f"malformed key path {path!r}")
    return parts


def format_path(parts) -> str:
    out = ""
    for p in parts:
        out += f"[{p}]" if isinstance(p, int) else (f".{p}" if out else str(p))
    return out


def split_override(item: str) -> tuple[str, str]:
    if "=" not in item:
        raise RecipeError(Problem(item, "an override must look like key.path=value"))
    key, value = item.split("=", 1)
    return key.strip(), value


class _PathProblem(Exception):
    def __init__(self, path: str, message: str):
        self.path, self.message = path, message


def _set(root, parts: list, value) -> None:
    """Set root[parts...] = value, creating missing mappings/lists; never replace an existing scalar."""
    node = root
    for depth, part in enumerate(parts):
        here, parent = format_path(parts[: depth + 1]), format_path(parts[:depth]) or "the recipe"
        if isinstance(part, int):
            if not isinstance(node, list):
                raise _PathProblem(here, f"is indexed with [{part}] but {parent} is not a list")
            if part > len(node):
                raise _PathProblem(here, f"index {part} is out of range: the list has {len(node)} item(s); "
                                         f"use an index from 0 to {len(node)} ({len(node)} appends a new item)")
            if part == len(node):
                node.append(None)
        elif not isinstance(node, dict):
            raise _PathProblem(here, f"cannot set {part!r}: {parent} is a {type(node).__name__}, not a mapping")
        if depth == len(parts) - 1:
            node[part] = value
            return
        child = node[part] if isinstance(part, int) else node.get(part)
        if child is None:
            child = [] if isinstance(parts[depth + 1], int) else {}
            node[part] = child
        node = child


def apply_overrides(raw: dict, items: list[str]) -> tuple[dict, set[str]]:
    """Apply `key=value` items to `raw` in place; return it and the set of overridden paths."""
    problems: list[Problem] = []
    touched: set[str] = set()
    for item in items:
        try:
            key, text = split_override(item)
            parts = parse_path(key)
        except ValueError as e:
            problems.append(Problem(item, f"{e}; write it like data.datasets[0].name=value", "override"))
            continue
        except RecipeError as e:
            problems.extend(e.problems)
            continue
        try:
            _set(raw, parts, parse_value(text))
            touched.add(format_path(parts))
        except _PathProblem as e:
            problems.append(Problem(e.path, e.message, "override"))
    if problems:
        raise RecipeError(problems)
    return raw, touched
