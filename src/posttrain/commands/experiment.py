"""`posttrain experiment check|lock|run|tables`: a pre-registered plan in, a verdict out.

    posttrain experiment check experiments/grpo-real.yaml     # the plan's problems, and its power at the planned items
    posttrain experiment lock experiments/grpo-real.yaml      # hashes + commit into grpo-real.lock.json: commit it first
    posttrain experiment run experiments/grpo-real.yaml       # every stage, kept when finished, resumed when killed
    posttrain experiment tables runs/experiments/grpo-real    # the tables and the verdict again, from the kept answers

The guide: `posttrain docs experiments`.
"""

from __future__ import annotations

import argparse
import json
import shutil
import sys
from pathlib import Path


def add_parser(sub) -> None:
    p = sub.add_parser(
        "experiment", help="run a pre-registered experiment: plan, lock, run the arms and seeds, tables and verdict",
        description="A plan file names the start, the arms and their seeds, the controls, the test set, the hypotheses and the "
        "decision rule. `check` reads it and states the items it needs for power 0.8; `lock` pins it (hashes of the plan, its "
        "recipes and test set, and the commit) before any arm runs; `run` trains and compares everything, keeping finished "
        "stages; `tables` rebuilds every table and the verdict from the kept answers.",
        epilog="examples:\n  posttrain experiment check experiments/grpo-real.yaml\n  posttrain experiment lock experiments/grpo-real.yaml"
        " && git add experiments/grpo-real.lock.json && git commit -m 'lock grpo-real'\n"
        "  posttrain experiment run experiments/grpo-real.yaml --lanes 2\n  posttrain experiment tables runs/experiments/grpo-real\n\n"
        "the guide: posttrain docs experiments", formatter_class=argparse.RawDescriptionHelpFormatter)
    steps = p.add_subparsers(dest="step", required=True, metavar="STEP")
    check = steps.add_parser("check", help="read the plan, list its problems, and state its power")
    check.add_argument("plan", type=Path, metavar="PLAN")
    lock = steps.add_parser("lock", help="write PLAN.lock.json (commit it before any arm runs)")
    lock.add_argument("plan", type=Path, metavar="PLAN")
    run_ = steps.add_parser("run", help="run every stage of a locked plan, then the tables and the verdict")
    run_.add_argument("plan", type=Path, metavar="PLAN")
    run_.add_argument("--out", type=Path, metavar="DIR", help="the experiment's folder (default runs/experiments/NAME, -fast for --fast)")
    run_.add_argument("--lanes", type=int, help="arms trained at once, the cores split between them (default: the plan's lanes)")
    run_.add_argument("--fast", action="store_true", help="the plan's toy version (its fast: section): the whole pipeline in minutes, "
                      "to try the machinery; its verdict is no evidence")
    tables = steps.add_parser("tables", help="rebuild DIR/results.md and results.json from DIR's kept answers")
    tables.add_argument("dir", type=Path, metavar="DIR")
    p.set_defaults(func=run)


def run(args) -> int:
    from posttrain.experiment.stages import StageFailed

    try:
        return {"check": _check, "lock": _lock, "run": _run, "tables": _tables}[args.step](args)
    except StageFailed as e:
        print(f"error: {e}", file=sys.stderr)
        return 1


def _items(plan) -> int:
    """The planned test items: test.n, or every item of the data file / generated task."""
    if plan.test.get("n"):
        return plan.test["n"]
    from posttrain.evaluation.tasks import load_task

    return len(load_task(plan.test["task"], data=plan.test.get("data")))


def _power(plan) -> None:
    from posttrain.experiment.power import plan_power, render

    print(render(plan_power(plan, _items(plan))))


