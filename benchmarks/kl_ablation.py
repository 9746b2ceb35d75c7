"""The KL ablation, offline: one pre-trained tiny base, GRPO with and without the KL term, paired evaluation.

    python benchmarks/kl_ablation.py                    # the full experiment (CPU, no model hub)
    python benchmarks/kl_ablation.py --rebuild-base     # ... retraining the cached base
    python benchmarks/kl_ablation.py --fast --out DIR   # the same pipeline at toy sizes, in seconds (tests)
    python benchmarks/kl_ablation.py --split dev        # evaluate on the dev split (for tuning)
    python benchmarks/kl_ablation.py --betas 0 0.04 0.2 1.0 --seeds 0 1 2 [--reward gameable] --split dev
                                                        # dose-response over beta, several seeds per beta

Dose-response (--betas/--seeds): every arm is grpo-beta0.04.yaml with training.beta=B and
training.seed=S (named beta<B>-s<S>); compare gets one several-seed arm per beta
(`--arm beta<B>=arms/beta<B>-s0,...`) and reports per-seed and mean accuracy, spread, and the
pooled Cochran-Mantel-Haenszel test of every pair. --reward gameable swaps the rewards for
answer_match + 0.5 x kl_rewards:lenient_format (pays for an empty <think>) + 0.3 x
kl_rewards:brevity (pays for short answers): a setup a policy without KL can drift in. The
hypotheses and the decision rule are written down before any run in
benchmarks/results/kl_ablation/tuning.md.

Every stage is a `posttrain` command run as a subprocess; this script only writes data, chooses
overrides, times the stages and assembles the report. Nothing is trained here.

1. data      Arithmetic word problems (`posttrain.data.synthetic`, GSM8K's shape). The held-out set
             is exactly what `posttrain compare --task arithmetic --n N` evaluates (seed 1234); a dev
             set (seed 99) is for tuning. Training problems come from seed 0 with every held-out
             and dev question removed; the script checks the files it wrote and stops if one
             held-out question is in any of them.
2. base      `posttrain train` with recipes/demo/kl-ablation/base.yaml: `tiny:qwen2-2m` (built
             locally: byte-level BPE, digits as single tokens, random weights) learns the problems
             from chats with the evaluation's system prompt and chat template, 8 problems a chat;
             most answers free-form, a share written with <think>/<answer> tags. Cached in
             OUT/base-<hash of recipe, overrides and data>; --rebuild-base retrains.
3. arms      `posttrain train` with grpo-beta0.04.yaml, grpo-beta0.yaml (identical but for
             training.beta) and gspo.yaml, each from the same base.
4. compare   `posttrain compare` of base and every arm on the held-out problems: strict and loose
             accuracy, exact McNemar test for every pair.
5. telemetry `posttrain report` of the arms: reward, length, entropy, KL by step range, plot.
6. report    OUT/report.md (both tables, n, seeds, recipes, wall times), printed at the end
             (dose-response: OUT/report-SPLIT.md, compare-SPLIT/, accuracy-SPLIT.png).

Threads: the base and compare use every core (torch's default); the arms train --jobs at once
(default: one per core), each with its share of the cores. OMP_NUM_THREADS, when set, applies
to every stage instead. The report states which.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import platform
import random
import re
import shlex
import shutil
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict, dataclass, field
from datetime import datetime, timezone
from pathlib import Path

HERE = Path(__file__).resolve().parent
REPO = HERE.parent
RECIPES = REPO / "recipes" / "demo" / "kl-ablation"
ARM_RECIPES = {"grpo-beta0.04": "grpo-beta0.04.yaml", "grpo-beta0": "grpo-beta0.yaml", "gspo": "gspo.yaml"}

TRAIN_SEED = 0  # posttrain.data.synthetic seed of every training problem
HELDOUT_SEED = 1234  # the arithmetic task's generator seed (posttrain's default): the held-out set
DEV_SEED = 99  # a second held-out generator seed, used only for tuning (--split dev)
EVAL_SEED = 0  # compare --seed: which N items of the task, and sampling (greedy here)
TAG_SEED = 2  # which chat examples are written with <think>/<answer> tags
TRAINING_FILES = ("base", "grpo")  # data/NAME.jsonl that any stage trains on


@dataclass(frozen=True)
class Scale:
    """Sizes of one variant of the experiment; every training knob is a recipe override."""

    model_size: str  # tiny:qwen2-SIZE
    n_base: int  # training problems for the base
    turns: int  # problems per base chat (user/assistant turns after one system prompt)
    n_grpo: int  # GRPO/GSPO prompts (other training problems)
    n_eval: int  # held-out problems every arm answers
    max_new_tokens: int
    base: tuple[str, ...] = ()  # overrides of base.yaml
    arms: dict[str, tuple[str, ...]] = field(default_factory=dict)  # overrides per arm


FULL = Scale(model_size="2m", n_base=30_000, turns=8, n_grpo=2_000, n_eval=500, max_new_tokens=48)

FAST = Scale(
    model_size="1m", n_base=128, turns=8, n_grpo=32, n_eval=16, max_new_tokens=24,
    base=("training.max_steps=6", "training.per_device_train_batch_size=2", "training.warmup_steps=0",
          "training.save_steps=3"),
    arms={name: ("training.max_steps=" + ("4" if name == "gspo" else "3"), "training.num_generations=4",
                 "training.per_device_train_batch_size=8", "training.max_completion_length=16")
          for name in ARM_RECIPES},
)


# ---------------------------------------------------------------------------------------------
# data


def tagged(solution: str, answer: int) -> str:
    """A worked solution in the <think>/<answer> format the evaluation asks for."""
    work = solution.rsplit(" The answer is", 1)[0]
    return f"<think>{work}</think>\n<answer>{answer}</answer>"


def _write_jsonl(path: Path, rows: list[dict]) -> None:
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))


def _sha(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def build_data(out: Path, scale: Scale, tag_share: float, system_prompt: str | None = None) -> dict:
    """Write the training splits and the held-out record; return the manifest (also data/manifest.json).

    The base's chats open with the evaluation task's system prompt (MATH_SYSTEM_PROMPT), or with
    ``system_prompt``: then the held-out and dev items are also written as chats that open with it
    (heldout-chats.jsonl, dev-chats.jsonl: `posttrain compare --task custom --data ...`; the same items
    as `--task arithmetic`, asked with the other prompt), for GRPO's `data.system_prompt`."""
    from posttrain.data.synthetic import problems
    from posttrain.data.task_prompts import MATH_SYSTEM_PROMPT
    from posttrain.evaluation.tasks import load_task

    system = MATH_SYSTEM_PROMPT if system_prompt is None else system_prompt

    out.mkdir(parents=True, exist_ok=True)
    # Exactly the items `posttrain compare --task arithmetic --n N --seed 0 [--data-seed S]` answers.
    heldout = load_task("arithmetic", n=scale.n_eval, seed=EVAL_SEED, data_seed=HELDOUT_SEED)
    dev = load_task("arithmetic", n=scale.n_eval, seed=EVAL_SEED, data_seed=DEV_SEED)
    excluded = {item["question"] for item in heldout + dev}
    wanted = scale.n_base + scale.n_grpo
    draw = wanted + wanted // 10 + 100
    while True:  # seed 0 is one stream: a longer draw extends a shorter one
        pool, seen = [], set()
        for drawn, p in enumerate(problems(draw, TRAIN_SEED), 1):
            if p["question"] not in excluded and p["question"] not in seen:
                seen.add(p["question"])
                pool.append(p)
                if len(pool) == wanted:
                    break
        if len(pool) == wanted:
            break
        draw *= 2
    base, grpo = pool[: scale.n_base], pool[scale.n_base:]

    rng = random.Random(TAG_SEED)
    chats, n_tagged = [], 0
    for start in range(0, len(base), scale.turns):
        messages = [{"role": "system", "content": system}]
        for p in base[start: start + scale.turns]:
            tag = rng.random() < tag_share
            n_tagged += tag
            messages += [{"role": "user", "content": p["question"]},
                         {"role": "assistant", "content": tagged(p["solution"], p["answer"]) if tag else p["solution"]}]
        chats.append({"messages": messages})
    files = {
        "base": (out / "base.jsonl", chats),
        "grpo": (out / "grpo.jsonl", [{"question": p["question"], "answer": f"{p['solution']}\n#### {p['answer']}"} for p in grpo]),
        "heldout": (out / "heldout.jsonl", [{"id": i["id"], "question": i["question"], "answer": i["gold"]} for i in heldout]),
        "dev": (out / "dev.jsonl", [{"id": i["id"], "question": i["question"], "answer": i["gold"]} for i in dev]),
    }
    if system_prompt is not None:
        for name, items in (("heldout", heldout), ("dev", dev)):
            files[f"{name}-chats"] = (out / f"{name}-chats.jsonl", [
                {"id": i["id"], "prompt": [{"role": "system", "content": system}, {"role": "user", "content": i["question"]}],
                 "answer": i["gold"]} for i in items])
    for path, rows in files.values():
        _write_jsonl(path, rows)

    # The promise, checked on the files as written: no held-out (or dev) question in training data.
    training_text = "".join(files[name][0].read_text() for name in TRAINING_FILES)
    leaked = [q for q in sorted(excluded) if json.dumps(q)[1:-1] in training_text]  # as JSON writes it
    if leaked:
        raise SystemExit(f"data: {len(leaked)} held-out/dev question(s) found in the training files, e.g. {leaked[0]!r}")
    trained = {p["expression"] for p in pool}  # the computation, whatever the story around it
    manifest = {
        "seeds": {"train": TRAIN_SEED, "heldout": HELDOUT_SEED, "dev": DEV_SEED, "eval_shuffle": EVAL_SEED, "tags": TAG_SEED},
        "counts": {"base": len(base), "base_chats": len(chats), "base_tagged": n_tagged, "grpo": len(grpo),
                   "heldout": len(heldout), "dev": len(dev), "seed0_problems_drawn": drawn},
        "tag_share": tag_share,
        "system_prompt": system,
        "heldout_questions_in_training": len(leaked),  # 0, or the run stopped above
        "heldout_same_numbers_in_training": sum(i["expression"] in trained for i in heldout),
        "dev_same_numbers_in_training": sum(i["expression"] in trained for i in dev),
        "files": {name: {"path": str(path.relative_to(out.parent)), "sha256": _sha(path)} for name, (path, _) in files.items()},
    }
    (out / "manifest.json").write_text(json.dumps(manifest, indent=1) + "\n")
    return manifest


