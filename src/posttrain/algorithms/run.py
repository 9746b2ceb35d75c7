"""One training run, top to bottom: data -> model -> TRL config -> trainer -> train -> save.

Everything that can fail on the user's input (recipe, data files, columns, model path) is checked
before output_dir is created, so a bad run leaves nothing behind.
"""

from __future__ import annotations

import datetime
import importlib
import json
import os
import platform
import subprocess
import sys
import traceback
from pathlib import Path

from posttrain.models.loading import DeviceInfo, LoadedModel, load_model, lora_config
from posttrain.recipe.algorithms import ALGORITHMS
from posttrain.recipe.load import LoadedRecipe, format_differences, resolved_dict, to_yaml
from posttrain.rewards.checks import RewardFault
from posttrain.storage.run_storage import run_storage, use_s3_settings_for_sources
from yaml import safe_load as yaml_load

from .callbacks import MetricsFile, RecipeInCheckpoints, RunSegments, ScheduleOnResume
from .common import Run, is_local_main_process, is_main_process, log  # noqa: F401  (importable from here, as before)
from .monitor import RunMonitor, StepTimers
from .output_lock import LOCK_NAME, OutputDirLock
from .recipe_history import write_history
from .resume import checkpoint_step, resume_point, same_checkpoint_everywhere
from .run_card import readable_like_the_rest, write_run_card
from .run_folder import check_recipe, command_with, finished_verdict, holds_a_run, load_progress, move_aside, read_records, whole_run
from .run_data import audit_prompts, fit_prompts, prepare_data
from .train_checks import reward_notes
from .trl_config import build_trl_config, cpu_attention_applies, runtime_defaults


def build_trainer(run: Run):
    """The algorithm's trainer, from its builder module (its row's `builder`: posttrain.algorithms.<builder>)."""
    from posttrain.internals import check

    row = ALGORITHMS[run.loaded_recipe.recipe.training.algorithm]
    check(row.family)  # every private internal this family's run touches is there, or exit 2 naming it
    return importlib.import_module(f"{__package__}.{row.builder}").build_trainer(run)


def provenance() -> dict:
    import peft
    import torch
    import transformers
    import trl

    import posttrain

    info = {
        "posttrain": posttrain.__version__, "trl": trl.__version__, "transformers": transformers.__version__,
        "peft": peft.__version__, "torch": torch.__version__, "python": platform.python_version(),
        "command": " ".join(["posttrain", *sys.argv[1:]]),  # secret overrides already blanked by the CLI
        "date": datetime.datetime.now().isoformat(timespec="seconds"),
    }
    try:
        here = Path(__file__).resolve().parent
        info["git_commit"] = subprocess.run(["git", "rev-parse", "HEAD"], cwd=here, capture_output=True, text=True, timeout=5).stdout.strip() or None
    except (OSError, subprocess.SubprocessError):
        pass
    return info


def make_trl_config(recipe, device, data_format):
    """The TRL config, built before the model loads so that settings TRL rejects fail fast (exit 2)."""
    from posttrain.errors import UserError

    try:
        return build_trl_config(recipe, device, data_format)
    except (ValueError, TypeError) as e:
        raise UserError(f"training: TRL rejected these settings: {e}") from None


EXIT_RUN_FAILED = 1  # a run that started and failed (a reward that raised mid-run): what an uncaught error exits with


class AlreadyComplete(Exception):
    """The run in output_dir finished and this recipe asks for nothing more: nothing to do (exit 0)."""


