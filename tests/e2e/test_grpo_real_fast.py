"""The pre-registered real-model GRPO experiment (benchmarks/grpo_real.py, `make grpo-real`) at toy sizes,
so it cannot rot: one `--fast` run of the real pipeline (posttrain train / compare as subprocesses, on
tiny:qwen2-1m), what it wrote, that `--tables` rebuilds the same numbers from the committed files alone,
and the plan's decision rule on hand-made per-seed tests (the real run's numbers cannot be known in advance).
"""

from __future__ import annotations

import importlib.util
import json
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

pytestmark = [pytest.mark.e2e, pytest.mark.slow]
REPO = Path(__file__).resolve().parents[2]
SCRIPT = REPO / "benchmarks" / "grpo_real.py"


def _script():
    spec = importlib.util.spec_from_file_location("grpo_real", SCRIPT)
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses look their module up while the file executes
    spec.loader.exec_module(module)
    return module


@pytest.fixture(scope="module")
def fast_run(tmp_path_factory):
    out = tmp_path_factory.mktemp("grpo-real")
    result = subprocess.run([sys.executable, str(SCRIPT), "--fast", "--out", str(out)], cwd=REPO, capture_output=True, text=True,
                            timeout=900)
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    return out, result.stdout


def test_every_planned_run_trained_and_answered_the_same_test_items(fast_run):
    out, stdout = fast_run
    assert "## Each GRPO seed, paired exact McNemar" in stdout and "**Goal:" in stdout
    arms = [a["name"] for a in json.loads((out / "samples" / "arms.json").read_text())]
    assert arms == ["base", "start", "grpo@run-0", "grpo@run-1", "more-sft"]
    ids = None
    for arm in arms:
        answered = sorted(json.loads(line)["id"] for line in (out / "samples" / f"{arm}.jsonl").read_text().splitlines())
        assert len(answered) == 12 and answered == (ids := ids or answered)
    for seed in (0, 1):  # the shipped recipe, from the start adapter, with its own seed
        resolved = yaml.safe_load((out / "arms" / f"grpo-s{seed}" / "resolved_recipe.yaml").read_text())
        assert resolved["training"]["seed"] == seed and resolved["model"]["base_model_name"].endswith("start")
        shipped = yaml.safe_load((REPO / "recipes/demo-real/grpo.yaml").read_text())["training"]["rewards"]
        assert [{k: v for k, v in r.items() if v is not None} for r in resolved["training"]["rewards"]] == shipped
    control = yaml.safe_load((out / "arms" / "more-sft" / "resolved_recipe.yaml").read_text())["training"]
    assert control["algorithm"] == "sft" and control["max_steps"] == 2  # 2 steps x 8 sequences = one toy GRPO run's 16


def test_tables_rebuild_from_the_committed_files_alone(fast_run, tmp_path):
    out, _ = fast_run
    before = json.loads((out / "results.json").read_text())
    copy = tmp_path / "copy"
    (copy / "samples").mkdir(parents=True)
    for f in (out / "samples").iterdir():
        (copy / "samples" / f.name).write_bytes(f.read_bytes())
    for name in ("meta.json", "health.json"):  # what benchmarks/results/grpo_real/ commits beside the samples
        (copy / name).write_bytes((out / name).read_bytes())
    assert _script().tables(copy) == before


def test_the_control_is_compute_matched_to_the_shipped_recipe():
    grpo = yaml.safe_load((REPO / "recipes/demo-real/grpo.yaml").read_text())["training"]
    assert _script().control_steps(_script().FULL) * 8 == grpo["max_steps"] * grpo["per_device_train_batch_size"]


def _test(delta: float, p: float) -> dict:
    return {"delta": delta, "p": p, "significant_gain": p < 0.05 and delta > 0}


def test_the_decision_rule_needs_every_seed_significant():
    decide = _script().decide
    good = {"loose": _test(0.06, 0.01), "strict": _test(0.3, 1e-9), "strict_vs_more_sft": _test(0.3, 1e-9),
            "strict_vs_forced_format": _test(0.05, 0.03)}
    assert decide({f"grpo@run-{s}": good for s in range(3)}, 3)["goal"] == "met"
    one_weak = {**good, "loose": _test(0.03, 0.2)}
    h = decide({"grpo@run-0": good, "grpo@run-1": one_weak, "grpo@run-2": good}, 3)
    assert h["goal"] == "not met" and not h["H1"]["holds"] and h["H1"]["positive_seeds"] == 3 and h["H1"]["significant_seeds"] == 2
    assert h["H2"]["holds"] and h["H3"]["holds"] and h["H4"]["holds"]
    assert decide({f"grpo@run-{s}": good for s in range(2)}, 3)["goal"] == "not met (partial: 2 of 3 seeds)"
