"""The run folder's states, the schedule rule and the signal handling, in-process (no training)."""

import json
import os
import signal

import pytest
from transformers import TrainerControl, TrainerState, TrainingArguments

from posttrain.algorithms.interrupt import GracefulStop
from posttrain.algorithms.run_folder import FINISHED, INTERRUPTED, NEW, command_with, extends, folder_state, move_aside, whole_run


def checkpoint(out, step):
    folder = out / f"checkpoint-{step}"
    folder.mkdir(parents=True)
    (folder / "model.safetensors").write_bytes(b"w")
    (folder / "trainer_state.json").write_text(json.dumps({"global_step": step}))


def test_states_from_the_folder(tmp_path):
    out = tmp_path / "run"
    assert folder_state(out).state == NEW
    checkpoint(out, 2)
    assert (folder_state(out).state, folder_state(out).step) == (INTERRUPTED, 2)
    (out / "run_summary.json").write_text(json.dumps({"state": "finished", "global_step": 2}))
    assert (folder_state(out).state, folder_state(out).step) == (FINISHED, 2)
    checkpoint(out, 3)  # a longer schedule that was interrupted after the finished run
    assert (folder_state(out).state, folder_state(out).step) == (INTERRUPTED, 3)
    (out / "checkpoint-4").mkdir()  # cut off mid-write: not a state of its own
    assert folder_state(out).checkpoint.name == "checkpoint-3"


def test_running_holder_reads_the_lock_without_taking_it(tmp_path):
    import socket

    from posttrain.algorithms.run_folder import running_holder

    lock = tmp_path / ".posttrain.lock"
    assert running_holder(tmp_path) is None
    lock.write_text(json.dumps({"pid": os.getpid(), "host": socket.gethostname(), "started": "now", "command": "posttrain train r.yaml"}))
    assert running_holder(tmp_path) == f"pid {os.getpid()}, started now: posttrain train r.yaml"
    lock.write_text(json.dumps({"pid": 2 ** 22 + 12345, "host": socket.gethostname()}))  # no such process: a stale record
    assert running_holder(tmp_path) is None


def test_extends_rule():
    old = {"training": {"max_steps": 4, "num_train_epochs": 3.0}}
    assert not extends(old, old, 4)
    assert extends(old, {"training": {"max_steps": 6}}, 4) and not extends(old, {"training": {"max_steps": 3}}, 4)
    stopped_early = {"training": {"max_steps": 10}}  # a health flag (stop_on) or early stopping ended it at step 4
    assert not extends(stopped_early, stopped_early, 4) and extends(stopped_early, {"training": {"max_steps": 12}}, 4)
    by_epochs = {"training": {"max_steps": -1, "num_train_epochs": 1.0}}
    assert not extends(by_epochs, by_epochs, 8) and extends(by_epochs, {"training": {"max_steps": -1, "num_train_epochs": 2.0}}, 8)


def test_move_aside_keeps_the_lock_and_earlier_runs(tmp_path):
    (tmp_path / ".posttrain.lock").write_text("")
    (tmp_path / "previous-1").mkdir()
    (tmp_path / "metrics.jsonl").write_text("{}\n")
    checkpoint(tmp_path, 2)
    moved = move_aside(tmp_path)
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted([".posttrain.lock", "previous-1", moved.name])
    assert sorted(p.name for p in moved.iterdir()) == ["checkpoint-2", "metrics.jsonl"]


def test_command_with_replaces_the_override_and_quotes():
    argv = ["train", "r.yaml", "training.resume_from_checkpoint=false", "data.datasets[0].name=a b.jsonl"]
    assert command_with(argv, "training.resume_from_checkpoint", None) == "posttrain train r.yaml 'data.datasets[0].name=a b.jsonl'"
    assert command_with(argv, "training.resume_from_checkpoint", "auto").endswith("training.resume_from_checkpoint=auto")


