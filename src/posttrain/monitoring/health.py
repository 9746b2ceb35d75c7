"""Run health: does this run's own telemetry say it cannot be learning, or is learning the wrong thing?

    flags = check_health(records, rl=True, window=10, max_completion_length=32)
    print(render_health(flags))

``records`` are metrics.jsonl records (``{"step": N, "loss": ..., "reward": ...}``), the same
stream the trainer writes as it goes; the training callback runs these checks after every log,
`posttrain report` runs them again on the file. Standard library only: pure functions of the
records, tested on synthetic streams (tests/monitoring/test_health.py).

A *windowed* flag fires when its condition held on every logged record covering at least
``window`` consecutive training steps; its step range is where it held (the longest such streak
first seen). Records that lack the metric (GRPO logs no reward on steps that reuse a generation)
neither extend nor break a streak. The thresholds are below, one per flag, with their reasons;
`FLAGS` is the table docs/guides/grpo.md and ``training.stop_on`` use.
"""

from __future__ import annotations

import math
from collections import deque
from dataclasses import asdict, dataclass

from .held_out_fall import METRICS, PREFIX, HeldOutFall

ALL_RUN_FLAGS = ("nonfinite_loss", "zero_learning_rate", "held_out_regression")  # every algorithm checks these; the rest are RL-only

# name -> (what it means, the threshold in words). Thresholds are the module constants below.
FLAGS: dict[str, tuple[str, str]] = {
    "no_learning_signal": ("every group's completions earned the same reward, so every advantage is 0 and GRPO has "
                           "nothing to learn from (loss and grad-norm ~0)",
                           "frac_reward_zero_std >= 0.999 (or reward_std = 0) for `window` steps"),
    "all_truncated": ("every completion hit max_completion_length: answers are cut off, so rewards that need a closed "
                      "answer cannot be earned", "completions/clipped_ratio >= 0.999 for `window` steps, or for every step "
                      "of a run shorter than that"),
    "length_collapse": ("completions shrank to a fraction of their starting length (the policy found that saying "
                        "little pays)", "mean completion length < 0.25 x its mean over the first `window` steps, for `window` steps"),
    "length_explosion": ("completions grew far past their starting length",
                         "mean completion length > 4 x its mean over the first `window` steps, for `window` steps"),
    "entropy_collapse": ("the policy became (nearly) deterministic: sampled groups stop differing and exploration ends",
                         "entropy < 0.1 x its mean over the first `window` steps and < 0.05 nats/token, for `window` steps"),
    "kl_past_bound": ("the policy moved far from the reference model",
                      "kl > 1.0 nats/token (TRL's per-token estimate; beta=0.04 runs typically stay below 0.1)"),
    "reward_divergence": ("one reward rose while another stayed flat or fell: the policy may be earning the easy "
                          "reward without the one you care about (format up, correctness flat)",
                          "over the run, one reward's mean rose >= 0.2 (first vs last `window` steps) while another's "
                          "changed by <= +0.02"),
    "empty_think": ("completions open a <think> block and leave it empty: the reasoning was dropped",
                    "share of completions with an empty <think></think> >= 0.5 for `window` steps"),
    "no_tool_calls": ("tools are offered but the policy never calls one: the rollouts are single-turn and the tools "
                      "teach nothing", "tools/use_rate == 0 for `window` steps"),
    "tool_error_rate": ("most tool calls fail (the tool raises, times out or crashes, the model names a tool that does not "
                        "exist or passes bad arguments): the model mostly reads error messages",
                        "tools/error_rate >= 0.5 for `window` steps"),
    "tool_timeouts": ("a tool call ran past training.tool_timeout and was stopped; every such call costs the whole timeout",
                      "any tools/timeouts > 0"),
    "nonfinite_loss": ("the loss or grad-norm became NaN or infinite: training is broken from there on",
                       "any logged loss/grad_norm NaN or +-inf"),
    "zero_learning_rate": ("the learning rate is 0, so the weights cannot move",
                           "learning_rate == 0 on a logged step other than the last (a linear schedule reaches 0 exactly at the end) "
                           "or a warm-up's first (it starts at 0 and rises)"),
    "held_out_regression": ("the model answers the held-out task (the recipe's held_out section) worse than it did at step 0: "
                            "training is making it worse at what you measure",
                            "held-out strict or loose accuracy below step 0's on the same items, exact McNemar p < 0.05 / "
                            "(2 x the planned evaluations): at most a 5% chance over the whole run that a model whose accuracy "
                            "never changed raises it (Bonferroni); the flag says when accuracy recovers"),
}

