"""benchmarks/gpu.py runs at toy size on CPU: real cases measured, impossible ones skipped with a reason."""

import json
import subprocess
import sys

import pytest

pytestmark = [pytest.mark.e2e, pytest.mark.slow]


def test_gpu_benchmark_toy_run_on_cpu(repo, tmp_path):
    out = tmp_path / "gpu.json"
    cmd = [sys.executable, "benchmarks/gpu.py", "--device", "cpu", "--tiny", "--steps", "2", "--out", str(out),
           "--cases", "sft_posttrain", "sft_trl", "gen_hf", "gen_vllm", "qlora"]
    result = subprocess.run(cmd, cwd=repo, capture_output=True, text=True, timeout=600, env={**__import__("os").environ, "OMP_NUM_THREADS": "1"})
    assert result.returncode == 0, result.stderr[-3000:]
    assert "| model | case | tokens/s |" in result.stdout
    report = json.loads(out.read_text())
    rows = {r["case"]: r for r in report["rows"]}
    assert report["device"] == "cpu" and report["tiny"] is True
    for case in ("sft_posttrain", "sft_trl", "gen_hf"):
        assert "failed" not in rows[case], rows[case]
        assert rows[case]["tokens_per_s"] > 0 and rows[case]["peak_memory_mb"] > 0
    assert rows["sft_posttrain"]["mfu"] is None  # no GPU, no peak FLOP/s: never an invented number
    # posttrain and plain TRL really ran the same training: the same first loss, in float32 (the toy pins it): the
    # mean over the batch's tokens of log-sum-exps over 1,152 logits, from sums of up to 768 terms that posttrain's
    # flattened rows add in another order than TRL's padded batch (float32 steps: 1.2e-7; the same sums in the
    # flattened-batch tests differ by under 1e-6 on AVX2, avx512 and AMX kernels)
    assert rows["sft_posttrain"]["first_loss"] == pytest.approx(rows["sft_trl"]["first_loss"], rel=1e-5)
    assert rows["qlora"]["skipped"] == "no CUDA GPU"
    assert rows["gen_vllm"]["skipped"] in ("vllm not installed", "no CUDA GPU")
