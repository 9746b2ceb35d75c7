"""The tool flags `generate`, `eval` and `compare` share: the model may call tools while it answers.

    add_tool_arguments(parser)
    toolbox = make_toolbox(args)        # None without --tools/--environment; exit 2 on a bad spec
    engine = with_tools(engine, toolbox, args)

The same tools and environments as GRPO's `training.tools` / `training.environment`, checked the
same way (imported in a worker first: posttrain.tools.probe) and run the same way (worker processes,
per-call timeout: posttrain.tools.isolation), in the multi-turn loop of posttrain.generation.tool_loop.
Only argparse and the standard library are imported here.
"""

from __future__ import annotations

import argparse
import json

from posttrain.flag_types import NONNEGATIVE, SECONDS

DEFAULT_MAX_TURNS = 5
DEFAULT_TIMEOUT = 10.0


def add_tool_arguments(parser: argparse.ArgumentParser) -> None:
    g = parser.add_argument_group("tools (the model may call them while it answers; multi-turn, as GRPO with training.tools)")
    g.add_argument("--tools", action="append", metavar="MODULE:FUNCTION",
                   help="a function the model may call (type hints and a Google-style docstring: its schema is built from "
                        "them); repeatable. Local models and openai: models (OpenAI's tool-call format)")
    g.add_argument("--environment", metavar="MODULE:CLASS",
                   help="a class whose public methods are tools with state: one instance per item, reset(**item) first, "
                        "get_reward() at the end (recorded as environment_reward)")
    g.add_argument("--environment-kwargs", metavar="JSON", help="keyword arguments for the environment's constructor, as a JSON object")
    g.add_argument("--max-tool-turns", type=NONNEGATIVE, metavar="N", help=f"turns of tool calls per item at most (default {DEFAULT_MAX_TURNS}); "
                   "--max-new-tokens applies to each turn")
    g.add_argument("--tool-timeout", type=SECONDS, metavar="S", help=f"seconds one tool call may run (default {DEFAULT_TIMEOUT:g}); "
                   "past it the call is stopped and the model reads a timeout error")


FLAGS = {"tools": "--tools", "environment": "--environment", "environment_kwargs": "--environment-kwargs",
         "max_tool_turns": "--max-tool-turns", "tool_timeout": "--tool-timeout"}


def make_toolbox(args):
    """The Toolbox the flags ask for, or None; every bad input is a UserError (exit 2) naming the flag."""
    from posttrain.errors import UserError

    tools, environment = list(getattr(args, "tools", None) or []), getattr(args, "environment", None)
    if not tools and not environment:
        given = [FLAGS[k] for k in ("environment_kwargs", "max_tool_turns", "tool_timeout") if getattr(args, k, None) is not None]
        if given:
            raise UserError(f"{', '.join(given)} only act with --tools or --environment; add them or drop {given[0]}")
        return None
    kwargs = getattr(args, "environment_kwargs", None) or {}
    if isinstance(kwargs, str):
        try:
            kwargs = json.loads(kwargs)
        except ValueError as e:
            raise UserError(f"--environment-kwargs {args.environment_kwargs!r}: not JSON ({e}); e.g. '{{\"budget\": 10}}'") from None
    if not isinstance(kwargs, dict):
        raise UserError(f"--environment-kwargs must be a JSON object (keyword arguments), got {type(kwargs).__name__}")
    if kwargs and not environment:
        raise UserError("--environment-kwargs only acts with --environment")
    turns, timeout = getattr(args, "max_tool_turns", None), getattr(args, "tool_timeout", None)
    if turns is not None and turns < 0:
        raise UserError(f"--max-tool-turns {turns}: must be 0 or more (0: tools offered, calls never run)")
    if timeout is not None and timeout <= 0:
        raise UserError(f"--tool-timeout {timeout}: must be more than 0 seconds")
    from posttrain.tools.probe import probe

    problems, _ = probe(tools, environment, kwargs)
    if problems:
        raise UserError("the tools cannot be used:\n" + "\n".join(f"  - {_flag(key, tools)}: {message}" for key, message in problems))
    from posttrain.tools.isolation import Toolbox, ToolSettings

    return Toolbox(tools, environment, kwargs, ToolSettings(timeout=timeout or DEFAULT_TIMEOUT))


def _flag(key: str, tools: list[str]) -> str:
    """A recipe key path from the probe, as the flag that gave it ('training.tools[1]' -> '--tools my:fn')."""
    if key.startswith("training.tools["):
        return f"--tools {tools[int(key.split('[')[1].rstrip(']'))]}"
    return FLAGS.get(key.removeprefix("training."), key)


def with_tools(engine, toolbox, args):
    """`engine` wrapped in the multi-turn tool loop, or as it is without a toolbox."""
    if toolbox is None:
        return engine
    from posttrain.generation.tool_loop import ToolLoop

    turns = getattr(args, "max_tool_turns", None)
    return ToolLoop(engine, toolbox, max_turns=DEFAULT_MAX_TURNS if turns is None else turns)