ZERO_STD_SHARE = 0.999
CLIPPED_SHARE = 0.999
LENGTH_COLLAPSE = 0.25
LENGTH_EXPLOSION = 4.0
ENTROPY_FRACTION = 0.1
ENTROPY_FLOOR = 0.05
KL_BOUND = 1.0
REWARD_RISE = 0.2
REWARD_FLAT = 0.02
EMPTY_THINK_SHARE = 0.5
TOOL_ERROR_SHARE = 0.5  # half the calls failing: the tool, or how the model calls it, is broken, not unlucky
HELD_OUT_PREFIX, HELD_OUT_METRICS = PREFIX, METRICS  # keys of the records posttrain.algorithms.held_out logs

EMPTY_THINK_KEY = "health/empty_think_frac"  # logged by posttrain's GRPO reward wrapper


@dataclass(frozen=True)
class Flag:
    name: str
    first_step: int
    last_step: int
    detail: str

    def render(self) -> str:
        steps = f"step {self.first_step}" if self.first_step == self.last_step else f"steps {self.first_step}-{self.last_step}"
        return f"{self.name} ({steps}): {self.detail}"

    def as_dict(self) -> dict:
        return asdict(self)


def _number(value) -> float | None:
    """A metric value as a float; metrics.jsonl stores NaN/inf as the strings 'nan', 'inf'."""
    if isinstance(value, bool):
        return None
    if isinstance(value, (int, float)):
        return float(value)
    if isinstance(value, str):
        try:
            return float(value)
        except ValueError:
            return None
    return None


class _Streak:
    """The first run of consecutive values satisfying ``condition`` that covers >= ``window`` steps,
    extended while the condition holds, as values arrive one at a time; frozen once it breaks.
    Each value covers the steps after the previous record's step up to its own (logging_steps > 1
    averages over them), so a streak counts steps, not records."""

    def __init__(self, condition, window: int):
        self.condition, self.window = condition, window
        self.start = self.found = None
        self.run_min = self.run_max = None
        self.done = self.seen = False

    def add(self, first: int, step: int, value: float) -> None:
        self.seen = True
        if self.done:
            return
        if not self.condition(value):
            self.start = None
            self.done = self.found is not None
            return
        if self.start is None:
            self.start, self.run_min, self.run_max = first, value, value
        else:
            self.run_min, self.run_max = min(self.run_min, value), max(self.run_max, value)
        if self.found is None and step - self.start + 1 >= self.window or self.found is not None and self.found[0] == self.start:
            self.found = (self.start, step)

    def flag(self, name: str, detail) -> list["Flag"]:
        """The flag (detail gets (min, max) of the values over its steps), or nothing."""
        return [Flag(name, *self.found, detail(self.run_min, self.run_max))] if self.found else []


class _AgainstStart:
    """Streaks whose condition compares each value with the mean over the series' first ``window``
    steps (its baseline). Until those steps are all in, values wait (at most ``window`` of them) and a
    query replays them against the baseline so far; after that, they stream into the streaks."""

    def __init__(self, window: int, conditions: dict):
        self.window, self.conditions = window, conditions  # name -> condition(value, base)
        self.first_step = None
        self.total = self.count = self.entries = 0
        self.waiting: list[tuple[int, int, float]] = []
        self.streaks: dict[str, _Streak] | None = None

    def add(self, first: int, step: int, value: float) -> None:
        self.entries += 1
        if self.first_step is None:
            self.first_step = step
        if step <= self.first_step + self.window - 1:
            self.total, self.count = self.total + value, self.count + 1
        if self.streaks is not None:
            for streak in self.streaks.values():
                streak.add(first, step, value)
            return
        self.waiting.append((first, step, value))
        if step >= self.first_step + self.window - 1:  # every baseline step is in: the baseline is final
            self.streaks, self.waiting = self._replay(), []

    @property
    def base(self) -> float | None:
        return self.total / self.count if self.count else None

    def _replay(self) -> dict[str, _Streak]:
        base = self.base
        streaks = {name: _Streak(lambda v, c=condition: c(v, base), self.window) for name, condition in self.conditions.items()}
        for entry in self.waiting:
            for streak in streaks.values():
                streak.add(*entry)
        return streaks

    def flags(self, details: dict) -> list["Flag"]:
        if not self.base or self.entries <= 1:
            return []
        streaks = self.streaks if self.streaks is not None else self._replay()
        return [flag for name, streak in streaks.items() for flag in streak.flag(name, lambda lo, hi, n=name: details[n](lo, hi, self.base))]


