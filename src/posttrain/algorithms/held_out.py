"""Held-out accuracy while a model trains: `posttrain eval`'s items, prompts and scorer, every N steps.

    held_out:                               # in any training recipe
      task: custom
      data: recipes/demo/data/eval.jsonl
      every: 10

At step 0 (before the first update), every `held_out.every` optimizer steps and at the last step,
the model being trained answers the same items greedily (posttrain's decoding loop, float32, eval
mode: what `posttrain eval` does with the saved model) and each answer is scored strict and loose.
Each evaluation is one record in metrics.jsonl and the trackers:

    held_out/strict, held_out/loose          accuracy on the n items
    held_out/{strict,loose}_fixed, _broken   items right now and wrong at step 0, and the reverse
    held_out/{strict,loose}_p                exact McNemar p of the change since step 0 (paired by item)
    held_out/looks                           the evaluations the schedule plans after step 0 (the flag spends its alpha over them)
    held_out/pass@K_strict, _loose           with held_out.pass_k: any of K sampled answers right
    time/held_out_s                          the evaluation's seconds (not part of any step's time)
    time/train_s                             wall seconds this process has trained when the evaluation starts: since
                                             training began (since the resume, for a resumed run), held-out evaluations
                                             left out (time-to-accuracy curves)

and its answers go to output_dir/held_out/step-N.jsonl (the records `posttrain eval` writes). The
health check `held_out_regression` (posttrain.monitoring.held_out_fall) fires on the first evaluation
below step 0 past a bound that holds its false-alarm rate over all the planned evaluations and both
metrics; `training.stop_on: [held_out_regression]` stops the run there. With
`held_out.keep_best` the model of the best evaluation so far is saved in output_dir/best; with
`held_out.patience: P` the run stops once P evaluations in a row have not beaten it (a plateau).

Several processes: each answers its share of the items and the records are gathered, so every
process sees the same scores and takes the same decisions. Greedy decoding draws no random numbers
and pass@k sampling runs on a forked generator, so a run with held-out scoring trains exactly as
one without (tests/e2e/test_held_out.py checks the losses).
"""

from __future__ import annotations

import json
import shutil
import time
from contextlib import nullcontext
from pathlib import Path

from transformers import TrainerCallback

from posttrain.monitoring.health import HELD_OUT_METRICS, HELD_OUT_PREFIX
from posttrain.monitoring.held_out_fall import LOOKS_KEY, planned_looks

from .common import log

FOLDER = "held_out"  # output_dir/held_out/step-N.jsonl
BEST = "best"  # output_dir/best: the model of the best evaluation, with held_out.json


