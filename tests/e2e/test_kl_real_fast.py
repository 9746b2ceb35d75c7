"""The real-model KL experiment (benchmarks/kl_real.py, `make kl-real`) at toy sizes, so it cannot rot.

One `--fast` run of the real pipeline (posttrain train / compare / report and forced_format.py as
subprocesses, on tiny:qwen2-1m), then: what it wrote, that a re-run keeps every finished stage,
that `--tables` rebuilds the same numbers from the committed files alone, and the plan's decision
rule on hand-made inputs (the real run's numbers cannot be known in advance).
"""

from __future__ import annotations

import importlib.util
import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

pytestmark = [pytest.mark.e2e, pytest.mark.slow]
REPO = Path(__file__).resolve().parents[2]
SCRIPT = REPO / "benchmarks" / "kl_real.py"
RUNS = ["beta0-s0", "beta0-s1", "beta0.04-s0", "beta0.04-s1"]


def _script():
    spec = importlib.util.spec_from_file_location("kl_real", SCRIPT)
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses look their module up while the file executes
    spec.loader.exec_module(module)
    return module


def _run(*args: str) -> subprocess.CompletedProcess:
    result = subprocess.run([sys.executable, str(SCRIPT), *args], cwd=REPO, capture_output=True, text=True, timeout=900)
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    return result


@pytest.fixture(scope="module")
def fast_run(tmp_path_factory):
    out = tmp_path_factory.mktemp("kl-real")
    return out, _run("--fast", "--out", str(out)).stdout


