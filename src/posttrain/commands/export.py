"""`posttrain export RUN --out DIR`: a trained model as a standalone folder that transformers loads alone,
checked against the model as it trained (parity table; exit 1 when they differ beyond the tolerance).

    posttrain export runs/sft-tiny-lora --out exported/sft-tiny
    posttrain export runs/sft-tiny-lora/checkpoint-10 --out exported/sft-tiny-10 --dtype bf16

RUN is a finished run's output_dir, one of its checkpoint-N folders, or any model or adapter folder. The
model work and the parity check are posttrain.models.export's; this module checks the folders.
"""

from __future__ import annotations

from pathlib import Path

from posttrain.flag_types import COUNT, number

EPILOG = """examples:
  posttrain export runs/sft-tiny-lora --out exported/sft-tiny                 # merge the LoRA adapter, check parity
  posttrain export runs/sft-tiny-lora/checkpoint-5 --out exported/sft-5       # a checkpoint of an unfinished run
  posttrain export runs/sft-tiny --out exported/sft-tiny-bf16 --dtype bf16    # a full model, re-saved in bfloat16

exit codes: 0 exported and parity holds; 1 exported but parity fails (the folder is kept, the table says where);
2 bad input (nothing written)."""


def add_parser(subparsers) -> None:
    import argparse

    from posttrain.models.export import DTYPES, TOLERANCE

    p = subparsers.add_parser(
        "export", help="merge a LoRA adapter (or copy a full model) into a standalone folder and check parity",
        description="Write a trained model as a folder that transformers loads with no posttrain (safetensors, config, "
        "generation config, tokenizer and chat template): a LoRA adapter merged into its base, or a full model re-saved. "
        "Then load that folder back and compare it with the model as it trained (the adapter on its unmerged base) on a few "
        "prompts: greedy continuations must be the same tokens and next-token log-probabilities must agree within the "
        "dtype's tolerance. Prints the comparison as a table.",
        epilog=EPILOG, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("run", help="a finished run's output_dir, a checkpoint-N folder, or a model or adapter folder")
    p.add_argument("--out", required=True, help="the folder to write (new or empty; --force replaces a non-empty one)")
    p.add_argument("--dtype", choices=sorted(DTYPES), default=None,
                   help="dtype of the saved weights (default: the base model's own, from its config.json); the merge is "
                   "always computed in float32")
    p.add_argument("--force", action="store_true", help="replace what a non-empty --out holds (only once the new folder is complete)")
    p.add_argument("--max-new-tokens", type=COUNT, default=16, help="greedy tokens generated per prompt for the check (default 16)")
    p.add_argument("--tolerance", type=number(float, ge=0), default=None,
                   help="largest allowed |difference| of a next-token log-probability (reward models: of a score); default "
                   + ", ".join(f"{k} {v:g}" for k, v in TOLERANCE.items()))
    p.set_defaults(func=run)


def run(args) -> int:
    from posttrain.errors import UserError

    source, out = Path(args.run).expanduser(), Path(args.out).expanduser()
    if not source.is_dir():
        raise UserError(f"export: {args.run!r} is not a folder; give a finished run's output_dir, a checkpoint-N folder or a model folder.")
    check_run(source, args.run)
    if out.exists() and not out.is_dir():
        raise UserError(f"export --out: {args.out!r} exists and is not a folder; give a new or empty folder.")
    if out.resolve() == source.resolve() or source.resolve() in out.resolve().parents:
        raise UserError(f"export --out: {args.out!r} is inside the run being exported; give a folder outside {args.run!r}.")
    if out.is_dir() and any(out.iterdir()) and not args.force:
        raise UserError(f"export --out: {args.out!r} is not empty; give a new or empty folder, or add --force to replace what is there "
                        "(replaced only once the new folder is complete).")
    from posttrain.models.export import export, model_kind

    model_kind(source)  # a folder with no model: exit 2 before anything loads
    parity = export(source, out, args.dtype, args.max_new_tokens, tolerance=args.tolerance)
    from posttrain.algorithms.run_card import readable_like_the_rest

    readable_like_the_rest(out)  # safetensors writes weights 0600; the folder's other files get 0666 & ~umask
    what = "score" if any(r.same_greedy is None for r in parity.rows) else "next-token log-prob"
    print(parity.render(what))
    if not parity.ok:
        print(f"exported to {out}, but it does not behave like {args.run} (kept for inspection; see the table above)")
        return 1
    print(f"exported to {out}: loads with transformers alone, e.g. AutoModelForCausalLM.from_pretrained({str(out)!r})")
    return 0


def check_run(source: Path, spec: str) -> None:
    """A posttrain run folder must be finished (its final model written) and not running; exit 2 naming what to do."""
    from posttrain.algorithms.run_folder import FINISHED, folder_state, holds_a_run, running_holder
    from posttrain.errors import UserError

    if not holds_a_run(source):
        return  # a checkpoint-N folder or any model folder
    holder = running_holder(source)
    if holder is not None:
        raise UserError(f"export: {spec!r} is still training ({holder}); export it when it has finished, or export one of its "
                        "checkpoint-N folders now.")
    state = folder_state(source)
    if state.state != FINISHED:
        hint = (f"resume it (posttrain train --recipe {source / 'resolved_recipe.yaml'}), or export its newest checkpoint: "
                f"posttrain export {source / state.checkpoint.name} --out DIR") if state.checkpoint else "train it first"
        raise UserError(f"export: {spec!r} is a run that has not finished ({state.describe()}): its final model is written when "
                        f"it finishes; {hint}.")
