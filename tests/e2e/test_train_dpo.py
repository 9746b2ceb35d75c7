"""DPO and evaluation during training through the real CLI on a tiny model."""

import json
import random
from pathlib import Path

import pytest

pytestmark = pytest.mark.e2e


@pytest.fixture(scope="module")
def easy_pairs(tmp_path_factory) -> Path:
    """Preference pairs a tiny model can learn in a few steps: a worked answer over a refusal."""
    from posttrain.data.synthetic import problems

    rng = random.Random(0)
    rows = [{"prompt": p["question"], "chosen": " " + p["solution"], "rejected": " " + rng.choice(["I do not know.", "No idea, sorry.", "Cannot say."])}
            for p in problems(120, seed=3)]
    path = tmp_path_factory.mktemp("dpo") / "pairs.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


def dpo(cli, out: Path, data: Path, *overrides, recipe="recipes/dpo/tiny-cpu.yaml"):
    result = cli("train", "--recipe", recipe, f"training.output_dir={out}", f"data.datasets[0].name={data}", *overrides)
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    return [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()], json.loads((out / "trl_config.json").read_text())


def test_lora_dpo_learns_preferences_and_evaluates_on_schedule(cli, tmp_path, easy_pairs):
    records, config = dpo(cli, tmp_path / "lora", easy_pairs, "training.max_steps=12", "training.eval_steps=4")
    evals = [r for r in records if "eval_loss" in r]
    assert [r["step"] for r in evals] == [4, 8, 12]  # eval_strategy=steps, eval_steps=4
    assert evals[-1]["eval_rewards/accuracies"] >= 0.8  # held-out pairs, chance is 0.5
    assert evals[-1]["eval_rewards/margins"] > evals[0]["eval_rewards/margins"]
    assert (config["beta"], config["loss_type"]) == (0.1, ["sigmoid"])
    assert (tmp_path / "lora" / "adapter_model.safetensors").is_file()


def test_beta_and_loss_type_reach_dpo_and_change_the_loss(cli, tmp_path, easy_pairs):
    common = ("training.max_steps=3", "training.eval_strategy=no", "training.eval_steps=null", "data.eval_fraction=null", "training.logging_steps=1")
    low, low_config = dpo(cli, tmp_path / "b01", easy_pairs, *common)
    high, high_config = dpo(cli, tmp_path / "b05", easy_pairs, *common, "training.beta=0.5", "training.loss_type=[sigmoid, hinge]", "training.loss_weights=[1.0, 0.5]")
    assert (high_config["beta"], high_config["loss_type"], high_config["loss_weights"]) == (0.5, ["sigmoid", "hinge"], [1.0, 0.5])
    low_loss = [r["loss"] for r in low if "loss" in r]
    high_loss = [r["loss"] for r in high if "loss" in r]
    assert low_loss[0] == pytest.approx(0.6931, abs=1e-3)  # -log sigmoid(0): policy == reference at step 1
    assert high_loss != pytest.approx(low_loss, abs=1e-4)


def test_full_dpo_uses_a_frozen_reference(cli, repo, tmp_path, easy_pairs):
    import yaml

    raw = yaml.safe_load((repo / "recipes/dpo/tiny-cpu.yaml").read_text())
    raw["model"] = {"base_model_name": raw["model"]["base_model_name"]}  # full training: no lora_* keys (they would be dead)
    (tmp_path / "full.yaml").write_text(yaml.safe_dump(raw))
    records, config = dpo(cli, tmp_path / "full", easy_pairs, "training.max_steps=4", "training.eval_steps=4",
                          "training.learning_rate=1e-3", recipe=str(tmp_path / "full.yaml"))
    assert (tmp_path / "full" / "model.safetensors").is_file()
    assert records[0]["loss"] == pytest.approx(0.6931, abs=1e-3)
    assert any("eval_rewards/accuracies" in r for r in records)


def test_early_stopping_stops(cli, tmp_path, easy_pairs):
    # An improvement must exceed 10 nats to count, so the second evaluation already runs out of patience.
    out = tmp_path / "early"
    records, _ = dpo(cli, out, easy_pairs, "training.max_steps=40", "training.eval_steps=2", "training.save_steps=2",
                     "training.load_best_model_at_end=true", "training.early_stopping_patience=1", "training.early_stopping_threshold=10")
    assert json.loads((out / "run_summary.json").read_text())["global_step"] == 4


BAD_ROWS = {
    "missing column": ([{"prompt": "q", "chosen": "a"}], "column 'rejected' not found"),
    "all equal": ([{"prompt": "q", "chosen": "a", "rejected": "a"}] * 3, "3 'chosen' equal to 'rejected'"),
    "wrong type": ([{"prompt": "q", "chosen": 5, "rejected": "b"}], "different or non-text types"),
}


@pytest.mark.parametrize("case", BAD_ROWS)
def test_bad_preference_data(cli, tmp_path, case):
    rows, expected = BAD_ROWS[case]
    data = tmp_path / "bad.jsonl"
    data.write_text("".join(json.dumps(r) + "\n" for r in rows))
    result = cli("train", "--recipe", "recipes/dpo/tiny-cpu.yaml", f"training.output_dir={tmp_path / 'out'}", f"data.datasets[0].name={data}",
                 "data.eval_fraction=null", "training.eval_strategy=no", "training.eval_steps=null")
    assert result.returncode == 2 and expected in result.stderr, result.stderr[-2000:]
    assert str(data) in result.stderr and not (tmp_path / "out").exists()


def test_equal_pairs_are_dropped_and_counted(tmp_path):
    from posttrain.data.formats import prepare_dataset
    from posttrain.recipe.schema import DatasetSpec

    rows = [{"prompt": "q1", "chosen": "a", "rejected": "b"}, {"prompt": "q2", "chosen": "x", "rejected": "x"},
            {"prompt": "q3", "chosen": "", "rejected": "b"}, {"prompt": "q4", "chosen": "c", "rejected": "d"}]
    data = tmp_path / "p.jsonl"
    data.write_text("".join(json.dumps(r) + "\n" for r in rows))
    ds, report = prepare_dataset(DatasetSpec(name=str(data)), "data.datasets[0]", "preference", seed=0)
    assert ds["prompt"] == ["q1", "q4"]
    assert "kept 2 of 4 rows; dropped 1 'chosen' equal to 'rejected' (row 1), 1 empty 'chosen' or 'rejected' (row 2)" in report.render()