def test_whole_run_weights_each_logged_loss_by_its_steps():
    records = [{"step": 2, "loss": 4.0}, {"step": 4, "loss": 2.0}, {"step": 5, "loss": 1.0}, {"step": 5, "train_runtime": 1}]
    segments = [{"from_step": 0, "to_step": 4, "wall_seconds": 2.0}, {"from_step": 4, "to_step": 5, "wall_seconds": 0.5}]
    whole = whole_run(segments, records)
    assert whole["train_loss"] == pytest.approx((4 * 2 + 2 * 2 + 1) / 5)
    assert (whole["steps_trained"], whole["wall_seconds"], whole["steps_per_s"]) == (5, 2.5, 2.0)
    assert [s["train_loss"] for s in whole["segments"]] == [3.0, 1.0]
    segments[0]["wall_seconds"] = None  # resumed from a checkpoint older than segment records
    assert whole_run(segments, records)["wall_seconds"] == 0.5


@pytest.mark.parametrize("sig, code", [(signal.SIGTERM, 143), (signal.SIGINT, None)])
def test_first_signal_stops_after_the_step_with_a_checkpoint_second_stops_at_once(sig, code, tmp_path):
    messages = []
    inherited = signal.signal(signal.SIGINT, signal.default_int_handler)  # as a foreground process has it (the suite may run under nohup)
    stop = GracefulStop(messages.append).install()
    try:
        os.kill(os.getpid(), sig)
        assert stop.signal_name == signal.Signals(sig).name and "saving a checkpoint" in messages[0]
        state, control = TrainerState(global_step=3), TrainerControl()
        stop.on_step_end(TrainingArguments(output_dir=str(tmp_path), use_cpu=True), state, control)
        assert control.should_save and control.should_training_stop and stop.stopped_at == 3
        other = signal.SIGTERM if sig == signal.SIGINT else signal.SIGINT
        os.kill(os.getpid(), other)  # torchrun forwards Ctrl-C as SIGTERM to ranks that also got the SIGINT: absorbed
        assert stop.signal_name == signal.Signals(sig).name
        with pytest.raises(KeyboardInterrupt if code is None else SystemExit) as raised:
            os.kill(os.getpid(), sig)
        if code is not None:
            assert raised.value.code == code
    finally:
        stop.restore()
        assert signal.getsignal(signal.SIGINT) is signal.default_int_handler
        signal.signal(signal.SIGINT, inherited)


def test_a_signal_the_process_inherited_as_ignored_stays_ignored():
    """`nohup posttrain train ...` and `posttrain train ... &` ignore Ctrl-C: the run must not start reacting to it."""
    inherited = signal.signal(signal.SIGINT, signal.SIG_IGN)
    stop = GracefulStop().install()
    try:
        assert signal.getsignal(signal.SIGINT) is signal.SIG_IGN and signal.getsignal(signal.SIGTERM) == stop._handle
        os.kill(os.getpid(), signal.SIGINT)
        assert stop.signal_name is None
    finally:
        stop.restore()
        signal.signal(signal.SIGINT, inherited)


def test_a_finished_run_without_a_checkpoint_cannot_be_extended_and_says_how_to_start_over(tmp_path):
    import yaml

    from posttrain.algorithms.run_folder import finished_verdict
    from posttrain.errors import UserError

    recipe = {"training": {"max_steps": 4, "save_strategy": "no"}}
    (tmp_path / "run_summary.json").write_text(json.dumps({"state": "finished", "global_step": 4}))
    (tmp_path / "resolved_recipe.yaml").write_text(yaml.safe_dump(recipe))
    argv = ["train", "r.yaml", "training.max_steps=6"]
    assert "already complete at step 4" in finished_verdict(tmp_path, recipe, "auto", argv)
    with pytest.raises(UserError) as e:
        finished_verdict(tmp_path, {"training": {"max_steps": 6, "save_strategy": "no"}}, "auto", argv)
    assert "it saved no checkpoint" in str(e.value) and "posttrain train r.yaml training.max_steps=6 training.resume_from_checkpoint=false" in str(e.value)
    assert finished_verdict(tmp_path, {"training": {"max_steps": 6}, "s3": {"bucket": "b"}}, "auto", argv) is None  # S3 may hold it
