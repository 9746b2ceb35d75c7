"""Recipe keys for tools and environments: every bad input is a clear error with its key, exit 2,
never a traceback; through the schema, `posttrain validate` and `posttrain train`."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from posttrain.recipe.errors import RecipeError
from posttrain.recipe.load import load_recipe

HERE = Path(__file__).resolve().parent
GRPO = "recipes/grpo/tiny-tools-cpu.yaml"


def problems(recipe: str, *overrides: str) -> str:
    with pytest.raises(RecipeError) as e:
        load_recipe(recipe, list(overrides))
    return str(e.value)


def test_the_keys_resolve_with_posttrains_limit():
    training = load_recipe(GRPO, ["training.max_tool_calling_iterations=null"]).recipe.training
    assert training.tools == ["posttrain.tools.calculator:calculator"] and training.tool_timeout == 5.0
    default = load_recipe("recipes/grpo/tiny-cpu.yaml", ["training.tools=[posttrain.tools.calculator:calculator]"]).recipe.training
    assert default.value("max_tool_calling_iterations") == 5  # posttrain's default with tools; TRL's None is unbounded
    assert load_recipe("recipes/grpo/tiny-cpu.yaml").recipe.training.value("max_tool_calling_iterations") is None


@pytest.mark.parametrize("overrides, key, says", [
    (["training.tools=[calculator]"], "training.tools[0]", "must look like 'package.module:function'"),
    (["training.environment=Shop"], "training.environment", "must look like 'package.module:function'"),
    (["training.tools=[a:b, a:b]"], "training.tools", "a:b is listed twice"),
    (["data.use_chat_template=false"], "data.use_chat_template", "needs chat prompts"),
    (["data.prompt_truncation=left"], "data.prompt_truncation", "tools need chat prompts"),
])
def test_bad_tool_settings(overrides, key, says):
    message = problems(GRPO, *overrides)
    assert f"{key} (from override): " in message and says in message


def test_tool_settings_without_tools_would_do_nothing():
    message = problems("recipes/grpo/tiny-cpu.yaml", "training.tool_timeout=3", "training.environment_kwargs={a: 1}")
    assert "training.environment_kwargs, training.tool_timeout only act(s) with training.tools or training.environment" in message


def test_tools_on_a_non_rl_algorithm_say_where_tool_calls_belong():
    message = problems("recipes/sft/tiny-tools-cpu.yaml", "training.tools=[posttrain.tools.calculator:calculator]")
    assert "training.tools (from override): not a key of algorithm sft: tools are called while GRPO/GSPO generate rollouts" in message
    assert "`tools` column" in message


def run_cli(cli, *args):
    env = {"PYTHONPATH": os.pathsep.join(filter(None, [str(HERE), os.environ.get("PYTHONPATH")]))}
    return cli(*args, env=env)


def test_validate_imports_the_tools_in_a_worker_and_lists_every_problem(cli):
    result = run_cli(cli, "validate", GRPO, "training.tools=[sample_tools:add, sample_tools:no_docstring, no_such_mod:f]",
                     "training.environment=sample_tools:NoReset")
    assert result.returncode == 2 and "Traceback" not in result.stderr
    err = result.stderr
    assert "3 problems in the recipe" in err
    assert "training.tools[1]: sample_tools:no_docstring: Cannot generate JSON schema for no_docstring because it has no docstring!" in err
    assert "training.tools[2]: tool 'no_such_mod:f': cannot import module 'no_such_mod'" in err
    assert "training.environment: sample_tools:NoReset has no reset method" in err


def test_train_refuses_a_template_without_tool_support_before_training(cli, tmp_path):
    """A ChatML template that ignores tools (like SmolLM2's own): exit 2 naming the model and the fix,
    and the output folder the run would have made is not left behind."""
    plain = tmp_path / "plain-chatml.jinja"
    plain.write_text("{%- for m in messages -%}{{- '<|im_start|>' + m.role + '\\n' + (m.content or '') + '<|im_end|>\\n' -}}"
                     "{%- endfor -%}{%- if add_generation_prompt -%}{{- '<|im_start|>assistant\\n' -}}{%- endif -%}")
    out = tmp_path / "run"
    result = run_cli(cli, "train", GRPO, f"training.output_dir={out}", f"training.chat_template_path={plain}")
    assert result.returncode == 2 and "Traceback" not in result.stderr
    assert "the chat template of tiny:qwen2-1m has no tool support" in result.stderr
    assert "recipes/templates/chatml-tools.jinja" in result.stderr
    assert not out.exists()


def test_train_stops_on_a_tool_module_that_segfaults_on_import(cli, tmp_path):
    (tmp_path / "crashy.py").write_text("import ctypes\nctypes.string_at(0)\n")
    env = {"PYTHONPATH": os.pathsep.join(filter(None, [str(tmp_path), os.environ.get("PYTHONPATH")]))}
    result = cli("train", GRPO, f"training.output_dir={tmp_path / 'run'}", "training.tools=[crashy:f]", env=env)
    assert result.returncode == 2 and "Traceback" not in result.stderr
    assert "training.tools: importing crashy:f crashed the Python process (killed by SIGSEGV)" in result.stderr