class HeldOutScores(TrainerCallback):
    """Scores the held-out items at step 0, every `spec.every` steps and at the last step (see the module docstring).

    `attach(trainer)` must be called once the trainer exists: generation needs its model and tokenizer."""

    def __init__(self, spec, items: list[dict], output_dir: Path, *, rl: bool, use_chat_template: bool = True):
        from posttrain.evaluation.tasks import get_task

        self.spec, self.items, self.output_dir = spec, items, output_dir
        self.max_new_tokens = spec.max_new_tokens or get_task(spec.task).max_new_tokens  # eval's default when unset
        self.rl = rl  # RL runs decode every step: their frozen weights' packed copies are worth keeping
        self.use_chat_template = use_chat_template
        self.trainer = None
        self.start: dict[str, dict[str, bool]] | None = None  # step 0's outcomes: metric -> item id -> right
        self.best: dict | None = None  # {"step", "strict", "loose"} of the best evaluation so far
        self.last_step: int | None = None
        self.since_best = 0  # evaluations in a row that did not beat the best (held_out.patience)
        self.stopped: dict | None = None  # {"step", "best_step", "evaluations"} when the plateau rule stopped the run
        self.began: float | None = None  # perf_counter() at train begin
        self.evaluating_s = 0.0  # seconds spent in held-out evaluations since then

    def attach(self, trainer) -> None:
        self.trainer = trainer

    # -- when -------------------------------------------------------------------------------
    def on_train_begin(self, args, state, control, **kwargs):
        self.began, self.evaluating_s = time.perf_counter(), 0.0
        if state.global_step == 0:
            self._evaluate(state, control)
        else:
            self._resume(state.global_step)

    def on_step_end(self, args, state, control, **kwargs):
        if state.global_step % self.spec.every == 0 or state.global_step >= state.max_steps:
            self._evaluate(state, control)

    # -- resume -----------------------------------------------------------------------------
    def _resume(self, step: int) -> None:
        """Continue from a checkpoint: step 0's answers are the baseline again; a best model saved after
        the checkpoint's step belongs to the part of the run that is being redone, and goes."""
        first = self.output_dir / FOLDER / "step-0.jsonl"
        if first.is_file():
            self.start = _outcomes([json.loads(line) for line in first.read_text().splitlines() if line.strip()])
        best = self.output_dir / BEST / "held_out.json"
        if best.is_file():
            saved = json.loads(best.read_text())
            if saved.get("step", 0) <= step:
                self.best = saved
                # the plateau count goes on: the evaluations after the best one, up to the checkpoint
                self.since_best = sum(1 for f in (self.output_dir / FOLDER).glob("step-*.jsonl")
                                      if saved["step"] < int(f.stem.removeprefix("step-")) <= step)
            elif self._is_main():
                shutil.rmtree(self.output_dir / BEST, ignore_errors=True)

    # -- one evaluation ---------------------------------------------------------------------
    def _evaluate(self, state, control) -> None:
        if self.last_step == state.global_step:
            return
        self.last_step = state.global_step
        started = time.perf_counter()
        records, sampled = self._answer()
        seconds = time.perf_counter() - started
        step = state.global_step
        record = self._record(records, sampled, step, seconds)
        record["time/train_s"] = round(started - (self.began or started) - self.evaluating_s, 3)
        self.evaluating_s += seconds
        record[LOOKS_KEY] = planned_looks(state.max_steps, self.spec.every)
        if self._is_main():
            folder = self.output_dir / FOLDER
            folder.mkdir(parents=True, exist_ok=True)
            (folder / f"step-{step}.jsonl").write_text("".join(json.dumps(r, ensure_ascii=False, default=str) + "\n" for r in records))
        improved = self._keep_if_best(record, step)
        self._stop_at_plateau(improved, step, control)
        trainer = self.trainer
        trainer.state.log_history.append({**record, "step": step})
        # the record goes to every callback's on_log as Trainer.log would send it, without TRL's log override,
        # which would merge and clear the step's pending training metrics; the handler clears should_log, which
        # must stay as the step set it, or the step's own training record would not be logged
        should_log = control.should_log
        trainer.control = trainer.callback_handler.on_log(trainer.args, state, control, record)
        trainer.control.should_log = should_log
        if self._is_main():
            log(_line(record, step))

    def _answer(self) -> tuple[list[dict], list[dict]]:
        """Greedy records for every item (and pass@k's sampled ones), this process's share gathered from all."""
        import torch

        from posttrain.evaluation.runner import evaluate
        from posttrain.generation.base import SamplingParams
        from posttrain.generation.inference_weights import forget_trained
        from posttrain.generation.local import TransformersEngine

        from .common import without_autocast

        trainer, spec = self.trainer, self.spec
        rank, world = trainer.args.process_index, trainer.args.world_size
        mine = self.items[rank::world]
        model = trainer.model
        engine = TransformersEngine.around(trainer.accelerator.unwrap_model(model), _tokenizer(trainer), "held-out",
                                           batch_size=spec.batch_size, use_chat_template=self.use_chat_template)
        was_training = engine.model.training
        engine.model.eval()
        # every evaluation, step 0's included, runs after the Trainer prepared (and autocast-wrapped) the model:
        # transformers calls on_train_begin after accelerator.prepare
        wrapped = trainer.accelerator.native_amp
        try:  # float32 on a CPU, as `posttrain eval` loads the model there (bf16 autocast is for the training passes)
            with without_autocast(model, wrapped) if trainer.args.use_cpu else nullcontext(), torch.no_grad():
                greedy = evaluate("held_out", engine, mine, SamplingParams(max_new_tokens=self.max_new_tokens, seed=spec.seed)) if mine else []
                sampled = []
                if spec.pass_k and mine:
                    params = SamplingParams(max_new_tokens=self.max_new_tokens, temperature=spec.temperature, seed=spec.seed)
                    repeated = [item for item in mine for _ in range(spec.pass_k)]
                    sampled = evaluate("held_out_sampled", engine, repeated, params)
        finally:
            engine.model.train(was_training)
            forget_trained(engine.model, frozen_too=not self.rl)
        if world > 1:
            from accelerate.utils import gather_object

            greedy, sampled = gather_object([greedy]), gather_object([sampled])
            greedy, sampled = [r for part in greedy for r in part], [r for part in sampled for r in part]
        order = {item["id"]: i for i, item in enumerate(self.items)}
        greedy.sort(key=lambda r: order[r["id"]])
        return greedy, sampled

    def _record(self, records: list[dict], sampled: list[dict], step: int, seconds: float) -> dict:
        """The metrics.jsonl record of one evaluation (the module docstring lists its keys)."""
        from posttrain.evaluation.statistics import mcnemar_exact

        n = len(records)
        record = {f"{HELD_OUT_PREFIX}n": n}
        outcomes = _outcomes(records)
        for metric in HELD_OUT_METRICS:
            key = f"{HELD_OUT_PREFIX}{metric}"
            record[key] = round(sum(outcomes[metric].values()) / n, 6) if n else None
            if self.start is not None and n:
                before = self.start[metric]
                fixed = sum(1 for i, right in outcomes[metric].items() if right and not before.get(i, False))
                broken = sum(1 for i, right in outcomes[metric].items() if not right and before.get(i, False))
                record.update({f"{key}_fixed": fixed, f"{key}_broken": broken, f"{key}_p": mcnemar_exact(fixed, broken)})
        if sampled:
            k = self.spec.pass_k
            for metric in HELD_OUT_METRICS:
                hits: dict[str, bool] = {}
                for r in sampled:
                    hits[r["id"]] = hits.get(r["id"], False) or bool(r[metric])
                record[f"{HELD_OUT_PREFIX}pass@{k}_{metric}"] = round(sum(hits.values()) / len(hits), 6)
        record["time/held_out_s"] = round(seconds, 3)
        if self.start is None:
            self.start = outcomes
        return record

    def _keep_if_best(self, record: dict, step: int) -> bool:
        """Save the model when this evaluation beats every earlier one: by `keep_best`'s accuracy, then by the
        other one (strict 0% everywhere still tells loose apart); full ties keep the earlier step. True when saved."""
        metric = self.spec.keep_best
        if metric == "none":
            return False
        other = next(m for m in HELD_OUT_METRICS if m != metric)
        rank = (record[f"{HELD_OUT_PREFIX}{metric}"], record[f"{HELD_OUT_PREFIX}{other}"])
        if self.best is not None and rank <= (self.best[metric], self.best[other]):
            return False
        self.best = {"step": step, "metric": metric, **{m: record[f"{HELD_OUT_PREFIX}{m}"] for m in HELD_OUT_METRICS}}
        folder = self.output_dir / BEST
        if self._is_main() and folder.exists():
            shutil.rmtree(folder)
        self.trainer.save_model(str(folder))  # every process calls it (DeepSpeed gathers); the main one writes
        if self._is_main():
            (folder / "held_out.json").write_text(json.dumps(self.best, indent=1) + "\n")
        return True

    def _stop_at_plateau(self, improved: bool, step: int, control) -> None:
        """held_out.patience: stop once that many evaluations in a row did not beat the best. Every process takes
        the same decision (the scores are gathered), so a multi-process run stops together."""
        self.since_best = 0 if improved else self.since_best + 1
        patience = self.spec.patience
        if patience is None or self.since_best < patience or step == 0:
            return
        self.stopped = {"step": step, "best_step": self.best["step"], "evaluations": self.since_best}
        control.should_training_stop = True
        if self._is_main():
            log(f"held-out plateau: {self.since_best} evaluations since step {self.best['step']} beat none of its "
                f"{self.best['metric']} {100 * self.best[self.best['metric']]:.1f}% (held_out.patience {patience}); "
                f"stopping at step {step}, best/ holds step {self.best['step']}'s model")

    def _is_main(self) -> bool:
        return self.trainer is None or self.trainer.args.process_index == 0

    def summary(self, records: list[dict]) -> dict:
        """run_summary.json's `held_out`: every evaluation of the whole run (metrics.jsonl's held-out records) and the best one."""
        scores = [{"step": r.get("step"), **{k.removeprefix(HELD_OUT_PREFIX): v for k, v in r.items() if k.startswith(HELD_OUT_PREFIX)},
                   "seconds": r.get("time/held_out_s")} for r in records if any(k.startswith(HELD_OUT_PREFIX) for k in r)]
        return {"task": self.spec.task, "items": len(self.items), "every": self.spec.every, "scores": scores,
                "best": {**self.best, "path": str(self.output_dir / BEST)} if self.best else None,
                **({"stopped": self.stopped} if self.stopped else {})}


