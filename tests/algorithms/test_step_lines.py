"""One compact line per logged step: the values a user watches, not transformers' dict of 45."""

from posttrain.algorithms.step_lines import step_line

GRPO_LOGS = {"loss": 0.0312, "grad_norm": 0.51, "learning_rate": 5e-05, "num_tokens": 3236.0, "completions/mean_length": 48.0,
             "completions/clipped_ratio": 0.0, "reward": 0.6125, "reward_std": 0.4231, "kl": 0.00311, "entropy": 0.8,
             "clip_ratio/region_mean": 0.0, "frac_reward_zero_std": 0.25, "speed/tokens_per_s": 210.4, "epoch": 0.02,
             **{f"rewards/r{i}/mean": 0.5 for i in range(20)}}


def test_a_grpo_step_is_one_short_line_of_what_users_watch():
    line = step_line(GRPO_LOGS, 12, 80)
    assert line == "step 12/80  loss 0.0312  reward 0.6125 ± 0.4231  kl 0.00311  len 48  lr 5e-05  grad 0.51  210 tok/s"
    assert len(line) < 120 < len(str(GRPO_LOGS))


def test_sft_steps_evaluations_held_out_scores_and_the_closing_summary():
    assert step_line({"loss": 1.25, "learning_rate": 1e-4, "grad_norm": 2.0, "mean_token_accuracy": 0.4}, 3, 10) == \
        "step 3/10  loss 1.25  lr 0.0001  grad 2"
    assert step_line({"eval_loss": 0.9, "eval_runtime": 1.2}, 5, 10) == "step 5/10  eval loss 0.9"
    assert step_line({"held_out/loose": 0.42, "held_out/strict": 0.3, "held_out/n": 100}, 20, 80) == \
        "step 20/80  held-out loose 0.42  strict 0.3"
    assert step_line({"train_runtime": 18.4, "train_steps_per_second": 0.109, "train_loss": 0.5, "epoch": 1.0}, 2, 2) == \
        "trained: 18.4 s  0.109 steps/s  mean loss 0.5"
    assert step_line({"epoch": 0.5}, 2, 4) is None  # nothing watched: no line
