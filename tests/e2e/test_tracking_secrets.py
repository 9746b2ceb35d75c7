"""Tracking works offline, and API keys from the recipe or the environment appear nowhere."""

import json

import pytest

pytestmark = pytest.mark.e2e

RECIPE_KEY = "rk_0123456789abcdef0123456789abcdef01234567"
ENV_KEY = "ek_fedcba9876543210fedcba9876543210fedcba98"


def test_wandb_offline_run_keeps_keys_secret(cli, tmp_path, data_dir):
    out = tmp_path / "run"
    result = cli("train", "--recipe", "recipes/sft/tiny-cpu.yaml", f"training.output_dir={out}",
                 f"data.datasets[0].name={data_dir / 'sft.jsonl'}", "training.max_steps=2",
                 "tracking.provider=wandb", "tracking.mode=offline", "tracking.project=posttrain-tests",
                 "tracking.tags=[ci, tiny]", f"tracking.api_key={RECIPE_KEY}",
                 env={"WANDB_API_KEY": ENV_KEY, "MY_OTHER_TOKEN": ENV_KEY})
    assert result.returncode == 0, result.stderr[-3000:]
    runs = list((out / "wandb").glob("offline-run-*"))
    assert len(runs) == 1 and list(runs[0].glob("*.wandb"))  # the offline run, inside output_dir
    assert "tracking: wandb offline" in result.stdout

    for text in (result.stdout, result.stderr):
        assert RECIPE_KEY not in text and ENV_KEY not in text
    checked = 0
    for path in out.rglob("*"):
        if path.is_file():
            data = path.read_bytes()
            assert RECIPE_KEY.encode() not in data and ENV_KEY.encode() not in data, path
            checked += 1
    assert checked > 10
    assert "api_key: '***'" in (out / "resolved_recipe.yaml").read_text()
    assert json.loads((out / "trl_config.json").read_text())["run_name"] == "run"


def test_tracking_package_missing_or_misused_is_a_recipe_error(cli):
    result = cli("validate", "recipes/sft/tiny-cpu.yaml", "tracking.provider=tensorboard", "tracking.api_key=x")
    assert result.returncode == 2 and "uses no key" in result.stderr


def test_trackers_receive_posttrains_speed_and_health_metrics(cli, tmp_path, data_dir):
    """The monitor's keys (speed/*, time/*, health/*) and the held-out scores (held_out/*) reach the tracker, not only
    metrics.jsonl: read back from the tensorboard event file of a GRPO run (transformers logs its callbacks' records
    under train/)."""
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    out = tmp_path / "run"
    result = cli("train", "--recipe", "recipes/grpo/tiny-cpu.yaml", f"training.output_dir={out}",
                 f"data.datasets[0].name={data_dir / 'problems.jsonl'}", "training.max_steps=2", "training.save_steps=2",
                 "training.max_completion_length=8", "training.per_device_train_batch_size=4", "training.num_generations=2",
                 "tracking.provider=tensorboard", "held_out={task: arithmetic, n: 4, every: 1, max_new_tokens: 4}")
    assert result.returncode == 0, result.stdout[-2000:] + result.stderr[-3000:]
    (events,) = {p.parent for p in out.rglob("events.out.tfevents.*")}
    scalars = EventAccumulator(str(events)).Reload().Tags()["scalars"]
    logged = [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()]
    ours = {k for record in logged for k in record if k.startswith(("speed/", "time/", "health/", "held_out/"))}
    assert {"speed/samples_per_s", "speed/tokens_per_s", "time/generation_s", "health/empty_think_frac", "held_out/loose",
            "held_out/strict_p", "time/held_out_s"} <= ours
    assert {f"train/{k}" for k in ours} <= set(scalars), sorted(set(scalars))
    reader = EventAccumulator(str(events)).Reload()
    written = [(r["step"], r["time/generation_s"]) for r in logged if "time/generation_s" in r]
    events_read = reader.Scalars("train/time/generation_s")
    assert [e.step for e in events_read] == [step for step, _ in written] == [1, 2]
    assert [e.value for e in events_read] == pytest.approx([value for _, value in written], rel=1e-6)
    assert [e.step for e in reader.Scalars("train/held_out/loose")] == [0, 1, 2]
