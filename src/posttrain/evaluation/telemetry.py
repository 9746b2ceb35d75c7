"""Training telemetry side by side: what each run logged, averaged over step ranges.

Reads `metrics.jsonl` (written by every posttrain run) and `trl_config.json` from run directories.
A GRPO run with beta=0 logs no KL at all; the table says so instead of leaving a blank, which is
how a user sees at a glance that a run trained without its KL term.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass
from pathlib import Path

from posttrain.errors import UserError

# (metric key in metrics.jsonl, label); per-reward means are added per run.
CORE_METRICS = [
    ("reward", "reward"),
    ("frac_reward_zero_std", "groups with identical rewards (share)"),
    # runs with training.refill_zero_variance_groups (posttrain.algorithms.refill); absent elsewhere
    ("refill/draws", "extra generation batches (refill)"),
    ("refill/groups_short", "groups without signal in the batch (refill ran out)"),
    ("completions/mean_length", "completion length"),
    ("entropy", "entropy"),
    ("kl", "KL"),
    ("clip_ratio/region_mean", "clip ratio"),
    ("loss", "loss"),
    # runs with tools (posttrain.algorithms.tool_use); absent elsewhere, so their tables are skipped
    ("tools/use_rate", "tool-use rate (rollouts with a call)"),
    ("tools/turns_per_rollout", "turns per rollout"),
    ("tools/calls", "tool calls"),
    ("tools/error_rate", "tool error rate"),
    ("tools/timeouts", "tool timeouts"),
    ("speed/tokens_per_s", "tokens/s (non-padding)"),
    ("speed/samples_per_s", "samples/s"),
    ("time/generation_s", "generation s/step"),
    ("speed/generation_tokens_per_s", "generation tokens/s"),
    ("time/scoring_s", "scoring s/step"),
    ("time/training_s", "training s/step"),
    ("speed/mfu", "MFU (% of peak)"),
]


@dataclass
class RunMetrics:
    name: str
    path: Path
    records: list[dict]
    beta: float | None
    summary: dict | None = None  # run_summary.json, once the run has finished
    algorithm: str | None = None
    window: int = 10
    rl: bool = False  # an RL run: its RL health checks apply

    @property
    def max_step(self) -> int:
        return max((r["step"] for r in self.records), default=0)


def load_run(path: Path) -> RunMetrics:
    metrics = path / "metrics.jsonl"
    if not metrics.is_file():
        raise UserError(f"{path} is not a posttrain run directory: it has no metrics.jsonl")
    records, torn = [], 0
    for line in metrics.read_text().splitlines():
        try:
            record = json.loads(line) if line.strip() else None
        except ValueError:  # a line cut off when the run was killed mid-write
            torn += 1
            continue
        if isinstance(record, dict):
            records.append(record)
    if torn:
        import sys

        print(f"note: {metrics}: skipped {torn} unreadable line(s) (a write cut off when the run was killed)", file=sys.stderr)
    if not records:
        raise UserError(f"{metrics} holds no readable records")
    records = [r for r in records if "train_runtime" not in r]  # the final summary record
    config = path / "trl_config.json"
    trl = json.loads(config.read_text()) if config.is_file() else {}
    summary_path = path / "run_summary.json"
    summary = json.loads(summary_path.read_text()) if summary_path.is_file() else None
    algorithm = (summary or {}).get("algorithm") or ("grpo" if "num_generations" in trl else None)
    # run_summary.json says whether the run was RL; before it finishes, RL trainers' configs have num_generations
    rl = bool((summary or {}).get("rl", "num_generations" in trl))
    return RunMetrics(path.name, path, records, trl.get("beta"), summary, algorithm, _health_window(path), rl)


def _health_window(path: Path) -> int:
    """training.health_window from the run's resolved_recipe.yaml (10 when absent)."""
    try:
        import yaml

        recipe = yaml.safe_load((path / "resolved_recipe.yaml").read_text()) or {}
        return int(recipe.get("training", {}).get("health_window") or 10)
    except (OSError, ValueError, TypeError, AttributeError, ImportError):
        return 10


