"""data.max_drop_fraction through the real CLI: a dataset that loses more of its rows than the limit stops the run
with exit 2 before training, naming each reason and count (the token audit's case is in test_token_audit.py)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

pytestmark = pytest.mark.e2e


def write(path: Path, rows: list[dict]) -> Path:
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


def problems(n: int, start: int = 0) -> list[dict]:
    return [{"question": f"What is {i} + 1?", "answer": f"#### {i + 1}"} for i in range(start, start + n)]


def test_unreadable_gold_answers_over_the_limit_stop_before_the_model_loads(cli, tmp_path):
    data = write(tmp_path / "p.jsonl", problems(8) + [{"question": "Half of one?", "answer": "#### \\frac{1}{2}"}] * 2)
    out = tmp_path / "run"
    result = cli("train", "--recipe", "recipes/grpo/tiny-cpu.yaml", f"data.datasets[0].name={data}", f"training.output_dir={out}")
    assert result.returncode == 2, result.stdout[-2000:] + result.stderr[-2000:]
    assert (f"data.datasets[0] ({data}) lost 20.0% of its rows: 2 of 10 rows at reading (2 'answer' not a number the rewards "
            "can compare") in result.stderr, result.stderr
    assert "raise data.max_drop_fraction" in result.stderr and "Traceback" not in result.stderr and not out.exists()
    assert "posttrain at start-up" not in result.stdout  # stopped before the device and model were looked at


def test_prompts_over_max_prompt_length_count_against_their_dataset(cli, tmp_path):
    long = [{"question": "Count the apples again and again. " * 60 + f"How many? {i}", "answer": "#### 3"} for i in range(3)]
    data = write(tmp_path / "p.jsonl", problems(9) + long)
    out = tmp_path / "run"
    args = ["train", "--recipe", "recipes/grpo/tiny-cpu.yaml", f"data.datasets[0].name={data}", f"training.output_dir={out}",
            "data.max_prompt_length=256", "training.max_steps=1", "training.max_completion_length=4"]
    refused = cli(*args)
    assert refused.returncode == 2, refused.stdout[-2000:] + refused.stderr[-2000:]
    assert f"data.datasets[0] ({data}) lost 25.0% of its rows: 3 of 12 remaining rows over data.max_prompt_length=256" in refused.stderr
    assert not out.exists()
    assert cli(*args, "data.max_drop_fraction=0.25").returncode == 0  # at the limit: trains on the 9 that fit
