"""The Commands page (docs/reference/cli.md), generated from the parser, so every command and every flag is
documented once, where it is defined (its `help=`), and the page cannot drift from what the CLI accepts:

    python -m posttrain.cli_reference > docs/reference/cli.md

tests/docs/test_docs.py fails when the committed page differs from what this prints.
"""

from __future__ import annotations

import argparse

HEADER = """# Commands

Every `posttrain` command and its flags, generated from the parser by `python -m posttrain.cli_reference`
(a test fails when this page and the code differ); `posttrain COMMAND --help` prints the same, with
examples. Recipe commands (`train`, `validate`) also take `key.path=value` overrides anywhere after
the command ([Recipes](../guides/recipes.md)).

Where each is explained: `train` in [Train](../guides/training.md); `validate` and `recipes` in
[Recipes](../guides/recipes.md); `inspect` and `make-tiny-model` in
[Models and the tokenizer rule](../guides/models.md); `generate`, `eval` and `compare` in
[Generate, evaluate, compare](../guides/evaluation.md); `report` in
[GRPO and GSPO](../guides/grpo.md); `convert` in [Coming from FAI-RL](../guides/fai-rl.md);
`vllm-serve` in [Many GPUs and nodes](../guides/distributed.md); `export` in [Export](../guides/export.md);
`demo` in [Getting started](../getting-started.md); `docs` prints these pages, offline; `env` prints what
a bug report needs (paste it in).
"""


def _cell(text: str | None) -> str:
    return " ".join((text or "").replace("|", "/").split())


def _flag(action: argparse.Action) -> str:
    """How a user writes the argument: `--n N`, `--arch {qwen2,llama,llava}`, `path`."""
    if not action.option_strings:
        return f"`{action.metavar or action.dest}`"
    if action.nargs == 0:
        return ", ".join(f"`{o}`" for o in action.option_strings)
    value = action.metavar or ("{" + ",".join(map(str, action.choices)) + "}" if action.choices else action.dest.upper())
    if isinstance(value, tuple):
        value = " ".join(value)
    return ", ".join(f"`{o} {value}`" for o in action.option_strings)


def _help(action: argparse.Action, parser: argparse.ArgumentParser) -> str:
    if not action.help:
        return ""
    try:
        text = parser._get_formatter()._expand_help(action)  # what --help prints: %(default)s filled in
    except (KeyError, TypeError, ValueError):
        text = action.help
    if action.option_strings and action.nargs != 0 and action.default not in (None, argparse.SUPPRESS, [], ())\
            and "default" not in text.lower():
        text += f" (default: {action.default})"
    return _cell(text)


def _commands(parser: argparse.ArgumentParser):
    sub = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    helps = {a.dest: a.help for a in sub._choices_actions}
    return [(name, helps.get(name, ""), command) for name, command in sub.choices.items() if name in helps]


def command_table(parser: argparse.ArgumentParser) -> list[str]:
    rows = ["| command | what it does |", "|---|---|"]
    return rows + [f"| [`posttrain {name}`](#posttrain-{name}) | {_cell(text)} |" for name, text, _ in _commands(parser)]


def markdown() -> str:
    from posttrain.cli import build_parser

    parser = build_parser()
    out = [HEADER, *command_table(parser), ""]
    for name, text, command in _commands(parser):
        usage = " ".join(command.format_usage().split()).removeprefix("usage: ")
        out += [f"## posttrain {name}", "", _cell(command.description or text), "", f"`{usage}`", "",
                "| argument | what it does |", "|---|---|"]
        out += [f"| {_flag(a)} | {_help(a, command)} |" for a in command._actions
                if not isinstance(a, argparse._HelpAction) and a.help != argparse.SUPPRESS]
        out.append("")
    return "\n".join(out)


if __name__ == "__main__":
    print(markdown(), end="")