def run_training(loaded_recipe: LoadedRecipe, argv: list[str] | None = None) -> int:
    """Train as the recipe says; returns the exit code: 0 finished (or already complete), 130/143
    when Ctrl-C / SIGTERM stopped it after saving a checkpoint, 1 when a reward failed mid-run."""
    from .interrupt import EXIT_CODES

    try:
        run, trainer = build_run(loaded_recipe, argv)
    except AlreadyComplete as done:
        log(str(done))
        return 0
    try:
        run.stop.install()
        try:
            result = trainer.train(resume_from_checkpoint=str(run.resume_from) if run.resume_from else None)
        except RewardFault as fault:  # the user's reward failed mid-run: named in one line (by the rank it failed on), the checkpoints kept
            _report_reward_fault(run, trainer, fault)
            return EXIT_RUN_FAILED
        finally:
            run.stop.restore()
        if run.stop.stopped_at is not None and result.global_step < trainer.state.max_steps:
            if is_main_process():
                _report_interrupted(run, result.global_step)
            return EXIT_CODES.get(run.stop.signal_name, 130)
        trainer.save_model(str(run.output_dir))
        if is_main_process():
            _write_summary(run, result)
            if run.held_out is not None and run.held_out.best is not None:
                best = run.held_out.best
                log(f"held-out best: step {best['step']} (strict {100 * best['strict']:.1f}%, loose {100 * best['loose']:.1f}%, "
                    f"by {best['metric']}), saved in {run.output_dir / 'best'}")
            readable_like_the_rest(run.output_dir)
            _report_checkpoint(run.output_dir, loaded_recipe.recipe)
            uploaded = run.storage.finish(run.output_dir)
            if uploaded:
                log(uploaded)
            log(f"done: final model in {run.output_dir}")
    finally:
        if run.toolbox is not None:
            run.toolbox.close()
        if run.lock is not None:
            run.lock.release()
    return 0


def _report_reward_fault(run: Run, trainer, fault: Exception) -> None:
    """A reward that raised (or returned what TRL cannot use) while training: the last finished step saved
    (`save_at_fault`), then one line naming the reward, the step, the completion, the file and line
    (posttrain.rewards.checks.guarded) and the checkpoint the fixed run resumes from. The traceback only with --verbose."""
    from posttrain.log import verbose

    from .resume import newest_complete_checkpoint

    for callback in trainer.callback_handler.callbacks:  # the progress bar ends its line before the error's
        bar = getattr(callback, "training_bar", None)
        if bar is not None:
            bar.close()
    if verbose():
        traceback.print_exception(fault)
    saved = save_at_fault(run, trainer)
    uploaded = run.storage.finish(run.output_dir, final=False) if is_main_process() else None
    if uploaded:
        log(uploaded)
    checkpoint, _ = newest_complete_checkpoint(run.output_dir)
    if checkpoint is None:
        kept = f"no checkpoint was saved (training.save_steps={run.trl_config.save_steps}): fix the reward and train again"
    else:
        again = command_with(run.argv, "training.resume_from_checkpoint", None if run.loaded_recipe.recipe.training.resume_from_checkpoint == "auto" else "auto")
        kept = f"{checkpoint.name} {'(the last finished step) is saved' if saved else 'is kept'} in {run.output_dir}: fix the reward and resume with `{again}`"
    print(f"error: {fault}; {kept}" + ("" if verbose() else " (--verbose shows the traceback)"), file=sys.stderr, flush=True)


def save_at_fault(run: Run, trainer) -> bool:
    """Save the last finished step when its checkpoint is not there yet (single process, save_strategy not 'no'):
    whether it saved. The failed step never reached its optimizer step, so the weights, optimizer and schedule are
    those of the last finished step, and the Trainer's own save writes them as it would have at that step's end (the
    RNG state is the later one; gradients are never saved). With several processes the other ranks wait in the step's
    reward gather, so a collective save would hang: the periodic checkpoints are what is kept there."""
    from posttrain.internals import require

    from .resume import newest_complete_checkpoint

    step, args = trainer.state.global_step, trainer.args
    newest, _ = newest_complete_checkpoint(run.output_dir)
    if run.trl_config.world_size > 1 or step == 0 or getattr(args.save_strategy, "value", args.save_strategy) == "no" \
            or (newest is not None and checkpoint_step(newest) >= step):
        return False
    require(trainer, "_save_checkpoint")(trainer.model_wrapped, trial=None)
    trainer.control = trainer.callback_handler.on_save(args, trainer.state, trainer.control)  # posttrain's files in it, the upload
    return True


