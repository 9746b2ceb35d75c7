"""The posttrain commands a plan runs, in its folder, and how they survive a stop.

    OUT/start/                 the start (`posttrain train` of start.recipe from the model; start.use: best -> OUT/start/best)
    OUT/gate/                  the gate: `posttrain eval --pass-k K` of the start on the gate's items; OUT/gate.json its verdict
    OUT/arms/NAME-sS/          each arm's seed, trained from the start
    OUT/arms/CONTROL[-sS]/     each training control (one seed: no suffix)
    OUT/compare/               `posttrain compare` of every model on the test set
    OUT/samples/               every model's per-item answers: what `experiment tables` reads
    OUT/stages/NAME.json       a finished stage: its command, wall time, and the commit, machine and UTC time it started at
    OUT/logs/NAME.log          each stage's output (a resumed stage's log keeps the earlier attempt)

A stage whose marker holds the same command is kept; a killed `posttrain train` resumes from its last
checkpoint (resume_from_checkpoint: auto). Arms and controls run `lanes` at a time with the cores split
between them (OMP_NUM_THREADS); the start and the comparison use every core.
"""

from __future__ import annotations

import json
import os
import shlex
import shutil
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path

SAMPLE_FIELDS = ("id", "gold", "completion", "strict", "loose", "format", "completion_tokens", "finish_reason", "error", "cached")


class StageFailed(Exception):
    """A stage's command exited non-zero (exit 1: the plan was fine, a run was not)."""


class GateFailed(StageFailed):
    """The start has less headroom than the plan's gate asks: no arm runs (exit 1: the plan said to stop here)."""


@dataclass
class Command:
    name: str
    argv: list[str]
    folder: Path | None = None  # a training run's folder: its checkpoints are dropped once it finished
    threads: int | None = None
    record: dict = field(default_factory=dict)  # the marker: command, seconds, started, commit, machine, kept

    @property
    def text(self) -> str:
        """The command as a user would type it (`posttrain train ...`): what the marker compares, on any interpreter."""
        argv = ["posttrain", *self.argv[3:]] if self.argv[1:3] == ["-m", "posttrain"] else self.argv
        return " ".join(shlex.quote(a) for a in argv)


def posttrain(*argv: str) -> list[str]:
    return [sys.executable, "-m", "posttrain", *argv]


def run_name(stage, seed: int) -> str:
    return f"{stage.name}-s{seed}" if len(stage.seeds) > 1 else stage.name


