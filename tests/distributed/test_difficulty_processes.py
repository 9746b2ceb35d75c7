"""training.difficulty_filter with two processes (torchrun + gloo on CPU): each rank scores its half of the prompts, the
scores are gathered, and both ranks keep the same prompts and train on them."""

from __future__ import annotations

import json
import os
import re

import pytest
from mp_testing import REPO, posttrain

pytestmark = [pytest.mark.e2e, pytest.mark.slow]


def test_two_processes_score_their_shares_and_keep_the_same_prompts(tmp_path, data_dir):
    out, calls = tmp_path / "run", tmp_path / "calls.txt"
    pythonpath = os.pathsep.join(filter(None, [str(REPO / "tests" / "e2e"), os.environ.get("PYTHONPATH")]))
    result = posttrain("train", "--recipe", "recipes/grpo/tiny-cpu.yaml", "--nproc", "2", f"training.output_dir={out}",
                       f"data.datasets[0].name={data_dir / 'problems.jsonl'}", "training.rewards=[{name: 'difficulty_rewards:graded'}]",
                       "training.difficulty_filter.samples=4", "data.max_drop_fraction=0.9",
                       "training.per_device_train_batch_size=4", "training.num_generations=4", "training.max_completion_length=8",
                       "training.max_steps=2", "training.logging_steps=1", "training.save_steps=1000",
                       env={"PYTHONPATH": pythonpath, "DIFFICULTY_CALLS": str(calls)})
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    assert "2 processes (2 on this node), distributed type MULTI_CPU" in result.stdout
    assert "difficulty: scoring 64 prompts with the starting policy, 4 samples and 1 greedy completion each" in result.stdout
    assert result.stdout.count("difficulty: pass rates of 64 prompts") == 1  # rank 0 speaks
    assert len(calls.read_text().splitlines()) == 2  # one scoring call per rank: each scored its own 32 prompts
    scores = [json.loads(line) for line in (out / "difficulty" / "pass_rates.jsonl").read_text().splitlines()]
    assert [s["row"] for s in scores] == list(range(64))  # both halves gathered
    kept = sum(0.01 <= s["passes"] / 4 <= 0.99 for s in scores)
    assert 0 < kept < 64 and f"difficulty: kept {kept} of 64 prompts" in result.stdout
    assert re.search(rf"token audit prompts \(train\): {kept} prompts", result.stdout)
    assert len([r for r in map(json.loads, (out / "metrics.jsonl").read_text().splitlines()) if "loss" in r]) == 2
