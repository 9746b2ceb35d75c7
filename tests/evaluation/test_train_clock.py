"""The training clock behind time-to-accuracy curves: what each method spends before its first step counts, held-out
scoring does not, and runs that predate time/train_s are reconstructed from their mean step and say so."""

import pytest

from posttrain.evaluation.train_clock import held_out_ticks


def held(step: int, loose: float, **extra) -> dict:
    return {"step": step, "held_out/n": 100, "held_out/strict": 0.0, "held_out/loose": loose, "time/held_out_s": 20.0, **extra}


def test_the_logged_clock_adds_what_ran_before_training():
    records = [held(0, 0.4, **{"time/train_s": 0.0}), {"step": 0, "rft/round": 1, "time/rft_sample_s": 57.0},
               {"step": 3, "loss": 0.1}, {"step": 6, "rft/round": 2, "time/rft_sample_s": 60.0},
               held(8, 0.45, **{"time/train_s": 130.0})]
    ticks = held_out_ticks(records, {"difficulty": {"seconds": 300.0}})
    # the pre-pass and the first round ran before the trainer's clock started; round 2 ran inside it (already in 130 s)
    assert [(t.step, t.seconds, t.estimated) for t in ticks] == [(0, 357.0, False), (8, 487.0, False)]


def test_a_resumed_run_continues_from_its_last_evaluation_and_says_so():
    records = [held(0, 0.4, **{"time/train_s": 0.0}), held(10, 0.5, **{"time/train_s": 100.0}),
               held(20, 0.6, **{"time/train_s": 90.0})]  # resumed at step 10: the clock restarted
    ticks = held_out_ticks(records, None)
    assert [(t.seconds, t.estimated) for t in ticks] == [(0.0, False), (100.0, False), (190.0, True)]


def test_an_older_run_is_reconstructed_from_its_mean_step():
    records = [held(0, 0.4), {"step": 0, "time/rft_sample_s": 50.0}, {"step": 6, "time/rft_sample_s": 40.0}, held(4, 0.4), held(12, 0.5)]
    ticks = held_out_ticks(records, {"speed": {"step_s": 7.5}})
    # step 4: round 1 + 4 steps; step 12: round 1 + 12 steps + round 2 (sampled after step 6)
    assert [t.seconds for t in ticks] == pytest.approx([50.0, 80.0, 180.0]) and all(t.estimated for t in ticks)
    assert held_out_ticks(records, None) == []  # unfinished: no mean step to spread
