"""`posttrain recipes [copy NAME [DIR]]`: the shipped recipes, listed or copied out to edit."""

from __future__ import annotations

import argparse
from pathlib import Path


def add_parser(sub) -> None:
    p = sub.add_parser(
        "recipes", help="list the shipped recipes, or copy one (with the data it names) or one shipped file into a folder",
        description="Without arguments: every shipped recipe, as `posttrain train --recipe NAME` takes it, with its "
        "description. `copy NAME [DIR]`: the recipe and every file it names (data, templates) into DIR (default: the working "
        "directory), at the paths it names them by, so `posttrain train --recipe recipes/NAME.yaml` runs there and edits "
        "stay yours. `copy PATH [DIR]`: one shipped file by its path (a chat template, example data, the example reward), "
        "to the same path under DIR.",
        epilog="examples:\n  posttrain recipes\n  posttrain train --recipe sft/tiny-cpu            # by name, from any folder\n"
        "  posttrain recipes copy grpo/tiny-cpu mine/ && cd mine && posttrain train --recipe recipes/grpo/tiny-cpu.yaml\n"
        "  posttrain recipes copy examples/rewards/my_reward.py    # one file: the example reward of `posttrain docs own-model-data-reward`",
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument("action", nargs="?", choices=["list", "copy"], default="list")
    p.add_argument("name", nargs="?", help="copy: the recipe's name (`sft/tiny-cpu`), or a shipped file's path (`recipes/templates/chatml-tools.jinja`)")
    p.add_argument("dir", nargs="?", type=Path, default=Path("."), help="copy: where to (default: the working directory)")
    p.set_defaults(func=run)


def run(args) -> int:
    from posttrain import shipped
    from posttrain.errors import UserError

    if args.action == "copy":
        if not args.name:
            raise UserError("posttrain recipes copy NAME [DIR]: give the recipe's name, e.g. sft/tiny-cpu (`posttrain recipes` lists them)")
        for path in shipped.copy(args.name, args.dir):
            print(f"wrote {path}")
        return 0
    names = shipped.names()
    if not names:
        raise UserError("no shipped recipes found: this posttrain was installed without its data files (reinstall the wheel)")
    import shutil
    import textwrap

    width = max(map(len, names))
    columns = max(shutil.get_terminal_size((120, 24)).columns, width + 40)
    for name in names:
        text = description(shipped.find(name).read_text())
        print(textwrap.fill(text, columns, initial_indent=f"{name.ljust(width)}  ", subsequent_indent=" " * (width + 2),
                            break_long_words=False, break_on_hyphens=False))  # a path or a name stays whole
    return 0


def description(recipe_text: str) -> str:
    """A recipe's description: its opening comment, every line of it, up to the command lines (indented)
    or the first key; indented lines that a line ending in ":" introduces belong to it. Printed whole,
    wrapped: a description cut mid-phrase reads as a different recipe.

    >>> description("# SFT of a tiny model on arithmetic\\n# problems (CPU).\\n#   posttrain train R\\nmodel: {}")
    'SFT of a tiny model on arithmetic problems (CPU).'
    """
    words: list[str] = []
    listing = False  # inside the indented lines a ":" introduced
    for line in recipe_text.splitlines():
        text = line.lstrip("#").strip()
        if not line.startswith("#") or not text:
            break
        indented = line.startswith("#  ")
        if indented and not listing and not (words and words[-1].endswith(":")):
            break
        if listing and not indented:
            break
        listing = indented
        words.append(text)
    return " ".join(words)
