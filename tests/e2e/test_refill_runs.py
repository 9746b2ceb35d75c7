"""training.refill_zero_variance_groups through the real CLI on a tiny model: off is the run without the key, bit for
bit; on, groups whose rewards are all equal are replaced until the batch is full (GRPO, GSPO with LoRA, RLOO), and
when the draws run out the run goes on and says so."""

import json
import os
from pathlib import Path

import pytest

pytestmark = pytest.mark.e2e
HERE = Path(__file__).resolve().parent
# refill_rewards:half_the_prompts gives about half of the prompts a constant 0 (no signal) and the others a reward
# that varies inside the group: a random tiny model takes real steps, and about half its groups are wasted.
HALF = "training.rewards=[{name: 'refill_rewards:half_the_prompts'}]"
FAST = ["training.max_steps=3", "training.num_generations=4", "training.per_device_train_batch_size=8",
        "training.max_completion_length=12", "training.save_steps=100", "training.learning_rate=3e-3"]


def train(cli, out: Path, *overrides, data_dir, recipe="recipes/grpo/tiny-cpu.yaml"):
    pythonpath = os.pathsep.join(filter(None, [str(HERE), os.environ.get("PYTHONPATH")]))
    result = cli("train", "--recipe", recipe, f"training.output_dir={out}", f"data.datasets[0].name={data_dir / 'problems.jsonl'}",
                 *FAST, *overrides, env={"PYTHONPATH": pythonpath})
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    return result


def records(out: Path) -> list[dict]:
    return [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()]


def test_off_is_the_run_without_the_key_bit_for_bit(cli, tmp_path, data_dir):
    from safetensors.torch import load_file

    absent = train(cli, tmp_path / "absent", HALF, data_dir=data_dir)
    off = train(cli, tmp_path / "off", HALF, "training.refill_zero_variance_groups=0", data_dir=data_dir)
    a, b = load_file(str(tmp_path / "absent" / "model.safetensors")), load_file(str(tmp_path / "off" / "model.safetensors"))
    assert a.keys() == b.keys() and all((a[k] == b[k]).all() for k in a)
    steps = [r for r in records(tmp_path / "absent") if "loss" in r]
    assert len(steps) == 3 and all(r["grad_norm"] > 0 for r in steps)  # real steps: the equality means something
    assert [r["loss"] for r in steps] == [r["loss"] for r in records(tmp_path / "off") if "loss" in r]
    assert not any(k.startswith("refill/") for r in records(tmp_path / "off") for k in r)
    assert "refill:" not in absent.stdout + off.stdout


@pytest.mark.parametrize("recipe, overrides, groups", [
    ("recipes/grpo/tiny-cpu.yaml", [], 2),  # full fine-tune, 2 groups of 4 per step
    ("recipes/gspo/tiny-cpu.yaml", ["model.use_lora=true", "training.max_steps=4"], 8),  # one generation of 4 steps: 8 groups
    ("recipes/rloo/tiny-cpu.yaml", [], 2),
])
def test_groups_without_signal_are_replaced_until_the_batch_is_full(cli, tmp_path, data_dir, recipe, overrides, groups):
    out = tmp_path / "run"
    result = train(cli, out, HALF, "training.refill_zero_variance_groups=8", *overrides, data_dir=data_dir, recipe=recipe)
    assert ("refill: groups whose rewards are all equal are replaced by fresh prompts, up to 8 extra generation batch(es) "
            "a step (training.refill_zero_variance_groups=8)") in result.stdout
    refills = [r for r in records(out) if "refill/draws" in r]
    assert refills and all(r["refill/groups_kept"] == groups and r["refill/groups_short"] == 0 for r in refills)
    assert all(r["refill/groups_drawn"] == groups * (1 + r["refill/draws"]) for r in refills)
    assert sum(r["refill/draws"] for r in refills) >= 1  # groups were dropped and drawn again
    if "rloo" not in recipe:  # (RLOO's frac_reward_zero_std is over rewards with its KL penalty in them)
        # TRL's zero-variance share covers every group drawn: a draw is made only while the batch lacks groups with
        # signal, so the draws before the last held at least (draws - 1) x groups + 1 groups without
        assert all(r["frac_reward_zero_std"] * r["refill/groups_drawn"] >= (r["refill/draws"] - 1) * groups + 1 - 1e-6
                   for r in refills if r["refill/draws"])


def test_when_the_draws_run_out_the_run_goes_on_and_says_so(cli, tmp_path, data_dir):
    """The tiny recipe's rewards (answer_match, format) are never earned by a random model: every group is wasted."""
    out = tmp_path / "run"
    result = train(cli, out, "training.refill_zero_variance_groups=1", "training.max_steps=2", data_dir=data_dir)
    assert ("refill: step 1: 0 of 2 groups had reward variance after 1 extra draw(s) (training.refill_zero_variance_groups=1); "
            "the batch is topped up with groups whose advantages are 0") in result.stdout
    refills = [r for r in records(out) if "refill/draws" in r]
    assert [(r["refill/draws"], r["refill/groups_drawn"], r["refill/groups_kept"], r["refill/groups_short"]) for r in refills] \
        == [(1, 4, 0, 2)] * 2
    assert "done: final model in" in result.stdout
    report = cli("report", out, "--bins", "1")
    assert report.returncode == 0, report.stderr
    table = report.stdout.split("## groups without signal in the batch (refill ran out)")[1].split("##")[0]
    assert "| 1-2 | 2 |" in table
