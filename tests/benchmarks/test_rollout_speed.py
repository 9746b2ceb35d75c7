"""benchmarks/rollout_speed.py at toy size: every contestant runs, the machine's limits are measured in
the same run, and the same-token checks pass (what makes the speed comparison a comparison of the
same work). Timings are not checked: they are the benchmark's job."""

import json
import os
import subprocess
import sys

import pytest

from posttrain.models.loading import DeviceInfo

pytestmark = pytest.mark.e2e


def test_rollout_speed_toy(repo, tiny_dir, tmp_path):
    out = tmp_path / "rollout.json"
    cmd = [sys.executable, "benchmarks/rollout_speed.py", "--models", "tiny:qwen2-1m", "--prompts", "2", "--generations", "2",
           "--max-new-tokens", "4", "--repeats", "1", "--out", str(out)]
    result = subprocess.run(cmd, cwd=repo, capture_output=True, text=True, timeout=600, env={**os.environ, "OMP_NUM_THREADS": "1"})
    assert result.returncode == 0, result.stderr[-3000:]
    assert "rollout draws at top_k=1 same as eval-mode generate: yes; same greedy tokens: yes" in result.stdout
    report = json.loads(out.read_text())
    assert report["limits"]["matmul_gflops"] > 0 and report["limits"]["read_gbs"] > 0
    rows = {(r["setting"].split(" (")[0], r["contestant"]): r for r in report["rows"]}
    # on a CPU with native bf16, TRL's defaults generate under bf16 autocast: that way of running generate races too
    autocast = {("GRPO rollout", "generate, as TRL's bf16 default runs it (autocast)")} if DeviceInfo.detect().bf16 else set()
    assert set(rows) == autocast | {("GRPO rollout", "generate, as TRL calls it (train mode)"), ("GRPO rollout", "generate, eval mode"),
                         ("GRPO rollout", "generate with posttrain's inference weights"),
                         ("GRPO rollout", "posttrain's loop without its inference weights"), ("GRPO rollout", "posttrain"),
                         ("evaluation", "generate"), ("evaluation", "posttrain")}
    for row in rows.values():
        assert row["tokens_per_s"] > 0 and 0 < row["flops_share"] < 1 and row["rows"] == 4
    (model,) = report["models"]
    assert model["rollout_same_policy"] and model["eval_same_tokens"] and model["parameters"] > 0
