"""`--recipe FILE [key=value ...]` for generate, eval and compare: recipe values fill the flags.

A recipe key is the flag's name (`max_new_tokens` is `--max-new-tokens`); a flag given on the
command line wins over the recipe, and a `key=value` override over the file. The schema and the
error machinery are the training recipes' (`posttrain.recipe.tasks`, `posttrain.recipe.load`).
"""

from __future__ import annotations

import argparse

# recipe key -> (flag destination, how the value becomes the flag's)
RENAMED = {
    "models": ("model", list),
    "use_chat_template": ("no_chat_template", lambda v: not v),
    "progress": ("no_progress", lambda v: not v),
    "image_columns": ("image_column", list),
    "video_columns": ("video_column", list),
    "arms": ("arm", lambda arms: [f"{name}={spec}" for name, spec in arms.items()]),
}


def add_recipe_arguments(p: argparse.ArgumentParser, section: str) -> None:
    p.add_argument("--recipe", "-r", metavar="FILE", help=f"a recipe with an `{section}:` section; its keys are this command's "
                   "flags (max_new_tokens for --max-new-tokens); flags given here win over it")
    p.add_argument("items", nargs="*", metavar="KEY=VALUE", help=f"recipe overrides such as {section}.temperature=0.7")


def explicit_destinations(parser: argparse.ArgumentParser, argv: list[str]) -> list[str]:
    """The destinations of the options written on the command line (whatever their value)."""
    subparsers = [a for a in parser._actions if isinstance(a, argparse._SubParsersAction)]
    known = dict(parser._option_string_actions)
    for action in subparsers:
        for sub in action.choices.values():
            known.update(sub._option_string_actions)
    found = []
    for token in argv:
        if token == "--":
            break
        if token.startswith("-"):
            action = known.get(token.split("=", 1)[0])
            if action is None:  # a unique prefix (--max-new) is accepted by argparse too
                matches = [a for opt, a in known.items() if opt.startswith(token.split("=", 1)[0]) and opt.startswith("--")]
                action = matches[0] if len({id(m) for m in matches}) == 1 else None
            if action is not None:
                found.append(action.dest)
    return found


def apply_recipe(args, section: str, command: str, required: dict[str, str], exclusive: tuple[str, ...] = ()) -> None:
    """Fill `args` from the recipe (unless the flag was given), then check what is still required.

    `required`: destination -> the flag to name when it is missing (e.g. {"model": "--model"}).
    `exclusive`: destinations of which one is given (--prompts / --dataset): one on the command line
    replaces the recipe's.
    """
    from posttrain.errors import UserError
    from posttrain.recipe.errors import RecipeError
    from posttrain.recipe.tasks import load_task_recipe

    overrides = list(getattr(args, "items", None) or [])
    if args.recipe is None:
        if overrides:
            raise UserError(f"{overrides[0]!r}: key=value overrides need a recipe: posttrain {command} --recipe FILE {overrides[0]}")
    else:
        stray = [o for o in overrides if "=" not in o]
        if stray:
            raise UserError(f"expected key.path=value overrides after the flags, got {stray[0]!r}")
        recipe = load_task_recipe(args.recipe, overrides)
        body = getattr(recipe, section)
        if body is None:
            other = "inference" if section == "evaluation" else "evaluation"
            use = "posttrain generate" if other == "inference" else "posttrain eval / compare"
            raise RecipeError(f"{args.recipe} has an `{other}:` section, which is for {use}; `posttrain {command}` reads `{section}:`.")
        if command == "eval" and body.model is None:
            raise RecipeError(f"{args.recipe}: evaluation.arms is for `posttrain compare`; `posttrain eval` evaluates evaluation.model.")
        if command == "compare" and body.arms is None:
            raise RecipeError(f"{args.recipe}: evaluation.model is for `posttrain eval`; `posttrain compare` compares evaluation.arms.")
        explicit = set(getattr(args, "_explicit", []))
        if explicit & set(exclusive):
            explicit |= set(exclusive)
        for key in body.model_fields_set:
            value = getattr(body, key)
            dest, convert = RENAMED.get(key, (key, None))
            if not hasattr(args, dest):
                raise RecipeError(f"{section}.{key} (from {args.recipe}): `posttrain {command}` has no such setting.")
            if dest in explicit or value is None:
                continue
            setattr(args, dest, convert(value) if convert else value)
    missing = [flag for dest, flag in required.items() if getattr(args, dest, None) in (None, [])]
    if missing:
        raise UserError(f"posttrain {command}: {' and '.join(missing)} required (as flags, or in a recipe's `{section}:` section with --recipe)")
