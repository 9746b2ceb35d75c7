"""Each health flag on synthetic metric streams: it fires where the condition holds long enough, at
the right step range, and stays quiet on a healthy stream."""

import math

import pytest

from posttrain.monitoring.health import FLAGS, check_health, empty_think_share, render_health


def healthy(steps=30, **over):
    """A GRPO stream that learns: rewards vary within groups, lengths and entropy stable, KL small."""
    out = []
    for s in range(1, steps + 1):
        r = {"step": s, "loss": 0.01, "grad_norm": 0.5, "learning_rate": 1e-5 * (1 - s / (steps + 1)),
             "frac_reward_zero_std": 0.4, "reward_std": 0.3, "completions/clipped_ratio": 0.1,
             "completions/mean_length": 40.0, "entropy": 1.2, "kl": 0.01 * s / steps,
             "rewards/answer_match/mean": 0.2 + 0.3 * s / steps, "rewards/format/mean": 0.5 + 0.3 * s / steps,
             "health/empty_think_frac": 0.0}
        for key, fn in over.items():
            value = fn(s)
            if value is not None:
                r[key.replace("__", "/")] = value
        out.append(r)
    return out


def names(flags):
    return [f.name for f in flags]


def test_healthy_stream_raises_nothing():
    assert check_health(healthy(), window=5) == []
    assert "no flag raised" in render_health([])


def test_no_learning_signal_fires_after_window_with_step_range():
    records = healthy(frac_reward_zero_std=lambda s: 1.0 if 8 <= s <= 20 else 0.3)
    [flag] = check_health(records, window=5)
    assert (flag.name, flag.first_step, flag.last_step) == ("no_learning_signal", 8, 20)
    # a shorter streak than the window is not a flag
    assert check_health(healthy(frac_reward_zero_std=lambda s: 1.0 if 8 <= s <= 11 else 0.3), window=5) == []


def test_no_learning_signal_counts_steps_not_records_and_skips_missing():
    # logging every 5 steps: 3 records cover steps 1-15
    records = [{"step": s, "frac_reward_zero_std": 1.0} for s in (5, 10, 15)]
    assert names(check_health(records, window=12)) == ["no_learning_signal"]
    assert check_health(records, window=16) == []
    # steps that reuse a generation log no reward: they neither break nor extend the streak
    records = [{"step": s, **({"frac_reward_zero_std": 1.0} if s % 2 else {})} for s in range(1, 12)]
    [flag] = check_health(records, window=10)
    assert (flag.first_step, flag.last_step) == (1, 11)


def test_no_signal_from_reward_std_when_frac_absent():
    records = [{"step": s, "reward_std": 0.0} for s in range(1, 7)]
    assert names(check_health(records, window=6)) == ["no_learning_signal"]


def test_all_truncated():
    records = healthy(completions__clipped_ratio=lambda s: 1.0 if s >= 10 else 0.5)
    [flag] = check_health(records, window=5, max_completion_length=32)
    assert (flag.name, flag.first_step, flag.last_step) == ("all_truncated", 10, 30)
    assert "max_completion_length=32" in flag.detail


def test_all_truncated_fires_on_a_run_shorter_than_its_window():
    """A 3-step run whose every completion was cut: the window (10) is capped by the run's length."""
    cut = [{"step": s, "completions/clipped_ratio": 1.0, "frac_reward_zero_std": 0.5} for s in range(1, 4)]
    [flag] = check_health(cut, window=10, run_steps=3)
    assert (flag.name, flag.first_step, flag.last_step) == ("all_truncated", 1, 3)
    assert check_health(cut, window=10) == []  # length unknown (a run still going): three steps are no verdict
    assert check_health(cut, window=10, run_steps=20) == []  # 3 of 20 steps so far
    one_finished = [*cut[:2], {**cut[2], "completions/clipped_ratio": 0.75}]
    assert check_health(one_finished, window=10, run_steps=3) == []
    # the cap is all_truncated's alone: three steps of identical rewards are too few for no_learning_signal
    flat = [{**r, "frac_reward_zero_std": 1.0} for r in cut]
    assert names(check_health(flat, window=10, run_steps=3)) == ["all_truncated"]


