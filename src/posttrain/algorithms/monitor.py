"""The run watching itself: speed metrics and health checks added to every log record as it happens.

`RunMonitor` runs first among the callbacks (`run.monitor_first`), so what it adds to a log record
(``speed/*``, ``time/*``, ``health/*``) lands in metrics.jsonl and reaches the trackers. Every record
goes into a `HealthTracker` (`posttrain.monitoring.health`: constant work per record, and on resume
the checkpoint's earlier records go in first); it prints each flag the first time it fires and,
when the flag is in ``training.stop_on``, stops the run and saves a checkpoint there.
At the end it prints the health section; `summary()` goes into run_summary.json (with the whole
run's tool counts in runs with tools: `tools/*` come from `posttrain.algorithms.tool_use.ToolCounts`).

`StepTimers` is filled by the GRPO trainer's wrapped generation, reward and log-prob methods
(`attach_timers`) and by the optimizer-step callbacks: seconds spent generating, scoring, in the
no-grad log-prob forwards (reference model, old policy) and in the optimizer, and the share of
empty <think> blocks.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field

from transformers import TrainerCallback

from posttrain.monitoring.health import EMPTY_THINK_KEY, HELD_OUT_PREFIX, HealthTracker, empty_think_share, render_health
from posttrain.monitoring.speed import flops_per_token, mfu


@dataclass
class StepTimers:
    generation_s: float = 0.0
    scoring_s: float = 0.0
    logprobs_s: float = 0.0  # no-grad log-prob forwards: the reference model (beta > 0), the old policy (off-policy steps)
    optimizer_s: float = 0.0  # optimizer.step() (gradient clipping and the backward pass are not in it)
    empty_think: list = field(default_factory=list)
    decoded_tokens: int = 0  # tokens the policy generated (to its first stop token), and the seconds `generate` took
    decode_s: float = 0.0

    def add_decoded(self, tokens: int, seconds: float) -> None:
        self.decoded_tokens += tokens
        self.decode_s += seconds

    def take(self) -> dict:
        """Seconds per part and the mean empty-think share (or None) since the last take."""
        out = {"generation_s": self.generation_s, "scoring_s": self.scoring_s, "logprobs_s": self.logprobs_s,
               "optimizer_s": self.optimizer_s, "decoded_tokens": self.decoded_tokens, "decode_s": self.decode_s,
               "empty_think": sum(self.empty_think) / len(self.empty_think) if self.empty_think else None}
        self.generation_s = self.scoring_s = self.logprobs_s = self.optimizer_s = self.decode_s = 0.0
        self.decoded_tokens = 0
        self.empty_think = []
        return out


def _sync(tensor) -> None:
    """Wait for a GPU's queued work so that a timer measures the computation, not its launch."""
    if getattr(getattr(tensor, "device", None), "type", "cpu") == "cuda":
        import torch

        torch.cuda.synchronize(tensor.device)


def attach_timers(trainer, timers: StepTimers) -> None:
    """Time TRL's GRPOTrainer._generate (generation), _calculate_rewards (scoring) and the no-grad
    calls of _get_per_token_logps_and_entropies (the reference model's and the old policy's log-probs;
    the loss's own call runs with gradients and stays in training time) on this trainer instance;
    the reward call also measures empty <think> blocks in the completions it scores.
    All are TRL 1.16 private methods (posttrain/internals.py): a missing one stops the run
    (exit 2, naming it) instead of silently logging no split."""
    from posttrain.internals import require, returned

    generate = require(trainer, "_generate")
    rewards = require(trainer, "_calculate_rewards")
    logprobs = require(trainer, "_get_per_token_logps_and_entropies")

    def timed_generate(*args, **kwargs):
        started = time.perf_counter()
        try:
            return generate(*args, **kwargs)
        finally:
            timers.generation_s += time.perf_counter() - started

    def timed_rewards(inputs, prompts, completions, *args, **kwargs):
        started = time.perf_counter()
        try:
            return rewards(inputs, prompts, completions, *args, **kwargs)
        finally:
            timers.scoring_s += time.perf_counter() - started
            timers.empty_think.append(empty_think_share(completions))

    trainer._generate = timed_generate
    trainer._calculate_rewards = timed_rewards
    import torch

    def timed_logprobs(*args, **kwargs):
        if torch.is_grad_enabled():
            return logprobs(*args, **kwargs)
        started = time.perf_counter()
        out = logprobs(*args, **kwargs)
        _sync(returned(trainer, "_get_per_token_logps_and_entropies", out)["per_token_logps"])
        timers.logprobs_s += time.perf_counter() - started
        return out

    trainer._get_per_token_logps_and_entropies = timed_logprobs