def steps_to_match(plan, control, model: str) -> int:
    """A compute-matched control's max_steps: as many trained sequences as one run of the arm it matches
    (max_steps x per-device batch x gradient accumulation, each from the resolved recipe with its overrides)."""
    from posttrain.recipe.load import load_recipe

    def sequences_per_step(stage) -> tuple[int, int]:
        t = load_recipe(stage.recipe, [f"model.base_model_name={model}", *stage.overrides]).recipe.training
        return t.max_steps, t.per_device_train_batch_size * (t.gradient_accumulation_steps or 1)

    arm_steps, arm_batch = sequences_per_step(plan.arms[control.matched_to])
    _, batch = sequences_per_step(control)
    return -(-arm_steps * arm_batch // batch)


def commands(plan, out: Path, lanes: int) -> dict[str, list[Command]]:
    """{"start": [...], "gate": [...], "lanes": [...], "compare": [...]}: every command the plan runs, in order."""
    threads = max(1, (os.cpu_count() or 1) // lanes)
    start = out / "start" if plan.start else None
    first = []
    if plan.start:
        first.append(Command("start", posttrain("train", "--recipe", plan.start.recipe, f"model.base_model_name={plan.model}",
                                                f"training.output_dir={start}", *plan.start.overrides), start))
    origin = str(start / "best" if plan.start.use == "best" else start) if start else plan.model
    gate = []
    if plan.gate:
        g = plan.gate
        options = [f"--{k.replace('_', '-')}={g[k]}" for k in ("data", "n", "max_new_tokens", "prompt_column", "answer_column") if k in g]
        gate.append(Command("gate", posttrain("eval", "--model", origin, "--task", g["task"], *options, f"--pass-k={g['k']}",
                                              f"--pass-temperature={g['temperature']}", "--no-progress", "--out", str(out / "gate"))))
    lane = []
    for stage in [*plan.arms.values(), *plan.controls.values()]:
        extra = [f"training.max_steps={steps_to_match(plan, stage, plan.model)}"] if stage.matched_to else []
        for seed in stage.seeds:
            folder = out / "arms" / run_name(stage, seed)
            lane.append(Command(run_name(stage, seed), posttrain(
                "train", "--recipe", stage.recipe, f"model.base_model_name={origin}", f"training.output_dir={folder}",
                *stage.overrides, *extra, f"training.seed={seed}"), folder, threads))
    arms = ["--arm", f"start={origin}"]
    for stage in [*plan.arms.values(), *plan.controls.values()]:
        arms += ["--arm", f"{stage.name}=" + ",".join(str(out / "arms" / run_name(stage, s)) for s in stage.seeds)]
    named = [m for h in [*plan.hypotheses.values(), *plan.descriptive.values()] for m in (h.arm, h.baseline)]
    uses_base = plan.start is not None and ("base" in named or "base" in plan.forced_format.values())
    test = plan.test
    options = [f"--{k.replace('_', '-')}={test[k]}" for k in ("data", "n", "max_new_tokens", "seed", "data_seed", "batch_size",
                                                              "prompt_column", "answer_column", "tools", "max_tool_turns")
               if test.get(k) is not None]
    compare = Command("compare", posttrain("compare", *arms, *([] if uses_base else ["--no-base"]), "--task", test["task"], *options,
                                           "--no-progress", "--out", str(out / "compare")))
    return {"start": first, "gate": gate, "lanes": lane, "compare": [compare]}


def provenance() -> dict:
    """When, on what code and on which machine a stage starts (a run of hours may see the code change between stages)."""
    from posttrain.models.cpu_paths import cpu_description
    from posttrain.experiment.lock import commit

    cpu, flags = cpu_description()
    return {"started": f"{datetime.now(timezone.utc):%Y-%m-%d %H:%M} UTC", "commit": commit(), "machine": f"{cpu} ({flags})"}


def run(command: Command, out: Path) -> Command:
    """Run the command unless its marker holds the same one; write the marker when it succeeds."""
    marker = out / "stages" / f"{command.name}.json"
    if marker.is_file():
        record = json.loads(marker.read_text())
        if record["command"] == command.text:
            command.record = {**record, "kept": True}
            print(f"[{command.name}] finished before ({record['seconds']:.0f} s): kept", flush=True)
            return command
    log = out / "logs" / f"{command.name}.log"
    log.parent.mkdir(parents=True, exist_ok=True)
    marker.parent.mkdir(parents=True, exist_ok=True)
    env = {**os.environ, "TOKENIZERS_PARALLELISM": "false"}
    if command.threads and "OMP_NUM_THREADS" not in os.environ:
        env["OMP_NUM_THREADS"] = str(command.threads)
    print(f"[{command.name}] {command.text}  (log {log})", flush=True)
    record = {"command": command.text, **provenance()}
    began = time.perf_counter()
    with log.open("a") as f:
        code = subprocess.call(command.argv, stdout=f, stderr=subprocess.STDOUT, env=env)
    record["seconds"] = round(time.perf_counter() - began, 1)
    if code != 0:
        raise StageFailed(f"experiment stage {command.name} failed (exit {code}) after {record['seconds']:.0f} s; the end of "
                          f"{log}:\n{log.read_text()[-3000:]}\nFix it and run the same command again: finished stages are kept, "
                          f"a killed training run resumes.")
    if command.folder is not None:  # compare would take every checkpoint-N for an arm of its own
        for checkpoint in command.folder.glob("checkpoint-*"):
            shutil.rmtree(checkpoint)
    marker.write_text(json.dumps(record, indent=1) + "\n")
    command.record = record
    print(f"[{command.name}] done in {record['seconds']:.0f} s", flush=True)
    return command


def check_start(plan, out: Path) -> None:
    """start.use: best needs the start's best/ (held_out with keep_best); a missing one would train every arm from nothing."""
    if plan.start and plan.start.use == "best" and not (out / "start" / "best" / "held_out.json").is_file():
        raise StageFailed(f"start.use is best, and the start left no {out / 'start' / 'best'}: its recipe ({plan.start.recipe}) "
                          "needs a held_out section with keep_best strict or loose (and patience, for a plateau)")


def check_gate(plan, out: Path) -> dict | None:
    """OUT/gate.json: the start's pass@k, greedy accuracy and headroom on the gate's items against the plan's least
    headroom. GateFailed when it is short: the plan said to stop there, before any arm runs."""
    if not plan.gate:
        return None
    g = plan.gate
    measured = json.loads((out / "gate" / "summary.json").read_text())["pass_at_k"]
    m = measured[g["metric"]]
    verdict = {"metric": g["metric"], "k": g["k"], "temperature": g["temperature"], "items": measured["n"],
               f"pass@{g['k']}": m[f"pass@{g['k']}"], "greedy": m["greedy"], "headroom": m["headroom"],
               "min_headroom": g["min_headroom"], "passed": m["headroom"] is not None and m["headroom"] >= g["min_headroom"]}
    (out / "gate.json").write_text(json.dumps(verdict, indent=1) + "\n")
    k = g["k"]
    said = (f"the start's {g['metric']} pass@{k} at temperature {g['temperature']:g} is {100 * m[f'pass@{k}']:.1f}% against "
            f"greedy {100 * m['greedy']:.1f}% on {measured['n']} gate items: headroom {100 * m['headroom']:+.1f} points")
    if not verdict["passed"]:
        raise GateFailed(f"gate failed: {said}, below the plan's {100 * g['min_headroom']:.0f}. No arm ran. As pre-registered, RL "
                         f"has too little to reach from this start: choose and pre-register a task or model where the gate holds "
                         f"({out / 'gate' / 'summary.md'} has the table).")
    print(f"[gate] passed: {said} (at least {100 * g['min_headroom']:.0f} asked)", flush=True)
    return verdict


def run_all(plan, groups: dict[str, list[Command]], out: Path, lanes: int) -> list[Command]:
    done = [run(c, out) for c in groups["start"]]
    check_start(plan, out)
    done += [run(c, out) for c in groups["gate"]]
    check_gate(plan, out)
    with ThreadPoolExecutor(max_workers=lanes) as pool:
        done += [f.result() for f in [pool.submit(run, c, out) for c in groups["lanes"]]]
    return done + [run(c, out) for c in groups["compare"]]


def keep_answers(plan, out: Path) -> None:
    """OUT/samples/ARM.jsonl (compare's per-item records without the prompt, small enough to commit), arms.json
    and OUT/health.json (every run's health flags, from its run_summary.json)."""
    report = json.loads((out / "compare" / "report.json").read_text())
    samples = out / "samples"
    samples.mkdir(exist_ok=True)
    arms = []
    for row in report["arms"]:
        arms.append({"name": row["arm"], "spec": row["spec"]})
        rows = [json.loads(line) for line in (out / "compare" / "samples" / f"{row['arm']}.jsonl").read_text().splitlines() if line]
        (samples / f"{row['arm']}.jsonl").write_text("".join(json.dumps({k: r.get(k) for k in SAMPLE_FIELDS}) + "\n" for r in rows))
    (samples / "arms.json").write_text(json.dumps(arms, indent=1) + "\n")
    if plan.subsets:  # the test items inside each subset, kept with the answers: the tables need no test file
        rows = [json.loads(line) for line in Path(plan.test["data"]).read_text().splitlines() if line.strip()]
        members = {name: sorted(str(r["id"]) for r in rows if r.get(column)) for name, column in plan.subsets.items()}
        (samples / "subsets.json").write_text(json.dumps(members, indent=1) + "\n")
    health = {}
    for folder in sorted((out / "arms").iterdir()) if (out / "arms").is_dir() else []:
        if (folder / "run_summary.json").is_file():
            health[folder.name] = json.loads((folder / "run_summary.json").read_text()).get("health") or []
    (out / "health.json").write_text(json.dumps(health, indent=1) + "\n")