def run_health(run: RunMetrics) -> list:
    """The run's health flags, recomputed from metrics.jsonl (so a run still going, or one that
    crashed, gets them too) with the run's own window."""
    from posttrain.monitoring.health import check_health

    max_len = max_steps = None
    config = run.path / "trl_config.json"
    if config.is_file():
        trl = json.loads(config.read_text())
        max_len, max_steps = trl.get("max_completion_length"), trl.get("max_steps")
    if not isinstance(max_steps, int) or max_steps <= 0:  # an epoch-based run: its length once it finished
        max_steps = (run.summary or {}).get("global_step")
    return check_health(run.records, rl=run.rl, window=run.window, max_completion_length=max_len,
                        run_steps=max_steps if isinstance(max_steps, int) else None)


def render_health_and_speed(runs: list[RunMetrics]) -> str:
    """Per run: the health section and the speed summary (from run_summary.json when finished)."""
    from posttrain.monitoring.health import render_health

    lines = ["## health", ""]
    for run in runs:
        lines.append(render_health(run_health(run), title=f"- {run.name}", rl=run.rl).replace("\n  - ", "\n    - "))
        if run.summary and run.summary.get("stopped_by"):
            lines.append(f"    stopped early by training.stop_on: {run.summary['stopped_by']} at step {run.summary.get('global_step')}")
    lines += ["", "## speed (whole run)", "", "| run | tokens/s | samples/s | s/step | generation | scoring | training | MFU | peak | held-out scoring (s, all) |",
              "|---|---|---|---|---|---|---|---|---|---|"]
    for run in runs:
        speed = (run.summary or {}).get("speed") or {}
        cells = [_cell(speed.get(k)) for k in ("tokens_per_s", "samples_per_s", "step_s", "generation_s", "scoring_s", "training_s")]
        mfu = speed.get("mfu")
        cells.append(_cell(mfu, percent=True))
        cells.append(speed.get("peak", "-"))
        cells.append(_cell(speed.get("held_out_s_total")))
        lines.append(f"| {run.name} | " + " | ".join(cells) + " |")
    lines += ["", "tokens/s: non-padding tokens trained per second of step time; generation/scoring/training: seconds per "
              "step (RL); MFU: training FLOPs (6N per token, 4N + 2N_trainable with LoRA) over the peak; held-out scoring: "
              "every held-out evaluation's seconds together (between steps, in no step's time).", ""]
    return "\n".join(lines + render_rl_step(runs) + render_held_out(runs))


