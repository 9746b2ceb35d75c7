"""The `posttrain` command line: one entry point, one subcommand per job.

Fast paths (`--help`, `validate`, `inspect`) import only the standard library, pydantic and yaml;
torch, transformers and TRL load inside the commands that train or generate. Bad input exits
with code 2 and a message naming the key or file; it never prints a traceback.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path

from posttrain.errors import UserError

EXIT_BAD_INPUT = 2

# Modules under posttrain.commands that add their own subcommands (generate, eval, compare, ...).
COMMAND_MODULES: list[str] = ["generate", "evaluate", "report", "convert", "vllm_serve", "export", "recipes", "demo", "docs", "env", "experiment"]

EPILOG_TRAIN = """\
examples:
  posttrain train --recipe recipes/sft/tiny-cpu.yaml
  posttrain train --recipe recipes/sft/tiny-cpu.yaml training.max_steps=5 model.use_lora=true
  posttrain train recipes/cpt/tiny-cpu.yaml 'data.datasets[0].name=my.jsonl'
  posttrain train --recipe R --nproc 8                                # 8 GPUs (torchrun)
  posttrain train --recipe R --nproc 8 --nnodes 2 --node-rank 0 --master-addr HOST --master-port 29500

overrides are key.path=value, anywhere after the command; list items are addressed as
data.datasets[0].name or data.datasets.0.name; values are YAML 1.2 scalars (true, null, 1e-5,
0123 = 123) or flow lists/maps ([a, b]); other text is kept exactly ('exp #3', 1:30).
Precedence: TRL default < posttrain default < recipe file < override.
"""


def _recipe_args(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--recipe", "-r", help="recipe YAML file (or give it as the first positional argument)")
    parser.add_argument("items", nargs="*", metavar="[RECIPE] KEY=VALUE", help="recipe file, then key.path=value overrides")


def _split_recipe_args(args) -> tuple[str, list[str]]:
    items = list(args.items)
    recipe = args.recipe
    if recipe is None and items and "=" not in items[0]:
        recipe = items.pop(0)
    if recipe is None:
        raise UserError("no recipe given: posttrain train --recipe RECIPE.yaml [key=value ...]")
    stray = [i for i in items if "=" not in i]
    if stray:
        raise UserError(f"expected key.path=value overrides after the recipe, got {stray[0]!r}: write it like training.learning_rate=1e-5")
    return recipe, items


def planned_world_size(opts) -> int:
    """The processes the run will have: those --nproc/--nnodes launch, or, inside a launcher (torchrun,
    accelerate, srun), the WORLD_SIZE it set. Batch shapes are validated for them."""
    if opts.launches:
        return opts.world_size
    return int(os.environ.get("WORLD_SIZE", "1"))


def load_with_file_checks(load_recipe, recipe_path, overrides, machine: bool = True):
    """Load the recipe; when the schema fails, add the file checks that need no valid recipe (a data
    file or model folder that does not exist), so one run lists both instead of two rounds."""
    from posttrain.recipe.errors import RecipeError
    from posttrain.recipe.preflight import preflight_raw

    try:
        return load_recipe(recipe_path, overrides)
    except RecipeError as e:
        raw = getattr(e, "raw", None)
        if not machine or raw is None:
            raise
        seen = {p.path for p in e.problems}
        extra = [p for p in preflight_raw(raw) if p.path not in seen]
        if not extra:
            raise
        raise RecipeError(e.problems + extra) from None


def cmd_validate(args) -> int:
    from posttrain.distributed.launch import options_from_args
    from posttrain.recipe.load import format_differences, load_recipe, read_yaml, redact_overrides, resolved_dict, to_yaml
    from posttrain.recipe.preflight import preflight
    from posttrain.recipe.tasks import is_task_recipe
    from posttrain.user_code import add_search_paths

    recipe_path, overrides = _split_recipe_args(args)
    add_search_paths(recipe_path)  # rewards, tools and environments import as train imports them
    raw = read_yaml(recipe_path)  # read once: for the kind of recipe, then for the recipe itself
    if is_task_recipe(raw):
        return _validate_task_recipe(recipe_path, overrides, raw, args.schema_only)
    world = planned_world_size(options_from_args(args))
    loaded = load_with_file_checks(lambda path, items: load_recipe(path, items, raw=raw, world_size=world), recipe_path, overrides,
                                   machine=not args.schema_only)
    notes = []
    if not args.schema_only:
        preflight(loaded.recipe)
        notes = what_train_checks(loaded, recipe_path, redact_overrides(getattr(args, "_argv", None) or sys.argv[1:]))
    print(f"# {recipe_path}: valid ({loaded.recipe.training.algorithm})")
    for note in notes:
        print(f"# {note}")
    print(to_yaml(resolved_dict(loaded.recipe)), end="")
    print("\n# differs from the library defaults:")
    print(format_differences(loaded))
    return 0


def what_train_checks(loaded, recipe_path: str, argv: list[str]) -> list[str]:
    """The checks `train` makes before the model loads that the recipe's schema and preflight do
    not: the data read as train reads it (local files), each reward function called on it and the run folder
    (posttrain.algorithms.train_checks)."""
    from posttrain.algorithms.train_checks import read_as_train_reads, reward_notes, run_folder_notes
    from posttrain.recipe.load import resolved_dict, to_yaml
    from posttrain.user_code import searched
    from yaml import safe_load

    recipe = loaded.recipe
    argv = ["train" if a == "validate" and i == 0 else a for i, a in enumerate(argv)]  # the fixes it suggests are train commands
    notes = run_folder_notes(recipe, safe_load(to_yaml(resolved_dict(recipe))), argv)
    data, train_dataset = read_as_train_reads(recipe)
    notes += data + reward_notes(recipe, train_dataset)  # user reward code called as TRL will, before train loads a model
    if any(":" in r.name for r in getattr(recipe.training, "rewards", None) or []) or getattr(recipe.training, "uses_tools", False):
        notes.append(f"user code imported as train imports it: {searched()}")
    return notes


def _validate_task_recipe(path: str, overrides: list[str], raw: dict, schema_only: bool = False) -> int:
    """A generation/evaluation recipe (`inference:` / `evaluation:`): schema checks and, unless schema_only, the
    models an evaluation names; printed resolved."""
    from posttrain.recipe.load import to_yaml
    from posttrain.recipe.tasks import load_task_recipe, resolved

    recipe = load_task_recipe(path, overrides, raw=raw)
    if recipe.evaluation is not None and not schema_only:  # the models it names, before a command would load them
        from posttrain.commands.evaluate import check_specs

        check_specs(recipe.evaluation)
    command = "generate" if recipe.inference is not None else ("eval" if recipe.evaluation.model else "compare")
    print(f"# {path}: valid (posttrain {command} --recipe {path})")
    print(to_yaml(resolved(recipe)), end="")
    return 0


def cmd_train(args) -> int:
    from posttrain.distributed.launch import exec_torchrun, options_from_args, restore_secret_overrides
    from posttrain.recipe.load import load_recipe, redact_overrides
    from posttrain.recipe.preflight import preflight

    from posttrain.user_code import add_search_paths

    recipe_path, overrides = _split_recipe_args(args)
    add_search_paths(recipe_path)  # user rewards, tools and environments: the recipe's folder and the working directory
    overrides = restore_secret_overrides(overrides)  # a rank that `--nproc` started: its secrets came in the environment
    opts = options_from_args(args)
    world = planned_world_size(opts)  # every recipe error once, here, not once per process
    loaded = load_with_file_checks(lambda path, items: load_recipe(path, items, world_size=world), recipe_path, overrides)
    preflight(loaded.recipe)
    argv = redact_overrides(getattr(args, "_argv", None) or sys.argv[1:])
    done = already_complete(loaded, argv)
    if done:
        print(done)
        return 0
    if opts.launches:
        os.environ["POSTTRAIN_COMMAND"] = json.dumps(argv)  # the command as typed (--nproc ...): the ranks' resume command
        child = ["train", "--recipe", recipe_path, *overrides]
        exec_torchrun(opts, child, ["train", "--recipe", recipe_path, *redact_overrides(overrides)])
    # Trackers record the command line (wandb's run metadata, our resolved_recipe.yaml): a secret
    # given as an override is already in the recipe object, so blank it out of argv.
    sys.argv[1:] = redact_overrides(sys.argv[1:])
    from posttrain.algorithms.run import run_training  # heavy imports start here

    if "POSTTRAIN_COMMAND" in os.environ:  # a rank of `posttrain train --nproc N`: the user's command, not torchrun's
        argv = json.loads(os.environ["POSTTRAIN_COMMAND"])
    return run_training(loaded, argv)


def already_complete(loaded, argv: list[str]) -> str | None:
    """"already complete at step N" when output_dir holds a finished run that this recipe would not
    take further: answered before torch is imported, and without writing anything (not even the
    lock). Only the launching process asks; ranks of a launched job leave it to the run's own check."""
    if "RANK" in os.environ:
        return None
    from posttrain.algorithms.run_folder import finished_verdict
    from posttrain.algorithms.train_checks import run_folder_notes
    from posttrain.recipe.load import resolved_dict, to_yaml
    from yaml import safe_load

    training = loaded.recipe.training
    new = safe_load(to_yaml(resolved_dict(loaded.recipe)))
    done = finished_verdict(Path(training.output_dir), new, training.resume_from_checkpoint, argv, log=lambda _msg: None)
    if done is None:
        run_folder_notes(loaded.recipe, new, argv)  # a recipe the run there cannot continue: exit 2 before the lock is taken
    return done