# ---------------------------------------------------------------------------------------------
# running posttrain


@dataclass
class Stage:
    name: str
    argv: list[str]  # posttrain arguments (no executable)
    seconds: float | None = None
    cached: bool = False
    threads: int | None = None  # OMP_NUM_THREADS for the stage (None: torch's default or the caller's)


def _path(path: Path) -> str:
    """A path as the stages get it: relative to the repository (their working directory) when inside it."""
    try:
        return str(path.relative_to(REPO))
    except ValueError:
        return str(path)


def _display(argv: list[str]) -> str:
    return "posttrain " + " ".join(shlex.quote(a) for a in argv)


def run_stage(stage: Stage, logs: Path, quiet: bool) -> Stage:
    """Run `python -m posttrain ARGV`, output to logs/NAME.log; exit with its tail if it fails."""
    logs.mkdir(parents=True, exist_ok=True)
    log = logs / f"{stage.name}.log"
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "HF_DATASETS_OFFLINE": "1", "TOKENIZERS_PARALLELISM": "false",
           # src: this checkout's posttrain; HERE: kl_rewards for --reward gameable
           "PYTHONPATH": os.pathsep.join(filter(None, [str(REPO / "src"), str(HERE), os.environ.get("PYTHONPATH")]))}
    if stage.threads and "OMP_NUM_THREADS" not in os.environ:
        env["OMP_NUM_THREADS"] = str(stage.threads)
    if not quiet:
        print(f"[{stage.name}] {_display(stage.argv)}", flush=True)
    start = time.perf_counter()
    with log.open("w") as f:
        code = subprocess.call([sys.executable, "-m", "posttrain", *stage.argv], cwd=REPO, stdout=f,
                               stderr=subprocess.STDOUT, env=env)
    stage.seconds = time.perf_counter() - start
    if code != 0:
        tail = log.read_text()[-3000:]
        raise SystemExit(f"[{stage.name}] failed with exit code {code} after {stage.seconds:.0f} s; log {log}:\n{tail}")
    if not quiet:
        print(f"[{stage.name}] done in {stage.seconds:.0f} s", flush=True)
    return stage


