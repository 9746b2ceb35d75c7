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
    return read_as_train_reads(recipe)[0]


def read_as_train_reads(recipe):
    """(data_notes' notes, the training dataset as train maps it, or None when it is not read here)."""
    from posttrain.data.splits import looks_local

    specs = [*recipe.data.datasets, *recipe.data.eval_datasets]
    if not all(looks_local(spec.name) for spec in specs):
        return ["data: hub and s3:// datasets are read by train, not by validate (it would download them)"], None
    from posttrain.data.drops import DropLedger

    from .run_data import prepare_data

    seed = recipe.training.seed if recipe.training.seed is not None else 42
    train, _, _, reports = prepare_data(recipe, seed)
    drops = DropLedger(recipe.data.max_drop_fraction)
    for report in reports:
        drops.add_report(report)
    drops.check()
    return [f"data: {report.render()}" for report in reports], train


def reward_notes(recipe, train_dataset) -> list[str]:
    """Each reward function called once on made-up completions of the first rows, as TRL will call it
    (posttrain.rewards.checks.trial); UserError naming every reward that raises or returns what TRL
    cannot use. `validate` and `train` (before the model loads) both run it."""
    from posttrain.errors import UserError
    from posttrain.rewards.builtin import get_reward
    from posttrain.rewards.checks import TRIAL_ROWS, trial

    training = recipe.training
    specs = getattr(training, "rewards", None) or []
    functions = [(f"training.rewards[{i}]", spec) for i, spec in enumerate(specs) if spec.name is not None and spec.name != "http"]
    if not functions:
        return []
    if getattr(training, "environment", None):
        return ["rewards: not tried before training (with training.environment TRL passes them the environments, built when the run starts)"]
    if train_dataset is None or not len(train_dataset):
        return ["rewards: train calls them on the first data rows before it loads the model (validate does not download the data)"]
    try:
        rewards = [(key, get_reward(spec.name, **spec.options)) for key, spec in functions]
    except ValueError as e:  # preflight has named it already; here for a caller without preflight
        raise UserError(f"training.rewards: {e}") from None
    rows = [train_dataset[i] for i in range(min(len(train_dataset), TRIAL_ROWS))]
    try:
        notes = trial(rewards, rows, _rows_from(recipe), untried=len(specs) - len(functions))
    except ValueError as e:
        raise UserError(str(e)) from None
    return [f"rewards: {note}" for note in notes] or [f"rewards: {len(rewards)} called on made-up completions of the first data rows, "
                                                       "as TRL will call them: each returned one number per completion"]


def _rows_from(recipe) -> str:
    specs = recipe.data.datasets
    return f"the training data ({specs[0].name})" if len(specs) == 1 else "the training data (data.datasets, mixed)"


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