class _Trend:
    """One reward's mean over its first and over its last ``window`` steps, for reward_divergence."""

    def __init__(self, window: int):
        self.window = window
        self.first_step = self.last_step = None
        self.early_total = self.early_count = 0
        self.recent: deque = deque()  # (step, value) of the last `window` steps

    def add(self, step: int, value: float) -> None:
        if self.first_step is None:
            self.first_step = step
        self.last_step = step
        if step <= self.first_step + self.window - 1:
            self.early_total, self.early_count = self.early_total + value, self.early_count + 1
        self.recent.append((step, value))
        while self.recent[0][0] < step - self.window + 1:
            self.recent.popleft()

    def long_enough(self) -> bool:
        return self.first_step is not None and self.last_step - self.first_step + 1 >= 2 * self.window

    def change(self) -> tuple[float, float]:
        return self.early_total / self.early_count, sum(v for _, v in self.recent) / len(self.recent)


class _Occurrences:
    """First and last step of the values that satisfy ``condition``, their count and their sum."""

    def __init__(self, condition):
        self.condition = condition
        self.first = self.last = self.first_value = None
        self.count, self.total = 0, 0.0

    def add(self, step: int, value: float) -> None:
        if self.condition(value):
            if self.first is None:
                self.first, self.first_value = step, value
            self.last, self.count, self.total = step, self.count + 1, self.total + value


