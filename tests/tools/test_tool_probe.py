"""The checks `validate`/`train` run on tool and environment specs: every bad input is a message
naming the key, never a traceback, and a module that crashes or hangs on import never takes the
command down (`probe` imports in a worker process). The checks themselves (`check_items`) are
pure: the many bad inputs are checked in this process, the worker is exercised where it matters."""

from __future__ import annotations

from posttrain.tools.probe import check_items, probe


def problems_of(tools=(), environment=None, kwargs=None):
    items = [("tool", i, spec) for i, spec in enumerate(tools)]
    if environment:
        items.append(("environment", environment, kwargs or {}))
    return check_items(items)["problems"]


def test_good_specs_give_the_schemas_the_model_reads():
    problems, found = probe(["sample_tools:calculator", "sample_tools:add"], "sample_tools:Counter", {"target": 4})
    assert problems == []
    assert [s["function"]["name"] for s in found["tools"]] == ["calculator", "add"]
    assert found["tools"][1]["function"]["parameters"]["properties"]["a"] == {"type": "integer", "description": "The first number."}
    env = found["environment"]
    assert env["name"] == "Counter" and env["has_get_reward"]
    assert sorted(s["function"]["name"] for s in env["methods"]) == ["crash", "increment", "stall"]


BAD_TOOLS = [  # (spec, what the message says); checked in one worker, as a recipe listing them all would be
    ("no_such_module_xyz:fn", "cannot import module 'no_such_module_xyz'"),
    ("sample_tools:nope", "'sample_tools' has no attribute 'nope'"),
    ("sample_tools:no_docstring", "has no docstring"),
    ("sample_tools:no_hints", "Argument x is missing a type hint"),
    ("sample_tools:Counter", "is a class; a tool is a function"),
    ("calculator", "must look like 'package.module:function'"),
]


def test_bad_tools_each_get_their_key_and_reason():
    problems = problems_of([spec for spec, _ in BAD_TOOLS] + ["sample_tools:add"])
    assert [k for k, _ in problems] == [f"training.tools[{i}]" for i in range(len(BAD_TOOLS))]
    for (_, expected), (_, message) in zip(BAD_TOOLS, problems):
        assert expected in message
    assert "Google-style docstring" in problems[2][1]  # the fix, not only the fault


def test_bad_environments():
    problems = problems_of(environment="sample_tools:NoReset")
    assert problems[0][0] == "training.environment" and "has no reset method" in problems[0][1]
    problems = problems_of(environment="sample_tools:Counter", kwargs={"targt": 3})
    assert problems[0][0] == "training.environment_kwargs" and "unexpected keyword argument 'targt'" in problems[0][1]
    problems = problems_of(environment="sample_tools:calculator")
    assert "is not a class" in problems[0][1]


def test_a_module_that_crashes_or_hangs_while_importing(tmp_path, monkeypatch):
    (tmp_path / "crashes_on_import.py").write_text("import ctypes\nctypes.string_at(0)\n")
    (tmp_path / "hangs_on_import.py").write_text("import threading\nthreading.Event().wait()\n")
    (tmp_path / "exits_on_import.py").write_text("import sys\nsys.exit(4)\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    problems, _ = probe(["crashes_on_import:f"])
    assert "crashed the Python process (killed by SIGSEGV)" in problems[0][1]
    problems, _ = probe(["hangs_on_import:f"], timeout=3)
    assert "did not finish within 3 s" in problems[0][1]
    problems, _ = probe(["exits_on_import:f"])
    assert "importing module 'exits_on_import' failed (SystemExit: 4)" in problems[0][1]


def test_two_tools_with_one_name():
    problems = problems_of(["sample_tools:add", "sample_tools:add"])
    assert "two tools are named 'add'" in problems[0][1]