def _report_interrupted(run: Run, step: int) -> None:
    uploaded = run.storage.finish(run.output_dir, final=False)  # waits for the checkpoint uploads in flight
    if uploaded:
        log(uploaded)
    key = "training.resume_from_checkpoint"
    again = command_with(run.argv, key, None if run.loaded_recipe.recipe.training.resume_from_checkpoint == "auto" else "auto")
    log(f"interrupted ({run.stop.signal_name}) at step {step}: checkpoint-{step} saved in {run.output_dir}; the final model "
        f"and run_summary.json are written when the run finishes. Resume with:\n    {again}")


def build_run(loaded_recipe: LoadedRecipe, argv: list[str] | None = None):
    """Everything up to the first training step: output_dir's lock, data, model, TRL config, trainer.

    The lock comes first, so a second run in the same output_dir stops in seconds; if anything
    fails before training, the lock is released and an output_dir this run created is removed.
    """
    output_dir = Path(loaded_recipe.recipe.training.output_dir)
    lock = None
    if is_main_process():
        existed = output_dir.exists()
        lock = OutputDirLock(output_dir).acquire()  # UserError (exit 2) naming the holder
        note = lock.stale_note()
        if note:
            log(note)
    try:
        return _build_run(loaded_recipe, lock, list(sys.argv[1:] if argv is None else argv))
    except BaseException:
        if lock is not None:
            lock.release()
            if not existed:
                _remove_empty(output_dir)
        raise