def recipe(name: str) -> str:
    return str((RECIPES / name).relative_to(REPO))


def base_stage(base_dir: Path, data: Path, scale: Scale) -> Stage:
    """`tiny:qwen2-SIZE` is built by posttrain itself (byte-level BPE with digits as single tokens,
    random weights, seed 0) and cached in ~/.cache/posttrain; the recipe trains it into the base."""
    return Stage("base", ["train", "--recipe", recipe("base.yaml"), f"model.base_model_name=tiny:qwen2-{scale.model_size}",
                          f"data.datasets[0].name={_path(data / 'base.jsonl')}",
                          f"training.output_dir={_path(base_dir / 'model')}", *scale.base])


def base_key(scale: Scale, manifest: dict) -> str:
    """What the base depends on: its recipe, the overrides, the model size and the data it trains on."""
    material = {
        "recipe": (RECIPES / "base.yaml").read_text(),
        "scale": [scale.model_size, list(scale.base)],
        "data": manifest["files"]["base"]["sha256"],
    }
    return hashlib.sha256(json.dumps(material, sort_keys=True).encode()).hexdigest()[:12]


GAMEABLE_REWARDS = ("training.rewards=[{name: answer_match, weight: 1.0}, {name: 'kl_rewards:lenient_format', weight: 0.5}, "
                    "{name: 'kl_rewards:brevity', weight: 0.3}]")