def render_held_out(runs: list[RunMetrics]) -> list[str]:
    """Every held-out evaluation of the runs that scored one: accuracy, pass@k, the paired change since step 0, the
    training clock when it ran (evaluation/train_clock.py) and its own cost."""
    from .train_clock import held_out_ticks

    lines = []
    for run in runs:
        evaluations = [r for r in run.records if isinstance(r.get("held_out/strict"), (int, float))]
        if not evaluations:
            continue
        ticks = held_out_ticks(run.records, run.summary)
        clock = [f"{'~' if t.estimated else ''}{t.seconds / 60:.1f}" for t in ticks] if len(ticks) == len(evaluations) else ["-"] * len(evaluations)
        passes = sorted({k for r in evaluations for k in r if k.startswith("held_out/pass@")})
        header = ["step", "training min", "strict", "loose", *(k.removeprefix("held_out/") for k in passes), "strict vs step 0",
                  "loose vs step 0", "seconds"]
        lines += [f"## held-out accuracy: {run.name} ({evaluations[0].get('held_out/n')} items, greedy)", "",
                  "| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
        for r, minutes in zip(evaluations, clock):
            changes = [f"{r[f'held_out/{m}_fixed']} fixed / {r[f'held_out/{m}_broken']} broken, p = {float(r[f'held_out/{m}_p']):.2g}"
                       if f"held_out/{m}_p" in r else "-" for m in ("strict", "loose")]
            cells = [str(r["step"]), minutes, *(_cell(r.get(k), percent=True) for k in ("held_out/strict", "held_out/loose", *passes)), *changes,
                     _cell(r.get("time/held_out_s"))]
            lines.append("| " + " | ".join(cells) + " |")
        best = ((run.summary or {}).get("held_out") or {}).get("best")
        lines += ["", f"Best: step {best['step']} by {best['metric']} accuracy, saved in {best['path']}." if best else ""]
        if any(t.estimated for t in ticks):
            lines.append("Training minutes marked ~ are estimated: the run predates time/train_s, so each is its mean step "
                         "(run_summary.json's speed.step_s) times the step, plus what ran before training and RFT's rounds.")
        lines.append("")
    return lines


def render_rl_step(runs: list[RunMetrics]) -> list[str]:
    """Where an RL step's seconds go, for the finished RL runs: generation (and its tokens/s), scoring,
    the no-grad log-prob passes (reference model, old policy), the policy's forward + backward, the
    optimizer. Training time is what is left of the step after generation and scoring."""
    rows = []
    for run in runs:
        speed = (run.summary or {}).get("speed") or {}
        if speed.get("generation_s") is None:
            continue
        parts = [speed.get(k) for k in ("training_s", "logprobs_s", "optimizer_s")]
        forward_backward = None if None in parts else max(0.0, parts[0] - parts[1] - parts[2])
        cells = [speed.get("step_s"), speed.get("generation_s"), speed.get("generation_tokens_per_s"), speed.get("scoring_s"),
                 speed.get("logprobs_s"), forward_backward, speed.get("optimizer_s")]
        rows.append(f"| {run.name} | " + " | ".join(_cell(c) for c in cells) + " |")
    if not rows:
        return []
    return ["## where an RL step goes (seconds per step, whole run)", "",
            "| run | step | generation | generation tokens/s | scoring | log-probs (reference, old policy) | policy forward + backward | optimizer |",
            "|---|---|---|---|---|---|---|---|", *rows, ""]


def metric_keys(runs: list[RunMetrics]) -> list[tuple[str, str]]:
    """The binned tables' metrics: the core ones with each reward's mean after the reward."""
    keys = list(CORE_METRICS)
    per_reward = sorted({k for run in runs for r in run.records for k in r if k.startswith("rewards/") and k.endswith("/mean")})
    return keys[:1] + [(k, k.removeprefix("rewards/").removesuffix("/mean") + " reward") for k in per_reward] + keys[1:]


def step_ranges(max_step: int, bins: int) -> list[tuple[int, int]]:
    """[1, max_step] cut into `bins` contiguous ranges of (nearly) equal size."""
    bins = max(1, min(bins, max_step))
    edges = [round(i * max_step / bins) for i in range(bins + 1)]
    return [(edges[i] + 1, edges[i + 1]) for i in range(bins)]


def binned(run: RunMetrics, key: str, ranges) -> list[float | None]:
    out = []
    for lo, hi in ranges:
        values = [r[key] for r in run.records if lo <= r["step"] <= hi and isinstance(r.get(key), (int, float))]
        out.append(sum(values) / len(values) if values else None)
    return out


# The held-out evaluations' accuracies (algorithms/held_out.py): one record per evaluation, so they get their own
# table (every evaluation, with its paired change since step 0) and their own panels in the plot, not binned rows.
HELD_OUT_METRICS = [("held_out/strict", "held-out strict accuracy (%)"), ("held_out/loose", "held-out loose accuracy (%)")]

# Logged as a fraction (of the peak; of the items); every table and plot shows a percentage.
PERCENT_KEYS = {"speed/mfu", "held_out/strict", "held_out/loose"}


def _cell(value: float | None, percent: bool = False) -> str:
    if value is None:
        return "-"
    if percent:
        return f"{100 * value:.3g}%"
    if value == 0:
        return "0"
    return f"{value:.4g}" if abs(value) >= 1e-3 else f"{value:.2e}"


def render(runs: list[RunMetrics], bins: int) -> str:
    """Each metric's mean over each run's steps cut into `bins` parts. Every run is cut on its own, so a
    5-step run next to an 80-step one still shows its trend; the rows then name parts, and a line says
    which steps each run's parts hold."""
    if max(run.max_step for run in runs) == 0:
        raise UserError("the runs have no logged steps yet")
    ranges = {run.name: step_ranges(run.max_step, bins) for run in runs}
    shared = len({tuple(r) for r in ranges.values()}) == 1
    parts = max(len(r) for r in ranges.values())
    names = [run.name for run in runs]
    if shared:
        lines = [f"# Training telemetry ({len(runs)} run(s), steps 1-{runs[0].max_step} in {parts} ranges)", ""]
        rows = [f"{lo}-{hi}" for lo, hi in ranges[names[0]]]
    else:
        lines = [f"# Training telemetry ({len(runs)} run(s), each run's steps in {parts} parts of its own)", "",
                 "Steps in each part: " + "; ".join(f"{name} {', '.join(f'{lo}-{hi}' for lo, hi in ranges[name])}" for name in names), ""]
        rows = [f"{i + 1}/{parts}" for i in range(parts)]
    for key, label in metric_keys(runs):
        columns = {run.name: binned(run, key, ranges[run.name]) for run in runs}
        if all(v is None for col in columns.values() for v in col):
            continue
        lines += [f"## {label}", "", f"| {'steps' if shared else 'part'} | " + " | ".join(names) + " |", "|---|" + "---|" * len(names)]
        for i, row in enumerate(rows):
            cells = [_cell(columns[n][i] if i < len(columns[n]) else None, key in PERCENT_KEYS) for n in names]
            lines.append(f"| {row} | " + " | ".join(cells) + " |")
        lines.append("")
    notes = [f"- {run.name}: beta={run.beta}, no KL term and no KL metric (TRL logs none with beta=0)" for run in runs if run.beta == 0]
    if notes:
        lines += ["Notes:", *notes, ""]
    lines.append(render_health_and_speed(runs))
    return "\n".join(lines)


def figure(runs: list[RunMetrics]):
    """Every metric's curve per run, one panel per metric. Each run keeps one colour in every panel
    (assigned from the run's position, not from the runs that happen to have the panel's metric), and
    one figure legend names them all: a run missing from a panel cannot shift the others' colours."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
        from matplotlib.lines import Line2D
    except ImportError:
        raise UserError("--plot needs matplotlib: pip install matplotlib (or pip install 'posttrain[plot]')") from None
    from .train_clock import held_out_ticks

    keys = [(k, label) for k, label in HELD_OUT_METRICS + metric_keys(runs) if any(k in r for run in runs for r in run.records)]
    clocks = {run.name: {t.step: t.seconds / 60 for t in held_out_ticks(run.records, run.summary)} for run in runs}
    # time to accuracy: held-out accuracy against the training clock too, so runs whose steps cost differently compare
    held = [(k, label, "step") for k, label in keys if k in dict(HELD_OUT_METRICS)]
    timed = [(k, f"{label} by training time", "time") for k, label, _ in held] if any(clocks.values()) else []
    keys = held + timed + [(k, label, "step") for k, label in keys if k not in dict(HELD_OUT_METRICS)]
    cycle = plt.rcParams["axes.prop_cycle"].by_key()["color"]
    colours = {run.name: cycle[i % len(cycle)] for i, run in enumerate(runs)}
    cols = 3
    rows = max(1, math.ceil(len(keys) / cols))
    fig, axes = plt.subplots(rows, cols, figsize=(5 * cols, 3.2 * rows + 0.4), squeeze=False)
    for ax, (key, label, x) in zip(axes.flat, keys):
        for run in runs:
            scale = 100 if key in PERCENT_KEYS else 1
            where = (lambda r: r["step"]) if x == "step" else (lambda r: clocks[run.name].get(r["step"]))
            points = [(where(r), scale * r[key]) for r in run.records if isinstance(r.get(key), (int, float)) and where(r) is not None]
            if points:  # held-out accuracy: a few evaluations, each drawn as a point
                ax.plot(*zip(*points), label=run.name, color=colours[run.name], marker="o" if key.startswith("held_out/") else None)
        ax.set_title(label)
        ax.set_xlabel("step" if x == "step" else "training minutes (held-out scoring left out)")
        if key.startswith("held_out/"):
            ax.set_ylim(0, 100)  # accuracy on its whole scale: a few points of noise should look like a few points
    for ax in list(axes.flat)[len(keys):]:
        ax.axis("off")
    handles = [Line2D([], [], color=colours[run.name], label=run.name) for run in runs]
    fig.legend(handles=handles, loc="upper center", ncol=min(len(runs), 4), frameon=False)
    fig.tight_layout(rect=(0, 0, 1, 1 - 0.4 / (3.2 * rows + 0.4)))
    return fig


def plot(runs: list[RunMetrics], path: Path) -> None:
    fig = figure(runs)  # the install hint when matplotlib is missing
    import matplotlib.pyplot as plt

    fig.savefig(path, dpi=100)
    plt.close(fig)