def test_length_collapse_and_explosion():
    collapse = healthy(completions__mean_length=lambda s: 40.0 if s < 15 else 5.0)
    assert [(f.name, f.first_step) for f in check_health(collapse, window=5)] == [("length_collapse", 15)]
    explode = healthy(completions__mean_length=lambda s: 40.0 if s < 15 else 200.0)
    assert [(f.name, f.first_step) for f in check_health(explode, window=5)] == [("length_explosion", 15)]
    # a 50% drop is ordinary learning, not a collapse
    assert check_health(healthy(completions__mean_length=lambda s: 40.0 if s < 15 else 20.0), window=5) == []


def test_entropy_collapse_needs_both_relative_and_absolute_drop():
    records = healthy(entropy=lambda s: 1.2 if s < 20 else 0.01)
    [flag] = check_health(records, window=5)
    assert (flag.name, flag.first_step, flag.last_step) == ("entropy_collapse", 20, 30)
    # low from the start (a model that was already confident) is not a collapse
    assert check_health(healthy(entropy=lambda s: 0.02), window=5) == []


def test_kl_past_bound_fires_on_one_step():
    [flag] = check_health(healthy(kl=lambda s: 2.5 if s == 17 else 0.01), window=5)
    assert (flag.name, flag.first_step, flag.last_step) == ("kl_past_bound", 17, 17)
    assert "2.5" in flag.detail


def test_reward_divergence_format_up_correctness_flat():
    records = healthy(rewards__format__mean=lambda s: 0.1 + 0.8 * s / 30, rewards__answer_match__mean=lambda s: 0.05)
    [flag] = check_health(records, window=5)
    assert flag.name == "reward_divergence" and (flag.first_step, flag.last_step) == (1, 30)
    assert "format rose" in flag.detail and "answer_match stayed flat" in flag.detail
    falling = healthy(rewards__format__mean=lambda s: 0.1 + 0.8 * s / 30, rewards__answer_match__mean=lambda s: 0.5 - 0.3 * s / 30)
    assert "answer_match fell" in check_health(falling, window=5)[0].detail
    # too short a run to call a trend
    assert check_health(records[:9], window=5) == []


def test_empty_think():
    records = healthy(health__empty_think_frac=lambda s: 0.9 if s > 12 else 0.0)
    [flag] = check_health(records, window=5)
    assert (flag.name, flag.first_step, flag.last_step) == ("empty_think", 13, 30)


def test_empty_think_share():
    assert empty_think_share(["<think> \n</think><answer>1</answer>", "<think>x</think>", "no tags"]) == pytest.approx(1 / 3)
    assert empty_think_share([[{"role": "assistant", "content": "<think></think>"}]]) == 1.0
    assert empty_think_share([]) == 0.0


@pytest.mark.parametrize("bad", [float("nan"), "nan", "inf", float("-inf")])
def test_nonfinite_loss(bad):
    records = healthy(loss=lambda s: bad if s >= 22 else 0.1)
    [flag] = check_health(records, window=5)
    assert (flag.name, flag.first_step, flag.last_step) == ("nonfinite_loss", 22, 30)


def test_zero_learning_rate_but_not_a_linear_schedule_ending_at_zero():
    assert check_health(healthy(learning_rate=lambda s: 1e-5 * (30 - s)), window=5) == []  # 0 only at the last step
    [flag] = check_health(healthy(learning_rate=lambda s: 0.0), window=5)
    assert (flag.name, flag.first_step, flag.last_step) == ("zero_learning_rate", 1, 29)


def test_a_warm_up_starting_at_zero_is_not_a_zero_learning_rate():
    warm_up = lambda s: 1e-5 * min(1.0, (s - 1) / 4)  # constant_with_warmup as logged: 0 at the first step, then rising
    assert check_health(healthy(learning_rate=warm_up), window=5) == []
    stuck = lambda s: 0.0 if s <= 3 else 1e-5  # three logged steps at 0 before the rise: the first two could not train
    [flag] = check_health(healthy(learning_rate=stuck), window=5)
    assert (flag.name, flag.first_step, flag.last_step) == ("zero_learning_rate", 1, 2)


