"""A faulty user reward through the real CLI: `validate`, and `train` before the model loads, name it with its file and
line and the input (exit 2); a reward that breaks mid-run stops it with one line, and the last checkpoint resumes."""

import shlex
from pathlib import Path

import pytest

pytestmark = pytest.mark.e2e

FAULTY = '''\
def text(completion):
    return completion if isinstance(completion, str) else completion[-1]["content"]


def raises(completions, **kwargs):
    return [1.0 / len(text(c)) for c in completions]


def strings(completions, **kwargs):
    return ["1.0" for _ in completions]


def short(completions, **kwargs):
    return [0.0]


def nan(completions, **kwargs):
    return [float("nan") for _ in completions]


def fails_from_step_2(completions, trainer_state, **kwargs):
    if trainer_state.global_step >= 1:
        raise RuntimeError("the grader is down")
    return [sum(ch.isdigit() for ch in text(c)) / max(1, len(text(c))) for c in completions]
'''


def line(text: str) -> int:
    return next(i for i, source in enumerate(FAULTY.splitlines(), 1) if text in source)


@pytest.fixture
def folder(tmp_path) -> Path:
    """The user's working folder, with their rewards in it (the working directory is where user code imports from)."""
    (tmp_path / "faulty_rewards.py").write_text(FAULTY)
    return tmp_path


def args(repo, folder: Path, data_dir, reward: str, *extra) -> list[str]:
    return ["--recipe", str(repo / "recipes/grpo/tiny-cpu.yaml"), f"data.datasets[0].name={data_dir / 'problems.jsonl'}",
            f"training.output_dir={folder / 'run'}", f"training.rewards=[{{name: 'faulty_rewards:{reward}'}}]", *extra]


@pytest.mark.parametrize("reward, named", [
    ("raises", f"raised ZeroDivisionError: float division by zero at faulty_rewards.py:{line('1.0 / len')}, on completion 1 ('' (empty)) for row 0"),
    ("strings", "value 0 is a str ('1.0'), not a number, for completion 0 ('<think>3 + 4 = 7</think><answer>7</answer>') for row 0"),
    ("short", "returned 1 value for 8 completions (one per completion, in order)"),
    ("nan", "value 0 is nan (return None for 'no reward for this completion'), for completion 0"),
])
def test_validate_names_the_faulty_reward_its_file_and_line_and_the_input(cli, repo, folder, data_dir, reward, named):
    result = cli("validate", *args(repo, folder, data_dir, reward), cwd=folder)
    assert result.returncode == 2, result.stdout[-2000:] + result.stderr[-2000:]
    assert f"error: training.rewards[0] ({reward}, faulty_rewards.py:{line(f'def {reward}(')}) {named}" in result.stderr
    assert f"of the training data ({data_dir / 'problems.jsonl'}), columns {{'answer': " in result.stderr or reward == "short"
    assert "Traceback" not in result.stderr


def test_validate_passes_a_sound_reward_and_says_it_was_called(cli, repo, folder, data_dir):
    result = cli("validate", *args(repo, folder, data_dir, "fails_from_step_2"), cwd=folder)
    assert result.returncode == 0, result.stderr[-2000:]
    assert "# rewards: 1 called on made-up completions of the first data rows, as TRL will call them" in result.stdout


def test_train_refuses_a_faulty_reward_before_the_model_loads(cli, repo, folder, data_dir):
    result = cli("train", *args(repo, folder, data_dir, "strings"), cwd=folder)
    assert result.returncode == 2, result.stdout[-2000:] + result.stderr[-2000:]
    assert "error: training.rewards[0] (strings, faulty_rewards.py:" in result.stderr and "Traceback" not in result.stderr
    assert not (folder / "run").exists()  # nothing loaded, nothing written
    assert "rollouts:" not in result.stdout  # the trainer was never built


def test_a_reward_that_breaks_mid_run_stops_it_in_one_line_and_the_last_step_resumes(cli, repo, folder, data_dir):
    # no periodic checkpoint before the fault (save_steps=100): the last finished step is saved when the reward breaks
    small = ("training.save_steps=100", "training.max_steps=3", "training.num_generations=2", "training.per_device_train_batch_size=4",
             "training.max_completion_length=8")
    result = cli("train", *args(repo, folder, data_dir, "fails_from_step_2", *small), cwd=folder)
    assert result.returncode == 1, result.stdout[-2000:] + result.stderr[-2000:]
    errors = [l for l in result.stderr.splitlines() if l.startswith("error:")]
    assert len(errors) == 1 and "Traceback" not in result.stderr, result.stderr[-3000:]
    assert errors[0].startswith(f"error: reward training.rewards[0] (fails_from_step_2, faulty_rewards.py:{line('raise RuntimeError')}) "
                                "raised RuntimeError: the grader is down at step 2, on completion 0 of 4 (")
    assert f"; checkpoint-1 (the last finished step) is saved in {folder / 'run'}: fix the reward and resume with `posttrain train" in errors[0]
    assert errors[0].endswith(" (--verbose shows the traceback)")
    assert [p.name for p in (folder / "run").glob("checkpoint-*")] == ["checkpoint-1"]
    # the Trainer's own checkpoint (optimizer and schedule included), with posttrain's recipe and segments in it
    saved = {p.name for p in (folder / "run" / "checkpoint-1").iterdir()}
    assert {"trainer_state.json", "optimizer.pt", "scheduler.pt", "posttrain_recipe.yaml", "posttrain_segments.json"} <= saved, saved
    assert not (folder / "run" / "run_summary.json").exists()  # not finished

    # the command it prints resumes from checkpoint-1, which the second fault keeps (--verbose: the traceback too)
    command = shlex.split(errors[0].split("resume with `")[1].split("`")[0])
    assert command[:2] == ["posttrain", "train"]  # resume_from_checkpoint is `auto` by default: the same command resumes
    again = cli(*command[1:], "--verbose", cwd=folder)
    assert again.returncode == 1, again.stderr[-3000:]
    assert "checkpoint-1" in again.stdout, again.stdout[-3000:]
    assert "Traceback" in again.stderr and 'raise RuntimeError("the grader is down")' in again.stderr
    error = next(l for l in again.stderr.splitlines() if l.startswith("error:"))
    assert error.startswith("error: reward training.rewards[0] (fails_from_step_2") and "at step 2," in error
    assert f"; checkpoint-1 is kept in {folder / 'run'}" in error
