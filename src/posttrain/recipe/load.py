"""Load a recipe: YAML file -> key=value overrides -> posttrain defaults -> validated `Recipe`.

Every problem is collected into one `RecipeError` that names the key path, the layer it came
from (the recipe file, an override, a posttrain default), what is wrong and how to fix it.
"""

from __future__ import annotations

import copy
import re
import types
import typing
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml
from pydantic import BaseModel, ValidationError

from posttrain.secrets import REDACTED, SECRET_CONTAINERS, is_secret_key, redact_tree, redact_url

from .defaults import defaults_for
from . import yaml12
from .errors import Problem, RecipeError, did_you_mean
from .migrations import ALGORITHM_MIGRATIONS, fairl_signs, migration_for
from .overrides import apply_overrides, format_path, parse_path
from .schema import OWNED_ELSEWHERE, RL_ALGORITHMS, RL_ONLY_HINTS, TRAINING_MODELS, Problems, Recipe, schema_for
from .trl_fields import trl_fields



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


def read_yaml(path: str | Path) -> dict:
    path = Path(path)
    if not path.is_file():
        raise RecipeError(Problem("", f"recipe file {str(path)!r} does not exist" + (" (it is a directory)" if path.is_dir() else "")))
    try:
        raw = yaml12.load(path.read_text())
    except yaml.YAMLError as e:
        raise RecipeError(Problem("", f"{path} is not valid YAML: {e}")) from None
    if raw is None:
        raw = {}
    if not isinstance(raw, dict):
        raise RecipeError(Problem("", f"{path} must hold a mapping with sections model, data, training; found a {type(raw).__name__}"))
    return raw


def load_recipe(path: str | Path | None, overrides: list[str] | tuple[str, ...] = (), raw: dict | None = None,
                world_size: int = 1) -> LoadedRecipe:
    """Resolve a recipe file (or an already-read mapping) plus overrides into a validated Recipe.

    `world_size`: how many processes the run will have (batch shapes are checked for them); the
    caller knows (the CLI: --nproc x --nnodes, or the launcher's WORLD_SIZE), the schema never reads
    the environment."""
    source = Path(path) if path is not None else None
    raw = copy.deepcopy(raw) if raw is not None else read_yaml(source)
    raw, overridden = apply_overrides(raw, list(overrides))
    _unset_null_overrides(raw, overridden)

    defaulted: set[str] = set()
    training = raw.get("training")
    if isinstance(training, dict) and isinstance(training.get("algorithm"), str):
        for key, value in defaults_for(training["algorithm"], training).items():
            if key not in training:
                training[key] = copy.deepcopy(value)
                defaulted.add(f"training.{key}")
        if "output_dir" not in training and source is not None:
            training["output_dir"] = f"runs/{source.stem}"
            defaulted.add("training.output_dir")

    try:
        recipe = schema_for(raw).model_validate(raw, context={"world_size": world_size})  # builds the schema of this algorithm only
    except ValidationError as e:
        from .tasks import fairl_signs_in_task, is_task_recipe

        if is_task_recipe(raw) and not fairl_signs_in_task(raw):
            section = "inference" if "inference" in raw else "evaluation"
            use = "posttrain generate --recipe" if section == "inference" else "posttrain eval --recipe (or compare)"
            raise RecipeError(Problem("", f"this is a generation/evaluation recipe (an `{section}:` section), not a training "
                                          f"recipe: run it with {use} {source or 'FILE'}")) from None
        signs = fairl_signs(raw)
        if signs:  # one message instead of one unknown key per line
            raise RecipeError(Problem("", fairl_message(source, signs))) from None
        loaded = LoadedRecipe(None, source, overridden, defaulted)  # type: ignore[arg-type]
        error = RecipeError(_problems(e, raw, loaded))
        error.raw = raw  # for checks that can still run on it (preflight_raw)
        raise error from None
    return LoadedRecipe(recipe, source, overridden, defaulted)


def _unset_null_overrides(raw: dict, overridden: set[str]) -> None:
    """`key=null` on a key that cannot be null removes it, so its default applies again: the way to
    take a dead key out of a recipe from the command line (`training.save_steps=null`)."""
    from pydantic import TypeAdapter

    for path in overridden:
        parts = parse_path(path)
        try:
            parent = _value_at(parts[:-1], raw)
        except (KeyError, IndexError, TypeError):
            continue
        if not isinstance(parent, dict) or parts[-1] not in parent or parent[parts[-1]] is not None:
            continue
        model = _model_at(parts[:-1], raw)
        info = model.model_fields.get(parts[-1]) if model is not None else None
        if info is None:
            continue
        try:
            TypeAdapter(info.annotation).validate_python(None)
        except ValidationError:
            del parent[parts[-1]]


