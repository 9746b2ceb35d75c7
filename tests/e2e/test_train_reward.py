"""Preference pairs -> reward model -> GRPO through the real CLI, on tiny models (2 reward steps, 1 GRPO step).

The reward model starts from a tiny model built with another seed, so its tokenizer differs from the policy's
(tiny:qwen2-1m): the GRPO run only works because the reward model re-tokenizes the text with its own."""

import json

import pytest

pytestmark = pytest.mark.e2e


@pytest.fixture(scope="module")
def reward_model(cli, repo, tmp_path_factory):
    from posttrain.models.tiny import build_tiny_model

    tmp = tmp_path_factory.mktemp("reward")
    base = build_tiny_model(tmp / "base-seed1", seed=1)
    out = tmp / "rm"
    result = cli("train", "--recipe", "recipes/reward/tiny-cpu.yaml", f"training.output_dir={out}", f"model.base_model_name={base}",
                 "training.max_steps=2", "training.eval_steps=2", "training.save_steps=2",
                 f"data.datasets[0].name={repo / 'examples/data/preferences_refusal.jsonl'}")
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    return base, out, result


def test_reward_model_trains_and_reports_held_out_pair_accuracy(reward_model):
    _base, out, result = reward_model
    summary = json.loads((out / "run_summary.json").read_text())
    accuracy = summary["pair_accuracy"]
    assert accuracy["pairs"] == 24 and accuracy["start"]["step"] == 0 and accuracy["end"]["step"] == 2
    assert 0 <= accuracy["end"]["correct"] <= 24 and accuracy["end"]["accuracy"] == accuracy["end"]["correct"] / 24
    assert "held-out pair accuracy at step 2 (end)" in result.stdout
    adapter = json.loads((out / "adapter_config.json").read_text())
    assert adapter["task_type"] == "SEQ_CLS" and "score" in (adapter["modules_to_save"] or [])  # the head is saved with the adapter
    assert [a["rows"] for a in summary["token_audit"]] == [96, 24]


def test_grpo_is_rewarded_by_a_reward_model_with_another_tokenizer(cli, repo, tmp_path, reward_model):
    from transformers import AutoTokenizer

    from posttrain.models.tiny import resolve_tiny

    base, rm, _ = reward_model
    text = "Ken has 142 cards and gets 271 more."
    assert AutoTokenizer.from_pretrained(base)(text).input_ids != AutoTokenizer.from_pretrained(resolve_tiny("tiny:qwen2-1m"))(text).input_ids
    out = tmp_path / "grpo"
    result = cli("train", "--recipe", "recipes/grpo/tiny-reward-model-cpu.yaml", f"training.output_dir={out}",
                 f"training.rewards=[{{model: {rm}, weight: 1.0}}]", "training.max_steps=1", "training.save_steps=1",
                 "training.num_generations=2", "training.per_device_train_batch_size=4", "training.max_completion_length=8",
                 f"data.datasets[0].name={repo / 'examples/data/problems.jsonl'}")
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    record = next(json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines() if "rewards/rm/mean" in line)
    assert record["rewards/rm/mean"] == record["rewards/rm/mean"] and record["rewards/rm/std"] > 0  # scores vary: a signal


def test_reward_functions_hand_trl_the_reward_models_own_tokenizer(reward_model):
    from types import SimpleNamespace

    from posttrain.algorithms.grpo import reward_functions
    from posttrain.recipe.rl_section import RewardSpec

    base, rm, _ = reward_model
    training = SimpleNamespace(rewards=[RewardSpec(name="format"), RewardSpec(model=str(rm))])
    functions, tokenizers = reward_functions(training)
    assert tokenizers[0] is None and type(functions[1]).__name__ == "Qwen2ForSequenceClassification"
    from transformers import AutoTokenizer

    text = "Ken has 142 cards"
    assert tokenizers[1](text).input_ids == AutoTokenizer.from_pretrained(base)(text).input_ids
    assert functions[1].config._name_or_path.endswith("rm") and not any(p.requires_grad for p in functions[1].parameters())


def test_a_causal_lm_from_the_hub_side_is_refused_at_load(tmp_path):
    from posttrain.algorithms.reward import load_reward_model
    from posttrain.errors import UserError
    from posttrain.models.tiny import resolve_tiny

    with pytest.raises(UserError, match=r"training.rewards\[0\].model: .* is a causal language model \(Qwen2ForCausalLM\)"):
        load_reward_model(str(resolve_tiny("tiny:qwen2-1m")), "training.rewards[0].model", None)


def test_rloo_runs_on_grpos_rewards_and_health_checks(cli, repo, tmp_path, reward_model):
    """RLOO, 1 step: the reward model as its reward, GRPO's time split and health keys in its log."""
    _base, rm, _ = reward_model
    out = tmp_path / "rloo"
    result = cli("train", "--recipe", "recipes/rloo/tiny-cpu.yaml", f"training.output_dir={out}", f"training.rewards=[{{model: {rm}}}]",
                 "training.max_steps=1", "training.save_steps=1", "training.num_generations=2", "training.per_device_train_batch_size=4",
                 "training.max_completion_length=8", f"data.datasets[0].name={repo / 'examples/data/problems.jsonl'}")
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    record = next(json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines() if "reward" in line)
    assert {"rewards/rm/mean", "frac_reward_zero_std", "kl", "time/generation_s", "time/scoring_s"} <= record.keys()
    config = json.loads((out / "trl_config.json").read_text())
    assert config["beta"] == 0.05 and config["num_generations"] == 2  # TRL's RLOO beta, kept
    summary = json.loads((out / "run_summary.json").read_text())
    assert summary["algorithm"] == "rloo" and summary["rl"] is True and "health" in summary