def with_tools(steps=30, **over):
    """A healthy stream of a run with tools: most rollouts call one, few calls fail, none time out."""
    base = {"tools__use_rate": lambda s: 0.6, "tools__error_rate": lambda s: 0.1, "tools__timeouts": lambda s: 0,
            "tools__calls": lambda s: 20}
    return healthy(steps, **{**base, **over})


def test_tool_flags_stay_quiet_on_a_healthy_tool_run_and_on_runs_without_tools():
    assert check_health(with_tools(), window=5) == []
    assert not {"no_tool_calls", "tool_error_rate", "tool_timeouts"} & set(names(check_health(healthy(), window=5)))


def test_no_tool_calls():
    [flag] = check_health(with_tools(tools__use_rate=lambda s: 0.0 if s >= 11 else 0.5), window=5)
    assert (flag.name, flag.first_step, flag.last_step) == ("no_tool_calls", 11, 30)
    assert "SFT on tool-calling chats" in flag.detail
    # steps that reused a generation log no tool metrics: they neither extend nor break the streak
    sparse = with_tools(tools__use_rate=lambda s: 0.0 if s % 2 else None)
    assert names(check_health(sparse, window=5)) == ["no_tool_calls"]


def test_tool_error_rate():
    [flag] = check_health(with_tools(tools__error_rate=lambda s: 0.8 if 5 <= s <= 12 else 0.1), window=5)
    assert (flag.name, flag.first_step, flag.last_step) == ("tool_error_rate", 5, 12)
    assert "80-80% of tool calls failed" in flag.detail
    assert check_health(with_tools(tools__error_rate=lambda s: 0.8 if s in (5, 6) else 0.1), window=5) == []  # too short


def test_tool_timeouts_fire_on_the_first_one():
    [flag] = check_health(with_tools(tools__timeouts=lambda s: 2 if s in (7, 19) else 0), window=5)
    assert (flag.name, flag.first_step, flag.last_step) == ("tool_timeouts", 7, 19)
    assert flag.detail.startswith("4 tool call(s) ran past training.tool_timeout")


def held_out(step, strict, loose, vs_start=None):
    """A held-out evaluation record (algorithms/held_out.py); vs_start: {metric: (fixed, broken, p)} against step 0."""
    record = {"step": step, "held_out/n": 100, "held_out/strict": strict, "held_out/loose": loose, "time/held_out_s": 3.0}
    for metric, (fixed, broken, p) in (vs_start or {}).items():
        record.update({f"held_out/{metric}_fixed": fixed, f"held_out/{metric}_broken": broken, f"held_out/{metric}_p": p})
    return record


def test_held_out_regression_fires_at_the_first_significant_fall_below_step_0():
    records = healthy(steps=30)
    records.insert(0, held_out(0, 0.0, 0.70))
    records.insert(11, held_out(10, 0.10, 0.66, {"strict": (10, 0, 0.002), "loose": (3, 7, 0.34)}))  # a dip, not significant
    records.insert(22, held_out(20, 0.21, 0.32, {"strict": (21, 0, 1e-6), "loose": (2, 40, 4e-10)}))
    records.append(held_out(30, 0.25, 0.20, {"strict": (25, 0, 1e-7), "loose": (1, 51, 1e-13)}))
    flags = check_health(records, window=5)
    [flag] = [f for f in flags if f.name == "held_out_regression"]
    assert (flag.first_step, flag.last_step) == (20, 20)
    assert "held-out loose accuracy 32.0% at step 20, against 70.0% at step 0 on the same 100 items (2 fixed, 40 broken" in flag.detail
    assert names(flags) == ["held_out_regression"]  # the training records themselves are healthy


def test_held_out_regression_stays_quiet_on_gains_and_in_any_algorithm():
    gains = [held_out(0, 0.0, 0.27), held_out(10, 0.34, 0.34, {"strict": (34, 0, 1e-10), "loose": (10, 3, 0.09)})]
    assert check_health(gains, rl=False) == []
    fall = [held_out(0, 0.5, 0.5), held_out(5, 0.2, 0.2, {"strict": (0, 30, 2e-9), "loose": (0, 30, 2e-9)})]
    assert names(check_health(fall, rl=False)) == ["held_out_regression"]  # SFT, DPO, ... too