def _build_run(loaded_recipe: LoadedRecipe, lock, argv: list[str]):
    from posttrain.log import quiet_libraries

    quiet_libraries()  # transformers is imported now: its bars and warnings too
    recipe = loaded_recipe.recipe
    training = recipe.training
    seed = training.seed if training.seed is not None else 42
    output_dir = Path(training.output_dir)
    recipe_text = to_yaml(resolved_dict(recipe))
    done = finished_verdict(output_dir, yaml_load(recipe_text), training.resume_from_checkpoint, argv, log)
    if done:  # checked again here, under the lock (the CLI asked before importing torch)
        raise AlreadyComplete(done)
    log(f"posttrain: {training.algorithm} run, recipe {loaded_recipe.source}")
    log(format_differences(loaded_recipe))
    storage = run_storage(recipe.s3)
    resume_from = _resume_from(recipe, output_dir, storage, recipe_text, argv)  # before anything heavy loads
    train_dataset, eval_dataset, data_format, reports, drops = _read_data(recipe, seed)
    for note in reward_notes(recipe, train_dataset):  # each reward called as TRL will: a faulty one stops here, exit 2
        log(note)
    held_out = _held_out(recipe, output_dir)  # its items are read now: a bad file fails before the model loads
    device = DeviceInfo.detect()
    trl_config = _trl_config(recipe, device, data_format)
    world = trl_config.world_size  # starts the process group when there are several processes
    same_checkpoint_everywhere(resume_from, world)
    from posttrain.tracking import configure as configure_tracking

    for note in configure_tracking(recipe.tracking, Path(trl_config.output_dir)):
        log(note)
    loaded = _load_model(recipe, device, trl_config, seed)
    from posttrain.data.chat_data import settle_chat_template

    from .step_lines import use_step_lines

    from .tool_use import prepare_tools

    toolbox = prepare_tools(recipe, loaded, log)  # chat_template_path, tools in workers, the template check
    template_note = settle_chat_template(ALGORITHMS[training.algorithm].family, recipe.model.base_model_name, loaded.tokenizer, train_dataset)
    if template_note:
        log(template_note)
        loaded.notes.append(template_note)
    schemas = toolbox.schemas() if toolbox is not None else None
    train_dataset, eval_dataset = fit_prompts(recipe, loaded.tokenizer, [train_dataset, eval_dataset], schemas, drops)
    from .difficulty import difficulty_filter

    # prompts outside training.difficulty_filter's pass-rate band dropped before TRL, the refill pool and the audit see them
    train_dataset, difficulty = difficulty_filter(recipe, loaded, train_dataset, output_dir, drops, log)
    prompt_audits = audit_prompts(train_dataset, eval_dataset, loaded.tokenizer, trl_config, schemas) if data_format == "prompt" and not recipe.uses_images else []
    monitor = make_monitor(recipe, loaded, trl_config, output_dir / "metrics.jsonl")
    # Continuing an adapter: the loaded PeftModel is already trainable; a second LoRA config on top
    # would make TRL stack a new adapter (or refuse: "PeftModel together with a peft_config").
    peft_config = None if loaded.adapter_dir is not None else lora_config(recipe.model)
    from .interrupt import GracefulStop

    stop = GracefulStop(log, world)
    segments = RunSegments(output_dir, load_progress(resume_from), checkpoint_step(resume_from) if resume_from else 0, monitor, stop)
    run = Run(loaded_recipe, loaded, train_dataset, eval_dataset, trl_config, peft_config, output_dir,
              _callbacks(recipe, monitor, output_dir, recipe_text, storage, stop, segments, resume_from, held_out), reports, resume_from,
              storage, lock, monitor, prompt_audits, toolbox, segments, stop, argv, held_out=held_out)
    if difficulty is not None:
        run.summary["difficulty"] = difficulty.report
    trainer = build_trainer(run)  # user rewards import here: a failure leaves output_dir as it was
    if held_out is not None:
        held_out.attach(trainer)
    if device.kind == "cpu":  # before the micro-batch rule times a step
        from posttrain.models import cpu_lm_head, cpu_paths
        from posttrain.models.flat_batches import flatten_scored_passes

        algorithm = recipe.training.algorithm
        notes = [cpu_paths.startup_note(algorithm), cpu_lm_head.use_on_cpu() if cpu_paths.path_on("lm_head", algorithm) else None]
        if ALGORITHMS[recipe.training.algorithm].family == "grpo":
            notes.append(flatten_scored_passes(trainer))
        for note in filter(None, notes):
            log(note)
            loaded.notes.append(note)
    monitor_first(trainer, monitor)
    use_step_lines(trainer)  # one compact line per logged step (--verbose: transformers' full dicts)
    _check_built(run, trainer, drops, device, world)
    output_dir.mkdir(parents=True, exist_ok=True)
    if is_main_process():
        _write_run_files(output_dir, recipe_text, trainer.args, resume_from)  # with what start-up decided (micro-batching)
        if difficulty is not None:
            difficulty.write(output_dir)  # with its report; a run started over has moved the earlier run's files aside
    return run, trainer


def _resume_from(recipe, output_dir: Path, storage, recipe_text: str, argv: list[str]) -> Path | None:
    """Where to resume from, and whether this recipe may continue it; every rank, before the process group."""
    mode = recipe.training.resume_from_checkpoint
    resume_from = resume_point(mode, output_dir, storage)
    if resume_from is not None:
        check_recipe(resume_from, output_dir, yaml_load(recipe_text), mode, argv, log)
    else:  # a finished run with nothing to continue from (not even in S3) is never restarted silently
        finished_verdict(output_dir, yaml_load(recipe_text), mode, argv, log, remote=False)
    return resume_from


