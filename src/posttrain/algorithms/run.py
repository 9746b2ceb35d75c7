"""One training run, top to bottom: data -> model -> TRL config -> trainer -> train -> save.

Everything that can fail on the user's input (recipe, data files, columns, model path) is checked
before output_dir is created, so a bad run leaves nothing behind.
"""

from __future__ import annotations

import datetime
import json
import os
import platform
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

from posttrain.models.loading import DeviceInfo, LoadedModel, load_model, lora_config
from posttrain.recipe.load import LoadedRecipe, format_differences, resolved_dict, to_yaml
from yaml import safe_load as yaml_load
from posttrain.storage.run_storage import run_storage, use_s3_settings_for_sources

from . import dpo, grpo, sft, sft_vlm
from .callbacks import MetricsFile, RecipeInCheckpoints
from .monitor import RunMonitor, StepTimers
from .output_lock import LOCK_NAME, OutputDirLock
from .recipe_history import checkpoint_recipe, recipe_changes, render, write_history
from .resume import checkpoint_problem, checkpoint_step, newest_complete_checkpoint
from .trl_config import build_trl_config, runtime_defaults

TRAINERS = {"cpt": sft.build_trainer, "sft": sft.build_trainer, "sft_vlm": sft_vlm.build_trainer, "dpo": dpo.build_trainer,
            "grpo": grpo.build_trainer, "gspo": grpo.build_trainer}


@dataclass
class Run:
    loaded_recipe: LoadedRecipe
    loaded: LoadedModel
    train_dataset: object
    eval_dataset: object  # None unless the recipe asks for evaluation
    trl_config: object
    peft_config: object
    output_dir: Path
    callbacks: list = field(default_factory=list)
    data_reports: list = field(default_factory=list)
    resume_from: Path | None = None  # the checkpoint training continues from
    storage: object = None  # NoStorage or S3RunStorage
    lock: OutputDirLock | None = None  # held by the main process for the whole run
    monitor: RunMonitor | None = None  # speed + health; RL trainers attach its timers
    token_audits: list = field(default_factory=list)  # posttrain.data.token_audit.TokenAudit, filled by the trainer builder
    toolbox: object = None  # posttrain.tools.isolation.Toolbox of a GRPO/GSPO run with tools, else None

    def trainer_kwargs(self) -> dict:
        """What every TRL trainer takes; algorithm modules add their own (reward functions, ...)."""
        return dict(model=self.loaded.model, args=self.trl_config, train_dataset=self.train_dataset, eval_dataset=self.eval_dataset,
                    processing_class=self.loaded.processing_class, peft_config=self.peft_config, callbacks=self.callbacks)


def is_main_process() -> bool:
    return int(os.environ.get("RANK", "0")) == 0


def log(msg: str = "") -> None:
    if is_main_process():
        print(msg, flush=True)


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


def prepare_data(recipe, seed: int):
    """(train, eval or None, format, reports) for the recipe's algorithm; no model needed yet."""
    from posttrain.data.formats import prepare_training_data
    from posttrain.data.prompts import read_prompt_data
    from posttrain.recipe.schema import RL_ALGORITHMS

    if recipe.uses_images:
        from posttrain.data.vision import prepare_vision_data

        train, fmt, reports, evaluation = prepare_vision_data(recipe.data, seed, prompt_only=recipe.training.algorithm in RL_ALGORITHMS)
        return train, evaluation, "prompt" if recipe.training.algorithm in RL_ALGORITHMS else fmt, reports
    if recipe.training.algorithm in RL_ALGORITHMS:
        from posttrain.data.prompts import untagged_prompt_warning
        from posttrain.rewards.builtin import NUMERIC_GOLD_REWARDS

        names = [r.name for r in recipe.training.rewards]
        train, reports, evaluation = read_prompt_data(recipe.data, seed, numeric_gold=any(n in NUMERIC_GOLD_REWARDS for n in names))
        warning = untagged_prompt_warning(train, names)
        if warning:
            log(warning)
        return train, evaluation, "prompt", reports
    train, fmt, reports, evaluation = prepare_training_data(recipe.data, recipe.training.algorithm, seed)
    return train, evaluation, fmt, reports


def fit_prompts(recipe, tokenizer, datasets_: list, tools: list | None = None, drops=None):
    """Enforce data.max_prompt_length (GRPO/GSPO/DPO) now that the tokenizer is loaded (counting the
    tool schemas the chat template renders into each prompt, when there are tools); dropped prompts
    go into `drops` (a DropLedger), against their dataset when the split has one."""
    from posttrain.data.prompts import enforce_prompt_length

    data, out = recipe.data, []
    for split, ds in zip(("train", "eval"), datasets_):
        if ds is not None and "prompt" in ds.column_names and data.max_prompt_length is not None:
            before = len(ds)
            ds, note = enforce_prompt_length(ds, tokenizer, data.max_prompt_length, data.prompt_truncation, tools=tools)
            log(note)
            if drops is not None:
                drops.add_stage(split_key(data, split), f"over data.max_prompt_length={data.max_prompt_length}", before, before - len(ds))
        out.append(ds)
    return out


