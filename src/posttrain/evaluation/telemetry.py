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
    ("completions/mean_length", "completion length"),
    ("entropy", "entropy"),
    ("kl", "KL"),
    ("clip_ratio/region_mean", "clip ratio"),
    ("loss", "loss"),
]


@dataclass
class RunMetrics:
    name: str
    path: Path
    records: list[dict]
    beta: float | None

    @property
    def max_step(self) -> int:
        return max((r["step"] for r in self.records), default=0)


def load_run(path: Path) -> RunMetrics:
    metrics = path / "metrics.jsonl"
    if not metrics.is_file():
        raise UserError(f"{path} is not a posttrain run directory: it has no metrics.jsonl")
    records = [json.loads(line) for line in metrics.read_text().splitlines() if line.strip()]
    records = [r for r in records if "train_runtime" not in r]  # the final summary record
    config = path / "trl_config.json"
    beta = json.loads(config.read_text()).get("beta") if config.is_file() else None
    return RunMetrics(path.name, path, records, beta)


def metric_keys(runs: list[RunMetrics]) -> list[tuple[str, str]]:
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


def _cell(value: float | None) -> str:
    if value is None:
        return "-"
    if value == 0:
        return "0"
    return f"{value:.4g}" if abs(value) >= 1e-3 else f"{value:.2e}"


def render(runs: list[RunMetrics], bins: int) -> str:
    max_step = max(run.max_step for run in runs)
    if max_step == 0:
        raise UserError("the runs have no logged steps yet")
    ranges = step_ranges(max_step, bins)
    lines = [f"# Training telemetry ({len(runs)} run(s), steps 1-{max_step} in {len(ranges)} ranges)", ""]
    names = [run.name for run in runs]
    for key, label in metric_keys(runs):
        columns = {run.name: binned(run, key, ranges) for run in runs}
        if all(v is None for col in columns.values() for v in col):
            continue
        lines += [f"## {label}", "", "| steps | " + " | ".join(names) + " |", "|---|" + "---|" * len(names)]
        for i, (lo, hi) in enumerate(ranges):
            lines.append(f"| {lo}-{hi} | " + " | ".join(_cell(columns[n][i]) for n in names) + " |")
        lines.append("")
    notes = [f"- {run.name}: beta={run.beta}, no KL term and no KL metric (TRL logs none with beta=0)" for run in runs if run.beta == 0]
    if notes:
        lines += ["Notes:", *notes, ""]
    return "\n".join(lines)


def plot(runs: list[RunMetrics], path: Path) -> None:
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        raise UserError("--plot needs matplotlib: pip install matplotlib (or pip install 'posttrain[plot]')") from None
    keys = [(k, label) for k, label in metric_keys(runs) if any(k in r for run in runs for r in run.records)]
    cols = 3
    rows = math.ceil(len(keys) / cols)
    fig, axes = plt.subplots(rows, cols, figsize=(5 * cols, 3.2 * rows), squeeze=False)
    for ax, (key, label) in zip(axes.flat, keys):
        for run in runs:
            points = [(r["step"], r[key]) for r in run.records if isinstance(r.get(key), (int, float))]
            if points:
                ax.plot(*zip(*points), label=run.name)
        ax.set_title(label)
        ax.set_xlabel("step")
    for ax in list(axes.flat)[len(keys):]:
        ax.axis("off")
    axes.flat[0].legend()
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)
