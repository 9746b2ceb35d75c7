"""What `posttrain train` checks before the model loads, for `posttrain validate` to check too.

The recipe schema and preflight (files, model folders, rewards, tools) are shared already; this adds
the two checks that live in the run: the data (read and mapped exactly as train reads it, local
files only: a hub dataset would be downloaded) and the run folder (what train would do in
output_dir, and whether this recipe may continue the run there). Nothing is written.
"""

from __future__ import annotations

from pathlib import Path


from .resume import explicit_checkpoint
from .run_folder import FINISHED, INTERRUPTED, PREVIOUS, check_recipe, finished_verdict, folder_state, holds_a_run, running_holder


def data_notes(recipe) -> list[str]:
    """Read the recipe's datasets as train does (columns against the format, every row's checks,
    the drop limit) when all are local files; UserError on the first problem, as train."""
    from posttrain.data.splits import looks_local

    specs = [*recipe.data.datasets, *recipe.data.eval_datasets]
    if not all(looks_local(spec.name) for spec in specs):
        return ["data: hub and s3:// datasets are read by train, not by validate (it would download them)"]
    from posttrain.data.drops import DropLedger

    from .run_data import prepare_data

    seed = recipe.training.seed if recipe.training.seed is not None else 42
    _, _, _, reports = prepare_data(recipe, seed)
    drops = DropLedger(recipe.data.max_drop_fraction)
    for report in reports:
        drops.add_report(report)
    drops.check()
    return [f"data: {report.render()}" for report in reports]


def run_folder_notes(recipe, new: dict, argv: list[str]) -> list[str]:
    """What train would do in output_dir; UserError when it would refuse (a recipe the checkpoint
    there cannot continue, a resume path that is no complete checkpoint)."""
    output_dir = Path(recipe.training.output_dir)
    mode = recipe.training.resume_from_checkpoint
    holder = running_holder(output_dir)
    notes: list[str] = [f"output_dir: running now ({holder}); train would be refused until that run ends"] if holder else []
    if mode not in (None, False, "false", "auto", "force"):
        path = explicit_checkpoint(mode)
        check_recipe(path, output_dir, new, mode, argv, log=notes.append)
        return [f"output_dir: train would resume from {path}", *notes]
    state = folder_state(output_dir)
    if mode in ("auto", "force"):
        done = finished_verdict(output_dir, new, mode, argv, log=notes.append)
        if done:
            return [*notes, f"output_dir: {done}"]
        if state.state == FINISHED:
            source = state.checkpoint.name if state.checkpoint is not None else "its newest checkpoint in S3"  # deleted after upload
            return [*notes, f"output_dir: {state.describe()}; train would continue it to the longer schedule from {source}"]
        if state.state == INTERRUPTED:
            check_recipe(state.checkpoint, output_dir, new, mode, argv, log=notes.append)
            return [f"output_dir: {state.describe()}; train would resume from {state.checkpoint.name}", *notes]
    if holds_a_run(output_dir):
        return [*notes, f"output_dir: holds a run ({state.describe()}); train would move it to {output_dir}/{PREVIOUS}<time>/ and start over"]
    return [*notes, f"output_dir: {output_dir} ({'new' if not output_dir.exists() else 'no run in it yet'}); train would start at step 0"]
