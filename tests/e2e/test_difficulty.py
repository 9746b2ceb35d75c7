"""training.difficulty_filter through the real CLI on a tiny model: prompts scored with the starting policy and the
recipe's rewards, kept in a pass-rate band, reported by bucket with pass@k against greedy, cached so that a resumed run
calls no reward to score them again; a narrower band reads the same scores and its drops count under
data.max_drop_fraction; a prompt set without headroom stops at start-up."""

import json
import math
import os
import re
from pathlib import Path

import pytest

pytestmark = pytest.mark.e2e
HERE = Path(__file__).resolve().parent
GRADED = "training.rewards=[{name: 'difficulty_rewards:graded'}]"  # each prompt its own pass probability: every bucket
FAST = ["training.max_steps=1", "training.num_generations=4", "training.per_device_train_batch_size=8",
        "training.max_completion_length=8", "training.save_steps=1", "training.difficulty_filter.samples=4"]
BUCKETS = ("0", "(0, 0.25]", "(0.25, 0.5]", "(0.5, 0.75]", "(0.75, 1)", "1")


def train(cli, out: Path, *overrides, data_dir, calls: Path):
    pythonpath = os.pathsep.join(filter(None, [str(HERE), os.environ.get("PYTHONPATH")]))
    return cli("train", "--recipe", "recipes/grpo/tiny-cpu.yaml", f"training.output_dir={out}",
               f"data.datasets[0].name={data_dir / 'problems.jsonl'}", *FAST, *overrides,
               env={"PYTHONPATH": pythonpath, "DIFFICULTY_CALLS": str(calls)})


def scoring_calls(calls: Path) -> int:
    """Reward calls made with trainer_state=None (the filter's scoring; the start-up trial and TRL pass a state)."""
    return len(calls.read_text().splitlines()) if calls.is_file() else 0


