"""Run health: does this run's own telemetry say it cannot be learning, or is learning the wrong thing?

    flags = check_health(records, algorithm="grpo", window=10, max_completion_length=32)
    print(render_health(flags))

``records`` are metrics.jsonl records (``{"step": N, "loss": ..., "reward": ...}``), the same
stream the trainer writes as it goes; the training callback runs these checks after every log,
`posttrain report` runs them again on the file. Standard library only: pure functions of the
records, tested on synthetic streams (tests/monitoring/test_health.py).

A *windowed* flag fires when its condition held on every logged record covering at least
``window`` consecutive training steps; its step range is where it held (the longest such streak
first seen). Records that lack the metric (GRPO logs no reward on steps that reuse a generation)
neither extend nor break a streak. The thresholds are below, one per flag, with their reasons;
`FLAGS` is the table the README and ``training.stop_on`` use.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass

RL_ALGORITHMS = ("grpo", "gspo")
ALL_RUN_FLAGS = ("nonfinite_loss", "zero_learning_rate")  # the flags every algorithm checks; the rest are RL-only

# name -> (what it means, the threshold in words). Thresholds are the module constants below.
FLAGS: dict[str, tuple[str, str]] = {
    "no_learning_signal": ("every group's completions earned the same reward, so every advantage is 0 and GRPO has "
                           "nothing to learn from (loss and grad-norm ~0)",
                           "frac_reward_zero_std >= 0.999 (or reward_std = 0) for `window` steps"),
    "all_truncated": ("every completion hit max_completion_length: answers are cut off, so rewards that need a closed "
                      "answer cannot be earned", "completions/clipped_ratio >= 0.999 for `window` steps"),
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
                           "learning_rate == 0 on a logged step other than the last (a linear schedule reaches 0 exactly at the end)"),
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


def _series(records: list[dict], key: str) -> list[tuple[int, int, float]]:
    """(first step covered, step, value) per record that has ``key``: a record at step s covers the
    steps after the previous record's step up to s (logging_steps > 1 averages over them)."""
    out, previous = [], 0
    for r in records:
        step = r.get("step", 0)
        value = _number(r.get(key))
        if value is not None:
            out.append((previous + 1, step, value))
        previous = max(previous, step)
    return out


def _streak(series, condition, window: int) -> tuple[int, int] | None:
    """The first run of consecutive records satisfying ``condition`` that covers >= window steps,
    extended to where the condition stops holding; None if there is none."""
    start = None
    found = None
    for first, step, value in series:
        if condition(value):
            start = first if start is None else start
            if found is None and step - start + 1 >= window:
                found = (start, step)
            elif found is not None and found[0] == start:
                found = (start, step)
        else:
            start = None
            if found is not None:
                return found
    return found


def _baseline(series, window: int) -> float | None:
    early = [v for first, step, v in series if step <= series[0][1] + window - 1] if series else []
    return sum(early) / len(early) if early else None


def _mean_over(series, lo: int, hi: int) -> float | None:
    values = [v for _, step, v in series if lo <= step <= hi]
    return sum(values) / len(values) if values else None


