"""`key.path=value` overrides applied to the recipe's raw mapping before validation.

Paths address mappings by name and lists by index, written `a.b[0].c` or `a.b.0.c`. Values are
YAML scalars or flow collections (`true`, `null`, `1e-5`, `[a, b]`, `{k: v}`); an empty value
(`key=`) means the empty string. Whether a *name* exists is the schema's business (it knows
every valid key and suggests the closest); this module only reports what it can see itself:
malformed paths and list indexes out of range.
"""

from __future__ import annotations

import re

import yaml

from .errors import Problem, RecipeError

_SEGMENT = re.compile(r"([^.\[\]]+)|\[(\d+)\]")
_FLOAT = re.compile(r"^[+-]?(\d+\.?\d*|\.\d+)([eE][+-]?\d+)$")


def parse_value(text: str):
    """A YAML scalar, with '1e-5' read as a float (YAML 1.1 would keep it a string)."""
    if _FLOAT.match(text.strip()):
        return float(text)
    try:
        return yaml.safe_load(text) if text.strip() else ""
    except yaml.YAMLError:
        return text


def parse_path(path: str) -> list[str | int]:
    """'data.datasets[0].name' or 'data.datasets.0.name' -> ['data', 'datasets', 0, 'name']."""
    parts: list[str | int] = []
    pos = 0
    for m in _SEGMENT.finditer(path):
        gap = path[pos : m.start()]
        if gap not in ("", ".") or (gap == "" and pos > 0 and m.group(1)):
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
        node = raw
        for depth, part in enumerate(parts):
            last = depth == len(parts) - 1
            here = format_path(parts[: depth + 1])
            if isinstance(part, int):
                if not isinstance(node, list):
                    problems.append(Problem(here, f"is indexed with [{part}] but {format_path(parts[:depth]) or 'it'} is not a list", "override"))
                    break
                if part > len(node):
                    problems.append(Problem(here, f"index {part} is out of range: the list has {len(node)} item(s); "
                                            f"use an index from 0 to {len(node)} ({len(node)} appends a new item)", "override"))
                    break
                if part == len(node):
                    node.append({})
            else:
                if not isinstance(node, dict):
                    problems.append(Problem(here, f"cannot set {part!r}: {format_path(parts[:depth])} is a {type(node).__name__}, not a mapping", "override"))
                    break
                if not last and not isinstance(node.get(part), (dict, list)):
                    node[part] = [] if isinstance(parts[depth + 1], int) else {}
            if last:
                node[part] = parse_value(text)
                touched.add(format_path(parts))
            else:
                node = node[part]
    if problems:
        raise RecipeError(problems)
    return raw, touched