def beta_name(beta: float, seed: int) -> str:
    """``beta0.04-s1``: the run of one beta and one seed (a several-seed arm is ``beta0.04``)."""
    return f"beta{beta:g}-s{seed}"


def dose_stage(beta: float, seed: int, base: Path, data: Path, arms_dir: Path, scale: Scale, reward: str) -> Stage:
    """One run of the dose-response: grpo-beta0.04.yaml with training.beta and training.seed set."""
    name = beta_name(beta, seed)
    rewards = [GAMEABLE_REWARDS] if reward == "gameable" else []
    return Stage(name, ["train", "--recipe", recipe(ARM_RECIPES["grpo-beta0.04"]), f"model.base_model_name={_path(base)}",
                        f"data.datasets[0].name={_path(data / 'grpo.jsonl')}", f"training.output_dir={_path(arms_dir / name)}",
                        *scale.arms.get("grpo-beta0.04", ()), f"training.beta={beta:g}", f"training.seed={seed}", *rewards])


def arm_stage(name: str, base: Path, data: Path, arms_dir: Path, scale: Scale, seed: int = 0) -> Stage:
    seed_override = [f"training.seed={seed}"] if seed else []  # the recipes say 0
    return Stage(name, ["train", "--recipe", recipe(ARM_RECIPES[name]), f"model.base_model_name={_path(base)}",
                        f"data.datasets[0].name={_path(data / 'grpo.jsonl')}",
                        f"training.output_dir={_path(arms_dir / name)}", *scale.arms.get(name, ()), *seed_override])


def config_differences(a: Path, b: Path) -> dict[str, tuple]:
    """Keys of two runs' trl_config.json whose values differ (what really differed between arms)."""
    ca, cb = (json.loads((p / "trl_config.json").read_text()) for p in (a, b))
    return {k: (ca.get(k), cb.get(k)) for k in sorted(set(ca) | set(cb)) if ca.get(k) != cb.get(k)}


# ---------------------------------------------------------------------------------------------
# the report


def _demote(markdown: str, levels: int = 2) -> str:
    return re.sub(r"^(#+) ", lambda m: "#" * min(6, len(m[1]) + levels) + " ", markdown, flags=re.M)


def _minutes(seconds: float | None) -> str:
    return "-" if seconds is None else f"{seconds / 60:.1f} min ({seconds:.0f} s)"


