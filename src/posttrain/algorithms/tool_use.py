"""GRPO/GSPO with tools and environments: what posttrain adds around TRL's multi-turn rollouts.

    posttrain train --recipe examples/tool_use/grpo.yaml

TRL 1.16's GRPOTrainer runs the loop itself (`tools=`, `environment_factory=`,
`max_tool_calling_iterations`): it generates, parses tool calls from the completion with the
tokenizer's response parser, calls the tools, appends their results as tool turns (masked out of
the loss), and generates again, until a turn has no call, the iteration limit is reached or the
completion budget (`max_completion_length`) is spent. posttrain adds, in this order at start-up:

1. the chat template, if the recipe gives one (`training.chat_template_path`);
2. the tools and environment in worker processes (`posttrain.tools.isolation`): TRL calls proxies
   with the user's names, signatures and docstrings; a call that raises, hangs, crashes or returns
   something unserialisable is the tool's error message (`{"error": ...}`, TRL's form), never a dead
   run;
3. the template check (`posttrain.data.tool_template`): tools rendered, history prefix-preserving,
   tool calls readable; an exit-2 error otherwise;
4. counts per generation, gathered over processes (`attach_tool_counts`), logged with every record
   by the run monitor: `tools/calls`, `tools/errors`, `tools/error_rate`, `tools/timeouts`,
   `tools/crashes`, `tools/truncated`, `tools/environment_errors`, `tools/use_rate` (rollouts with a
   call), `tools/turns_per_rollout`, `tools/cut_off` (rollouts stopped with a call unanswered: the
   iteration limit or the completion budget). The health flags `no_tool_calls`,
   `tool_error_rate` and `tool_timeouts` read them.
"""

from __future__ import annotations

import threading
from pathlib import Path

from posttrain.errors import UserError

COUNT_KEYS = ("rollouts", "calls", "errors", "with_calls", "turns", "cut_off",
              "timeouts", "crashes", "truncated", "environment_errors")


class ToolCounts:
    """Tool-use counts since the last log record (every process's, summed)."""

    def __init__(self):
        self._lock = threading.Lock()
        self._counts = dict.fromkeys(COUNT_KEYS, 0)

    def add(self, counts: dict) -> None:
        with self._lock:
            for key in COUNT_KEYS:
                self._counts[key] += int(counts.get(key, 0))

    def take(self) -> dict[str, float]:
        """The `tools/*` metrics since the last take, or {} if no rollout was generated since (TRL
        reuses a generation for several steps with steps_per_generation > 1)."""
        with self._lock:
            c, self._counts = self._counts, dict.fromkeys(COUNT_KEYS, 0)
        if not c["rollouts"]:
            return {}
        out = {f"tools/{k}": c[k] for k in ("calls", "errors", "timeouts", "crashes", "truncated", "environment_errors", "cut_off")}
        out["tools/error_rate"] = round(c["errors"] / c["calls"], 4) if c["calls"] else 0.0
        out["tools/use_rate"] = round(c["with_calls"] / c["rollouts"], 4)
        out["tools/turns_per_rollout"] = round(c["turns"] / c["rollouts"], 4)
        return out


def rollout_counts(completions: list) -> dict[str, int]:
    """Counts over the finished rollouts of one generation (TRL's completions: lists of messages).

    >>> call = {"role": "assistant", "content": "", "tool_calls": [{"type": "function", "function": {"name": "f", "arguments": {}}}]}
    >>> rollout_counts([[call, {"role": "tool", "content": "1"}, {"role": "assistant", "content": "1"}], [call]])
    {'rollouts': 2, 'with_calls': 2, 'turns': 3, 'cut_off': 1}
    """
    out = dict(rollouts=len(completions), with_calls=0, turns=0, cut_off=0)
    for messages in completions:
        messages = [m for m in messages if isinstance(m, dict)]
        out["turns"] += sum(m.get("role") == "assistant" for m in messages)
        if any(m.get("tool_calls") for m in messages if m.get("role") == "assistant"):
            out["with_calls"] += 1
        if messages and messages[-1].get("role") == "assistant" and messages[-1].get("tool_calls"):
            out["cut_off"] += 1
    return out