def test_the_band_is_kept_reported_cached_and_counted(cli, tmp_path, data_dir):
    out, calls = tmp_path / "run", tmp_path / "calls.txt"
    first = train(cli, out, GRADED, "data.max_drop_fraction=0.9", data_dir=data_dir, calls=calls)
    assert first.returncode == 0, first.stdout[-3000:] + first.stderr[-3000:]
    assert scoring_calls(calls) >= 1
    scores = [json.loads(line) for line in (out / "difficulty" / "pass_rates.jsonl").read_text().splitlines()]
    assert [s["row"] for s in scores] == list(range(64))
    rates = [s["passes"] / 4 for s in scores]
    kept = [r for r in rates if 0.01 <= r <= 0.99]
    report = json.loads((out / "difficulty" / "report.json").read_text())
    assert (report["prompts"], report["kept"], report["dropped"]) == (64, len(kept), 64 - len(kept))
    assert json.loads((out / "run_summary.json").read_text())["difficulty"] == report
    # the printed table: each bucket's prompts, kept and dropped, as the scores in pass_rates.jsonl give them
    for name, low, high in zip(BUCKETS, (0, 0.01, 0.26, 0.51, 0.76, 1), (0, 0.25, 0.5, 0.75, 0.99, 1)):
        n = sum(low <= r <= high for r in rates)
        inside = n if name not in ("0", "1") else 0
        assert re.search(rf"^  {re.escape(name)} +{n} +{inside} +{n - inside}$", first.stdout, re.M), name
    assert sum(r == 0 for r in rates) and sum(r == 1 for r in rates) and len(kept) > 8  # the reward spreads the prompts
    solved, greedy = sum(s["passes"] > 0 for s in scores), sum(s["greedy"] for s in scores)
    assert report["pass@4"] == round(solved / 64, 6) and report["greedy"] == round(greedy / 64, 6)
    assert f"pass@4 {100 * solved / 64:.1f}%, greedy {100 * greedy / 64:.1f}%: headroom {100 * (solved - greedy) / 64:+.1f} points" in first.stdout
    assert f"difficulty: kept {len(kept)} of 64 prompts with pass rate in [0.01, 0.99], dropped {64 - len(kept)}" in first.stdout
    assert f"token audit prompts (train): {len(kept)} prompts" in first.stdout  # TRL's data is the kept prompts

    # an extended run resumes from checkpoint-1 and reads the scores: no reward is called to score again
    calls.unlink()
    extended = train(cli, out, GRADED, "data.max_drop_fraction=0.9", "training.max_steps=2", data_dir=data_dir, calls=calls)
    assert extended.returncode == 0, extended.stdout[-3000:] + extended.stderr[-3000:]
    assert "difficulty: read from cache, not scored again" in extended.stdout and "difficulty: scoring" not in extended.stdout
    assert scoring_calls(calls) == 0
    assert f"difficulty: kept {len(kept)} of 64 prompts" in extended.stdout
    # the report keeps what the scoring cost, also in the run that read the scores
    assert 0 < report["seconds"] == json.loads((out / "difficulty" / "report.json").read_text())["seconds"]
    assert f"difficulty: scored in {report['seconds']:.1f} s" in first.stdout

    # a narrower band, started afresh in the same folder: the same scores (the band is not in the cache's key), and its
    # drops over data.max_drop_fraction's default stop the run before the trainer is built
    narrow = train(cli, out, GRADED, "training.resume_from_checkpoint=false", "training.difficulty_filter.min_pass_rate=0.5",
                   "training.difficulty_filter.max_pass_rate=0.5", data_dir=data_dir, calls=calls)
    assert narrow.returncode == 2, narrow.stdout[-3000:] + narrow.stderr[-3000:]
    assert "difficulty: read from cache, not scored again" in narrow.stdout and scoring_calls(calls) == 0
    half = sum(r == 0.5 for r in rates)
    assert "data.max_drop_fraction=0.1: 1 dataset(s) lost more of their rows than that" in narrow.stderr
    assert (f"{64 - half} of 64 remaining rows outside training.difficulty_filter's pass-rate band [0.5, 0.5]") in narrow.stderr
    needed = math.ceil(100 * (64 - half) / 64) / 100  # the value that lets this band through, named in the message
    assert f"(data.max_drop_fraction={needed:g} lets this data through)" in narrow.stderr


def test_a_prompt_set_without_headroom_stops_at_start_up(cli, tmp_path, data_dir):
    out = tmp_path / "run"
    result = train(cli, out, "training.rewards=[{name: 'difficulty_rewards:always'}]", data_dir=data_dir, calls=tmp_path / "calls.txt")
    assert result.returncode == 2, result.stdout[-3000:] + result.stderr[-3000:]
    assert ("training.difficulty_filter: pass@4 = greedy = 100.0% on 64 prompts: sampling finds nothing greedy misses, so RL has "
            "nothing to reinforce; train SFT further or choose a task with headroom") in result.stderr
    assert not (out / "metrics.jsonl").exists() and (out / "difficulty" / "key.json").is_file()  # nothing trained; the scores kept


def test_a_reward_that_fails_on_the_policys_completions_is_named(cli, tmp_path, data_dir):
    """The start-up trial passes it; the filter's scoring meets the fault first: exit 2 naming the reward, nothing left."""
    out = tmp_path / "run"
    result = train(cli, out, "training.rewards=[{name: 'difficulty_rewards:fails_on_real_text'}]", "training.difficulty_filter.samples=2",
                   "training.max_completion_length=4", data_dir=data_dir, calls=tmp_path / "calls.txt")
    assert result.returncode == 2, result.stdout[-3000:] + result.stderr[-3000:]
    assert ("error: training.difficulty_filter: scoring the prompts before training: reward training.rewards[0] (fails_on_real_text, "
            "tests/e2e/difficulty_rewards.py:") in result.stderr and "raised ValueError: a completion this reward cannot read" in result.stderr
    assert not out.exists()
