"""One compact line per logged step instead of transformers' dict of every logged value.

A GRPO step logs about 45 values (some 1,250 characters a line); the ones a user watches while a
run trains fit on one line:

    step 12/80  loss 0.0312  reward 0.61 ± 0.42  kl 0.0031  len 48  lr 5e-05  210 tok/s

Everything logged still goes to metrics.jsonl and the trackers; `--verbose` prints the whole dict.
"""

from __future__ import annotations

from transformers.trainer_callback import ProgressCallback

# (logged key, label), in the order shown; a key the step did not log is left out
WATCHED = (("loss", "loss"), ("reward", "reward"), ("kl", "kl"), ("completions/mean_length", "len"),
           ("held_out/loose", "held-out loose"), ("held_out/strict", "strict"), ("eval_loss", "eval loss"),
           ("learning_rate", "lr"), ("grad_norm", "grad"), ("speed/tokens_per_s", "tok/s"))


def _number(value) -> str:
    return f"{value:.4g}" if isinstance(value, float) else str(value)


def step_line(logs: dict, step: int, max_steps: int) -> str | None:
    """The line for one on_log call: a training step's watched values, or the run's closing summary."""
    if "train_runtime" in logs:  # the closing summary
        return f"trained: {_number(logs['train_runtime'])} s" + "".join(
            text.format(_number(logs[key])) for key, text in (("train_steps_per_second", "  {} steps/s"), ("train_loss", "  mean loss {}"))
            if key in logs)
    parts = []
    for key, label in WATCHED:
        if key not in logs:
            continue
        if label == "tok/s":
            parts.append(f"{logs[key]:.0f} tok/s")
        elif key == "reward" and "reward_std" in logs:
            parts.append(f"reward {_number(logs[key])} ± {_number(logs['reward_std'])}")
        else:
            parts.append(f"{label} {_number(logs[key])}")
    return f"step {step}/{max_steps}  " + "  ".join(parts) if parts else None


class StepLines(ProgressCallback):
    """transformers' progress bar, with `step_line` under it for each logged step."""

    def on_log(self, args, state, control, logs=None, **kwargs):
        if state.is_world_process_zero and self.training_bar is not None and logs:
            line = step_line(logs, state.global_step, state.max_steps)
            if line:
                self.training_bar.write(line)


def use_step_lines(trainer) -> None:
    """Swap the trainer's progress callback for StepLines (unless --verbose, which keeps the full dicts)."""
    from posttrain.log import verbose

    if verbose() or not any(type(c) is ProgressCallback for c in trainer.callback_handler.callbacks):
        return
    trainer.remove_callback(ProgressCallback)
    trainer.add_callback(StepLines())
