"""The checks `posttrain.tools.probe` runs inside a tool worker (`posttrain.tools.worker`): import
each tool or environment spec and check it can be described to the model. Imported by the worker
only, so the worker never imports the parent side (`probe`, `isolation`).
"""

from __future__ import annotations

import inspect

# key path prefix of each kind of spec, in recipes
TOOL_KEY, ENV_KEY, ENV_KWARGS_KEY = "training.tools", "training.environment", "training.environment_kwargs"

SCHEMA_RULE = ("TRL describes a tool to the model from its type hints and docstring: give every parameter a type hint and "
               "write a Google-style docstring whose Args: section describes each parameter")


def check_items(items: list[tuple]) -> dict:
    """{"problems": [(key, message)], "tools": [schema], "environment": {...} or None}; runs in the worker."""
    from posttrain.user_code import import_object

    out: dict = {"problems": [], "tools": [], "environment": None}
    for item in items:
        if item[0] == "tool":
            _, index, spec = item
            key = f"{TOOL_KEY}[{index}]"
            try:
                fn = import_object(spec, "tool")
            except ValueError as e:
                out["problems"].append((key, str(e)))
                continue
            if inspect.isclass(fn):
                out["problems"].append((key, f"{spec} is a class; a tool is a function. For a class whose methods are tools "
                                             f"(with state per rollout), use {ENV_KEY}: {spec}"))
                continue
            schema, problem = _schema(fn, spec)
            if problem:
                out["problems"].append((key, problem))
            else:
                out["tools"].append(schema)
        else:
            _, spec, kwargs = item
            out["environment"] = _check_environment(spec, kwargs, out["problems"])
    names = [s["function"]["name"] for s in out["tools"]] + [s["function"]["name"] for s in (out["environment"] or {}).get("methods", [])]
    twice = sorted({n for n in names if names.count(n) > 1})
    if twice:
        out["problems"].append((TOOL_KEY, f"two tools are named {twice[0]!r}; the model calls tools by name, so every tool needs its own"))
    return out


def _schema(fn, spec: str) -> tuple[dict | None, str | None]:
    from transformers.utils import get_json_schema
    from transformers.utils.chat_template_utils import DocstringParsingException, TypeHintParsingException

    try:
        return get_json_schema(fn), None
    except (DocstringParsingException, TypeHintParsingException) as e:
        return None, f"{spec}: {e}. {SCHEMA_RULE}."
    except Exception as e:  # noqa: BLE001 - an annotation that does not evaluate, a signature that cannot be read
        return None, f"{spec}: its signature cannot be read ({type(e).__name__}: {e}). {SCHEMA_RULE}."


def _check_environment(spec: str, kwargs: dict, problems: list) -> dict | None:
    from posttrain.user_code import import_object

    try:
        cls = import_object(spec, "environment")
    except ValueError as e:
        problems.append((ENV_KEY, str(e)))
        return None
    if not inspect.isclass(cls):
        problems.append((ENV_KEY, f"{spec} is not a class; an environment is a class whose public methods are the tools, "
                                  "with reset(**row) (and optionally get_reward()); for plain functions use training.tools"))
        return None
    members = dict(inspect.getmembers(cls, predicate=inspect.isfunction))
    if "reset" not in members:
        problems.append((ENV_KEY, f"{spec} has no reset method; TRL calls reset(**row) at the start of every rollout (the "
                                  "dataset row's columns as keywords; return an observation to append to the prompt, or None). Add one."))
    if "get_reward" in members:
        extra = [p for p in list(inspect.signature(members["get_reward"]).parameters)[1:]]
        if extra:
            problems.append((ENV_KEY, f"{spec}.get_reward takes {extra}; TRL calls get_reward() with no arguments at the end of "
                                      "each rollout, so it must read what it needs from the environment's state"))
    methods = []
    for name, method in members.items():
        if name.startswith("_") or name in ("reset", "get_reward"):
            continue
        schema, problem = _schema(method, f"{spec}.{name}")
        if problem:
            problems.append((ENV_KEY, problem + " (every public method of an environment is offered as a tool; prefix "
                                                "helpers with _)"))
        else:
            methods.append(schema)
    if not methods:
        problems.append((ENV_KEY, f"{spec} has no public method other than reset/get_reward, so the model would have no tool to call"))
    try:
        inspect.signature(cls).bind(**kwargs)
    except TypeError as e:
        problems.append((ENV_KWARGS_KEY, f"{kwargs} do not fit {spec}'s constructor {inspect.signature(cls)}: {e}"))
    except ValueError:
        pass  # a constructor without a readable signature (a C type): building it will tell
    return {"spec": spec, "name": cls.__name__, "methods": methods, "has_get_reward": "get_reward" in members}
