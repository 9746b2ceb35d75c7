"""Evaluation with tools: the multi-turn loop over a local model and over an OpenAI-format API (the fake
provider of test_api_engines checks every request's tool turns), with a tool that hangs and one that
crashes; the samples keep every call and result; eval/compare/generate take --tools."""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

import pytest

from posttrain.generation.base import SamplingParams
from posttrain.generation.tool_loop import ToolLoop
from posttrain.tools.isolation import Toolbox, ToolSettings

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "e2e"))  # flaky_tools, as the e2e tests use it
from test_api_engines import FAST, KEY, MODEL, FakeProvider  # noqa: E402

PARAMS = SamplingParams(max_new_tokens=16)


@pytest.fixture
def openai_server():
    server = FakeProvider("openai")
    yield server
    server.close()


def test_the_loop_over_an_openai_api_runs_every_call_and_keeps_the_turns(openai_server):
    from posttrain.generation.api import OpenAIEngine

    engine = OpenAIEngine(MODEL, base_url=openai_server.base_url, api_key=KEY, **FAST)
    box = Toolbox(["flaky_tools:calculator"], settings=ToolSettings(timeout=1.0))
    try:
        loop = ToolLoop(engine, box, max_turns=2)
        out = loop.generate(["What is 6 * 7?", "What is hang?", "What is crash?"], PARAMS)
    finally:
        box.close()
    errors = ["calculator did not return within 1 s and was stopped",
              "calculator crashed (killed by SIGSEGV); the tool's process was restarted"]
    # the model read each failure as TRL writes it in training: {'error': ...}
    assert [c.text for c in out] == ["The answer is 42."] + [f"The answer is {str({'error': e})}." for e in errors]
    turns = out[0].extra["turns"]
    assert [m["role"] for m in turns] == ["assistant", "tool", "assistant"]
    assert turns[0]["tool_calls"][0]["function"] == {"name": "calculator", "arguments": {"expression": "6 * 7"}}
    assert turns[1] == {"role": "tool", "name": "calculator", "tool_call_id": turns[0]["tool_calls"][0]["id"], "content": "42"}
    assert out[0].extra["tools"] == {"calls": 1, "errors": 0, "timeouts": 0, "crashes": 0, "truncated": 0, "rounds": 1, "cut_off": False}
    assert out[1].extra["tools"]["timeouts"] == 1 and out[2].extra["tools"]["crashes"] == 1
    assert out[0].completion_tokens == 14  # both turns counted
    # what reached the server: the schema, then the call and its result in OpenAI's form (the fake refuses anything else)
    second = [r["body"] for r in openai_server.requests if r["body"]["messages"][-1]["role"] == "tool"][0]
    assert second["tools"][0]["function"]["name"] == "calculator" and second["messages"][-2]["content"] is None


def test_other_api_providers_refuse_tools_clearly():
    from posttrain.errors import UserError
    from posttrain.generation.api import AnthropicEngine

    engine = AnthropicEngine(MODEL, base_url="http://127.0.0.1:9/v1", api_key=KEY, **FAST)
    with pytest.raises(UserError, match="OpenAI's tool-call format only"):
        engine.generate(["hi"], PARAMS, tools=[{"type": "function", "function": {"name": "f"}}])


def test_the_loop_over_a_local_model_and_the_turn_limit(tiny_dir):
    """A random tiny model never writes a well-formed call: the loop ends after one turn, and the
    tools really are in its prompt (the chat template rendered them)."""
    from posttrain.generation.local import TransformersEngine

    engine = TransformersEngine(str(tiny_dir), progress=False)
    box = Toolbox(["posttrain.tools.calculator:calculator"])
    try:
        out = ToolLoop(engine, box, max_turns=1).generate(["What is 2 + 3?"], PARAMS)
    finally:
        box.close()
    assert out[0].extra["tools"]["rounds"] == 0 and out[0].prompt_tokens > 150  # the calculator's schema is in the prompt
    assert out[0].extra["turns"][0]["role"] == "assistant"


def test_eval_and_compare_with_tools_through_the_cli(cli, tmp_path, openai_server):
    data = tmp_path / "items.jsonl"
    data.write_text("".join(json.dumps({"prompt": [{"role": "user", "content": f"What is {e}?"}], "answer": a}) + "\n"
                            for e, a in (("6 * 7", 42), ("2 + 2", 4), ("hang", 0))))
    env = {"PYTHONPATH": os.pathsep.join(filter(None, [str(Path(__file__).resolve().parents[1] / "e2e"), os.environ.get("PYTHONPATH")])),
           "OPENAI_API_KEY": KEY}
    result = cli("compare", "--arm", f"a=openai:{MODEL}", "--arm", f"b=openai:{MODEL}", "--base-url", openai_server.base_url,
                 "--task", "custom", "--data", str(data), "--tools", "flaky_tools:calculator", "--tool-timeout", "1",
                 "--out", str(tmp_path / "cmp"), "--no-progress", env=env)
    assert result.returncode == 0, result.stderr[-3000:]
    assert "## tool use" in result.stdout and "| a | 100.0% (3/3) | 3 | 1 (33.3%) | 1 | 2.00 | 0 |" in result.stdout
    samples = {s["prompt"][0]["content"]: s for s in map(json.loads, (tmp_path / "cmp" / "samples" / "a.jsonl").read_text().splitlines())}
    assert {q: s["loose"] for q, s in samples.items()} == {"What is 6 * 7?": True, "What is 2 + 2?": True, "What is hang?": False}
    assert samples["What is 6 * 7?"]["turns"][1]["content"] == "42" and samples["What is 6 * 7?"]["tools"]["calls"] == 1
    # a re-run is answered from the cache, turns included
    again = cli("eval", "--model", f"openai:{MODEL}", "--base-url", openai_server.base_url, "--task", "custom", "--data", str(data),
                "--tools", "flaky_tools:calculator", "--tool-timeout", "1", "--out", str(tmp_path / "cmp"), "--no-progress", env=env)
    assert again.returncode == 0 and "3/3 generations from the cache" in again.stderr
    cached = [json.loads(line) for line in (tmp_path / "cmp" / "samples.jsonl").read_text().splitlines()]
    assert all(s["cached"] and s["turns"][0]["tool_calls"] for s in cached)


