"""benchmarks/defaults_race.py runs at toy size: three real contestants (posttrain's CLI, a plain TRL
script, FAI-RL's defaults in a plain TRL script) train on the same data, consume the same real
tokens, and the table and JSON say so. Timings are not checked: they are the benchmark's job."""

import json
import os
import subprocess
import sys

import pytest

pytestmark = [pytest.mark.e2e, pytest.mark.slow]


TOY = ["benchmarks/defaults_race.py", "--toy", "--repeats", "1", "--algorithm", "sft"]


def test_defaults_race_toy_sft(repo, tiny_dir, tmp_path):
    out = tmp_path / "race.json"
    cmd = [sys.executable, *TOY, "--out", str(out)]
    result = subprocess.run(cmd, cwd=repo, capture_output=True, text=True, timeout=900, env={**os.environ, "OMP_NUM_THREADS": "1"})
    assert result.returncode == 0, (result.stdout + result.stderr)[-3000:]
    check_toy_report(result.stdout, json.loads(out.read_text()))


def check_toy_report(stdout: str, report: dict) -> None:
    """What a toy race must show (also usable on the output of the TOY command run by hand)."""
    assert "| contestant | real tokens | tokens/s |" in stdout
    assert "posttrain / TRL:" in stdout and "posttrain / FAI-RL:" in stdout
    assert report["toy"] is True and report["repeats"] == 1 and report["model"] == "tiny:qwen2-1m"
    assert report["machine"]["cores"] >= 1 and report["versions"]["trl"] and report["date"]
    assert report["matmul_peak"]["flops"] > 0
    sft = report["results"]["sft"]
    contestants = sft["contestants"]
    assert set(contestants) == {"posttrain", "trl", "fairl"}
    tokens = {name: c["real_tokens"] for name, c in contestants.items()}
    # one pass over the same rows: every contestant's own count of non-padding tokens agrees
    assert min(tokens.values()) > 0 and max(tokens.values()) <= 1.01 * min(tokens.values()), tokens
    for name, c in contestants.items():
        assert c["real_tokens_per_s"] > 0 and c["wall_s"] > 0 and c["peak_tree_rss_mb"] > 100, (name, c)
        assert len(c["eval_curve"]) >= 2, (name, c["eval_curve"])  # checkpoints + final model, scored
        assert 0 < c["eval_loss"] < 10
    # FAI-RL's batch 1 x accumulation 16 takes fewer optimizer steps than TRL's batch 8 on 16 rows
    assert contestants["fairl"]["steps"] < contestants["trl"]["steps"]
    assert sft["common_eval_loss"] == max(c["eval_loss"] for c in contestants.values())
    for peer in ("trl", "fairl"):
        assert sft[f"posttrain_vs_{peer}"]["real_tokens_per_s"] > 0
    assert 0 < sft["posttrain_fraction_of_matmul_peak"] < 1