def split_key(data, split: str) -> str:
    """The dataset a split's rows come from ('data.datasets[0]'), or the section when it mixes several."""
    specs, section = (data.eval_datasets, "data.eval_datasets") if split == "eval" and data.eval_datasets else (data.datasets, "data.datasets")
    return f"{section}[0]" if len(specs) == 1 else f"{section} (mixed)"


def audit_prompts(train_dataset, eval_dataset, tokenizer, trl_config, tools: list | None = None) -> list:
    """RL runs: the prompts' token counts (posttrain.data.token_audit.PromptAudit), tool schemas included."""
    from posttrain.data.prompts import prompt_token_count
    from posttrain.data.token_audit import PromptAudit

    return [PromptAudit(split, [len(prompt_token_count(p, tokenizer, tools)) for p in ds["prompt"]], trl_config.max_completion_length)
            for split, ds in (("train", train_dataset), ("eval", eval_dataset)) if ds is not None and len(ds)]


def make_trl_config(recipe, device, data_format):
    """The TRL config, built before the model loads so that settings TRL rejects fail fast (exit 2)."""
    from posttrain.errors import UserError

    try:
        return build_trl_config(recipe, device, data_format)
    except (ValueError, TypeError) as e:
        raise UserError(f"training: TRL rejected these settings: {e}") from None


def run_training(loaded_recipe: LoadedRecipe) -> Path:
    """Train as the recipe says; returns output_dir."""
    run, trainer = build_run(loaded_recipe)
    try:
        started = time.time()
        result = trainer.train(resume_from_checkpoint=str(run.resume_from) if run.resume_from else None)
        trainer.save_model(str(run.output_dir))
        if is_main_process():
            _write_summary(run, result, time.time() - started)
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
    return run.output_dir


def build_run(loaded_recipe: LoadedRecipe):
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
        return _build_run(loaded_recipe, lock)
    except BaseException:
        if lock is not None:
            lock.release()
            if not existed:
                _remove_empty(output_dir)
        raise