class HealthTracker:
    """Every health check, fed one metrics record at a time: constant work per record (the windowed
    checks keep their streak, the baselines their first window, reward_divergence each reward's
    first and last window), so a run of N logged steps costs O(N) in all, not O(N^2).

        tracker = HealthTracker(rl=True, window=10)
        for record in records:
            tracker.add(record)
        tracker.flags()   # what check_health(records) returns

    A resumed run feeds the records before its checkpoint first (metrics.jsonl), so baselines and
    streaks continue where they were instead of starting again from the resumed segment.
    """

    def __init__(self, *, rl: bool = True, window: int = 10, max_completion_length: int | None = None,
                 run_steps: int | None = None):
        if window < 1:
            raise ValueError(f"window must be at least 1 step, got {window}")
        self.rl, self.window, self.max_completion_length = rl, window, max_completion_length  # rl: the algorithm's row (recipe/algorithms.py)
        self.previous = 0  # the step of the last record: the next value covers the steps after it
        w = window
        self.streaks = {
            "frac_reward_zero_std": _Streak(lambda v: v >= ZERO_STD_SHARE, w), "reward_std": _Streak(lambda v: v == 0, w),
            "completions/clipped_ratio": _Streak(lambda v: v >= CLIPPED_SHARE, w), "kl": _Streak(lambda v: v > KL_BOUND, 1),
            EMPTY_THINK_KEY: _Streak(lambda v: v >= EMPTY_THINK_SHARE, w), "tools/use_rate": _Streak(lambda v: v == 0, w),
            "tools/error_rate": _Streak(lambda v: v >= TOOL_ERROR_SHARE, w),
        }
        self.set_run_steps(run_steps)
        self.lengths = _AgainstStart(w, {"length_collapse": lambda v, base: v < LENGTH_COLLAPSE * base,
                                         "length_explosion": lambda v, base: v > LENGTH_EXPLOSION * base})
        self.entropy = _AgainstStart(w, {"entropy_collapse": lambda v, base: v < ENTROPY_FRACTION * base and v < ENTROPY_FLOOR})
        self.trends: dict[str, _Trend] = {}
        self.timeouts = _Occurrences(lambda v: v > 0)
        self.nonfinite = {key: _Occurrences(lambda v: not math.isfinite(v)) for key in ("loss", "grad_norm")}
        self.zero_lr = _Occurrences(lambda v: v == 0)
        self.last_lr: tuple[int, float] | None = None  # the latest learning rate waits: a schedule may end at 0
        self.held_out = HeldOutFall()

    def set_run_steps(self, steps: int | None) -> None:
        """The run's planned length (TrainerState.max_steps). all_truncated's window is capped by it: in a run
        shorter than the window, every completion of every step cut off is the run's whole story, not too
        little evidence. The other windowed flags keep their window (a short run's flat rewards are no verdict)."""
        if steps is not None and steps > 0:
            self.streaks["completions/clipped_ratio"].window = min(self.window, steps)

    def add(self, record: dict) -> None:
        if "train_runtime" in record or any(k.startswith("eval_") for k in record):
            return
        if any(k.startswith(HELD_OUT_PREFIX) for k in record):
            self.held_out.add(record)
            return
        step = record.get("step", 0)
        first = self.previous + 1
        for key, value in record.items():
            value = _number(value)
            if value is None:
                continue
            if key in self.streaks:
                self.streaks[key].add(first, step, value)
            elif key == "completions/mean_length":
                self.lengths.add(first, step, value)
            elif key == "entropy":
                self.entropy.add(first, step, value)
            elif key.startswith("rewards/") and key.endswith("/mean"):
                self.trends.setdefault(key, _Trend(self.window)).add(step, value)
            elif key == "tools/timeouts":
                self.timeouts.add(step, value)
            elif key in self.nonfinite:
                self.nonfinite[key].add(step, value)
            elif key == "learning_rate":
                if self.last_lr is not None and value <= self.last_lr[1]:  # a 0 the schedule then rises from is a warm-up's start
                    self.zero_lr.add(*self.last_lr)
                self.last_lr = (step, value)
        self.previous = max(self.previous, step)

    def flags(self) -> list[Flag]:
        """Every flag raised so far, in FLAGS order. RL flags apply to RL runs only (rl=True)."""
        flags = self._rl_flags() if self.rl else []
        for key, bad in self.nonfinite.items():
            if bad.count:
                flags.append(Flag("nonfinite_loss", bad.first, bad.last, f"{key} was {bad.first_value} at step {bad.first} "
                                  f"({bad.count} logged step(s)); lower the learning rate, check the data, use fp32/bf16 not fp16."))
                break
        if (fall := self.held_out.fired()) is not None:
            flags.append(Flag("held_out_regression", fall[0], fall[0], fall[1]))
        if self.zero_lr.count:
            flags.append(Flag("zero_learning_rate", self.zero_lr.first, self.zero_lr.last, f"learning_rate was 0 on "
                              f"{self.zero_lr.count} logged step(s); check learning_rate, warmup and the scheduler."))
        order = list(FLAGS)
        return sorted(flags, key=lambda f: (order.index(f.name), f.first_step))

    def _rl_flags(self) -> list[Flag]:
        s, window = self.streaks, self.window
        if s["frac_reward_zero_std"].seen:
            flags = s["frac_reward_zero_std"].flag("no_learning_signal", lambda lo, hi: f"all groups' rewards identical (frac_reward_zero_std "
                              f"{lo:.3g}-{hi:.3g}); loss and gradients carry no signal. Give the model a reward it can sometimes "
                              f"earn (start from an SFT model, add partial credit) or raise num_generations/temperature.")
        else:
            flags = s["reward_std"].flag("no_learning_signal", lambda lo, hi: "reward_std 0 on every logged step: no group had "
                                         "different rewards.")
        cap = f" (max_completion_length={self.max_completion_length})" if self.max_completion_length else ""
        flags += s["completions/clipped_ratio"].flag("all_truncated", lambda lo, hi: f"every completion was cut at the length "
                                                     f"limit{cap}; raise max_completion_length or teach the model to stop (SFT on "
                                                     f"finished answers first).")
        flags += self.lengths.flags({
            "length_collapse": lambda lo, hi, base: f"mean completion length {lo:.1f} tokens, down from {base:.1f} in the first {window} steps.",
            "length_explosion": lambda lo, hi, base: f"mean completion length {hi:.1f} tokens, up from {base:.1f} in the first {window} steps."})
        flags += self.entropy.flags({
            "entropy_collapse": lambda lo, hi, base: f"entropy {lo:.3g} nats/token, down from {base:.3g}; raise temperature or beta."})
        # One step is enough: a KL that high is worth seeing at once.
        flags += s["kl"].flag("kl_past_bound", lambda lo, hi: f"KL up to {hi:.3g} nats/token (> {KL_BOUND}); lower the learning "
                              f"rate or raise beta.")
        flags += self._reward_divergence()
        flags += s[EMPTY_THINK_KEY].flag("empty_think", lambda lo, hi: f"{100 * hi:.0f}% of completions had an empty "
                                         f"<think></think>; a format reward that pays for empty reasoning invites this (raise "
                                         f"beta, or pay only for non-empty think).")
        return flags + self._tool_flags()

    def _tool_flags(self) -> list[Flag]:
        """Runs with tools log tools/* (posttrain.algorithms.tool_use); the rest never raise these."""
        s = self.streaks
        flags = s["tools/use_rate"].flag("no_tool_calls", lambda lo, hi: "no rollout called a tool although tools are offered. "
                                         "Start from a model that calls them (SFT on tool-calling chats first: "
                                         "posttrain.data.synthetic writes some), check that the chat template renders the tools "
                                         "(the start-up log), or reward tool use.")
        flags += s["tools/error_rate"].flag("tool_error_rate", lambda lo, hi: f"{100 * lo:.0f}-{100 * hi:.0f}% of tool calls "
                                            "failed; the model reads error messages instead of results. Read the failing calls "
                                            "(the tool's own errors, timeouts, unknown tool names, bad arguments) and fix the "
                                            "tool or its docstring.")
        t = self.timeouts
        if t.count:
            flags.append(Flag("tool_timeouts", t.first, t.last, f"{int(t.total)} tool call(s) ran past training.tool_timeout and "
                              f"were stopped (on {t.count} logged step(s)); each costs the whole timeout. Make the tool bound "
                              "its own work, or raise training.tool_timeout if it is slow but sure to finish."))
        return flags

    def _reward_divergence(self) -> list[Flag]:
        if len(self.trends) < 2 or not all(t.long_enough() for t in self.trends.values()):
            return []  # too short to tell a trend from noise
        changes = {key.removeprefix("rewards/").removesuffix("/mean"): (*t.change(), t.first_step, t.last_step)
                   for key, t in sorted(self.trends.items())}
        out = []
        for up, (e_up, l_up, lo, hi) in changes.items():
            if l_up - e_up < REWARD_RISE:
                continue
            for other, (e_o, l_o, _, _) in changes.items():
                if other != up and l_o - e_o <= REWARD_FLAT:
                    trend = "fell" if l_o - e_o < -REWARD_FLAT else "stayed flat"
                    out.append(Flag("reward_divergence", lo, hi, f"{up} rose {e_up:.3g} -> {l_up:.3g} while {other} {trend} "
                                    f"({e_o:.3g} -> {l_o:.3g}); check that {up} cannot be earned without {other}."))
        return out


