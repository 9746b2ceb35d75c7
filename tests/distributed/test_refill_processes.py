"""training.refill_zero_variance_groups with two processes (torchrun + gloo on CPU): every rank decides from the same
gathered rewards, so the ranks draw the same number of times and stay in step, and each fills its own batch."""

from __future__ import annotations

import json
import os

import pytest
from mp_testing import REPO, posttrain

pytestmark = [pytest.mark.e2e, pytest.mark.slow]


def test_two_processes_refill_in_step_until_both_batches_are_full(tmp_path, data_dir):
    out = tmp_path / "run"
    pythonpath = os.pathsep.join(filter(None, [str(REPO / "tests" / "e2e"), os.environ.get("PYTHONPATH")]))
    result = posttrain("train", "--recipe", "recipes/grpo/tiny-cpu.yaml", "--nproc", "2", f"training.output_dir={out}",
                       f"data.datasets[0].name={data_dir / 'problems.jsonl'}",
                       "training.rewards=[{name: 'refill_rewards:half_the_prompts'}]", "training.refill_zero_variance_groups=8",
                       "training.per_device_train_batch_size=4", "training.num_generations=4", "training.max_completion_length=8",
                       "training.max_steps=3", "training.logging_steps=1", "training.save_steps=1000", env={"PYTHONPATH": pythonpath})
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    assert "2 processes (2 on this node), distributed type MULTI_CPU" in result.stdout
    assert result.stdout.count("refill: groups whose rewards are all equal") == 1  # rank 0 speaks
    refills = [r for r in map(json.loads, (out / "metrics.jsonl").read_text().splitlines()) if "refill/draws" in r]
    assert len(refills) == 3
    # each rank holds one group a step, counted over the two ranks: kept with signal, or topped up only once both
    # ranks had drawn all 8 extra batches together
    assert all(r["refill/groups_kept"] + r["refill/groups_short"] == 2 for r in refills)
    assert all(r["refill/groups_drawn"] == 2 * (1 + r["refill/draws"]) for r in refills)
    assert all(r["refill/groups_short"] == 0 or r["refill/draws"] == 8 for r in refills)
    assert any(r["refill/draws"] >= 1 and r["refill/groups_short"] == 0 for r in refills)  # a refill filled both batches
