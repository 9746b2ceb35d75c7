"""Check tool and environment specs before a run uses them, in a worker process.

    problems, schemas = probe(["my_tools:calculator"], "my_envs:Shop", {"budget": 10})

Run by `posttrain validate` and `posttrain train` (preflight) and by `eval`/`generate`/`compare
--tools`. The imports happen in a `posttrain.tools.worker` child, with the parent's sys.path (the
import rule of `posttrain.user_code`), so a module that hangs or segfaults while importing is a
clear error here and never takes the command down. What is checked, with the reason:

- the module imports and the attribute exists (a tool must be a function, an environment a class);
- every tool, and every public method of an environment (TRL offers each as a tool), gets a JSON
  schema from transformers' `get_json_schema`, the exact rule TRL applies: type hints on every
  parameter and a Google-style docstring with an `Args:` line per parameter. This is what the
  model reads about the tool, so a tool without it cannot be offered;
- an environment has `reset` (TRL calls it at the start of every rollout), `get_reward` (optional)
  takes no arguments, and `environment_kwargs` fit its constructor (the environment is not built:
  building may be costly; `train` builds one before the first step).

The schemas found are returned: the evaluation loop offers them to API models as they are.
"""

from __future__ import annotations

from .checks import ENV_KEY, ENV_KWARGS_KEY, SCHEMA_RULE, TOOL_KEY, check_items  # noqa: F401  (importable from here)


def probe(tools: list[str], environment: str | None = None, environment_kwargs: dict | None = None,
          timeout: float | None = None) -> tuple[list[tuple[str, str]], dict]:
    """(problems as (key path, message), what the worker found: {"tools": [schema], "environment": ...}).
    Nothing to check: no worker starts."""
    from posttrain.tools.isolation import STARTUP_TIMEOUT, ToolSettings, WorkerDied, WorkerProcess, WorkerTimeout

    items: list[tuple] = [("tool", i, spec) for i, spec in enumerate(tools)]
    if environment:
        items.append(("environment", environment, dict(environment_kwargs or {})))
    if not items:
        return [], {"tools": [], "environment": None}
    timeout = timeout or STARTUP_TIMEOUT
    worker = WorkerProcess(ToolSettings(startup_timeout=timeout), "probe")
    key = TOOL_KEY if tools else ENV_KEY
    named = ", ".join(tools + ([environment] if environment else []))
    try:
        worker.start()
        reply = worker.request(("probe", items), timeout)
    except WorkerTimeout:
        return [(key, f"importing {named} did not finish within {timeout:g} s (the import hangs, or does heavy work at import time)")], {}
    except WorkerDied as e:
        return [(key, f"importing {named} crashed the Python process ({e.how}); run `python -c 'import MODULE'` to see why")], {}
    finally:
        worker.stop()
    if reply[0] == "error":
        return [(key, f"checking {named} failed: {reply[1]}")], {}
    found = reply[1]
    return [tuple(p) for p in found["problems"]], found
