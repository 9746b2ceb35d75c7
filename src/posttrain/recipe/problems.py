"""Reading a recipe file and turning pydantic's validation errors into posttrain's problems: each
with the user's key path, the layer that set it (file, override, default) and a message that says
how to fix it. Shared by training recipes (`recipe.load`) and generation/evaluation recipes
(`recipe.tasks`); imports neither.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml
from pydantic import BaseModel, ValidationError

from . import yaml12
from .errors import Problem, RecipeError, did_you_mean
from .migrations import ALGORITHM_MIGRATIONS, migration_for
from .overrides import format_path, parse_path
from .schema import OWNED_ELSEWHERE, RL_ALGORITHMS, RL_ONLY_HINTS, TRAINING_MODELS, Problems, Recipe
from .section import unwrap


@dataclass
class LoadedRecipe:
    recipe: Recipe
    source: Path | None
    overridden: set[str] = field(default_factory=set)  # key paths set by key=value
    defaulted: set[str] = field(default_factory=set)  # key paths set by posttrain defaults

    def layer(self, path: str) -> str:
        """Who set `path`: the nearest of it and its parents that an override or a default set."""
        try:
            parts = parse_path(path) if path else []
        except ValueError:  # a key of the user's that is no valid path (e.g. with dots): itself only
            parts = [path]
        for n in range(len(parts), 0, -1):
            prefix = format_path(parts[:n])
            if prefix in self.overridden:
                return "override"
            if prefix in self.defaulted:
                return "posttrain default"
        return self.source.name if self.source else "recipe"

    def sets_below(self, path: str) -> bool:
        """Whether a key=value override set `path` or a key under it."""
        return any(p == path or p.startswith((path + ".", path + "[")) for p in self.overridden)


def read_yaml(path: str | Path) -> dict:
    """A recipe file's mapping; a name that is no file here but a shipped recipe's (`sft/tiny-cpu`) reads that
    recipe, with the files it names made absolute (posttrain.shipped), so it runs from any folder."""
    from posttrain import shipped

    path = Path(path)
    shipped_recipe = shipped.find(path) if not path.exists() else None
    if shipped_recipe is not None:
        return shipped.rooted(read_yaml(shipped_recipe), shipped.root())
    if not path.is_file():
        hint = " (it is a directory)" if path.is_dir() else "; `posttrain recipes` lists the shipped ones, which run by name"
        raise RecipeError(Problem("", f"recipe file {str(path)!r} does not exist{hint}"))
    try:
        raw = yaml12.load(path.read_text())
    except yaml.YAMLError as e:
        raise RecipeError(Problem("", f"{path} is not valid YAML: {e}")) from None
    if raw is None:
        raw = {}
    if not isinstance(raw, dict):
        raise RecipeError(Problem("", f"{path} must hold a mapping with sections model, data, training; found a {type(raw).__name__}"))
    return raw


def fairl_message(source: Path | None, signs: list[str]) -> str:
    shown = ", ".join(dict.fromkeys(s.replace(".*.", "[i].") for s in signs[:6]))
    more = f" and {len(set(signs)) - 6} more" if len(set(signs)) > 6 else ""
    name = str(source) if source is not None else "FILE"
    return (f"this looks like a FAI-RL recipe ({shown}{more}); run `posttrain convert {name}` to write the posttrain "
            "recipe and a table of what moved and what changed meaning.")


def _model_at(parts: list, raw: dict, root: type[BaseModel] = Recipe) -> type[BaseModel] | None:
    """The schema model that validates the mapping at `parts` (None if not a mapping of ours)."""
    model: type[BaseModel] | None = root
    node: Any = raw
    for part in parts:
        if model is None:
            return None
        if isinstance(part, int):
            node = node[part] if isinstance(node, list) and part < len(node) else None
            continue
        if model.model_fields.get(part) is None:
            return None
        node = node.get(part) if isinstance(node, dict) else None
        if part == "training" and issubclass(model, Recipe):
            algorithm = node.get("algorithm") if isinstance(node, dict) else None
            model = TRAINING_MODELS.get(algorithm) if isinstance(algorithm, str) else None
        else:
            found = unwrap(model.model_fields[part].annotation)
            model = found[0] if found else None
    return model


def _key_path(loc: tuple, raw: dict, root: type[BaseModel] = Recipe) -> list:
    """Keep the part of a pydantic error location that addresses the user's data (drop union tags)."""
    parts: list = []
    node: Any = raw
    for i, part in enumerate(loc):
        if i == 1 and loc[0] == "training" and part in TRAINING_MODELS:
            continue
        if isinstance(node, dict) and part in node:
            node = node[part]
        elif isinstance(node, list) and isinstance(part, int) and part < len(node):
            node = node[part]
        elif isinstance(node, dict) and isinstance(part, str) and _model_at(parts, raw, root) is not None and part in _model_at(parts, raw, root).model_fields:
            node = None  # a missing required key: still the user's path
        else:
            break
        parts.append(part)
    return parts


