"""KTO through the real CLI: 2 steps on tiny:qwen2-1m (the tiny recipe's learning is measured in its comment)."""

import json

import pytest

pytestmark = pytest.mark.e2e


def test_kto_trains_with_live_weights_and_says_the_balance(cli, repo, tmp_path):
    out = tmp_path / "kto"
    result = cli("train", "--recipe", "recipes/kto/tiny-cpu.yaml", f"training.output_dir={out}", "training.max_steps=2",
                 "training.eval_steps=2", "training.desirable_weight=0.9", f"data.datasets[0].name={repo / 'examples/data/unpaired.jsonl'}")
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    assert "kto data: 95 desirable, 65 undesirable rows" in result.stdout
    config = json.loads((out / "trl_config.json").read_text())
    assert (config["desirable_weight"], config["undesirable_weight"], config["train_sampling_strategy"]) == (0.9, 1.2, "sequential")
    records = [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()]
    assert any("eval_rewards/margins" in r for r in records) and all(r["loss"] == r["loss"] for r in records if "loss" in r)
    assert json.loads((out / "run_summary.json").read_text())["global_step"] == 2
    assert (out / "adapter_model.safetensors").is_file()
