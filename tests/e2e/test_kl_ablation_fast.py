"""The KL ablation demo (benchmarks/kl_ablation.py) at toy sizes, so it cannot rot.

One `--fast` run (the real pipeline: posttrain train / compare / report subprocesses on a 1M model,
a few steps each), then checks on what it wrote: the report's tables, every arm, n and seeds,
a McNemar row for every pair, identical items for every arm, and no held-out problem in any
training file.
"""

from __future__ import annotations

import importlib.util
import itertools
import json
import re
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = [pytest.mark.e2e, pytest.mark.slow]
REPO = Path(__file__).resolve().parents[2]
SCRIPT = REPO / "benchmarks" / "kl_ablation.py"
ARMS = ["base", "grpo-beta0.04", "grpo-beta0", "gspo"]


def _script():
    spec = importlib.util.spec_from_file_location("kl_ablation", SCRIPT)
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses look their module up while the file executes
    spec.loader.exec_module(module)
    return module


@pytest.fixture(scope="module")
def fast_run(tmp_path_factory):
    out = tmp_path_factory.mktemp("kl-ablation")
    result = subprocess.run([sys.executable, str(SCRIPT), "--fast", "--jobs", "3", "--quiet", "--out", str(out)],
                            cwd=REPO, capture_output=True, text=True, timeout=600)
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    return out, result.stdout