def _value_at(parts: list, raw: dict):
    node: Any = raw
    for p in parts:
        node = node[p]
    return node


def _problems(exc: ValidationError, raw: dict, loaded: LoadedRecipe, root: type[BaseModel] = Recipe) -> list[Problem]:
    grouped: dict[str, list[dict]] = {}
    for err in exc.errors():
        parts = _key_path(err["loc"], raw, root)
        if err["type"].startswith("union_tag"):
            parts = ["training", "algorithm"]
        grouped.setdefault(format_path(parts), []).append({**err, "parts": parts})
    problems = []
    for path, errs in grouped.items():
        parts = errs[0]["parts"]
        for err in errs:  # a cross-field check that found several problems names each one's key
            found = err.get("ctx", {}).get("error") if err["type"] == "value_error" else None
            if isinstance(found, Problems):
                problems.extend(Problem(key, msg, loaded.layer(key)) for key, msg in found.items)
        errs = [e for e in errs if not isinstance(e.get("ctx", {}).get("error"), Problems)]
        if errs:
            source = loaded.layer(path) if path else None
            if path and all(e["type"] == "extra_forbidden" for e in errs) and loaded.sets_below(path):
                source = "override"  # `modle.use_lora=true` made the unknown key 'modle': the override is at fault, not the file
            problems.append(Problem(path, _message(errs, parts, raw, root), source))
    return problems


def _message(errs: list[dict], parts: list, raw: dict, root: type[BaseModel] = Recipe) -> str:
    err = errs[0]
    kind = err["type"]
    if kind == "extra_forbidden":
        name = parts[-1]
        hint = migration_for(parts, raw)
        if hint:
            return f"{name!r} is no longer a key: {hint}"
        if parts[0] == "training" and len(parts) == 2 and name in OWNED_ELSEWHERE:
            return f"posttrain sets {name!r} itself: {OWNED_ELSEWHERE[name]}"
        algorithm = (raw.get("training") or {}).get("algorithm") if isinstance(raw.get("training"), dict) else None
        if parts[0] == "training" and len(parts) == 2 and name in RL_ONLY_HINTS and algorithm not in RL_ALGORITHMS:
            return f"not a key of algorithm {algorithm}: " + RL_ONLY_HINTS[name].format(algorithm=algorithm)
        model = _model_at(parts[:-1], raw, root)
        known = list(model.model_fields) if model else []
        where = format_path(parts[:-1]) or "the recipe"
        msg = f"unknown key {name!r} in {where}.{did_you_mean(str(name), known)}"
        if parts[0] == "training" and len(parts) == 2 and model is not None:  # not inside training.difficulty_filter
            msg += f" Keys there are posttrain's plus every field of TRL's {model.__doc__.split('TRL ')[-1].rstrip(')')}."
        return msg
    if kind in ("union_tag_invalid", "union_tag_not_found"):
        names = ", ".join(TRAINING_MODELS)
        if kind == "union_tag_not_found":
            return f"training.algorithm is required: one of {names}."
        tag = err["ctx"]["tag"]
        if tag in ALGORITHM_MIGRATIONS:  # another tool's algorithm: a close spelling here would mean something else
            return f"algorithm {tag!r} is not one posttrain runs: {ALGORITHM_MIGRATIONS[tag]} Choose one of {names}."
        return f"algorithm {tag!r} is not one posttrain runs; choose one of {names}.{did_you_mean(tag, TRAINING_MODELS)}"
    if kind == "too_short":
        return "is empty; give at least one item." + _describe(parts, raw, root)
    if kind == "missing":
        return "is required but missing." + _describe(parts, raw, root)
    value = err.get("input")
    if kind == "literal_error" and all(e["type"] == "literal_error" for e in errs):
        expected = err["ctx"]["expected"]
        return f"{value!r} is not allowed; choose one of {expected}.{did_you_mean(str(value), [s.strip(chr(39)) for s in expected.replace(' or ', ', ').split(', ')])}"
    if kind == "value_error":
        return err["msg"].removeprefix("Value error, ")
    expected = sorted({e["msg"].removeprefix("Input should be ").removeprefix("a valid ") for e in errs})
    shown = "null" if value is None else f"{value!r} ({type(value).__name__})"
    return f"{shown} is not valid: expected {' or '.join(expected)}."


def _describe(parts: list, raw: dict, root: type[BaseModel] = Recipe) -> str:
    model = _model_at(parts[:-1], raw, root)
    info = model.model_fields.get(parts[-1]) if model else None
    return f" {info.description}" if info is not None and info.description else ""
