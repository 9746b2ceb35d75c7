"""Tools and environments in worker processes: real hangs, real segfaults, sys.exit, 10 MB results
and unserialisable ones become the tool's error message and a count, and the next call works."""

from __future__ import annotations

import inspect
import os
import time

import pytest

from posttrain.tools.isolation import EnvironmentLost, Toolbox, ToolError, ToolSettings

SPECS = ["sample_tools:calculator", "sample_tools:hang", "sample_tools:segfault", "sample_tools:exits",
         "sample_tools:hard_exit", "sample_tools:huge", "sample_tools:unserialisable", "sample_tools:chatty"]


@pytest.fixture(scope="module")
def toolbox():
    box = Toolbox(SPECS, settings=ToolSettings(timeout=2.0, max_result_chars=1000))
    yield box
    box.close()


def by_name(box: Toolbox) -> dict:
    return {t.__name__: t for t in box.tools()}


def test_proxies_look_like_the_users_functions(toolbox):
    from transformers.utils import get_json_schema

    import sample_tools

    proxy = by_name(toolbox)["calculator"]
    assert inspect.signature(proxy) == inspect.signature(sample_tools.calculator)
    assert get_json_schema(proxy) == get_json_schema(sample_tools.calculator)  # what TRL shows the model


def test_a_call_runs_in_another_process(toolbox):
    tools = by_name(toolbox)
    assert tools["calculator"](expression="3 * (4 + 5)") == "27"
    assert toolbox._tools_worker.proc.pid != os.getpid()
    with pytest.raises(ToolError, match="ValueError: only numbers"):
        tools["calculator"](expression="__import__('os')")


def test_a_tool_that_blocks_forever_is_stopped_and_counted(toolbox):
    tools = by_name(toolbox)
    toolbox.stats.take()
    started = time.monotonic()
    with pytest.raises(ToolError, match=r"hang did not return within 2 s and was stopped"):
        tools["hang"](seconds=1.0)
    assert time.monotonic() - started < 6
    assert tools["calculator"](expression="1 + 1") == "2"  # a fresh worker answers the next call
    counts = toolbox.stats.take()
    assert (counts["calls"], counts["errors"], counts["timeouts"]) == (2, 1, 1)


def test_a_segfaulting_tool_is_an_error_message_and_the_run_goes_on(toolbox):
    tools = by_name(toolbox)
    toolbox.stats.take()
    with pytest.raises(ToolError, match=r"segfault crashed \(killed by SIGSEGV\)"):
        tools["segfault"](x=1)
    with pytest.raises(ToolError, match=r"hard_exit crashed \(exited with code 7\)"):
        tools["hard_exit"](code=7)
    assert tools["calculator"](expression="6 / 4") == "1.5"
    counts = toolbox.stats.take()
    assert (counts["calls"], counts["errors"], counts["crashes"]) == (3, 2, 2)


def test_sys_exit_is_the_tools_error_not_ours(toolbox):
    tools = by_name(toolbox)
    pid = toolbox._tools_worker.proc.pid if toolbox._tools_worker.alive else None
    with pytest.raises(ToolError, match=r"the tool called sys.exit\(3\)"):
        tools["exits"](code=3)
    if pid is not None:
        assert toolbox._tools_worker.proc.pid == pid  # nothing had to be restarted


def test_huge_results_are_cut_before_they_cross_and_counted(toolbox):
    tools = by_name(toolbox)
    toolbox.stats.take()
    started = time.monotonic()
    text = tools["huge"](megabytes=10)
    assert time.monotonic() - started < 10
    assert text.startswith("7" * 1000) and "truncated: the tool returned 10,000,000 characters" in text and len(text) < 1200
    assert toolbox.stats.take()["truncated"] == 1


def test_unserialisable_results_and_stdout_noise(toolbox):
    tools = by_name(toolbox)
    with pytest.raises(ToolError, match="returned a lock, which is not JSON-serialisable"):
        tools["unserialisable"](x=1)
    assert tools["chatty"](x=5) == "x=5"  # its print went to stderr, not into the reply


def test_wrong_arguments_are_the_tools_error(toolbox):
    with pytest.raises(ToolError, match="TypeError: .*unexpected keyword argument 'nope'"):
        by_name(toolbox)["calculator"](nope="1")


def test_an_environment_lives_in_its_own_process_and_keeps_state():
    box = Toolbox([], "sample_tools:Counter", {"target": 2}, ToolSettings(timeout=2.0))
    try:
        factory = box.environment_factory()
        env, other = factory(), factory()
        assert type(env).__name__ == "Counter" and env._worker.proc.pid != other._worker.proc.pid
        assert env.reset(prompt="x") == "Count to 2."
        assert env.increment(by=1) == "1" and env.increment(by=1) == "2"
        assert env.count == 2 and env.target == 2  # state read by rewards crosses from the worker
        assert env.get_reward() == 1.0
        other.reset()
        assert other.get_reward() == 0.0  # instances do not share state
        # TRL's view: public methods are the tools, with the user's signatures
        names = sorted(n for n, _ in inspect.getmembers(type(env), inspect.isfunction) if not n.startswith("_"))
        assert names == ["crash", "get_reward", "increment", "reset", "stall"]
    finally:
        box.close()


def test_a_crashed_or_stalled_environment_is_lost_for_its_rollout_only():
    box = Toolbox([], "sample_tools:Counter", {}, ToolSettings(timeout=1.5))
    try:
        env = box.environment_factory()()
        env.reset()
        with pytest.raises(ToolError, match=r"crash crashed \(killed by SIGSEGV\); the environment is lost"):
            env.crash(x=0)
        with pytest.raises(ToolError, match="the environment of this rollout is gone"):
            env.increment(by=1)
        assert env.get_reward() is None  # not scored, never a silent 0
        with pytest.raises(EnvironmentLost):
            env.count
        assert env.reset() == "Count to 3."  # the next rollout gets a fresh instance
        assert env.increment(by=3) == "3" and env.get_reward() == 1.0
        with pytest.raises(ToolError, match="stall did not return within 1.5 s"):
            env.stall(x=0)
        counts = box.stats.take()
        assert counts["crashes"] == 1 and counts["timeouts"] == 1 and counts["environment_errors"] == 1
    finally:
        box.close()


def test_workers_stop_with_the_toolbox():
    box = Toolbox(["sample_tools:add"], settings=ToolSettings(timeout=2.0))
    assert box.tools()[0](a=2, b=3) == "5"
    proc = box._tools_worker.proc
    box.close()
    assert proc.poll() is not None