def _read_data(recipe, seed: int):
    """(train, eval, format, reports, drops): the datasets read and mapped, the drop limit checked, before the model loads."""
    use_s3_settings_for_sources(recipe.s3)
    if recipe.uses_images:  # a text-only model fails here, before any image is read
        from posttrain.models.vision import require_vision_language

        require_vision_language(recipe.model, "the data has image or video columns")
    train_dataset, eval_dataset, data_format, reports = prepare_data(recipe, seed)
    from posttrain.data.drops import DropLedger

    drops = DropLedger(recipe.data.max_drop_fraction)
    for report in reports:
        log(report.render())
        drops.add_report(report)
    drops.check()
    if eval_dataset is not None:
        log(f"evaluation data: {len(eval_dataset)} rows" + (f" (held out: data.eval_fraction={recipe.data.eval_fraction})" if recipe.data.eval_fraction else ""))
    return train_dataset, eval_dataset, data_format, reports, drops


def _trl_config(recipe, device, data_format: str):
    """The TRL config, with what posttrain decided for this machine printed first."""
    training = recipe.training
    for key, (value, why) in runtime_defaults(recipe, device, data_format).items():
        if key != "report_to" or value != "none":
            log(f"training.{key} = {value}  (posttrain at start-up: {why})")
    if training.distributed is not None:
        from posttrain.distributed.backends import BACKENDS, config_path

        if device.kind == "cpu" and BACKENDS[training.distributed][0] == "deepspeed":
            from posttrain.distributed.backends import skip_deepspeed_inference_op

            os.environ.setdefault("DS_ACCELERATOR", "cpu")  # DeepSpeed's CPU accelerator (gloo), before it is imported
            skip_deepspeed_inference_op()  # no C++ build of an all-reduce that only inference uses
        log(f"training.distributed = {training.distributed}: {BACKENDS[training.distributed][1]} ({config_path(training.distributed)})")
    return make_trl_config(recipe, device, data_format)


def _load_model(recipe, device, trl_config, seed: int) -> LoadedModel:
    from transformers import set_seed

    set_seed(seed)  # before the model loads: LoRA's initialisation draws from the global generator
    with trl_config.main_process_first(local=True, desc="model download"):
        # tiny: builds and s3:// downloads happen on local rank 0; the node's other ranks wait, then hit the cache
        if is_local_main_process():
            resolve_model_sources(recipe.model)
    loaded = load_model(recipe.model, device, vision=recipe.uses_images, reward_head=ALGORITHMS[recipe.training.algorithm].reward_head)
    if cpu_attention_applies(recipe, device):
        from posttrain.models.cpu_attention import use_on_cpu

        note = use_on_cpu(loaded.model, bf16=trl_config.bf16)
        if note:  # logged below, and kept in run_summary.json's model_notes
            loaded.notes.append(note)
    for note in loaded.notes:
        log(note)
    return loaded


def _held_out(recipe, output_dir: Path):
    """The held-out scorer of a recipe with a held_out section (algorithms/held_out.py), its items loaded; else None."""
    if recipe.held_out is None:
        return None
    from posttrain.evaluation.tasks import get_task, held_out_items

    from .held_out import HeldOutScores

    spec = recipe.held_out
    items = held_out_items(spec)  # a UserError names the held_out key
    scorer = HeldOutScores(spec, items, output_dir, rl=ALGORITHMS[recipe.training.algorithm].rl,
                           use_chat_template=getattr(recipe.data, "use_chat_template", True))
    # what differs from `posttrain eval --task ...` at its defaults, said where the scores begin
    differences = [f"held_out.n={spec.n} (posttrain eval scores every item unless --n)"] if spec.n is not None else []
    if spec.max_new_tokens is not None:
        differences.append(f"held_out.max_new_tokens={spec.max_new_tokens} (posttrain eval's default for {spec.task}: "
                           f"{get_task(spec.task).max_new_tokens})")
    log(f"held-out: {len(items)} items of task {spec.task}, at most {scorer.max_new_tokens} new tokens, scored at step 0 and "
        f"every {spec.every} steps" + (f"; unlike posttrain eval's defaults: {', '.join(differences)}" if differences else ""))
    return scorer