def _build_run(loaded_recipe: LoadedRecipe, lock):
    recipe = loaded_recipe.recipe
    training = recipe.training
    seed = training.seed if training.seed is not None else 42
    log(f"posttrain: {training.algorithm} run, recipe {loaded_recipe.source}")
    log(format_differences(loaded_recipe))

    # Where to resume from, and whether this recipe may continue it, before anything heavy loads.
    output_dir = Path(training.output_dir)
    storage = run_storage(recipe.s3)
    resume_from = resume_point(training.resume_from_checkpoint, output_dir, storage)  # every rank, before the process group
    recipe_text = to_yaml(resolved_dict(recipe))
    if resume_from is not None:
        check_resume_recipe(resume_from, output_dir, yaml_load(recipe_text), training.resume_from_checkpoint)

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
    drops.check()  # before the model loads
    if eval_dataset is not None:
        log(f"evaluation data: {len(eval_dataset)} rows" + (f" (held out: data.eval_fraction={recipe.data.eval_fraction})" if recipe.data.eval_fraction else ""))

    device = DeviceInfo.detect()
    for key, (value, why) in runtime_defaults(recipe, device, data_format).items():
        if key != "report_to" or value != "none":
            log(f"training.{key} = {value}  (posttrain at start-up: {why})")
    if training.distributed is not None:
        from posttrain.distributed.backends import BACKENDS, config_path

        if device.kind == "cpu" and BACKENDS[training.distributed][0] == "deepspeed":
            os.environ.setdefault("DS_ACCELERATOR", "cpu")  # DeepSpeed's CPU accelerator (gloo), before it is imported
        log(f"training.distributed = {training.distributed}: {BACKENDS[training.distributed][1]} ({config_path(training.distributed)})")
    trl_config = make_trl_config(recipe, device, data_format)
    world = trl_config.world_size  # starts the process group when there are several processes
    same_checkpoint_everywhere(resume_from, world)
    from posttrain.tracking import configure as configure_tracking

    for note in configure_tracking(recipe.tracking, Path(trl_config.output_dir)):
        log(note)

    from transformers import set_seed

    set_seed(seed)  # before the model loads: LoRA's initialisation draws from the global generator
    with trl_config.main_process_first(local=True, desc="model download"):
        # tiny: builds and s3:// downloads happen on local rank 0; the node's other ranks wait, then hit the cache
        if is_local_main_process():
            resolve_model_sources(recipe.model)
    loaded = load_model(recipe.model, device, vision=recipe.uses_images)
    for note in loaded.notes:
        log(note)
    from .tool_use import prepare_tools

    toolbox = prepare_tools(recipe, loaded, log)  # chat_template_path, tools in workers, the template check
    schemas = toolbox.schemas() if toolbox is not None else None
    train_dataset, eval_dataset = fit_prompts(recipe, loaded.tokenizer, [train_dataset, eval_dataset], schemas, drops)
    prompt_audits = audit_prompts(train_dataset, eval_dataset, loaded.tokenizer, trl_config, schemas) if data_format == "prompt" and not recipe.uses_images else []

    monitor = make_monitor(recipe, loaded, trl_config, output_dir / "metrics.jsonl")
    # the monitor adds speed/health keys to each log record: before MetricsFile here, before the trackers in monitor_first
    callbacks = [monitor, MetricsFile(output_dir / "metrics.jsonl"), RecipeInCheckpoints(output_dir, recipe_text), *storage.callbacks()]
    if training.early_stopping_patience is not None:
        from transformers import EarlyStoppingCallback

        callbacks.append(EarlyStoppingCallback(training.early_stopping_patience, training.early_stopping_threshold or 0.0))
    # Continuing an adapter: the loaded PeftModel is already trainable; a second LoRA config on top
    # would make TRL stack a new adapter (or refuse: "PeftModel together with a peft_config").
    peft_config = None if loaded.adapter_dir is not None else lora_config(recipe.model)
    run = Run(loaded_recipe, loaded, train_dataset, eval_dataset, trl_config, peft_config, output_dir, callbacks, reports,
              resume_from, storage, lock, monitor, prompt_audits, toolbox)
    trainer = TRAINERS[training.algorithm](run)  # user rewards import here: a failure leaves output_dir as it was
    monitor_first(trainer, monitor)
    for audit in run.token_audits:
        log(audit.render())
    drops.add_audits(run.token_audits)
    drops.check()  # the trainer is built, nothing has trained
    if training.algorithm in ("sft", "dpo") and is_main_process():
        from posttrain.data.padding import padding_note

        note = padding_note(trainer.train_dataset, trl_config, device.kind)
        if note:
            log(note)
    if world > 1:
        log(f"{world} processes ({os.environ.get('LOCAL_WORLD_SIZE', '?')} on this node), distributed type "
            f"{trainer.accelerator.distributed_type.value}")

    output_dir.mkdir(parents=True, exist_ok=True)
    if is_main_process():
        header = "".join(f"# {k}: {v}\n" for k, v in provenance().items())
        (output_dir / "resolved_recipe.yaml").write_text(header + recipe_text)
        trl_json = trl_config.to_json_string()
        write_history(output_dir, header + recipe_text, checkpoint_step(resume_from) if resume_from else 0, trl_json)
        (output_dir / "trl_config.json").write_text(trl_json)
        keep_metrics(output_dir / "metrics.jsonl", checkpoint_step(resume_from) if resume_from else 0)
    return run, trainer


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
    from posttrain.recipe.schema import RL_ALGORITHMS

    training = recipe.training
    rl = training.algorithm in RL_ALGORITHMS
    precision = "bf16" if trl_config.bf16 else "fp16" if trl_config.fp16 else "fp32"
    peak, source = device_peak(precision)
    samples = trl_config.per_device_train_batch_size * trl_config.gradient_accumulation_steps * world_size()
    from .tool_use import ToolCounts

    return RunMonitor(algorithm=training.algorithm, window=training.health_window, stop_on=list(training.stop_on),
                      max_completion_length=getattr(trl_config, "max_completion_length", None) if rl else None,
                      samples_per_step=samples, peak=peak, peak_source=source,
                      timers=StepTimers() if rl else None, tools=ToolCounts() if getattr(training, "uses_tools", False) else None,
                      log=log, history=history)


def is_local_main_process() -> bool:
    return int(os.environ.get("LOCAL_RANK", "0")) == 0


def resolve_model_sources(model_cfg) -> None:
    """Build or download the model (and an adapter's base) into the local cache; loading then hits it."""
    from posttrain.models.loading import adapter_base, resolve_source

    source = resolve_source(model_cfg.base_model_name)
    base = adapter_base(source) if Path(source).is_dir() else None
    if base is not None:
        resolve_source(base)