# ------------------------------------------------------------------------------ error messages
def fairl_message(source: Path | None, signs: list[str]) -> str:
    shown = ", ".join(dict.fromkeys(s.replace(".*.", "[i].") for s in signs[:6]))
    more = f" and {len(set(signs)) - 6} more" if len(set(signs)) > 6 else ""
    name = str(source) if source is not None else "FILE"
    return (f"this looks like a FAI-RL recipe ({shown}{more}); run `posttrain convert {name}` to write the posttrain "
            "recipe and a table of what moved and what changed meaning.")


def _unwrap(annotation) -> list[type[BaseModel]]:
    """The pydantic models an annotation can hold (through Optional, list, Annotated, Union)."""
    origin = typing.get_origin(annotation)
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return [annotation]
    if origin in (typing.Union, types.UnionType, list, typing.Annotated):
        args = typing.get_args(annotation)[:1] if origin is typing.Annotated else typing.get_args(annotation)
        return [m for a in args for m in _unwrap(a)]
    return []


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
            found = _unwrap(model.model_fields[part].annotation)
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
        if parts[0] == "training" and model is not None:
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


# ------------------------------------------------------------------------------ resolved view
def resolved_dict(recipe: Recipe, redact: bool = True) -> dict:
    """The recipe as it will run: every section's values, training's set keys; secrets redacted."""
    out = recipe.model_dump(mode="json", exclude={"training"})
    training = recipe.training
    values = training.model_dump(mode="json", include=training.model_fields_set - {"algorithm"})
    out["training"] = {"algorithm": training.algorithm, **dict(sorted(values.items()))}
    return redact_tree(out) if redact else out


def _json(value):
    return value.model_dump(mode="json") if isinstance(value, BaseModel) else value


def redact_overrides(items) -> list[str]:
    """A command line with the values of secret overrides (tracking.api_key=..., any
    ...headers.NAME=... or headers={...}) replaced by ***, and credentials in URLs blanked."""
    out = []
    for item in items:
        key, eq, value = item.partition("=")
        parts = [p for p in re.split(r"[.\[\]]", key) if p]
        secret = eq and parts and (is_secret_key(parts[-1]) or any(p in SECRET_CONTAINERS for p in parts))
        # a whole reward given as YAML ({name: http, headers: {...}}) can hold headers too
        secret = secret or (eq and any(f"{c}:" in value or f"'{c}'" in value or f'"{c}"' in value for c in SECRET_CONTAINERS))
        out.append(f"{key}={REDACTED}" if secret else redact_url(item) if eq else item)
    return out


def library_default(path_parts: list[str], recipe: Recipe):
    """What a key would be with nothing set: the schema default, or TRL's for a training field."""
    section = path_parts[0]
    if section == "training":
        spec = trl_fields(type(recipe.training)._family).get(path_parts[1])
        return spec["default"] if spec else None
    model = type(getattr(recipe, section))
    info = model.model_fields.get(path_parts[1]) if len(path_parts) > 1 else None
    if info is None:
        return None
    return None if info.is_required() else info.get_default(call_default_factory=True)


def differences(loaded: LoadedRecipe) -> list[tuple[str, Any, Any, str]]:
    """(path, value, library default, layer) for every resolved value that differs from the library's."""
    rows = []
    resolved = resolved_dict(loaded.recipe)
    for section, values in resolved.items():
        for key, value in (values or {}).items():
            path = f"{section}.{key}"
            if (section, key) in (("data", "datasets"), ("training", "algorithm")):
                rows.append((path, value, None, loaded.layer(path)))
                continue
            default = library_default([section, key], loaded.recipe)
            if _json(default) != value:
                rows.append((path, value, default, loaded.layer(path)))
    return rows


def to_yaml(data: dict) -> str:
    return yaml.safe_dump(data, sort_keys=False, default_flow_style=None, width=100)


def format_differences(loaded) -> str:
    rows = [(p, _short(v), "-" if d is None else _short(d), layer) for p, v, d, layer in differences(loaded)]
    head = ("key", "value", "library default", "set by")
    widths = [max(len(r[i]) for r in [head, *rows]) for i in range(4)]
    return "\n".join("  ".join(c.ljust(w) for c, w in zip(r, widths)).rstrip() for r in [head, *rows])


def _short(value, limit: int = 60) -> str:
    import json

    text = value if isinstance(value, str) else json.dumps(value)
    return text if len(text) <= limit else text[: limit - 3] + "..."