def _callbacks(recipe, monitor, output_dir: Path, recipe_text: str, storage, stop, segments, resume_from, held_out=None) -> list:
    # the monitor adds speed/health keys to each log record: before MetricsFile here, before the trackers in monitor_first;
    # the checkpoint's recipe and segments are written before the S3 uploader snapshots it; the held-out scorer's
    # evaluation at a step comes after the monitor has timed the step, and before the checkpoint of that step is saved
    callbacks = [monitor, stop, MetricsFile(output_dir / "metrics.jsonl"), RecipeInCheckpoints(output_dir, recipe_text), segments,
                 *([held_out] if held_out is not None else []), *storage.callbacks()]
    if resume_from is not None:
        callbacks.append(ScheduleOnResume())
    training = recipe.training
    if training.early_stopping_patience is not None:
        from transformers import EarlyStoppingCallback

        callbacks.append(EarlyStoppingCallback(training.early_stopping_patience, training.early_stopping_threshold or 0.0))
    return callbacks


def _check_built(run: Run, trainer, drops, device, world: int) -> None:
    """The trainer is built and nothing has trained: token audits, the drop limit, the padding note."""
    for audit in run.token_audits:
        log(audit.render())
    drops.add_audits(run.token_audits)
    drops.check()
    training = run.loaded_recipe.recipe.training
    if ALGORITHMS[training.algorithm].padding_note and is_main_process():
        from posttrain.data.padding import padding_note

        from .micro_batching import split_if_faster

        decided = split_if_faster(trainer, training.micro_batching, device.kind, world)
        if decided:
            log(decided)
        note = padding_note(trainer.train_dataset, trainer.args, device.kind, advise=decided is None)
        if note:
            log(note)
    if world > 1:
        log(f"{world} processes ({os.environ.get('LOCAL_WORLD_SIZE', '?')} on this node), distributed type "
            f"{trainer.accelerator.distributed_type.value}")


def _write_run_files(output_dir: Path, recipe_text: str, trl_config, resume_from: Path | None) -> None:
    if resume_from is None and holds_a_run(output_dir):  # starting over: the earlier run moves aside, whole
        moved = move_aside(output_dir)
        log(f"starting over (step 0): the earlier run in {output_dir} moved to {moved}")
    header = "".join(f"# {k}: {v}\n" for k, v in provenance().items())
    (output_dir / "resolved_recipe.yaml").write_text(header + recipe_text)
    trl_json = trl_config.to_json_string()
    step = checkpoint_step(resume_from) if resume_from else 0
    write_history(output_dir, header + recipe_text, step, trl_json)
    (output_dir / "trl_config.json").write_text(trl_json)
    keep_metrics(output_dir / "metrics.jsonl", step)


def monitor_first(trainer, monitor) -> None:
    """Run the monitor's on_log before every other callback's, so what it adds to a log record
    (speed/*, time/*, health/*) reaches the trackers too. transformers puts the report_to callbacks
    (wandb, tensorboard, mlflow, trackio) ahead of the ones a trainer is given, so they used to log
    each record before the monitor had added its keys: the keys reached metrics.jsonl and no tracker."""
    callbacks = trainer.callback_handler.callbacks
    callbacks.remove(monitor)
    callbacks.insert(0, monitor)


def make_monitor(recipe, loaded: LoadedModel, trl_config, history: Path | None = None) -> RunMonitor:
    """Speed and health watching for this run (see posttrain.algorithms.monitor)."""
    from posttrain.monitoring.speed import device_peak, world_size

    training = recipe.training
    rl = ALGORITHMS[training.algorithm].rl
    precision = "bf16" if trl_config.bf16 else "fp16" if trl_config.fp16 else "fp32"
    peak, source = device_peak(precision)
    samples = trl_config.per_device_train_batch_size * trl_config.gradient_accumulation_steps * world_size()
    from .tool_use import ToolCounts

    return RunMonitor(rl=rl, window=training.health_window, stop_on=list(training.stop_on),
                      max_completion_length=getattr(trl_config, "max_completion_length", None) if rl else None,
                      samples_per_step=samples, peak=peak, peak_source=source,
                      timers=StepTimers() if rl else None, tools=ToolCounts() if getattr(training, "uses_tools", False) else None,
                      log=log, history=history)