def answer_styles(compare_dir: Path, arms: list[str], examples: int = 2) -> list[str]:
    """How each arm answers: tag use, empty reasoning (a reward hack), length, and a few answers verbatim."""
    lines = ["| arm | answers in the tag format | of those, empty `<think>` | mean tokens | "
             + " | ".join(f"held-out item {i + 1}" for i in range(examples)) + " |",
             "|---|---|---|---|" + "---|" * examples]
    for arm in arms:
        rows = [json.loads(line) for line in (compare_dir / "samples" / f"{arm}.jsonl").read_text().splitlines() if line.strip()]
        rows.sort(key=lambda r: r["id"])
        tagged_rows = [r for r in rows if r["format"] > 0]
        empty = sum(not r["completion"].split("<think>", 1)[1].split("</think>", 1)[0].strip() for r in tagged_rows)
        tokens = sum(r["completion_tokens"] or 0 for r in rows) / max(1, len(rows))
        shown = [f"`{r['completion'].strip()[:80]}`".replace("|", "\\|").replace("\n", "⏎") + f" (gold {r['gold']})"
                 for r in rows[:examples]]
        lines.append(f"| {arm} | {len(tagged_rows)}/{len(rows)} | {empty}/{len(tagged_rows)} | {tokens:.1f} | " + " | ".join(shown) + " |")
    return lines


def hardware(jobs: int, arm_threads: int) -> str:
    threads = os.environ.get("OMP_NUM_THREADS")
    threads = (f"{threads} per process (OMP_NUM_THREADS), {jobs} arm(s) at once" if threads else
               f"torch's default for the base and compare, {arm_threads} per arm with {jobs} arm(s) at once")
    cpu = platform.processor() or platform.machine()
    try:
        model = next((line.split(":", 1)[1].strip() for line in Path("/proc/cpuinfo").read_text().splitlines()
                      if line.startswith("model name")), cpu)
    except OSError:
        model = cpu
    return (f"{os.cpu_count()}-core CPU ({model}), {platform.system()} {platform.release()}; "
            f"torch threads: {threads}")