def check_health(records: list[dict], *, algorithm: str = "grpo", window: int = 10,
                 max_completion_length: int | None = None) -> list[Flag]:
    """Every flag the records raise, in FLAGS order. RL flags apply to GRPO/GSPO only."""
    if window < 1:
        raise ValueError(f"window must be at least 1 step, got {window}")
    records = [r for r in records if "train_runtime" not in r and not any(k.startswith("eval_") for k in r)]
    flags: list[Flag] = []
    rl = algorithm in RL_ALGORITHMS

    def windowed(name, key, condition, detail):
        series = _series(records, key)
        hit = _streak(series, condition, window)
        if hit:
            values = [v for _, s, v in series if hit[0] <= s <= hit[1]]
            flags.append(Flag(name, hit[0], hit[1], detail(values)))

    if rl:
        if _series(records, "frac_reward_zero_std"):
            windowed("no_learning_signal", "frac_reward_zero_std", lambda v: v >= ZERO_STD_SHARE,
                     lambda vs: f"all groups' rewards identical (frac_reward_zero_std {min(vs):.3g}-{max(vs):.3g}); "
                                f"loss and gradients carry no signal. Give the model a reward it can sometimes earn "
                                f"(start from an SFT model, add partial credit) or raise num_generations/temperature.")
        else:
            windowed("no_learning_signal", "reward_std", lambda v: v == 0,
                     lambda vs: "reward_std 0 on every logged step: no group had different rewards.")
        cap = f" (max_completion_length={max_completion_length})" if max_completion_length else ""
        windowed("all_truncated", "completions/clipped_ratio", lambda v: v >= CLIPPED_SHARE,
                 lambda vs: f"every completion was cut at the length limit{cap}; raise max_completion_length or teach "
                            f"the model to stop (SFT on finished answers first).")
        lengths = _series(records, "completions/mean_length")
        base = _baseline(lengths, window)
        if base and len(lengths) > 1:
            windowed("length_collapse", "completions/mean_length", lambda v: v < LENGTH_COLLAPSE * base,
                     lambda vs: f"mean completion length {min(vs):.1f} tokens, down from {base:.1f} in the first {window} steps.")
            windowed("length_explosion", "completions/mean_length", lambda v: v > LENGTH_EXPLOSION * base,
                     lambda vs: f"mean completion length {max(vs):.1f} tokens, up from {base:.1f} in the first {window} steps.")
        entropy = _series(records, "entropy")
        base = _baseline(entropy, window)
        if base and len(entropy) > 1:
            windowed("entropy_collapse", "entropy", lambda v: v < ENTROPY_FRACTION * base and v < ENTROPY_FLOOR,
                     lambda vs: f"entropy {min(vs):.3g} nats/token, down from {base:.3g}; raise temperature or beta.")
        # One step is enough: a KL that high is worth seeing at once.
        kl = _series(records, "kl")
        kl_hit = _streak(kl, lambda v: v > KL_BOUND, 1)
        if kl_hit:
            top = max(v for _, s, v in kl if kl_hit[0] <= s <= kl_hit[1])
            flags.append(Flag("kl_past_bound", *kl_hit, f"KL up to {top:.3g} nats/token (> {KL_BOUND}); lower the learning rate or raise beta."))
        flags += _reward_divergence(records, window)
        windowed("empty_think", EMPTY_THINK_KEY, lambda v: v >= EMPTY_THINK_SHARE,
                 lambda vs: f"{100 * max(vs):.0f}% of completions had an empty <think></think>; a format reward that "
                            f"pays for empty reasoning invites this (raise beta, or pay only for non-empty think).")
        flags += _tool_flags(records, windowed)
    for key in ("loss", "grad_norm"):
        bad = [(first, s, v) for first, s, v in _series(records, key) if not math.isfinite(v)]
        if bad:
            flags.append(Flag("nonfinite_loss", bad[0][1], bad[-1][1], f"{key} was {bad[0][2]} at step {bad[0][1]} "
                              f"({len(bad)} logged step(s)); lower the learning rate, check the data, use fp32/bf16 not fp16."))
            break
    lr = _series(records, "learning_rate")
    zero = [s for _, s, v in lr[:-1] if v == 0]
    if zero:
        flags.append(Flag("zero_learning_rate", zero[0], zero[-1], f"learning_rate was 0 on {len(zero)} logged step(s); "
                          "check learning_rate, warmup and the scheduler."))
    order = list(FLAGS)
    return sorted(flags, key=lambda f: (order.index(f.name), f.first_step))


def _tool_flags(records: list[dict], windowed) -> list[Flag]:
    """Runs with tools log tools/* (posttrain.algorithms.tool_use); the rest never raise these."""
    windowed("no_tool_calls", "tools/use_rate", lambda v: v == 0,
             lambda vs: "no rollout called a tool although tools are offered. Start from a model that calls them (SFT on "
                        "tool-calling chats first: posttrain.data.synthetic writes some), check that the chat template "
                        "renders the tools (the start-up log), or reward tool use.")
    windowed("tool_error_rate", "tools/error_rate", lambda v: v >= TOOL_ERROR_SHARE,
             lambda vs: f"{100 * min(vs):.0f}-{100 * max(vs):.0f}% of tool calls failed; the model reads error messages "
                        "instead of results. Read the failing calls (the tool's own errors, timeouts, unknown tool names, "
                        "bad arguments) and fix the tool or its docstring.")
    timeouts = _series(records, "tools/timeouts")
    hit = [(first, step, v) for first, step, v in timeouts if v > 0]
    if not hit:
        return []
    total = int(sum(v for _, _, v in hit))
    return [Flag("tool_timeouts", hit[0][1], hit[-1][1], f"{total} tool call(s) ran past training.tool_timeout and were "
                 f"stopped (on {len(hit)} logged step(s)); each costs the whole timeout. Make the tool bound its own work, "
                 "or raise training.tool_timeout if it is slow but sure to finish.")]


def _reward_divergence(records: list[dict], window: int) -> list[Flag]:
    keys = sorted({k for r in records for k in r if k.startswith("rewards/") and k.endswith("/mean")})
    if len(keys) < 2:
        return []
    changes = {}
    for key in keys:
        series = _series(records, key)
        if not series or series[-1][1] - series[0][1] + 1 < 2 * window:
            return []  # too short to tell a trend from noise
        first_lo, last_hi = series[0][1], series[-1][1]
        early = _mean_over(series, first_lo, first_lo + window - 1)
        late = _mean_over(series, last_hi - window + 1, last_hi)
        changes[key.removeprefix("rewards/").removesuffix("/mean")] = (early, late, first_lo, last_hi)
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


def render_health(flags: list[Flag], *, title: str = "health", algorithm: str = "grpo") -> str:
    """The health section: one line per flag, or a line saying none fired and what was checked."""
    if not flags:
        checks = list(FLAGS) if algorithm in RL_ALGORITHMS else list(ALL_RUN_FLAGS)
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
