"""benchmarks/startup.py runs at toy size: both contestants reach step 1, the same step, and the report has its shape.

Timings are the benchmark's business, not this test's: it checks that the numbers exist and are
consistent with each other (step 1 comes after the trainer starts, recipe handling is part of
the run), never how fast they are.
"""

import json
import os
import subprocess
import sys

import pytest

pytestmark = [pytest.mark.e2e, pytest.mark.slow]


def test_startup_benchmark_toy_run(repo, tmp_path):
    out = tmp_path / "startup.json"
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    result = subprocess.run([sys.executable, "benchmarks/startup.py", "--repeats", "1", "--warmup", "0", "--out", str(out)], cwd=repo,
                            capture_output=True, text=True, timeout=600, env=env)
    assert result.returncode == 0, result.stderr[-3000:]
    assert "| process start -> end of step 1 |" in result.stdout
    assert "| posttrain's own recipe handling in that run |" in result.stdout
    report = json.loads(out.read_text())
    assert report["repeats"] == 1 and report["recipe"] == "recipes/sft/tiny-cpu.yaml"
    # the proof that both contestants trained the same first step: identical starting weights, and every parameter's
    # update within startup.UPDATE_TOL of TRL's (the bound comes from AdamW's first step; see startup.py)
    assert report["same_step"] is True
    difference = report["step_difference"]
    assert difference["same_start"] is True and difference["parameters"] > 0
    assert 0 <= difference["worst"] <= 0.05
    for who in ("posttrain", "trl"):
        assert 0 < report["train_begin_s"][who] < report["step1_s"][who]
        assert 0 < report["train_begin_cpu_s"][who] <= report["step1_cpu_s"][who]
    assert report["step1_ratio"] == pytest.approx(report["step1_s"]["posttrain"] / report["step1_s"]["trl"], abs=1e-3)
    # recipe handling: the CLI's part and the run's later parts, inside the run's time to step 1
    parts = report["own_parts_s"]
    assert {"cli", "format_differences", "OutputDirLock.acquire", "provenance"} <= set(parts)
    assert 0 < parts["cli"] <= report["own_s"] < report["train_begin_s"]["posttrain"]
    assert 0 < report["own_cpu_s"] < report["train_begin_cpu_s"]["posttrain"]
    assert report["validate_s"] > report["python_s"] > 0
