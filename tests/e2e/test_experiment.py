"""`posttrain experiment` end to end on rl-from-plateau's toy version (tiny:qwen2-1m): lock, run (an SFT start stopped
at its dev-set plateau, its best model the arms' start, the pass@k gate, GRPO and RFT seeds, a compute-matched more-SFT
control), a kill in the middle of the arms, the run again (finished stages kept, the killed arm resumed), then the
tables rebuilt from the kept answers alone, byte for byte, with the verdict.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

pytestmark = [pytest.mark.e2e, pytest.mark.slow]
REPO = Path(__file__).resolve().parents[2]


def _posttrain(*argv: str, **kwargs) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "posttrain", *argv], cwd=REPO, capture_output=True, text=True, timeout=600, **kwargs)


@pytest.fixture(scope="module")
def experiment(tmp_path_factory):
    root = tmp_path_factory.mktemp("experiment")
    plan = root / "rl-from-plateau.yaml"
    shutil.copyfile(REPO / "experiments" / "rl-from-plateau.yaml", plan)
    locked = _posttrain("experiment", "lock", str(plan))
    assert locked.returncode == 0, locked.stderr
    out = root / "out"
    command = [sys.executable, "-m", "posttrain", "experiment", "run", str(plan), "--fast", "--lanes", "2", "--out", str(out)]
    first = subprocess.Popen(command, cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, start_new_session=True)
    deadline = time.monotonic() + 300
    while not (out / "arms" / "grpo-s0" / "checkpoint-1" / "trainer_state.json").is_file() and first.poll() is None and time.monotonic() < deadline:
        time.sleep(0.05)
    killed_unfinished = not (out / "stages" / "grpo-s0.json").is_file()
    os.killpg(first.pid, signal.SIGKILL)  # the experiment and every training process it started
    first.wait()
    assert (out / "stages" / "start.json").is_file(), first.stdout.read()
    start_marker = (out / "stages" / "start.json").read_bytes()
    second = subprocess.run(command, cwd=REPO, capture_output=True, text=True, timeout=600)
    assert second.returncode == 0, second.stdout[-3000:] + second.stderr[-3000:]
    return plan, out, second.stdout, killed_unfinished, start_marker


def test_a_killed_experiment_keeps_finished_stages_and_resumes_the_rest(experiment):
    _, out, stdout, killed_unfinished, start_marker = experiment
    assert "[start] finished before" in stdout and (out / "stages" / "start.json").read_bytes() == start_marker
    if killed_unfinished:  # killed after grpo-s0's first checkpoint: it went on from there (or had just finished)
        log = (out / "logs" / "grpo-s0.log").read_text()
        assert "resuming from" in log or "already complete at step 2" in log
    for stage in ("start", "gate", "grpo-s0", "grpo-s1", "rft-s0", "rft-s1", "more-sft", "compare"):
        record = json.loads((out / "stages" / f"{stage}.json").read_text())
        assert record["commit"] and record["machine"] and record["started"].endswith("UTC") and record["seconds"] > 0
    assert not list((out / "arms").glob("*/checkpoint-*"))  # finished runs keep their final weights only


def test_every_model_answered_the_same_items_and_the_control_is_compute_matched(experiment):
    _, out, _, _, _ = experiment
    arms = [a["name"] for a in json.loads((out / "samples" / "arms.json").read_text())]
    assert arms == ["start", "grpo@run-0", "grpo@run-1", "rft@run-0", "rft@run-1", "more-sft"]
    answered = {a: sorted(json.loads(line)["id"] for line in (out / "samples" / f"{a}.jsonl").read_text().splitlines()) for a in arms}
    assert len(set(map(tuple, answered.values()))) == 1 and len(answered["start"]) == 12
    command = json.loads((out / "stages" / "more-sft.json").read_text())["command"]
    assert "training.max_steps=2" in command  # toy GRPO: 2 steps x 8 completions = 16 sequences = 2 SFT steps of 8


def test_the_arms_start_from_the_plateau_and_after_the_gate(experiment):
    """The start stopped by held_out.patience (2 evaluations without a better one), its best/ is what every arm and the
    comparison take, and the gate's verdict (pass@2 against greedy on 8 dev items) is kept and printed."""
    _, out, stdout, _, _ = experiment
    held_out = json.loads((out / "start" / "run_summary.json").read_text())["held_out"]
    assert held_out["stopped"]["evaluations"] == 2 and held_out["stopped"]["step"] < 4  # before the toy's max_steps
    best = str(out / "start" / "best")
    for stage in ("gate", "grpo-s0", "rft-s1", "more-sft"):
        assert best in json.loads((out / "stages" / f"{stage}.json").read_text())["command"]
    gate = json.loads((out / "gate.json").read_text())
    assert gate["k"] == 2 and gate["items"] == 8 and gate["passed"] is True and gate["headroom"] >= gate["min_headroom"]
    assert "Gate (before any arm, on 8 dev items)" in stdout


def test_tables_rebuild_from_the_kept_answers_alone(experiment, tmp_path):
    plan, out, stdout, _, _ = experiment
    copy = tmp_path / "kept"
    copy.mkdir()
    for name in ("plan.yaml", "lock.json", "meta.json", "health.json", "gate.json", "samples"):
        (shutil.copytree if (out / name).is_dir() else shutil.copyfile)(out / name, copy / name)
    rebuilt = _posttrain("experiment", "tables", str(copy))
    assert rebuilt.returncode == 0, rebuilt.stderr
    for name in ("results.md", "results.json"):
        assert (copy / name).read_bytes() == (out / name).read_bytes()
    results = json.loads((out / "results.json").read_text())
    lock = json.loads((plan.with_name("rl-from-plateau.lock.json")).read_text())
    assert results["lock"]["plan_sha256"] == lock["plan_sha256"] and results["meta"]["fast"] is True
    assert set(results["verdict"]["hypotheses"]) == {"H1", "H2", "H3"} and results["gate"]["passed"] is True
    answered = {json.loads(line)["id"] for line in (out / "samples" / "start.jsonl").read_text().splitlines()}
    rows = [json.loads(line) for line in (REPO / "recipes" / "demo-real" / "data" / "test-1500.jsonl").read_text().splitlines()]
    inside = sum(1 for r in rows if r["id"] in answered and r["fact_in_sft"])
    for model in ("start", "grpo", "rft", "more-sft"):  # accuracy inside and outside the items whose fact SFT worked
        split = results["subsets"]["fact-in-sft"][model]
        assert (split["in"]["n"], split["out"]["n"]) == (inside, len(answered) - inside)
    assert "(fast toy version)" in stdout and "**Goal: " in stdout and f"sha256 {lock['plan_sha256'][:12]}" in stdout