def write_report(out: Path, args, scale: Scale, manifest: dict, stages: list[Stage], base_dir: Path, arms: list[str],
                 total: float, arm_threads: int) -> Path:
    compare = json.loads((out / "compare" / "report.json").read_text())
    compare_md = (out / "compare" / "report.md").read_text()
    telemetry_md = (out / "telemetry.md").read_text()
    split = "held-out" if args.split == "heldout" else "dev (tuning split, not the held-out set)"
    data_seed = HELDOUT_SEED if args.split == "heldout" else DEV_SEED
    counts = manifest["counts"]
    lines = [
        f"# KL ablation: GRPO with and without the KL term, from one pre-trained tiny base{' (fast variant)' if args.fast else ''}",
        "",
        f"Measured {datetime.now(timezone.utc):%Y-%m-%d %H:%M} UTC on {hardware(args.jobs, arm_threads)}.",
        "",
        f"Command: `{' '.join(['python', 'benchmarks/kl_ablation.py', *sys.argv[1:]])}`; total wall time {_minutes(total)}.",
        "",
        "## Setup",
        "",
        f"- Evaluation: {split} split, `posttrain compare --task arithmetic --data-seed {data_seed} --n {compare['n']} "
        f"--seed {EVAL_SEED}`: n = {compare['n']} problems, the identical items for every arm, greedy decoding, "
        f"at most {scale.max_new_tokens} new tokens. strict = the single `<answer>` block equals the gold number "
        "(the `answer_match` reward); loose = the last number anywhere equals it.",
        f"- Held-out data: generator seed {HELDOUT_SEED} (dev: {DEV_SEED}); training data: seed {TRAIN_SEED} with every "
        f"held-out and dev question removed. Held-out questions found in training files: "
        f"{manifest['heldout_questions_in_training']} of {counts['heldout']} (checked on the written files). "
        f"{manifest['heldout_same_numbers_in_training']} of {counts['heldout']} held-out problems ask for a computation "
        "(same kind and numbers) that also occurs, in another story, in the training data.",
        f"- Training problems: {counts['base']} for the base, {scale.turns} a chat ({counts['base_tagged']} of them "
        f"answered in `<think>`/`<answer>` tags: --tag-share {manifest['tag_share']:g}, seed {TAG_SEED}; the rest "
        f"free-form), and {counts['grpo']} other ones as GRPO/GSPO prompts.",
        f"- Model: `tiny:qwen2-{scale.model_size}`, built locally by posttrain (byte-level BPE with digits as single "
        f"tokens, random weights), trained into the base `{base_dir.relative_to(out)}` (cached). "
        "Training seeds: `training.seed` 0 in every recipe"
        + (f", overridden to {args.arm_seed} for the arms (--arm-seed: a replication with other sampling)." if args.arm_seed else "."),
        "",
        "| stage | command | wall time |",
        "|---|---|---|",
    ]
    for stage in stages:
        note = " (cached)" if stage.cached else ""
        command = f"`{_display(stage.argv)}`" if stage.argv else "this script: data/*.jsonl, data/manifest.json"
        lines.append(f"| {stage.name} | {command} | {_minutes(stage.seconds)}{note} |")
    lines += ["", "Recipes: " + ", ".join(f"`{recipe(n)}`" for n in ["base.yaml", *(ARM_RECIPES[a] for a in arms)]) + "."]
    if {"grpo-beta0.04", "grpo-beta0"} <= set(arms):
        diff = config_differences(out / "arms" / "grpo-beta0.04", out / "arms" / "grpo-beta0")
        shown = ", ".join(f"`{k}` ({a!r} vs {b!r})" for k, (a, b) in diff.items() if k not in ("output_dir", "logging_dir"))
        lines += ["", f"The TRL configs the two GRPO arms ran with (`trl_config.json`) differ only in: {shown or 'nothing'}"
                      " (besides their output directories)."]
    lines += ["", "## Accuracy (posttrain compare)", "", _demote(compare_md.strip()), "",
              "![accuracy per arm](accuracy.png)", "",
              "### How each arm answers", "", *answer_styles(out / "compare", ["base", *arms]), "",
              "## Training telemetry of the arms (posttrain report)", "", _demote(telemetry_md.strip()), "",
              "![telemetry](telemetry.png)", ""]
    report = out / "report.md"
    report.write_text("\n".join(lines))
    summary = {"command": sys.argv, "total_seconds": total, "scale": asdict(scale), "split": args.split,
               "stages": [asdict(s) for s in stages], "base": str(base_dir), "manifest": manifest,
               "arms": compare["arms"], "comparisons": compare["comparisons"]}
    (out / "summary.json").write_text(json.dumps(summary, indent=1, default=str) + "\n")
    return report


def write_dose_report(out: Path, args, scale: Scale, stages: list[Stage], total: float, arm_threads: int) -> Path:
    """The dose-response report: compare's tables (per seed, pooled CMH across seeds) and the arms' telemetry.

    Named by split (report-dev.md, compare-dev/, accuracy-dev.png), so the dev evaluation and the one
    held-out evaluation of the same arms (--reuse-arms) sit side by side."""
    compare_md = (out / f"compare-{args.split}" / "report.md").read_text()
    telemetry_md = (out / "telemetry.md").read_text()
    split = "held-out" if args.split == "heldout" else "dev (tuning split)"
    lines = [f"# KL dose-response: beta {', '.join(f'{b:g}' for b in args.betas)} x seeds {', '.join(map(str, args.seeds))}"
             f"{' (fast variant)' if args.fast else ''}", "",
             f"Measured {datetime.now(timezone.utc):%Y-%m-%d %H:%M} UTC on {hardware(args.jobs, arm_threads)}.", "",
             f"Command: `{' '.join(['python', 'benchmarks/kl_ablation.py', *sys.argv[1:]])}`; total wall time {_minutes(total)}.", "",
             f"- Split: {split}; rewards: {'gameable (answer_match + 0.5 lenient_format + 0.3 brevity)' if args.reward == 'gameable' else 'standard (answer_match + 0.2 format)'}.",
             "- Hypotheses and decision rule, written before the runs: benchmarks/results/kl_ablation/tuning.md.", "",
             "| stage | command | wall time |", "|---|---|---|"]
    for stage in stages:
        command = f"`{_display(stage.argv)}`" if stage.argv else "this script: data/*.jsonl, data/manifest.json"
        lines.append(f"| {stage.name} | {command} | {_minutes(stage.seconds)}{' (cached)' if stage.cached else ''} |")
    lines += ["", "## Accuracy (posttrain compare)", "", _demote(compare_md.strip()), "",
              f"![accuracy per arm](accuracy-{args.split}.png)", "",
              "## Training telemetry of the runs (posttrain report)", "", _demote(telemetry_md.strip()), "",
              "![telemetry](telemetry.png)", ""]
    report = out / f"report-{args.split}.md"
    report.write_text("\n".join(lines))
    return report


