"""The lock: a plan's hash, its recipes' and test set's hashes and the commit, committed before any arm runs.

`experiment lock PLAN` writes PLAN's `.lock.json` beside it; `experiment run` refuses without one, or when the
plan, a recipe it names or its test set changed since: a changed plan is a new pre-registration, and saying
so is the point. Every result names the lock (its own hash and the commit it was taken at).
"""

from __future__ import annotations

import hashlib
import json
import subprocess
from datetime import datetime, timezone
from pathlib import Path

from posttrain.errors import UserError


def lock_path(plan_path: Path) -> Path:
    return plan_path.with_name(plan_path.stem + ".lock.json")


def sha256(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def test_set_hash(test: dict) -> tuple[str, str]:
    """(what was hashed, its sha256): the data file's bytes, or the generated items of a built-in task."""
    if test.get("data"):
        return str(test["data"]), sha256(Path(test["data"]).read_bytes())
    if test["task"] == "arithmetic":
        from posttrain.evaluation.tasks import ARITHMETIC_SEED, load_task

        items = load_task("arithmetic", n=test.get("n"), seed=test.get("seed", 0), data_seed=test.get("data_seed", ARITHMETIC_SEED))
        return "task arithmetic (generated items)", sha256(json.dumps(items, sort_keys=True).encode())
    return f"task {test['task']} (the hub's copy: not hashable offline)", sha256(json.dumps(test, sort_keys=True).encode())


def commit(where: Path | None = None) -> str | None:
    """The commit of the working directory's code, "+changes" when tracked files differ from it; None outside git."""
    def git(*args: str) -> str:
        return subprocess.run(["git", *args], cwd=where, capture_output=True, text=True, timeout=10).stdout.strip()

    try:
        head = git("rev-parse", "--short", "HEAD")
        return head and head + ("+changes" if git("status", "--porcelain", "--untracked-files=no") else "") or None
    except (OSError, subprocess.SubprocessError):
        return None


def contents(plan) -> dict:
    """What the lock pins: the plan file, each recipe it names, the test set."""
    what, digest = test_set_hash(plan.test)
    pinned = {"plan": str(plan.path), "plan_sha256": sha256(plan.path.read_bytes()),
              "recipes": {r: sha256(Path(r).read_bytes()) for r in plan.recipes()},
              "test_set": what, "test_set_sha256": digest}
    if plan.gate:
        pinned.update(zip(("gate_set", "gate_set_sha256"), test_set_hash(plan.gate)))
    return pinned


def write_lock(plan) -> Path:
    path = lock_path(plan.path)
    lock = {**contents(plan), "commit": commit(), "locked_at": f"{datetime.now(timezone.utc):%Y-%m-%d %H:%M} UTC"}
    path.write_text(json.dumps(lock, indent=1) + "\n")
    return path


def check_lock(plan) -> dict:
    """The lock, when the plan, its recipes and its test set are what it pinned; else UserError naming the change."""
    path = lock_path(plan.path)
    if not path.is_file():
        raise UserError(f"experiment plan {str(plan.path)!r} has no lock ({path}): lock it before any arm runs, and commit the lock:\n"
                        f"    posttrain experiment lock {plan.path}")
    lock = json.loads(path.read_text())
    now = contents(plan)
    changed = [f"the plan ({plan.path})"] if now["plan_sha256"] != lock.get("plan_sha256") else []
    changed += [f"recipe {r}" for r in sorted(set(now["recipes"]) | set(lock.get("recipes", {})))
                if now["recipes"].get(r) != lock.get("recipes", {}).get(r)]
    if now["test_set_sha256"] != lock.get("test_set_sha256"):
        changed.append(f"the test set ({now['test_set']})")
    if now.get("gate_set_sha256") != lock.get("gate_set_sha256"):
        changed.append(f"the gate's items ({now.get('gate_set')})")
    if changed:
        raise UserError(f"{', '.join(changed)} changed since the lock of {lock.get('locked_at')} ({path}). A changed plan is a new "
                        f"pre-registration: restore what was locked, or lock again and commit it (and say why in the results):\n"
                        f"    posttrain experiment lock {plan.path}")
    return {**lock, "lock_sha256": sha256(path.read_bytes())}