def _check(args) -> int:
    from posttrain.experiment.plan import load_plan

    plan = load_plan(args.plan)
    print(f"{args.plan}: {len(plan.arms)} arm(s), {len(plan.controls) + len(plan.forced_format)} control(s), "
          f"{len(plan.hypotheses)} hypothesis(es), rule {plan.rule}, alpha {plan.alpha}, correction {plan.correction}")
    _power(plan)
    return 0


def _lock(args) -> int:
    from posttrain.experiment.lock import write_lock
    from posttrain.experiment.plan import load_plan

    plan = load_plan(args.plan)
    _power(plan)
    path = write_lock(plan)
    print(f"locked: {path}. Commit it before any arm runs:\n    git add {args.plan} {path} && git commit -m 'lock {plan.name}'")
    return 0


def _run(args) -> int:
    from posttrain.errors import UserError
    from posttrain.experiment import stages, tables
    from posttrain.experiment.lock import check_lock
    from posttrain.experiment.plan import load_plan

    plan = load_plan(args.plan)
    lock = check_lock(plan)
    if args.fast and not plan.fast:
        raise UserError(f"{args.plan} has no fast: section, so no toy version; add one (model, seeds, test sizes, overrides)")
    lanes = args.lanes or plan.lanes
    if lanes < 1:
        raise UserError("--lanes must be at least 1")
    out = args.out or Path("runs/experiments") / (plan.name + ("-fast" if args.fast else ""))
    kept = out / "plan.yaml"
    amended = check_folder(out, plan, lock)
    if amended:
        print(amended, flush=True)
    run_plan = plan.with_fast() if args.fast else plan
    commands = stages.commands(run_plan, out, lanes)  # every recipe resolves before anything is written
    out.mkdir(parents=True, exist_ok=True)
    shutil.copyfile(plan.path, kept)
    (out / "lock.json").write_text(json.dumps(lock, indent=1) + "\n")
    done = stages.run_all(run_plan, commands, out, lanes)
    stages.keep_answers(run_plan, out)
    meta = {"fast": args.fast, "lanes": lanes, "stages": {c.name: {k: v for k, v in c.record.items() if k != "kept"} for c in done}}
    (out / "meta.json").write_text(json.dumps(meta, indent=1) + "\n")
    tables.build(out)
    print((out / "results.md").read_text())
    return 0


def check_folder(out: Path, plan, lock: dict) -> str | None:
    """May `run` continue in `out`? Another experiment's folder, or one whose test set has changed, is refused (exit 2).
    A plan amended and locked again since the folder's run continues there: every stage's marker holds its command, so
    the stages whose commands the amendment left alone are kept and the others run again. Returns the note that says so."""
    import yaml

    from posttrain.errors import UserError

    kept = out / "plan.yaml"
    if not kept.is_file() or kept.read_bytes() == plan.path.read_bytes():
        return None
    try:
        name = (yaml.safe_load(kept.read_text()) or {}).get("experiment")
    except (yaml.YAMLError, AttributeError):
        name = None
    if name != plan.name:
        raise UserError(f"{out} holds another experiment ({name!r}, not {plan.name!r}): give another --out")
    try:
        before = json.loads((out / "lock.json").read_text())
    except (OSError, ValueError):
        before = {}
    if before.get("test_set_sha256") != lock.get("test_set_sha256"):
        raise UserError(f"{out}: the test set changed since this folder's run ({lock.get('test_set')}); its answers would mix "
                        "two test sets: give another --out")
    return (f"note: {plan.path} was amended since {out}'s run (it was locked again): stages whose commands are unchanged "
            "are kept, the others run again")


def _tables(args) -> int:
    from posttrain.errors import UserError
    from posttrain.experiment.tables import build

    needed = [n for n in ("plan.yaml", "lock.json", "meta.json", "samples/arms.json") if not (args.dir / n).is_file()]
    if needed:
        raise UserError(f"{args.dir} is not an experiment's folder: {', '.join(needed)} missing (`posttrain experiment run` writes them)")
    build(args.dir)
    print((args.dir / "results.md").read_text())
    return 0