def cmd_inspect(args) -> int:
    from posttrain.models.checkpoint_report import inspect_checkpoint

    report = inspect_checkpoint(Path(args.path))
    print(report.render())
    return 1 if (args.strict and report.warnings) else 0


def cmd_make_tiny_model(args) -> int:
    from posttrain.models.tiny import build_tiny_model

    if Path(args.out).exists() and not Path(args.out).is_dir():
        raise UserError(f"make-tiny-model: {args.out!r} exists and is not a directory; give a folder to write the model into")
    if Path(args.out).is_dir() and any(Path(args.out).iterdir()) and not args.force:
        raise UserError(f"make-tiny-model: {args.out!r} is not empty (a trained model there would be replaced by random "
                        f"weights); give an empty or new folder, or add --force to replace what is there")
    out = build_tiny_model(args.out, arch=args.arch, size=args.size, seed=args.seed)
    print(f"tiny {args.arch}-{args.size} model and tokenizer written to {out}")
    return 0


def build_parser() -> argparse.ArgumentParser:
    from posttrain.distributed.launch import add_launch_args

    parser = argparse.ArgumentParser(
        prog="posttrain",
        description="Post-train language models (CPT, SFT, DPO, GRPO, GSPO) from validated YAML recipes, then "
        "evaluate them and say with paired statistics whether a change helped.",
        epilog="Run 'posttrain COMMAND --help' for a command's options, `posttrain demo` for the whole loop on a tiny model, "
        "and `posttrain docs` for the user guide (it ships with posttrain: `posttrain docs getting-started` prints a page).",
    )
    parser.add_argument("--version", action="version", version=f"posttrain {__import__('posttrain').__version__}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)

    p = sub.add_parser("train", help="train a model from a recipe", description="Train a model from a recipe: validate it, load model and data, run TRL, save the result in training.output_dir.", epilog=EPILOG_TRAIN, formatter_class=argparse.RawDescriptionHelpFormatter)
    _recipe_args(p)
    add_launch_args(p)
    p.set_defaults(func=cmd_train)

    p = sub.add_parser("validate", help="check a recipe and print it resolved (no torch import)", description="Resolve a recipe with its overrides and posttrain's defaults, check it without loading anything heavy, print the result and what differs from the library defaults. Exit code 2 lists every problem at once.", epilog=EPILOG_TRAIN.replace("posttrain train", "posttrain validate"), formatter_class=argparse.RawDescriptionHelpFormatter)
    _recipe_args(p)
    p.add_argument("--schema-only", action="store_true", help="check the recipe only, not this machine (data files present, a GPU for QLoRA, tracking packages): for recipes meant for another machine")
    add_launch_args(p)
    p.set_defaults(func=cmd_validate)

    p = sub.add_parser("inspect", help="what a checkpoint holds: parameters and bytes per module group", description="Read a checkpoint's safetensors headers (no weights loaded) and print parameters and bytes per group: LoRA A/B, embeddings, lm_head, other. Warns when an adapter carries full embedding or lm_head matrices.")
    p.add_argument("path", help="model, adapter or checkpoint directory, or a .safetensors file")
    p.add_argument("--strict", action="store_true", help="exit 1 when there is a warning (for CI checks)")
    p.set_defaults(func=cmd_inspect)

    p = sub.add_parser("make-tiny-model", help="build a small random model + tokenizer locally (seconds, offline)", description="Build a small randomly initialised causal LM (or, with --arch llava, a vision-language model with its processor) with a locally trained tokenizer (digits split, eos and pad tokens, chat template). Recipes can use 'tiny:ARCH-SIZE' directly; this writes one to a folder.")
    p.add_argument("out", help="output directory")
    p.add_argument("--arch", choices=["qwen2", "llama", "llava"], default="qwen2", help="llava: a vision-language model (CLIP-style vision tower + projector + qwen2 language model) with its processor")
    p.add_argument("--size", choices=["1m", "2m", "6m"], default="1m", help="approximate parameter count")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--force", action="store_true", help="write into a folder that is not empty, replacing the model files there")
    p.set_defaults(func=cmd_make_tiny_model)

    import importlib

    for name in COMMAND_MODULES:
        importlib.import_module(f"posttrain.commands.{name}").add_parser(sub)
    for command in sub.choices.values():
        if not any("--verbose" in a.option_strings for a in command._actions):
            command.add_argument("--verbose", action="store_true", help="also show the libraries' routine output (DeepSpeed's "
                                 "accelerator notice, transformers' weight loading/writing bars, their deprecation warnings)")
    return parser


def parse_args(parser: argparse.ArgumentParser, argv: list[str] | None):
    """Parse the command line with key=value overrides allowed anywhere after the command.

    argparse stops filling a positional list at the first option, so `validate R --schema-only k=v`
    leaves `k=v` over; such leftovers join the command's overrides. Anything else left over is the
    usual "unrecognized arguments" error (exit 2).
    """
    args, extra = parser.parse_known_args(argv)
    overrides = [e for e in extra if "=" in e and not e.startswith("-")]
    others = [e for e in extra if e not in overrides]
    if overrides and not hasattr(args, "items"):
        others = extra  # this command takes no overrides
    if others:
        parser.error(f"unrecognized arguments: {' '.join(others)}")
    if overrides:
        args.items = [*args.items, *overrides]
    return args


def main(argv: list[str] | None = None) -> int:
    from posttrain.log import configure_logging, quiet_libraries
    from posttrain.recipe.errors import RecipeError

    parser = build_parser()
    args = parse_args(parser, argv)
    args._argv = list(sys.argv[1:] if argv is None else argv)  # the command as typed, for the commands messages suggest
    if getattr(args, "recipe", None) is not None or getattr(args, "items", None):
        from posttrain.commands.task_recipe import explicit_destinations

        args._explicit = explicit_destinations(parser, list(sys.argv[1:] if argv is None else argv))
    if getattr(args, "verbose", False):
        os.environ["POSTTRAIN_VERBOSE"] = "1"  # torchrun's ranks inherit it
    try:
        configure_logging()  # storage / net / data records reach the user (posttrain.log)
        quiet_libraries()
        return args.func(args)
    except (RecipeError, UserError) as e:
        print(f"error: {e}", file=sys.stderr)
        return EXIT_BAD_INPUT
    except BrokenPipeError:  # output piped into `head`
        return 0
    except KeyboardInterrupt:
        print("interrupted", file=sys.stderr)
        return 130


if __name__ == "__main__":
    raise SystemExit(main())