@pytest.mark.parametrize("flags, says", [
    (["--tools", "no_such_module:f"], "--tools no_such_module:f: tool 'no_such_module:f': cannot import module"),
    (["--tool-timeout", "3"], "--tool-timeout only act with --tools or --environment"),
    (["--tools", "posttrain.tools.calculator:calculator", "--environment-kwargs", "{bad"], "--environment-kwargs '{bad': not JSON"),
])
def test_bad_tool_flags_are_exit_2(cli, tmp_path, flags, says):
    result = cli("eval", "--model", "tiny:qwen2-1m", "--task", "arithmetic", "--n", "2", "--out", str(tmp_path), *flags)
    assert result.returncode == 2 and says in result.stderr and "Traceback" not in result.stderr


def test_generate_with_tools_writes_every_turn(cli, tmp_path, openai_server):
    prompts = tmp_path / "p.jsonl"
    prompts.write_text(json.dumps({"prompt": "What is 3 * 5?"}) + "\n")
    out = tmp_path / "gen.jsonl"
    result = cli("generate", "--model", f"openai:{MODEL}", "--base-url", openai_server.base_url, "--prompts", str(prompts),
                 "--tools", "posttrain.tools.calculator:calculator", "--out", str(out), "--csv", "--no-progress",
                 env={"OPENAI_API_KEY": KEY})
    assert result.returncode == 0, result.stderr[-2000:]
    row = json.loads(out.read_text())
    assert row["completion"] == "The answer is 15." and [m["role"] for m in row["turns"]] == ["assistant", "tool", "assistant"]
    assert row["tools"]["calls"] == 1 and "turns" in out.with_suffix(".csv").read_text().splitlines()[0]


class ScriptedEngine:
    """An engine whose turns are written in advance (the loop's logic under test, not a model's)."""

    name = "scripted"

    def __init__(self, turns):
        self.turns, self.seen = turns, []

    def generate(self, prompts, params, tools=None):
        from posttrain.generation.base import Completion

        self.seen.append((prompts, tools))
        out = []
        for chat in prompts:
            rounds = sum(m["role"] == "tool" for m in chat)
            text, calls = self.turns[min(rounds, len(self.turns) - 1)]
            out.append(Completion(text=text, prompt_tokens=3, completion_tokens=2, finish_reason="stop", tool_calls=calls))
        return out


def call(name, **arguments):
    return [{"id": "c1", "type": "function", "function": {"name": name, "arguments": arguments}}]


def test_an_environment_per_item_its_reward_recorded_and_the_turn_limit():
    box = Toolbox([], "flaky_tools:Counter", {"target": 4}, ToolSettings(timeout=2.0))
    try:
        engine = ScriptedEngine([("", call("increment", by=2)), ("", call("increment", by=2)), ("", call("increment", by=2))])
        out = ToolLoop(engine, box, max_turns=2, environment_pool=2).generate(["count", "count", "count"], PARAMS,
                                                                               rows=[{"id": i, "gold": "4"} for i in range(3)])
    finally:
        box.close()
    # two rounds of calls ran (2 + 2 = target 4), the third turn's call was left unanswered: cut off
    assert [c.extra["environment_reward"] for c in out] == [1.0, 1.0, 1.0]
    assert all(c.extra["tools"]["rounds"] == 2 and c.extra["tools"]["cut_off"] for c in out)
    assert [m["content"] for m in out[0].extra["turns"] if m["role"] == "tool"] == ["2", "4"]
    assert {t["function"]["name"] for t in engine.seen[0][1]} == {"increment"}  # the environment's methods were offered


def test_unknown_tools_and_arguments_that_are_not_an_object_are_the_models_errors():
    box = Toolbox(["posttrain.tools.calculator:calculator"])
    try:
        engine = ScriptedEngine([("", call("nope", x=1) + [{"id": "c2", "type": "function",
                                                           "function": {"name": "calculator", "arguments": "2 + 2"}}]), ("done", None)])
        [out] = ToolLoop(engine, box).generate(["q"], PARAMS)
    finally:
        box.close()
    results = [m["content"] for m in out.extra["turns"] if m["role"] == "tool"]
    assert results == [str({"error": "Tool nope not found."}),
                       str({"error": "the arguments of calculator must be a JSON object, got '2 + 2'"})]
    assert out.extra["tools"]["calls"] == 2 and out.extra["tools"]["errors"] == 2 and out.text == "done"
