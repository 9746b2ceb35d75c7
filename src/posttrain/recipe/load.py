"""Load a recipe: YAML file -> key=value overrides -> posttrain defaults -> validated `Recipe`.

Every problem is collected into one `RecipeError` that names the key path, the layer it came
from (the recipe file, an override, a posttrain default), what is wrong and how to fix it.
"""

from __future__ import annotations

import copy
import re
from pathlib import Path
from typing import Any

import yaml
from pydantic import BaseModel, ValidationError

from posttrain.secrets import REDACTED, SECRET_CONTAINERS, is_secret_key, redact_tree, redact_url

from .defaults import defaults_for
from .errors import Problem, RecipeError
from .migrations import fairl_signs
from .overrides import apply_overrides, parse_path
from .problems import LoadedRecipe, _model_at, _problems, _value_at, fairl_message, read_yaml  # noqa: F401  (LoadedRecipe, read_yaml: importable from here)
from .schema import Recipe, schema_for
from .tasks import fairl_signs_in_task, is_task_recipe
from .trl_fields import trl_fields


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
