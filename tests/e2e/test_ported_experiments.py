"""The experiments ported to `posttrain experiment` after their runs (grpo-real, kl-real, tool-use-real): their committed
results are what the command rebuilds from the committed answers, and their plans (toy versions included) resolve.

Nothing trains here: the suite already runs one experiment's toy end to end (grpo-real's). A rebuild reads
benchmarks/results/DIR's plan.yaml, lock.json, meta.json, samples/ and health.json, as `experiment tables` does on a
fresh run's folder; a plan's stages resolve through the same code `experiment run` uses before it starts anything.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from posttrain.experiment.lock import lock_path
from posttrain.experiment.plan import load_plan
from posttrain.experiment.stages import commands

pytestmark = pytest.mark.e2e
REPO = Path(__file__).resolve().parents[2]
PORTED = {"experiments/grpo-real.yaml": "benchmarks/results/grpo_real", "experiments/kl-real.yaml": "benchmarks/results/kl_real",
          "experiments/tool-use-real.yaml": "benchmarks/results/tool_use_smollm2", "experiments/kl-ablation.yaml": "benchmarks/results/kl_ablation"}


def _posttrain(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "posttrain", *args], cwd=REPO, capture_output=True, text=True, timeout=300)


@pytest.mark.parametrize("plan, results", sorted(PORTED.items()))
def test_the_committed_tables_are_what_the_command_rebuilds(plan, results, tmp_path):
    committed = REPO / results
    copy = tmp_path / "results"
    shutil.copytree(committed, copy, ignore=shutil.ignore_patterns("results.md", "results.json"))
    done = _posttrain("experiment", "tables", str(copy))
    assert done.returncode == 0, done.stderr[-3000:]
    assert (copy / "results.md").read_text() == (committed / "results.md").read_text()
    assert json.loads((copy / "results.json").read_text()) == json.loads((committed / "results.json").read_text())
    # the results describe the plan as it stands and its lock
    assert (committed / "plan.yaml").read_bytes() == (REPO / plan).read_bytes()
    lock = json.loads((REPO / lock_path(Path(plan))).read_text())
    assert {k: v for k, v in json.loads((committed / "lock.json").read_text()).items() if k != "lock_sha256"} == lock


def test_kl_real_notes_state_the_diagnostic_the_command_does_not_read():
    """H0's numbers in notes.md are those of the committed prefix-forced answers (samples/diagnostic.jsonl)."""
    folder = REPO / "benchmarks/results/kl_real"
    rows = [json.loads(line) for line in (folder / "samples/diagnostic.jsonl").read_text().splitlines() if line.strip()]
    notes = (folder / "notes.md").read_text()
    for prefix, shown in (("", "(free)"), ("<think>", "`<think>`"), ("<think></think>\n<answer>", "`<think></think>⏎<answer>`")):
        answers = [r for r in rows if r["prefix"] == prefix]
        assert len(answers) == 300
        share = {k: f"{100 * sum(bool(r[k]) for r in answers) / 300:.1f}%" for k in ("strict", "loose")}
        tags = f"{100 * sum(r['format'] > 0 for r in answers) / 300:.1f}%"
        assert f"| {shown} | {share['strict']} | {share['loose']} | {tags} |" in notes


@pytest.mark.parametrize("plan", sorted(PORTED))
def test_the_plan_and_its_toy_resolve(plan, tmp_path, monkeypatch):
    monkeypatch.chdir(REPO)
    done = _posttrain("experiment", "check", plan)
    assert done.returncode == 0, done.stderr[-3000:]
    assert "power (target 80%)" in done.stdout
    from posttrain.recipe.load import load_recipe

    toy = load_plan(REPO / plan).with_fast()
    assert toy.model == "tiny:qwen2-1m" and all(len(a.seeds) == 2 for a in toy.arms.values())
    trains = [c for group in ("start", "lanes") for c in commands(toy, tmp_path, 1)[group]]
    assert len(trains) == 1 + 2 * len(toy.arms) + len(toy.controls)
    for command in trains:  # each stage's recipe and overrides, trained from the toy's model instead of its start
        args = command.argv[command.argv.index("--recipe") + 1:]
        overrides = [a for a in args[1:] if not a.startswith("model.base_model_name=")]
        recipe = load_recipe(args[0], [f"model.base_model_name={toy.model}", *overrides]).recipe
        assert recipe.training.output_dir == str(command.folder)


def test_the_tool_use_control_trains_as_many_sequences_as_one_grpo_run(tmp_path, monkeypatch):
    """64 SFT steps of 2 chats = 16 GRPO steps of 8 rollouts: the plan's comment, checked on the command it runs."""
    monkeypatch.chdir(REPO)
    plan = load_plan(REPO / "experiments/tool-use-real.yaml")
    control = [c for c in commands(plan, tmp_path, 1)["lanes"] if c.name == "more-sft"]
    assert len(control) == 1 and control[0].argv[-2:] == ["training.max_steps=64", "training.seed=0"]