def resolve_model_sources(model_cfg) -> None:
    """Build or download the model (and an adapter's base) into the local cache; loading then hits it."""
    from posttrain.models.loading import adapter_base, resolve_source

    source = resolve_source(model_cfg.base_model_name)
    base = adapter_base(source) if Path(source).is_dir() else None
    if base is not None:
        resolve_source(base)


def _remove_empty(folder: Path) -> None:
    """Undo creating output_dir when the run stops before training: only the lock file is in it."""
    try:
        if all(p.name == LOCK_NAME for p in folder.iterdir()):
            (folder / LOCK_NAME).unlink(missing_ok=True)
            folder.rmdir()
    except OSError:
        pass


def keep_metrics(path: Path, upto_step: int) -> None:
    """Start metrics.jsonl afresh, or when resuming keep the records up to the checkpoint's step.

    A run killed mid-write (SIGKILL) can leave a torn last line: unreadable lines are dropped, and
    the records after the checkpoint's step are rewritten by the resumed run anyway.
    """
    if not path.is_file():
        return
    if upto_step == 0:
        path.unlink()
        return
    kept, torn = [], 0
    for line in path.read_text().splitlines():
        try:
            record = json.loads(line) if line.strip() else None
        except ValueError:
            torn += 1
            continue
        if isinstance(record, dict) and record.get("step", 0) <= upto_step:
            kept.append(line)
    if torn:
        log(f"metrics.jsonl: dropped {torn} unreadable line(s) (a write cut off when the run was killed)")
    path.write_text("".join(line + "\n" for line in kept))


def _write_summary(run: Run, result) -> None:
    """run_summary.json: the whole run, over every segment (each start or resume that trained it)."""
    segments = run.segments.segments(result.global_step, "finished")
    records = read_records(run.output_dir / "metrics.jsonl")
    whole = whole_run(segments, records)
    if whole["train_loss"] is None and len(segments) == 1:  # nothing logged a loss: the Trainer's own mean
        whole["train_loss"] = result.training_loss
    segments = whole.pop("segments")
    summary = {
        "state": "finished",
        "algorithm": run.loaded_recipe.recipe.training.algorithm,
        "rl": ALGORITHMS[run.loaded_recipe.recipe.training.algorithm].rl,
        "global_step": result.global_step,
        **whole,
        "data": [r.render() for r in run.data_reports],
        "token_audit": [a.to_dict() for a in run.token_audits],
        "model_notes": run.loaded.notes,
        **(run.monitor.summary() if run.monitor else {}),
        **({"held_out": run.held_out.summary(records)} if run.held_out is not None else {}),
        **run.summary,
        "segments": segments,  # listed last: the whole run's figures come first
    }
    (run.output_dir / "run_summary.json").write_text(json.dumps(summary, indent=2) + "\n")
    write_run_card(run.output_dir, summary, run.loaded_recipe.recipe, records, provenance())


def _report_checkpoint(output_dir: Path, recipe) -> None:
    """The adapter-size guard: print what the final checkpoint holds, warn if an adapter carries matrices."""
    from posttrain.models.checkpoint_report import inspect_checkpoint

    report = inspect_checkpoint(output_dir)
    kind = "adapter" if report.is_adapter else "model"
    log(f"final {kind}: {sum(report.params.values()):,} parameters, {report.total_bytes:,} bytes")
    if report.warnings and not recipe.model.lora_modules_to_save:
        for w in report.warnings:
            log(f"warning: {w}")