def machine_lock(name: str):
    """An exclusive flock shared by this machine's processes (in the posttrain cache; the kernel drops it if we die)."""
    import hashlib

    from posttrain.locks import exclusive
    from posttrain.storage.cache import default_cache_root

    return exclusive(default_cache_root() / "locks" / (hashlib.sha256(name.encode()).hexdigest()[:32] + ".lock"))


def same_checkpoint_everywhere(resume_from: Path | None, world: int) -> None:
    """Every rank must continue from the same step; they would not if nodes see different output_dirs."""
    if world <= 1:
        return
    import torch.distributed as dist

    from posttrain.errors import UserError

    mine = checkpoint_step(resume_from) if resume_from else 0
    steps = [None] * world
    dist.all_gather_object(steps, mine)
    if len(set(steps)) > 1:
        raise UserError(f"the ranks found different checkpoints to resume from (steps by rank: {steps}): output_dir must be "
                        "on a filesystem every node shares, or give the run an s3 section so each node fetches the same one.")


def resume_point(value, output_dir: Path, storage) -> Path | None:
    """training.resume_from_checkpoint: 'auto' (default) -> the newest complete checkpoint, local or
    (with an s3 section) uploaded, if any; false/null -> start fresh; a path -> that checkpoint.

    Every rank runs this before the process group exists, so the processes of one machine take
    turns through a file lock: the first downloads a newer uploaded checkpoint into output_dir,
    the others then find it there complete (one download per node, never two into one folder).
    """
    from posttrain.errors import UserError

    if value in (None, False, "false"):
        return None
    if value in ("auto", "force"):
        with machine_lock(f"resume {output_dir.resolve()}"):
            found, notes = newest_complete_checkpoint(output_dir)
            remote = storage.fetch_checkpoint(output_dir, checkpoint_step(found) if found else 0)
        for note in notes:
            log(note)
        if remote is not None:
            # printed by every process that downloads (local rank 0 of each node), not only rank 0
            print(f"rank {os.environ.get('RANK', '0')}: downloaded {remote.name} from S3: newer than any complete local checkpoint", flush=True)
            found = remote
        if found is not None:
            log(f"resuming from {found} (training.resume_from_checkpoint={value}; set it to false to start over)")
        return found
    path = Path(value)
    problem = checkpoint_problem(path) if path.is_dir() else "not a directory"
    if problem:
        raise UserError(f"training.resume_from_checkpoint: cannot resume from {value}: {problem}")
    return path


def check_resume_recipe(checkpoint: Path, output_dir: Path, new: dict, mode) -> None:
    """Refuse to continue a checkpoint under a different recipe (unless forced); print schedule changes."""
    from posttrain.errors import UserError

    old, where = checkpoint_recipe(checkpoint, output_dir)
    if old is None:
        log(f"note: {checkpoint} carries no recipe to compare with; resuming as asked")
        return
    allowed, refused = recipe_changes(old, new)
    if allowed:
        log(f"changed since {checkpoint.name} (allowed on resume):\n{render(allowed)}")
    if refused and mode != "force":
        raise UserError(
            f"training.resume_from_checkpoint: {checkpoint} was trained with another recipe ({where}); these keys differ:\n"
            f"{render(refused)}\nOnly the schedule (max_steps, num_train_epochs, save/logging/eval cadence), tracking, s3 and activation_checkpointing may "
            "change on resume. Restore those keys, start over with training.resume_from_checkpoint=false (or another "
            "training.output_dir), or continue anyway with training.resume_from_checkpoint=force.")
    if refused:
        log(f"warning: resuming {checkpoint.name} with a changed recipe (training.resume_from_checkpoint=force):\n{render(refused)}")


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


def _write_summary(run: Run, result, seconds: float) -> None:
    summary = {
        "algorithm": run.loaded_recipe.recipe.training.algorithm,
        "global_step": result.global_step,
        "train_loss": result.training_loss,
        "wall_seconds": round(seconds, 2),
        "data": [r.render() for r in run.data_reports],
        "token_audit": [a.to_dict() for a in run.token_audits],
        "model_notes": run.loaded.notes,
        **(run.monitor.summary() if run.monitor else {}),
    }
    (run.output_dir / "run_summary.json").write_text(json.dumps(summary, indent=2) + "\n")


def _report_checkpoint(output_dir: Path, recipe) -> None:
    """The adapter-size guard: print what the final checkpoint holds, warn if an adapter carries matrices."""
    from posttrain.models.checkpoint_report import inspect_checkpoint

    report = inspect_checkpoint(output_dir)
    kind = "adapter" if report.is_adapter else "model"
    log(f"final {kind}: {sum(report.params.values()):,} parameters, {report.total_bytes:,} bytes")
    if report.warnings and not recipe.model.lora_modules_to_save:
        for w in report.warnings:
            log(f"warning: {w}")
