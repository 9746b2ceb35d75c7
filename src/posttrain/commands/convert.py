"""`posttrain convert FILE [-o OUT]`: a FAI-RL recipe -> a posttrain recipe, and a table of what changed.

    posttrain convert fai-rl/recipes/training/dpo/llama3_3B_lora.yaml -o recipes/dpo/llama3-lora.yaml

Prints one row per FAI-RL key: where it went, and any change of meaning with the reason (FAI-RL
defects included: what FAI-RL really ran, what the converted recipe runs). Keys with no
equivalent that would change the run are named and the command exits 2 without writing anything.
The written recipe is checked like `posttrain validate --schema-only` before it is written.
"""

from __future__ import annotations


def add_parser(subparsers) -> None:
    p = subparsers.add_parser(
        "convert", help="convert a FAI-RL recipe (training, inference, evaluation) into a posttrain recipe",
        description="Convert a FAI-RL 0.2.x recipe into a posttrain recipe and print a table: each FAI-RL key, its new "
        "place, and any change of meaning with the reason. Exit 2, writing nothing, when a key cannot be converted.",
    )
    p.add_argument("file", help="the FAI-RL recipe (YAML)")
    p.add_argument("-o", "--out", help="where to write the posttrain recipe (default: print it)")
    p.add_argument("--quiet", "-q", action="store_true", help="print no table (the written recipe's opening comment still holds it)")
    p.set_defaults(func=run)


def run(args) -> int:
    import sys
    from pathlib import Path

    from posttrain.errors import UserError
    from posttrain.migrate import convert, render
    from posttrain.recipe.load import read_yaml, to_yaml

    raw = read_yaml(args.file)
    if already_posttrain(raw):
        raise UserError(f"{args.file} is already a posttrain recipe (it validates); nothing to convert.")
    conv = convert(raw, args.file)
    if not args.quiet:
        print(f"# {args.file}: FAI-RL {conv.kind} recipe\n{render(conv.rows)}\n", file=sys.stderr)
    if conv.blocking:
        lines = "\n".join(f"  - {r.key}: {r.note}" for r in conv.blocking)
        raise UserError(f"{args.file}: {len(conv.blocking)} key(s) cannot be converted; nothing was written:\n{lines}")
    text = header(args.file, conv) + to_yaml(conv.recipe)
    check(conv, text)
    if args.out:
        Path(args.out).parent.mkdir(parents=True, exist_ok=True)
        Path(args.out).write_text(text)
        print(f"wrote {args.out}; run it with: {conv.command.replace('OUT', args.out)}", file=sys.stderr)
    else:
        print(text, end="")
    return 0


def already_posttrain(raw: dict) -> bool:
    from posttrain.recipe.errors import RecipeError
    from posttrain.recipe.load import load_recipe
    from posttrain.recipe.tasks import is_task_recipe, load_task_recipe

    try:
        (load_task_recipe if is_task_recipe(raw) else load_recipe)(None, raw=raw)
    except RecipeError:
        return False
    return True


def header(source: str, conv) -> str:
    """The written recipe's opening comment: where it came from, and the table of what changed (kept with the
    recipe, whether or not the table was printed)."""
    from posttrain.migrate import render

    table = "".join(f"#   {line}".rstrip() + "\n" for line in render(conv.rows).splitlines())
    return f"# Converted from the FAI-RL recipe {source} by `posttrain convert`. What changed:\n{table}"


def check(conv, text: str) -> None:
    """The converted recipe must load (schema only): a converter bug is not the user's to find at train time."""
    import yaml

    from posttrain.errors import UserError
    from posttrain.recipe.errors import RecipeError

    raw = yaml.safe_load(text)
    try:
        if conv.kind == "training":
            from posttrain.recipe.load import load_recipe

            load_recipe(None, raw=raw)
        else:
            from posttrain.recipe.tasks import load_task_recipe

            load_task_recipe(None, raw=raw)
    except RecipeError as e:
        raise UserError(f"the converted recipe does not validate (a converter gap; please report it):\n{e}") from None