def prepare_tools(recipe, loaded, log):
    """The run's Toolbox (None without tools), after applying training.chat_template_path and the template check."""
    training = recipe.training
    path = getattr(training, "chat_template_path", None)
    if path is not None:
        loaded.tokenizer.chat_template = Path(path).expanduser().read_text()
        log(f"chat template: {path} (training.chat_template_path; saved with the model)")
    if not getattr(training, "uses_tools", False):
        return None
    from posttrain.data.tool_template import check_tool_template
    from posttrain.tools.isolation import Toolbox, ToolSettings

    settings = ToolSettings(timeout=training.tool_timeout, max_result_chars=training.tool_result_max_chars)
    try:
        toolbox = Toolbox(training.tools, training.environment, training.environment_kwargs, settings)
    except ValueError as e:  # preflight imported them in a worker; this process differs only if the files changed since
        raise UserError(f"training.tools: {e}") from None
    for note in check_tool_template(loaded.tokenizer, recipe.model.base_model_name, toolbox.schemas()):
        log(note)
    names = [s["function"]["name"] for s in toolbox.schemas()]
    turns = training.value("max_tool_calling_iterations")
    log(f"tools: {', '.join(names)} in worker processes (timeout {training.tool_timeout:g} s per call, results cut at "
        f"{training.tool_result_max_chars:,} characters, " + (f"at most {turns} turns of calls per rollout)" if turns is not None
                                                              else "no limit on turns of calls per rollout)"))
    return toolbox


def trainer_kwargs(toolbox) -> dict:
    """GRPOTrainer's tools= and environment_factory= for a Toolbox (the first environment is built here)."""
    if toolbox is None:
        return {}
    out = {"tools": toolbox.tools()}
    factory = toolbox.environment_factory()
    if factory is not None:
        out["environment_factory"] = factory
    return out


def attach_tool_counts(trainer, counts: ToolCounts, toolbox) -> None:
    """Count every generation's tool use, gathered over processes, through two TRL 1.16 private methods:
    `_tool_call_loop` (its return value carries the rollouts' messages and TRL's own call and failure
    counts) and `_generate_and_score_completions` (the whole generation: environment resets, the tool
    loop, then the rewards, where an environment's get_reward runs; its end is where one generation's
    counts are complete). A missing method: refuse to run rather than train without the counts the
    health flags need; a result of another shape, likewise (`returned` checks it before reading it)."""
    import torch

    from posttrain.internals import require, returned

    loop = require(trainer, "_tool_call_loop")
    generation = require(trainer, "_generate_and_score_completions")
    stash: dict = {}

    def counted_loop(*args, **kwargs):
        out = loop(*args, **kwargs)
        result = returned(trainer, "_tool_call_loop", out, completions=list, tool_call_count=int, tool_failure_count=int)
        # TRL's call and failure counts cover what the workers reported and more: unknown tool names, bad arguments
        stash.update({**rollout_counts(result["completions"]), "calls": result["tool_call_count"],
                      "errors": result["tool_failure_count"]})
        return out

    def counted_generation(*args, **kwargs):
        stash.clear()
        out = generation(*args, **kwargs)
        local = {**toolbox.stats.take(), **stash}
        values = torch.tensor([float(local.get(k, 0)) for k in COUNT_KEYS], device=trainer.accelerator.device)
        total = trainer.accelerator.gather(values.unsqueeze(0)).sum(dim=0).tolist()
        counts.add(dict(zip(COUNT_KEYS, total)))
        return out

    trainer._tool_call_loop = counted_loop
    trainer._generate_and_score_completions = counted_generation

