"""`posttrain eval` on a CPU: each task's own token budget unless --max-new-tokens is given (and the one
used is in the summary), and a progress bar that counts answers and tokens as they are made, inside a
batch, not batches."""

from __future__ import annotations

import json
import re

from posttrain.evaluation.tasks import TASKS


def run_eval(cli, tmp_path, *flags, env=None):
    out = tmp_path / "eval"
    result = cli("eval", "--model", "tiny:qwen2-1m", "--task", "arithmetic", "--n", "3", "--out", out, *flags, env=env)
    assert result.returncode == 0, result.stderr
    samples = [json.loads(line) for line in (out / "samples.jsonl").read_text().splitlines()]
    return result, json.loads((out / "summary.json").read_text()), samples


def test_the_task_sets_the_budget(cli, tmp_path):
    result, summary, samples = run_eval(cli, tmp_path, "--no-progress")
    budget = TASKS["arithmetic"].max_new_tokens
    assert budget < 512  # arithmetic answers are short: the old one-size default was 512
    assert f"max_new_tokens: {budget} (the arithmetic task's default; --max-new-tokens N sets it)" in result.stderr
    assert summary["settings"]["max_new_tokens"] == budget and f"max_new_tokens={budget}" in result.stdout
    assert max(s["completion_tokens"] for s in samples) <= budget


def test_the_flag_wins_and_the_bar_counts_answers_and_tokens_inside_one_batch(cli, tmp_path):
    """Three items, one batch (a CPU takes 64): the bar shows the tokens growing step by step before the
    batch ends, and ends on every item and the exact token total."""
    result, summary, samples = run_eval(cli, tmp_path, "--max-new-tokens", "8", env={"TQDM_MININTERVAL": "0"})
    assert "task's default" not in result.stderr
    assert summary["settings"]["max_new_tokens"] == 8 and all(s["completion_tokens"] <= 8 for s in samples)

    states = re.findall(r"(\d+)/3 \[.*?([\d,]+) tokens, ([\d,.]+) tokens/s\]", result.stderr)
    assert states, result.stderr
    tokens = [int(t.replace(",", "")) for _, t, _ in states]
    before_the_end = {t for (items, _, _), t in zip(states, tokens) if items != "3"}
    assert len(before_the_end) >= 4, "the bar moved with the tokens, not once per batch"
    assert tokens == sorted(tokens)
    assert states[-1][0] == "3" and tokens[-1] == sum(s["completion_tokens"] for s in samples)