def check_health(records: list[dict], *, rl: bool = True, window: int = 10,
                 max_completion_length: int | None = None, run_steps: int | None = None) -> list[Flag]:
    """Every flag the records raise, in FLAGS order (a HealthTracker fed all of them). RL flags apply to RL runs only (rl=True).
    run_steps: the run's planned length, when known (HealthTracker.set_run_steps)."""
    tracker = HealthTracker(rl=rl, window=window, max_completion_length=max_completion_length, run_steps=run_steps)
    for record in records:
        tracker.add(record)
    return tracker.flags()


def render_health(flags: list[Flag], *, title: str = "health", rl: bool = True) -> str:
    """The health section: one line per flag, or a line saying none fired and what was checked."""
    if not flags:
        checks = list(FLAGS) if rl else list(ALL_RUN_FLAGS)
        return f"{title}: no flag raised (checked: {', '.join(checks)})"
    return "\n".join([f"{title}: {len(flags)} flag(s)", *(f"  - {f.render()}" for f in flags)])


def empty_think_share(completions: list) -> float:
    """Share of completions holding an empty ``<think></think>`` block (whitespace only).

    >>> empty_think_share(["<think></think><answer>4</answer>", "<think>2+2</think><answer>4</answer>", "4"])
    0.3333333333333333
    """
    import re

    pattern = re.compile(r"<think>\s*</think>")
    texts = [_text(c) for c in completions]
    return sum(bool(pattern.search(t)) for t in texts) / len(texts) if texts else 0.0


def _text(completion) -> str:
    if isinstance(completion, str):
        return completion
    if isinstance(completion, list):  # chat completions: [{"role": "assistant", "content": ...}]
        return "".join(m.get("content", "") if isinstance(m.get("content"), str) else "" for m in completion if isinstance(m, dict))
    return str(completion)
