"""The run folder's README.md: a model card that says what this run is and how to make it again.

TRL writes its stock card ("a fine-tuned version of [None]") into output_dir at every save; when the
run finishes posttrain replaces it with this one: base model, algorithm, data (rows kept per
dataset), steps, final metrics, health, and the command that reproduces the run (with the posttrain
version and git commit). The YAML header is model-card metadata the hub reads (`library_name`,
`tags`, `pipeline_tag`, and `base_model` only when it is a hub id: a local path there is invalid).

Also here: file modes. safetensors writes weights through a private temporary file (mode 0600);
everything else in a run folder is written 0644 (under the usual umask), so a run shared with a
group or served from a web folder had every file readable except its weights.
"""

from __future__ import annotations

import json
import os
import re
from pathlib import Path

HUB_ID = re.compile(r"^[A-Za-z0-9][\w.-]*/[\w.-]+$")


def _umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask


def readable_like_the_rest(folder: Path) -> None:
    """Give the files in `folder` that were written private (0600) the mode every other file gets (0666 & ~umask)."""
    mode = 0o666 & ~_umask()
    for path in Path(folder).iterdir():
        try:
            if path.is_file() and not path.is_symlink() and (path.stat().st_mode & 0o777) == 0o600 and mode != 0o600:
                path.chmod(mode)
        except OSError:
            pass


def _final_metrics(records: list[dict]) -> dict:
    """The last logged value of each training metric (eval_* too), keyed by name."""
    out: dict = {}
    for record in records:
        if "train_runtime" in record:
            continue
        for key, value in record.items():
            if key != "step" and isinstance(value, (int, float)) and not isinstance(value, bool):
                out[key] = (record.get("step"), value)
    keep = ("loss", "eval_loss", "reward", "kl", "entropy", "mean_token_accuracy", "learning_rate", "grad_norm")
    return {k: out[k] for k in keep if k in out} | {k: v for k, v in out.items() if k.startswith(("rewards/", "eval_")) and k.endswith(("mean", "loss"))}


def _fmt(value) -> str:
    return f"{value:.4g}" if isinstance(value, float) else str(value)


def render(summary: dict, recipe, records: list[dict], provenance: dict, adapter: bool) -> str:
    model = recipe.model
    training = recipe.training
    base = model.base_model_name
    tags = ["posttrain", training.algorithm, "trl"] + (["lora", "peft"] if adapter else [])
    task = "text-classification" if training.algorithm == "reward" else "text-generation"  # a reward model scores text
    meta = {"library_name": "peft" if adapter else "transformers", "tags": tags, "pipeline_tag": task}
    if HUB_ID.match(base):
        meta["base_model"] = base
    header = "---\n" + "".join(f"{k}: {json.dumps(v)}\n" for k, v in meta.items()) + "---\n"
    lines = [header, f"# {Path(training.output_dir).name}", "",
             f"{'A LoRA adapter' if adapter else 'A model'} trained by posttrain {provenance.get('posttrain', '?')} with "
             f"{training.algorithm.upper()} (TRL {provenance.get('trl', '?')}).", "",
             "| | |", "|---|---|",
             f"| base model | `{base}` |",
             f"| algorithm | {training.algorithm} |",
             f"| steps | {summary.get('global_step')} ({len(summary.get('segments', []))} segment(s), "
             f"{summary.get('wall_seconds')} s of training) |"]
    if summary.get("train_loss") is not None:
        lines.append(f"| training loss (mean over the run) | {_fmt(summary['train_loss'])} |")
    lines += ["", "## Data", ""] + [f"- {line}" for line in summary.get("data", [])]
    metrics = _final_metrics(records)
    if metrics:
        lines += ["", "## Final metrics", "", "| metric | value | at step |", "|---|---|---|"]
        lines += [f"| {k} | {_fmt(v)} | {step} |" for k, (step, v) in metrics.items()]
    lines += _held_out(summary.get("held_out"))
    health = summary.get("health") or []
    lines += ["", "## Health", ""]
    steps = lambda f: f"step {f.get('first_step')}" if f.get("first_step") == f.get("last_step") else f"steps {f.get('first_step')}-{f.get('last_step')}"
    lines += [f"- **{flag.get('name')}** ({steps(flag)}): {flag.get('detail', '')}" for flag in health] or ["No health flag was raised."]
    if summary.get("stopped_by"):
        lines.append(f"- stopped early by training.stop_on: {summary['stopped_by']}")
    lines += ["", "## Reproduce", "", "```bash", provenance.get("command", "posttrain train ..."), "```", "",
              f"posttrain {provenance.get('posttrain', '?')}" + (f", git commit {provenance['git_commit']}" if provenance.get("git_commit") else "")
              + f"; the resolved recipe is `resolved_recipe.yaml`, the TRL config `trl_config.json`, every log record "
              "`metrics.jsonl`, the summary `run_summary.json`.", ""]
    return "\n".join(lines)


def _held_out(held_out: dict | None) -> list[str]:
    """The held-out task's scores at each evaluation (recipe's held_out section), and the best model."""
    if not held_out or not held_out.get("scores"):
        return []
    pct = lambda v: "-" if v is None else f"{100 * v:.1f}%"
    change = lambda s, m: f"{s[m + '_fixed']} fixed / {s[m + '_broken']} broken (p = {float(s[m + '_p']):.2g})" if m + "_p" in s else "-"
    lines = ["", "## Held-out accuracy", "", f"Task `{held_out['task']}`, {held_out['items']} items, greedy, scored while training "
             "(the items and scorer of `posttrain eval`); changes are paired against step 0 (exact McNemar).", "",
             "| step | strict | loose | strict vs step 0 | loose vs step 0 |", "|---|---|---|---|---|"]
    lines += [f"| {s['step']} | {pct(s.get('strict'))} | {pct(s.get('loose'))} | {change(s, 'strict')} | {change(s, 'loose')} |"
              for s in held_out["scores"]]
    best = held_out.get("best")
    if best:
        lines += ["", f"The best evaluation (by {best['metric']} accuracy) was step {best['step']}: its model is in `best/`."]
    return lines


def write_run_card(output_dir: Path, summary: dict, recipe, records: list[dict], provenance: dict) -> Path:
    adapter = (Path(output_dir) / "adapter_config.json").is_file()
    path = Path(output_dir) / "README.md"
    path.write_text(render(summary, recipe, records, provenance, adapter))
    return path