# ---------------------------------------------------------------------------------------------


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--out", type=Path, default=Path("runs/kl-ablation"), help="output folder (default runs/kl-ablation)")
    parser.add_argument("--fast", action="store_true", help="toy sizes and a few steps: the whole pipeline in seconds")
    parser.add_argument("--rebuild-base", action="store_true", help="retrain the base even if a cached one matches")
    parser.add_argument("--arms", nargs="+", choices=list(ARM_RECIPES), default=list(ARM_RECIPES),
                        help="which arms to train and compare (default: all)")
    parser.add_argument("--split", choices=["heldout", "dev"], default="heldout",
                        help="evaluate on the held-out set (default) or on the dev set used for tuning")
    parser.add_argument("--tag-share", type=float, default=0.2,
                        help="share of the base's training answers written with <think>/<answer> tags (default 0.2)")
    parser.add_argument("--arm-seed", type=int, default=0,
                        help="training.seed of the arms (default 0, the recipes'): replicate the arms from the same base")
    parser.add_argument("--betas", type=float, nargs="+", metavar="B",
                        help="dose-response: GRPO arms at these KL weights (e.g. 0 0.04 0.2 1.0), instead of --arms")
    parser.add_argument("--seeds", type=int, nargs="+", metavar="S", default=None,
                        help="with --betas: training seeds per beta (default 0 1 2); the arms pool them")
    parser.add_argument("--reward", choices=["standard", "gameable"], default="standard",
                        help="with --betas: 'gameable' pays for an empty <think> and for brevity (benchmarks/kl_rewards.py)")
    parser.add_argument("--reuse-arms", action="store_true",
                        help="keep arms a previous run with the same --out finished (e.g. evaluate the dev-tuned arms "
                             "once on the held-out split without retraining them); unfinished ones are retrained")
    parser.add_argument("--jobs", type=int, help="arms trained at once, sharing the cores (default: one per core)")
    parser.add_argument("--quiet", action="store_true", help="print only the report")
    args = parser.parse_args(argv)
    if not 0.0 <= args.tag_share <= 1.0:
        parser.error("--tag-share must be between 0 and 1")
    if args.jobs is not None and args.jobs < 1:
        parser.error("--jobs must be at least 1")
    if args.betas is None and (args.seeds is not None or args.reward != "standard"):
        parser.error("--seeds and --reward belong to the dose-response design: give --betas too")
    if args.betas is not None:
        if any(b < 0 for b in args.betas) or len(set(args.betas)) != len(args.betas):
            parser.error("--betas must be distinct and >= 0")
        args.seeds = args.seeds or [0, 1, 2]
        if len(set(args.seeds)) != len(args.seeds):
            parser.error("--seeds must be distinct")
        args.arms = [beta_name(b, s) for b in args.betas for s in args.seeds]
    cores = os.cpu_count() or 1
    args.jobs = min(len(args.arms), args.jobs or cores)
    arm_threads = max(1, cores // args.jobs)
    sys.path.insert(0, str(REPO / "src"))

    scale = FAST if args.fast else FULL
    out = args.out.resolve()
    started = time.perf_counter()
    stages: list[Stage] = []

    data_stage = Stage("data", [])
    t0 = time.perf_counter()
    manifest = build_data(out / "data", scale, args.tag_share)
    data_stage.seconds = time.perf_counter() - t0
    stages.append(data_stage)
    data = out / "data"
    logs = out / "logs"

    base_dir = out / f"base-{base_key(scale, manifest)}"
    base_run = base_stage(base_dir, data, scale)
    base = base_dir / "model"
    done_marker = base_dir / "base.json"
    if args.rebuild_base:
        shutil.rmtree(base_dir, ignore_errors=True)
    if done_marker.is_file():
        base_run.seconds, base_run.cached = json.loads(done_marker.read_text())["seconds"], True
        if not args.quiet:
            print(f"[base] reusing {_path(base)} (trained in {base_run.seconds:.0f} s; --rebuild-base retrains)", flush=True)
    else:  # an interrupted base resumes from its last checkpoint (posttrain's resume_from_checkpoint=auto)
        run_stage(base_run, logs, args.quiet)
        for checkpoint in base.glob("checkpoint-*"):  # compare would evaluate each one as an arm of its own
            shutil.rmtree(checkpoint)
        done_marker.write_text(json.dumps({"seconds": base_run.seconds, "command": _display(base_run.argv)}, indent=1) + "\n")
    stages.append(base_run)

    arms_dir = out / "arms"
    if args.betas is not None:
        arm_stages = [dose_stage(b, s, base, data, arms_dir, scale, args.reward) for b in args.betas for s in args.seeds]
    else:
        arm_stages = [arm_stage(name, base, data, arms_dir, scale, args.arm_seed) for name in args.arms]
    to_train = []
    for stage in arm_stages:
        stage.threads = arm_threads
        marker = arms_dir / f"{stage.name}.json"  # written when the arm finished, with the command that trained it
        if args.reuse_arms and marker.is_file() and json.loads(marker.read_text())["command"] == _display(stage.argv):
            stage.seconds, stage.cached = json.loads(marker.read_text())["seconds"], True
            if not args.quiet:
                print(f"[{stage.name}] reusing {_path(arms_dir / stage.name)} (--reuse-arms)", flush=True)
            continue
        shutil.rmtree(arms_dir / stage.name, ignore_errors=True)
        marker.unlink(missing_ok=True)
        to_train.append(stage)

    def train(stage: Stage) -> None:
        run_stage(stage, logs, args.quiet)
        (arms_dir / f"{stage.name}.json").write_text(json.dumps({"seconds": stage.seconds, "command": _display(stage.argv)}, indent=1) + "\n")

    with ThreadPoolExecutor(max_workers=args.jobs) as pool:
        list(pool.map(train, to_train))
    stages += arm_stages

    data_seed = HELDOUT_SEED if args.split == "heldout" else DEV_SEED
    if args.betas is not None:  # one several-seed arm per beta: compare pools the seeds
        arm_args = [a for b in args.betas for a in
                    ("--arm", f"beta{b:g}=" + ",".join(_path(arms_dir / beta_name(b, s)) for s in args.seeds))]
    else:
        arm_args = [a for n in args.arms for a in ("--arm", f"{n}={_path(arms_dir / n)}")]
    compare = Stage("compare", ["compare", "--arm", f"base={_path(base)}", *arm_args,
                                "--task", "arithmetic", "--data-seed", str(data_seed), "--n", str(scale.n_eval),
                                "--seed", str(EVAL_SEED), "--max-new-tokens", str(scale.max_new_tokens),
                                "--out", _path(out / "compare"), "--plot", _path(out / "accuracy.png")])
    if args.betas is not None:  # one report per split (see write_dose_report)
        compare.argv[-3:] = [_path(out / f"compare-{args.split}"), "--plot", _path(out / f"accuracy-{args.split}.png")]
    telemetry = Stage("telemetry", ["report", *[_path(arms_dir / n) for n in args.arms], "--bins", "4",
                                    "--plot", _path(out / "telemetry.png"), "--out", _path(out / "telemetry.md")])
    for stage in (compare, telemetry):
        stages.append(run_stage(stage, logs, args.quiet))

    if args.betas is not None:
        report = write_dose_report(out, args, scale, stages, time.perf_counter() - started, arm_threads)
    else:
        report = write_report(out, args, scale, manifest, stages, base_dir, args.arms, time.perf_counter() - started, arm_threads)
    print(report.read_text())
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
