"""Two real processes (torchrun, gloo on CPU): the data is sharded and rank 0 alone writes the run."""

import json
import os
import subprocess
import sys

import pytest

pytestmark = pytest.mark.e2e


def test_two_process_sft_shards_data_and_writes_once(repo, tmp_path, data_dir):
    out = tmp_path / "ddp"
    cmd = [sys.executable, "-m", "torch.distributed.run", "--nproc_per_node", "2", "-m", "posttrain", "train",
           "--recipe", "recipes/sft/tiny-cpu.yaml", f"training.output_dir={out}", f"data.datasets[0].name={data_dir / 'sft.jsonl'}",
           "training.max_steps=2", "training.per_device_train_batch_size=8", "training.logging_steps=1", "training.ddp_backend=gloo"]
    result = subprocess.run(cmd, cwd=repo, capture_output=True, text=True, timeout=300, env={**os.environ, "OMP_NUM_THREADS": "1"})
    assert result.returncode == 0, result.stderr[-3000:]
    assert result.stdout.count("done: final model in") == 1  # only rank 0 reports and saves
    records = [json.loads(l) for l in (out / "metrics.jsonl").read_text().splitlines()]
    # 64 rows, 2 processes x 8 per step: an epoch is 4 steps, so 2 steps are half an epoch (1 process: a quarter).
    assert records[-1]["epoch"] == pytest.approx(0.5)
    assert len([r for r in records if "loss" in r]) == 2