def _jsonl(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def _table_rows(markdown: str, heading: str) -> list[list[str]]:
    """Rows (cells) of the first table after the heading that contains `heading`."""
    section = markdown.split(heading, 1)[1]
    rows = []
    for line in section.splitlines()[1:]:
        if line.startswith("|"):
            rows.append([cell.strip() for cell in line.strip("|").split("|")])
        elif rows:
            break
    return rows[2:]  # without the header and the |---| line


def test_report_is_printed_and_has_both_tables(fast_run):
    out, stdout = fast_run
    report = (out / "report.md").read_text()
    assert report.strip() in stdout  # printed as written
    assert "## Accuracy (posttrain compare)" in report and "## Training telemetry of the arms (posttrain report)" in report
    accuracy = {row[0]: row for row in _table_rows(report, "arithmetic: 16 items")}
    assert list(accuracy) == ARMS
    assert all(row[2] == "16" for row in accuracy.values())  # n per arm
    for metric in ("reward", "completion length", "entropy", "KL"):
        rows = _table_rows(report, f"#### {metric}\n")
        assert rows and all(len(row) == 1 + 3 for row in rows), metric  # a column per trained arm
    assert "grpo-beta0: beta=0.0, no KL term" in report
    assert (out / "accuracy.png").stat().st_size > 0 and (out / "telemetry.png").stat().st_size > 0


def test_report_states_n_seeds_recipes_and_what_differed(fast_run):
    report = (fast_run[0] / "report.md").read_text()
    assert "n = 16 problems" in report
    assert "generator seed 1234" in report and "seed 0 with every held-out" in report and "`training.seed` 0" in report
    for recipe in ("base.yaml", "grpo-beta0.04.yaml", "grpo-beta0.yaml", "gspo.yaml"):
        assert f"recipes/demo/kl-ablation/{recipe}" in report
    assert "differ only in: `beta` (0.04 vs 0.0)" in report
    for stage in ("data", "base", "grpo-beta0.04", "grpo-beta0", "gspo", "compare", "telemetry"):
        assert re.search(rf"^\| {re.escape(stage)} \| .* \| [\d.]+ min \(\d+ s\)", report, re.M), stage


def test_every_pair_has_mcnemar_rows(fast_run):
    report = (fast_run[0] / "report.md").read_text()
    rows = _table_rows(report, "paired comparison")
    found = {(row[0], row[1], row[2]) for row in rows}
    for a, b in itertools.combinations(ARMS, 2):
        for metric in ("strict", "loose"):
            assert (metric, a, b) in found, (metric, a, b)
    assert all(0.0 <= float(row[9]) <= 1.0 for row in rows)  # the exact p-value


def test_every_arm_answered_the_identical_heldout_problems(fast_run):
    out = fast_run[0]
    ids = {arm: [row["id"] for row in _jsonl(out / "compare" / "samples" / f"{arm}.jsonl")] for arm in ARMS}
    assert len(set(map(tuple, ids.values()))) == 1 and len(ids["base"]) == 16
    assert sorted(ids["base"]) == sorted(row["id"] for row in _jsonl(out / "data" / "heldout.jsonl"))


def test_heldout_problems_never_appear_in_training_files(fast_run):
    out = fast_run[0]
    evaluated = {row["prompt"][-1]["content"] for row in _jsonl(out / "compare" / "samples" / "base.jsonl")}
    train = {
        "base": [m["content"] for row in _jsonl(out / "data" / "base.jsonl") for m in row["messages"] if m["role"] == "user"],
        "grpo": [row["question"] for row in _jsonl(out / "data" / "grpo.jsonl")],
    }
    assert all(train.values())
    for name, questions in train.items():
        assert not evaluated & set(questions), name
        text = (out / "data" / f"{name}.jsonl").read_text()
        assert not [q for q in evaluated if json.dumps(q)[1:-1] in text], name  # not even inside another field
    # the arms really trained on those files
    for arm in ("grpo-beta0.04", "grpo-beta0", "gspo"):
        resolved = (out / "arms" / arm / "resolved_recipe.yaml").read_text()
        assert str(out / "data" / "grpo.jsonl") in resolved


def test_the_data_check_catches_a_leak(tmp_path, monkeypatch):
    """The script refuses to train when a held-out question is in the training data."""
    module = _script()
    from posttrain.evaluation.tasks import load_task

    leaked = load_task("arithmetic", n=module.FAST.n_eval, seed=module.EVAL_SEED, data_seed=module.HELDOUT_SEED)[0]["question"]
    real = module.tagged

    def leaky_tagged(solution, answer):  # smuggle a held-out question into the base's answers
        return real(solution, answer) + " " + leaked

    monkeypatch.setattr(module, "tagged", leaky_tagged)
    with pytest.raises(SystemExit, match="held-out/dev question"):
        module.build_data(tmp_path / "data", module.FAST, tag_share=1.0)


def test_base_cache_key_follows_recipes_overrides_and_data(tmp_path):
    module = _script()
    manifest = module.build_data(tmp_path / "data", module.FAST, tag_share=0.2)
    key = module.base_key(module.FAST, manifest)
    assert key == module.base_key(module.FAST, json.loads((tmp_path / "data" / "manifest.json").read_text()))
    other_steps = module.Scale(**{**module.FAST.__dict__, "base": (*module.FAST.base, "training.max_steps=9")})
    assert module.base_key(other_steps, manifest) != key
    other_data = module.build_data(tmp_path / "other", module.FAST, tag_share=0.5)  # other chat answers
    assert module.base_key(module.FAST, other_data) != key


def test_arm_seed_reaches_every_arm_and_only_the_arms(tmp_path):
    module = _script()
    data, arms = tmp_path / "data", tmp_path / "arms"
    default = module.arm_stage("grpo-beta0", tmp_path / "base", data, arms, module.FULL)
    replica = module.arm_stage("grpo-beta0", tmp_path / "base", data, arms, module.FULL, seed=1)
    assert not any(a.startswith("training.seed=") for a in default.argv)  # the recipe's seed 0
    assert replica.argv == [*default.argv, "training.seed=1"]
    assert not any(a.startswith("training.seed=") for a in module.base_stage(tmp_path, data, module.FULL).argv)


def test_dose_response_with_seeds_and_gameable_reward_at_toy_size(fast_run, tmp_path):
    """--betas/--seeds/--reward gameable: one run per (beta, seed) that differs only in those keys
    (and the rewards), several-seed arms in compare with the pooled test. Reuses the fast base."""
    import shutil

    source, _ = fast_run
    for base in source.glob("base-*"):
        shutil.copytree(base, tmp_path / base.name)
    result = subprocess.run([sys.executable, str(SCRIPT), "--fast", "--betas", "0", "1.0", "--seeds", "0", "1",
                             "--reward", "gameable", "--jobs", "2", "--quiet", "--out", str(tmp_path)],
                            cwd=REPO, capture_output=True, text=True, timeout=900)
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    runs = {name: json.loads((tmp_path / "arms" / name / "trl_config.json").read_text())
            for name in ("beta0-s0", "beta0-s1", "beta1-s0", "beta1-s1")}
    assert {n: (c["beta"], c["seed"]) for n, c in runs.items()} == {
        "beta0-s0": (0.0, 0), "beta0-s1": (0.0, 1), "beta1-s0": (1.0, 0), "beta1-s1": (1.0, 1)}
    resolved = (tmp_path / "arms" / "beta0-s0" / "resolved_recipe.yaml").read_text()
    assert "kl_rewards:lenient_format" in resolved and "kl_rewards:brevity" in resolved
    report = (tmp_path / "report-heldout.md").read_text()
    assert "arms with several seeds" in report and "Cochran-Mantel-Haenszel by item" in report
    compare = json.loads((tmp_path / "compare-heldout" / "report.json").read_text())
    assert [g["arm"] for g in compare["seed_groups"]] == ["beta0", "beta1"] and all(g["seeds"] == 2 for g in compare["seed_groups"])
    pairs = {(c["arm_a"], c["arm_b"], c["metric"]) for c in compare["pooled_comparisons"]}
    assert {("base", "beta0", "loose"), ("beta0", "beta1", "loose"), ("base", "beta1", "strict")} <= pairs
    assert "Hypotheses and decision rule" in report and "[base] reusing" not in result.stdout  # --quiet
    # The same arms evaluated once more on the other split: --reuse-arms trains nothing again.
    weights = {p: p.stat().st_mtime_ns for p in (tmp_path / "arms").glob("*/model.safetensors")}
    assert len(weights) == 4
    again = subprocess.run([sys.executable, str(SCRIPT), "--fast", "--betas", "0", "1.0", "--seeds", "0", "1",
                            "--reward", "gameable", "--reuse-arms", "--split", "dev", "--out", str(tmp_path)],
                           cwd=REPO, capture_output=True, text=True, timeout=900)
    assert again.returncode == 0, again.stdout[-3000:] + again.stderr[-3000:]
    assert again.stdout.count("(--reuse-arms)") == 4 and "[beta0-s0] posttrain train" not in again.stdout
    assert {p: p.stat().st_mtime_ns for p in weights} == weights
    assert "dev (tuning split)" in (tmp_path / "report-dev.md").read_text()
    assert (tmp_path / "report-heldout.md").is_file() and (tmp_path / "compare-dev" / "report.json").is_file()
    # A changed command (another reward) is not the same arm: it is retrained.
    third = subprocess.run([sys.executable, str(SCRIPT), "--fast", "--betas", "0", "--seeds", "0", "--reuse-arms",
                            "--quiet", "--out", str(tmp_path)], cwd=REPO, capture_output=True, text=True, timeout=900)
    assert third.returncode == 0, third.stdout[-3000:] + third.stderr[-3000:]
    assert (tmp_path / "arms" / "beta0-s0" / "model.safetensors").stat().st_mtime_ns != weights[tmp_path / "arms" / "beta0-s0" / "model.safetensors"]
