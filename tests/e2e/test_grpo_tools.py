"""GRPO with tools through TRL's real multi-turn loop, with tools that hang, segfault, exit and return
10 MB: the run goes on, the model reads each failure as the tool's error, every failure is counted,
and the health flags fire. Then the real CLI, end to end.

A tiny random model never writes a well-formed tool call, and one that reliably does takes minutes
of SFT; so the in-process tests script what the policy *samples* (TRL's `_generate_single_turn`,
the one thing replaced) and keep everything else real: TRL's parsing of the calls, the tool loop,
posttrain's worker processes, masking, rewards, the monitor, metrics.jsonl."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

pytestmark = pytest.mark.e2e
HERE = Path(__file__).resolve().parent

CALL = '<tool_call>\n{{"name": "{name}", "arguments": {arguments}}}\n</tool_call><|im_end|>'
# what each of the 8 rollouts of a step does first (2 prompts x 4 generations)
FIRST_TURNS = [
    CALL.format(name="calculator", arguments='{"expression": "2 + 3"}'),
    CALL.format(name="calculator", arguments='{"expression": "hang"}'),
    CALL.format(name="calculator", arguments='{"expression": "crash"}'),
    CALL.format(name="calculator", arguments='{"expression": "exit"}'),
    CALL.format(name="calculator", arguments='{"expression": "huge"}'),
    CALL.format(name="no_such_tool", arguments='{"x": 1}'),
    "<tool_call>\n{not json\n</tool_call><|im_end|>",  # malformed: TRL reads it as plain text, no call
    "The answer is 5.<|im_end|>",  # no call at all
]


def script_generation(trainer, first_turns: list[str], final: str = "The answer is 5.<|im_end|>") -> None:
    """The policy's samples, scripted: rollout i's first turn is first_turns[i]; after a tool result, `final`."""
    tokenizer = trainer.processing_class

    def generate(prompt_ids, images, multimodal_fields, num_generations, has_tool_images=False):
        texts = [final if "<|im_start|>tool" in tokenizer.decode(ids) else first_turns[i % len(first_turns)]
                 for i, ids in enumerate(prompt_ids)]
        return [tokenizer(t, add_special_tokens=False)["input_ids"] for t in texts], None

    assert hasattr(trainer, "_generate_single_turn")  # the TRL 1.16 method replaced here
    trainer._generate_single_turn = generate


def train_scripted(tmp_path, overrides: list[str], first_turns: list[str]) -> tuple[list[dict], list[dict], object]:
    """Build the run as `posttrain train` does, script the samples, train; (metrics records, reward log, run)."""
    from posttrain.algorithms.run import build_run
    from posttrain.recipe.load import load_recipe

    log = tmp_path / "rewards.jsonl"
    os.environ["TOOL_LOG"] = str(log)
    loaded = load_recipe(str(HERE.parents[1] / "recipes/grpo/tiny-tools-cpu.yaml"), [
        f"training.output_dir={tmp_path / 'run'}", "training.max_steps=2", "training.rewards=[{name: 'flaky_tools:record'}]",
        "training.tool_timeout=1", "training.tool_result_max_chars=40", "training.max_completion_length=160",
        "training.health_window=2", "data.datasets[0].name=" + str(HERE.parents[1] / "examples/data/problems.jsonl"),
        "data.max_prompt_length=400", "data.max_drop_fraction=1", *overrides])  # the environment's tool schemas make most prompts long
    run, trainer = build_run(loaded)
    log.unlink(missing_ok=True)  # the reward's trial call before the model loaded (made-up completions): only rollouts count here
    try:
        script_generation(trainer, first_turns)
        trainer.train()
    finally:
        os.environ.pop("TOOL_LOG", None)
        run.toolbox.close()
        run.lock.release()
    records = [json.loads(line) for line in (tmp_path / "run" / "metrics.jsonl").read_text().splitlines()]
    return records, [json.loads(line) for line in log.read_text().splitlines()], run


def test_every_failure_reaches_the_model_as_the_tools_error_and_is_counted(tmp_path):
    records, rewards, run = train_scripted(tmp_path, ["training.tools=[flaky_tools:calculator]"], FIRST_TURNS)
    steps = [r for r in records if "tools/calls" in r]
    assert len(steps) == 2  # the run survived a hang, a segfault and sys.exit on both steps
    for r in steps:
        assert (r["tools/calls"], r["tools/errors"], r["tools/timeouts"], r["tools/crashes"], r["tools/truncated"]) == (6, 4, 1, 1, 1)
        assert r["tools/use_rate"] == 0.75 and r["tools/turns_per_rollout"] == 1.75 and r["tools/error_rate"] == pytest.approx(4 / 6, abs=1e-4)
    tool_turns = {}
    for completion in rewards[0]["completions"]:
        for message in completion:
            if message["role"] == "tool":
                tool_turns.setdefault(message["name"], []).append(message["content"])
    results = tool_turns["calculator"]
    assert "5" in results
    assert "{'error': 'calculator did not return within 1 s and was stopped'}" in results
    assert any("calculator crashed (killed by SIGSEGV)" in t for t in results)
    assert any("the tool called sys.exit(3)" in t for t in results)
    assert any(t.startswith("7" * 40) and "truncated: the tool returned 10,000,000 characters" in t for t in results)
    assert tool_turns["no_such_tool"] == ["{'error': 'Tool no_such_tool not found.'}"]  # TRL's own error, counted too
    # after each tool result the policy answered, and that answer was scored
    assert all(c[-1]["content"] == "The answer is 5." for c in rewards[0]["completions"] if len(c) > 1)
    flags = {f.name for f in run.monitor.flags}
    assert {"tool_timeouts", "tool_error_rate"} <= flags and "no_tool_calls" not in flags
    assert run.monitor.summary()["tools"] == {"calls": 12, "errors": 8, "timeouts": 2, "crashes": 2, "truncated": 2,
                                              "environment_errors": 0, "cut_off": 0}  # run_summary.json's whole-run counts


def test_an_environment_per_rollout_with_its_own_reward_and_state(tmp_path):
    first = [CALL.format(name="increment", arguments='{"by": 2}'), CALL.format(name="increment", arguments='{"by": 1}'),
             CALL.format(name="increment", arguments='{"by": 99}'), "The answer is 5.<|im_end|>"]
    records, rewards, run = train_scripted(tmp_path, ["training.environment=flaky_tools:Counter", "training.environment_kwargs={target: 2}"], first)
    steps = [r for r in records if "tools/calls" in r]
    assert len(steps) == 2
    for r in steps:
        assert (r["tools/calls"], r["tools/errors"], r["tools/crashes"]) == (6, 2, 2)
        # TRL's reward channel named after the class: target 2 reached by 1 rollout in 4; the crashed
        # rollout is not scored (None -> left out of the mean), the others score 0
        assert r["rewards/Counter/mean"] == pytest.approx(1 / 3, abs=1e-3)
        assert r["tools/environment_errors"] >= 2  # the crashed environments' get_reward
    # rewards read each rollout's environment state; the crashed one says it is lost
    assert rewards[0]["states"] == [2, 1, "EnvironmentLost", 0] * 2


def test_tools_through_the_cli(cli, tmp_path, data_dir):
    """The real CLI, 2 steps on a random tiny model: the tool is offered (its schema in the prompt
    audit), the counts are logged on every step, the TRL config carries the limit, and a random model
    that never calls the tool is flagged no_tool_calls."""
    out = tmp_path / "run"
    result = cli("train", "--recipe", "recipes/grpo/tiny-tools-cpu.yaml", f"training.output_dir={out}", "training.max_steps=2",
                 "training.health_window=2", "training.max_completion_length=16", "data.max_prompt_length=400",
                 f"data.datasets[0].name={data_dir / 'problems.jsonl'}")
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    assert "tools: calculator in worker processes (timeout 5 s per call" in result.stdout
    assert json.loads((out / "trl_config.json").read_text())["max_tool_calling_iterations"] == 2
    records = [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()]
    steps = [r for r in records if "tools/use_rate" in r]
    assert len(steps) == 2 and all(r["tools/turns_per_rollout"] >= 1 for r in steps)
    if all(r["tools/use_rate"] == 0 for r in steps):
        assert "health: no_tool_calls (steps 1-2)" in result.stdout
    report = cli("report", str(out))
    assert report.returncode == 0 and "## tool-use rate (rollouts with a call)" in report.stdout