class RunMonitor(TrainerCallback):
    def __init__(self, *, rl: bool, window: int, stop_on: list[str], max_completion_length: int | None,
                 samples_per_step: int, peak: float | None, peak_source: str,
                 timers: StepTimers | None = None, tools=None, log=print, history=None):
        self.rl, self.window, self.stop_on = rl, window, set(stop_on)
        self.max_completion_length = max_completion_length
        self.flops_per_token = 0  # set at on_train_begin from the model the trainer really trains (PEFT-wrapped or not)
        self.samples_per_step, self.peak, self.peak_source = samples_per_step, peak, peak_source
        self.timers = timers
        self.tools = tools  # posttrain.algorithms.tool_use.ToolCounts in runs with tools
        self.tool_totals: dict[str, int] = {}  # the whole run's tool counts, for run_summary.json
        self.log = log
        self.history = history  # metrics.jsonl: the records before a checkpoint this run resumes from
        self.health = HealthTracker(rl=rl, window=window, max_completion_length=max_completion_length)
        self.flags: list = []
        self._announced: set[str] = set()
        self.stopped_by: str | None = None
        self._step_started = None
        self._interval_s = 0.0
        self._interval_steps = 0
        self._last_tokens: float | None = None
        self.totals = {"step_s": 0.0, "steps": 0, "tokens": 0.0, "token_s": 0.0, "generation_s": 0.0, "scoring_s": 0.0,
                       "logprobs_s": 0.0, "optimizer_s": 0.0, "decoded_tokens": 0, "decode_s": 0.0, "mfu_s": 0.0,
                       "held_out_s": 0.0}

    # -- timing -----------------------------------------------------------------------------
    def on_train_begin(self, args, state, control, **kwargs):
        self._last_tokens = 0.0 if state.global_step == 0 else None  # after a resume, the first interval is skipped
        self.health.set_run_steps(state.max_steps)  # a run shorter than the window still gets all_truncated
        if state.global_step > 0:
            self._resume_health(state.global_step)
        model = kwargs.get("model")
        if model is not None:
            params = sum(p.numel() for p in model.parameters())
            trainable = sum(p.numel() for p in model.parameters() if p.requires_grad)
            self.flops_per_token = flops_per_token(params, trainable)

    def _resume_health(self, step: int) -> None:
        """Continue the health checks where the checkpoint left them: its records (metrics.jsonl up to
        `step`) go in first, so baselines (first-window lengths, entropy, rewards) and streaks span the
        whole run. Flags they raise were reported before the checkpoint and are not reported, nor acted
        on, again."""
        import json

        if self.history is None or not self.history.is_file():
            return
        for line in self.history.read_text().splitlines():
            try:
                record = json.loads(line) if line.strip() else None
            except ValueError:
                continue
            if isinstance(record, dict) and record.get("step", 0) <= step:
                self.health.add(record)
        self.flags = self.health.flags()
        self._announced = {flag.name for flag in self.flags}

    def on_step_begin(self, args, state, control, **kwargs):
        self._step_started = time.perf_counter()

    def on_pre_optimizer_step(self, args, state, control, **kwargs):
        if self.timers is not None:
            self._optimizer_started = time.perf_counter()

    def on_optimizer_step(self, args, state, control, **kwargs):
        started = getattr(self, "_optimizer_started", None)
        if self.timers is not None and started is not None:
            self.timers.optimizer_s += time.perf_counter() - started
            self._optimizer_started = None

    def on_step_end(self, args, state, control, **kwargs):
        if self._step_started is not None:
            self._interval_s += time.perf_counter() - self._step_started
            self._interval_steps += 1
            self._step_started = None

    # -- every log record -------------------------------------------------------------------
    def on_log(self, args, state, control, logs=None, **kwargs):
        if not logs or "train_runtime" in logs or any(k.startswith("eval_") for k in logs):
            return
        if any(k.startswith(HELD_OUT_PREFIX) for k in logs):  # a held-out evaluation's own record (algorithms/held_out.py)
            self.totals["held_out_s"] += logs.get("time/held_out_s", 0.0)
            return self._check_health(logs, state, control)
        self._add_speed(logs, state)
        if self.tools is not None:
            counts = self.tools.take()  # tools/* since the last record, when a generation happened
            logs.update(counts)
            for key in ("calls", "errors", "timeouts", "crashes", "truncated", "environment_errors", "cut_off"):
                self.tool_totals[key] = self.tool_totals.get(key, 0) + counts.get(f"tools/{key}", 0)
        return self._check_health(logs, state, control)

    def _check_health(self, logs: dict, state, control):
        """Feed the record to the health checks; print each new flag, and stop on the ones in stop_on."""
        self.health.add({"step": state.global_step, **logs})
        self.flags = self.health.flags()
        seen = self._announced
        for flag in self.flags:
            if flag.name not in seen:
                seen.add(flag.name)
                if state.is_world_process_zero:
                    self.log(f"health: {flag.render()}")
                if flag.name in self.stop_on and self.stopped_by is None:
                    self.stopped_by = flag.name
                    control.should_training_stop = True
                    control.should_save = True
                    if state.is_world_process_zero:
                        self.log(f"stopping at step {state.global_step} (training.stop_on: {flag.name}); "
                                 f"a checkpoint is saved here")
        self._announced = seen
        return control

    def _add_speed(self, logs: dict, state) -> None:
        seconds, steps = self._interval_s, self._interval_steps
        self._interval_s, self._interval_steps = 0.0, 0
        parts = self.timers.take() if self.timers is not None else None
        # MFU's seconds: the whole step, or in RL the training part (generation and scoring are not 6N work)
        mfu_seconds = max(0.0, seconds - parts["generation_s"] - parts["scoring_s"]) if parts is not None else seconds
        tokens = logs.get("num_tokens")
        if not isinstance(tokens, (int, float)):
            tokens = state.num_input_tokens_seen or None
        if seconds > 0 and steps:
            logs["speed/samples_per_s"] = round(self.samples_per_step * steps / seconds, 4)
            self.totals["step_s"] += seconds
            self.totals["steps"] += steps
            if tokens is not None and self._last_tokens is not None and tokens >= self._last_tokens:
                trained = tokens - self._last_tokens
                logs["speed/tokens_per_s"] = round(trained / seconds, 2)
                self.totals["tokens"] += trained
                self.totals["token_s"] += seconds
                self.totals["mfu_s"] += mfu_seconds
                value = mfu(self.flops_per_token, trained / mfu_seconds, self.peak) if self.flops_per_token and mfu_seconds > 0 else None
                if value is not None:
                    logs["speed/mfu"] = round(value, 6)
        if tokens is not None:
            self._last_tokens = float(tokens)
        if parts is not None:
            generation, scoring, empty = parts["generation_s"], parts["scoring_s"], parts["empty_think"]
            if steps:
                logs["time/generation_s"] = round(generation / steps, 4)
                logs["time/scoring_s"] = round(scoring / steps, 4)
                logs["time/training_s"] = round(max(0.0, seconds - generation - scoring) / steps, 4)
                logs["time/logprobs_s"] = round(parts["logprobs_s"] / steps, 4)  # part of training_s
                logs["time/optimizer_s"] = round(parts["optimizer_s"] / steps, 4)  # part of training_s
                for key in ("generation_s", "scoring_s", "logprobs_s", "optimizer_s", "decoded_tokens", "decode_s"):
                    self.totals[key] += parts[key]
                if parts["decode_s"] > 0:
                    logs["speed/generation_tokens_per_s"] = round(parts["decoded_tokens"] / parts["decode_s"], 2)
            if empty is not None:
                logs[EMPTY_THINK_KEY] = round(empty, 4)

    def on_train_end(self, args, state, control, **kwargs):
        if state.is_world_process_zero:
            self.log(render_health(self.flags, rl=self.rl))

    # -- run_summary.json ---------------------------------------------------------------------
    def summary(self) -> dict:
        t = self.totals
        speed = {"peak": self.peak_source}
        if t["steps"]:
            speed["samples_per_s"] = round(self.samples_per_step * t["steps"] / t["step_s"], 4)
            speed["step_s"] = round(t["step_s"] / t["steps"], 4)
        if t["token_s"]:
            rate = t["tokens"] / t["token_s"]
            speed["tokens_per_s"] = round(rate, 2)
            if self.peak and self.flops_per_token and t["mfu_s"] > 0:
                speed["mfu"] = round(mfu(self.flops_per_token, t["tokens"] / t["mfu_s"], self.peak), 6)
        if self.timers is not None and t["steps"]:
            speed["generation_s"] = round(t["generation_s"] / t["steps"], 4)
            speed["scoring_s"] = round(t["scoring_s"] / t["steps"], 4)
            speed["training_s"] = round(max(0.0, t["step_s"] - t["generation_s"] - t["scoring_s"]) / t["steps"], 4)
            speed["logprobs_s"] = round(t["logprobs_s"] / t["steps"], 4)
            speed["optimizer_s"] = round(t["optimizer_s"] / t["steps"], 4)
            if t["decode_s"] > 0:
                speed["generation_tokens_per_s"] = round(t["decoded_tokens"] / t["decode_s"], 2)
        if t["held_out_s"]:  # not part of any step's time: the held-out evaluations run between steps
            speed["held_out_s_total"] = round(t["held_out_s"], 2)
        out = {"speed": speed, "health": [f.as_dict() for f in self.flags], "stopped_by": self.stopped_by}
        if self.tools is not None:
            out["tools"] = dict(self.tool_totals)
        return out