def test_rl_flags_do_not_apply_to_sft():
    records = healthy(frac_reward_zero_std=lambda s: 1.0, loss=lambda s: math.inf if s == 3 else 1.0)
    assert names(check_health(records, rl=False, window=5)) == ["nonfinite_loss"]


def test_every_documented_flag_is_tested_here():
    source = open(__file__).read()
    assert all(f'"{name}"' in source for name in FLAGS)


def test_the_tracker_does_constant_work_per_record():
    """Before: every log re-ran every check over the whole history, O(N^2) over a run (a 20,000-step run with
    logging_steps=1 spent hours in it). Now 4x the records take about 4x the time, not 16x."""
    import time

    from posttrain.monitoring.health import HealthTracker

    def feed(n: int) -> float:
        stream = healthy(n)
        tracker = HealthTracker(rl=True, window=10)
        started = time.perf_counter()
        for record in stream:
            tracker.add(record)
            tracker.flags()  # as the monitor asks after every log
        return time.perf_counter() - started

    feed(200)  # warm up
    small, large = min(feed(1_000) for _ in range(2)), min(feed(4_000) for _ in range(2))
    assert large / small < 8, (small, large)  # quadratic would be ~16
    assert large < 10


def test_a_resumed_run_keeps_its_baselines_and_does_not_report_old_flags_again(tmp_path):
    """Completion lengths 40 before step 10, 5 after: a collapse against the first window's 40. A run resumed at
    step 15 used to take its baseline from the resumed segment (5) and miss it; it now reads the checkpoint's
    records first, so it sees the same flag as a run that never stopped."""
    import json

    from transformers import TrainerControl, TrainerState

    from posttrain.algorithms.monitor import RunMonitor

    stream = healthy(30, completions__mean_length=lambda s: 40.0 if s <= 10 else 5.0, frac_reward_zero_std=lambda s: 1.0 if s <= 12 else 0.3)
    history = tmp_path / "metrics.jsonl"
    history.write_text("".join(json.dumps(r) + "\n" for r in stream[:15]))

    def run(records, start, history):
        printed = []
        monitor = RunMonitor(rl=True, window=5, stop_on=["no_learning_signal"], max_completion_length=None,
                             samples_per_step=1, peak=None, peak_source="none", log=printed.append, history=history)
        state, control = TrainerState(global_step=start), TrainerControl()
        monitor.on_train_begin(None, state, control)
        for record in records:
            state.global_step = record["step"]
            monitor.on_log(None, state, control, logs={k: v for k, v in record.items() if k != "step"})
        return monitor, printed, control

    whole, _, _ = run(stream, 0, None)
    resumed, printed, control = run(stream[15:], 15, history)
    assert [f.as_dict() for f in resumed.flags] == [f.as_dict() for f in whole.flags]
    collapse = next(f for f in resumed.flags if f.name == "length_collapse")
    assert (collapse.first_step, "down from 40.0" in collapse.detail) == (11, True)
    # no_learning_signal (steps 1-12) fired and stopped the first segment; the resumed one neither repeats nor re-stops
    assert not any("no_learning_signal" in line for line in printed) and not control.should_training_stop
    assert any("length_collapse" in line for line in printed) is False  # it too fired before the checkpoint (step 15)
    cut, _, _ = run(stream[15:], 15, None)  # what the resumed run saw before: no baseline of 40
    assert "length_collapse" not in [f.name for f in cut.flags]


def test_report_caps_the_window_by_the_run_length_too(tmp_path, capsys):
    """`posttrain report` on a finished 3-step run (trl_config.json's max_steps) whose every completion was cut."""
    import json

    from posttrain.cli import main

    run = tmp_path / "short"
    run.mkdir()
    (run / "trl_config.json").write_text(json.dumps({"num_generations": 4, "max_steps": 3, "max_completion_length": 8}))
    (run / "metrics.jsonl").write_text("".join(json.dumps({"step": s, "loss": 0.0, "reward": 0.5, "completions/clipped_ratio": 1.0,
                                                           "completions/mean_length": 8.0}) + "\n" for s in (1, 2, 3)))
    assert main(["report", str(run)]) == 0
    assert "all_truncated (steps 1-3): every completion was cut at the length limit (max_completion_length=8)" in capsys.readouterr().out