def _tokenizer(trainer):
    """The tokenizer of the trainer's processing class (a processor's, for vision-language models)."""
    processing = trainer.processing_class
    return getattr(processing, "tokenizer", processing)


def _outcomes(records: list[dict]) -> dict[str, dict[str, bool]]:
    return {metric: {r["id"]: bool(r[metric]) for r in records} for metric in HELD_OUT_METRICS}


def _line(record: dict, step: int) -> str:
    """One log line: `held-out step 20: strict 34.0%, loose 51.0% (vs step 0: loose 3 fixed / 9 broken, p = 0.15) [12.1 s]`."""
    parts = [f"{m} {100 * record[f'{HELD_OUT_PREFIX}{m}']:.1f}%" for m in HELD_OUT_METRICS]
    parts += [f"{k.removeprefix(HELD_OUT_PREFIX)} {100 * v:.1f}%" for k, v in record.items() if k.startswith(f"{HELD_OUT_PREFIX}pass@")]
    changes = [f"{m} {record[f'{HELD_OUT_PREFIX}{m}_fixed']} fixed / {record[f'{HELD_OUT_PREFIX}{m}_broken']} broken, "
               f"p = {record[f'{HELD_OUT_PREFIX}{m}_p']:.2g}" for m in HELD_OUT_METRICS if f"{HELD_OUT_PREFIX}{m}_p" in record]
    versus = f" (vs step 0: {'; '.join(changes)})" if changes else ""
    return f"held-out step {step}: {', '.join(parts)} on {record[f'{HELD_OUT_PREFIX}n']} items{versus} [{record['time/held_out_s']:.1f} s]"