def _jsonl(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def test_every_planned_run_trained_and_answered_the_same_heldout_items(fast_run):
    out, stdout = fast_run
    assert "## Per arm (mean over seeds)" in stdout and "Outcome by the plan's rule" in stdout
    heldout = [row["id"] for row in _jsonl(out / "data" / "heldout-chats.jsonl")]
    arms = json.loads((out / "samples" / "arms.json").read_text())
    assert [a["name"] for a in arms] == ["base", "beta0@run-0", "beta0@run-1", "beta0.04@run-0", "beta0.04@run-1"]
    for arm in arms:
        assert sorted(r["id"] for r in _jsonl(out / "samples" / f"{arm['name']}.jsonl")) == sorted(heldout), arm
    for run in RUNS:  # trained with their own beta and seed, from the base adapter, checkpoints removed
        resolved = yaml.safe_load((out / "arms" / run / "resolved_recipe.yaml").read_text())
        beta, seed = run[4:].split("-s")
        assert (resolved["training"]["beta"], resolved["training"]["seed"]) == (float(beta), int(seed))
        assert resolved["model"]["base_model_name"] == str(out / "base" / "model")
        assert not list((out / "arms" / run).glob("checkpoint-*"))
    # the held-out chats open with grpo.yaml's system prompt, the one the base and GRPO saw
    prompt = _script().system_prompt()
    assert all(row["prompt"][0]["content"] == prompt for row in _jsonl(out / "data" / "heldout-chats.jsonl"))
    assert {m["content"] for row in _jsonl(out / "data" / "base.jsonl") for m in row["messages"] if m["role"] == "system"} == {prompt}


def test_results_carry_both_tests_per_seed_numbers_and_the_diagnostic(fast_run):
    out = fast_run[0]
    results = json.loads((out / "results.json").read_text())
    assert results["arms"]["beta0"]["seeds"] == 2 and len(results["arms"]["beta0.04"]["per_seed_loose"]) == 2
    primary = [c for c in results["pooled"] if {c["arm_a"], c["arm_b"]} == {"beta0", "beta0.04"} and c["metric"] == "loose"]
    assert len(primary) == 1 and "conservative_verdict" in primary[0]
    # Welch's t over the seeds, or, where a toy run's seeds do not differ at all, the reason it is undefined
    assert primary[0]["seed_test"] == "welch" or "no spread" in primary[0]["seed_note"]
    assert set(results["diagnostic"]) == {"", "<think>", "<think></think>\n<answer>"}
    assert set(results["health"]) == set(RUNS)
    assert results["hypotheses"]["outcome"] in {"the seed's finding reproduces", "reproduces in direction, not in mechanism",
                                                "the hack without an accuracy cost", "does not reproduce"}


def test_a_rerun_keeps_every_finished_stage(fast_run):
    out = fast_run[0]
    before = (out / "arms" / "beta0-s0" / "adapter_model.safetensors").stat().st_mtime_ns
    stdout = _run("--fast", "--out", str(out)).stdout
    for stage in ["base", *RUNS, "diagnostic", "compare", "telemetry"]:
        assert f"[{stage}] done before" in stdout, stage
    assert (out / "arms" / "beta0-s0" / "adapter_model.safetensors").stat().st_mtime_ns == before


def test_tables_are_rebuilt_from_the_committed_files_alone(fast_run, tmp_path):
    """What benchmarks/results/kl_real/ holds is enough to recompute every number: no model, no run folder."""
    out = fast_run[0]
    for name in ("samples", "meta.json", "health.json"):
        (shutil.copytree if (out / name).is_dir() else shutil.copy)(out / name, tmp_path / name)
    _run("--tables", str(tmp_path))
    assert json.loads((tmp_path / "results.json").read_text()) == json.loads((out / "results.json").read_text())
    assert (tmp_path / "results.md").read_text() == (out / "results.md").read_text()


def _arms(empty0: float, empty004: float) -> dict:
    return {name: {"empty_think": e, "seeds": 3} for name, e in (("beta0", empty0), ("beta0.04", empty004), ("base", 0.0))}


def _pooled(a: str, b: str, delta: float, verdict: str) -> dict:
    return {"metric": "loose", "arm_a": a, "arm_b": b, "delta": delta, "conservative_verdict": verdict}


META = {"betas": [0.0, 0.04], "seeds": [0, 1, 2]}


@pytest.mark.parametrize("order", ["plan", "compare"])  # A/B as the plan writes it, and as compare orders the arms
def test_decision_rule_the_finding_reproduces(order):
    module = _script()
    primary = (_pooled("beta0.04", "beta0", -0.2, "significant regression") if order == "plan"
               else _pooled("beta0", "beta0.04", 0.2, "significant improvement"))
    pooled = [primary, _pooled("base", "beta0", -0.25, "significant regression"),
              _pooled("base", "beta0.04", -0.02, "no measurable difference")]
    h = module.decide(META, _arms(0.8, 0.1), {"": {"loose": 0.4}, "<think>": {"loose": 0.4}, "<think></think>\n<answer>": {"loose": 0.2}}, pooled)
    assert h["outcome"] == "the seed's finding reproduces"
    assert h["H0"]["holds"] and h["H1"]["holds"] and h["H2"]["holds"] and h["H3"]["holds"]


def test_decision_rule_needs_both_tests_and_the_mechanism():
    module = _script()
    cmh_only = [_pooled("beta0", "beta0.04", 0.2, "no measurable difference"),  # CMH significant, seed-level not
                _pooled("base", "beta0", -0.25, "no measurable difference"), _pooled("base", "beta0.04", 0.0, "no measurable difference")]
    h = module.decide(META, _arms(0.8, 0.1), {"": {"loose": 0.2}, "<think>": {"loose": 0.3}, "<think></think>\n<answer>": {"loose": 0.28}}, cmh_only)
    assert h["outcome"] == "the hack without an accuracy cost"
    assert not h["H0"]["holds"] and not h["H3"]["holds"]  # base below 25%; beta 0's drop not significant
    no_hack = [_pooled("beta0", "beta0.04", 0.2, "significant improvement"), *cmh_only[1:]]
    assert module.decide(META, _arms(0.3, 0.1), {}, no_hack)["outcome"] == "reproduces in direction, not in mechanism"
    assert module.decide(META, _arms(0.3, 0.1), {}, cmh_only)["outcome"] == "does not reproduce"
    # beta 0 *better* than beta 0.04 is not the seed's finding, however significant
    better = [_pooled("beta0", "beta0.04", -0.2, "significant regression"), *cmh_only[1:]]
    assert not module.decide(META, _arms(0.8, 0.1), {}, better)["H1"]["holds"]
    partial = {**_arms(0.8, 0.1), "beta0": {"empty_think": 0.8, "seeds": 2}}
    assert module.decide(META, partial, {}, cmh_only)["outcome"].endswith("(partial: fewer seeds than planned)")


def test_empty_think_is_the_health_checks_rule():
    from posttrain.monitoring.health import empty_think_share

    module = _script()
    texts = ["<think></think>\n<answer>4</answer>", "<think> \n</think><answer>4</answer>", "<think>2+2</think><answer>4</answer>", "4"]
    records = [{"completion": t, "strict": 0, "loose": 0, "format": 0, "completion_tokens": 3} for t in texts]
    assert module.describe(records, limit=64)["empty_think"] == empty_think_share(texts) == 0.5
