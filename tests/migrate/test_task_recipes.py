"""Generation/evaluation recipes (`inference:` / `evaluation:`) follow the training recipes' rules."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest
import yaml

from posttrain.recipe.errors import RecipeError
from posttrain.recipe.tasks import load_task_recipe


def problems(raw, overrides=()) -> str:
    with pytest.raises(RecipeError) as e:
        load_task_recipe(None, overrides, raw=raw)
    return str(e.value)


GEN = {"inference": {"models": ["tiny:qwen2-1m"], "prompts": "p.jsonl"}}
EV = {"evaluation": {"model": "tiny:qwen2-1m", "task": "arithmetic"}}


def test_unknown_keys_bad_values_and_overrides_are_reported_all_at_once():
    text = problems(GEN, ["inference.temprature=0.5", "inference.top_p=2", "inference.on_error=ignore"])
    assert "3 problems" in text
    assert "inference.temprature (from override): unknown key 'temprature' in inference. Did you mean 'temperature'?" in text
    assert "inference.top_p" in text and "less than or equal to 1" in text
    assert "inference.on_error" in text and "'fail' or 'continue'" in text


def test_cross_field_rules():
    assert "one way" in problems({"inference": {**GEN["inference"], "dataset": "d.jsonl"}})
    assert "model (posttrain eval) or arms" in problems({"evaluation": {"task": "gsm8k"}})
    assert "one section" in problems({**GEN, **EV})


def test_overrides_apply_and_secrets_never_echo():
    recipe = load_task_recipe(None, ["inference.temperature=0.7", "inference.models[1]=tiny:llama-1m"], raw=GEN)
    assert recipe.inference.temperature == 0.7 and recipe.inference.models == ["tiny:qwen2-1m", "tiny:llama-1m"]
    text = problems(GEN, ["inference.api_key=sk-SECRET-123"])
    assert "SECRET" not in text and "api_key" in text


def main(*args) -> int:
    """The CLI in this process (the generating commands cost seconds of imports per subprocess)."""
    from posttrain.cli import main as posttrain_main

    return posttrain_main([str(a) for a in args])


def test_cli_exit_2_without_traceback_and_flags_win_over_the_recipe(cli, tmp_path):
    (tmp_path / "p.txt").write_text("1 + 1 =\n2 + 2 =\n")
    recipe = tmp_path / "gen.yaml"
    recipe.write_text(yaml.safe_dump({"inference": {"models": ["tiny:qwen2-1m"], "prompts": str(tmp_path / "p.txt"),
                                                    "max_new_tokens": 9, "temperature": 0.5, "out": str(tmp_path / "g.jsonl")}}))
    bad = cli("generate", "--recipe", recipe, "inference.max_new_tokns=3")
    assert bad.returncode == 2 and "Did you mean 'max_new_tokens'" in bad.stderr and "Traceback" not in bad.stderr
    validated = cli("validate", recipe, "--schema-only")
    assert validated.returncode == 0 and "posttrain generate --recipe" in validated.stdout
    assert main("generate", "--recipe", recipe, "inference.temperature=0.9", "--max-new-tokens", "3", "--seed", "5") == 0
    params = json.loads((tmp_path / "g.jsonl").read_text().splitlines()[0])["params"]
    assert params == {"max_new_tokens": 3, "temperature": 0.9, "top_p": 1.0, "seed": 5}


def test_evaluation_recipe_for_eval_and_compare(cli, tmp_path):
    recipe = tmp_path / "ev.yaml"
    recipe.write_text(yaml.safe_dump({"evaluation": {"arms": {"a": "tiny:qwen2-1m", "b": "tiny:llama-1m"}, "task": "arithmetic",
                                                     "n": 3, "max_new_tokens": 4, "out": str(tmp_path / "cmp")}}))
    wrong = cli("eval", "--recipe", recipe)
    assert wrong.returncode == 2 and "posttrain compare" in wrong.stderr
    assert main("compare", "--recipe", recipe, "--n", "2") == 0
    report = json.loads((tmp_path / "cmp" / "report.json").read_text())
    assert report["invocation"]["arguments"]["n"] == 2 and report["invocation"]["arguments"]["max_new_tokens"] == 4


def test_convert_and_the_task_recipe_path_import_no_torch(tmp_path):
    code = ("import sys; from posttrain.cli import main; "
            "rc = main(['convert', '-q', 'tests/migrate/fairl_corpus/evaluation/gsm8k_single.yaml', '-o', sys.argv[1]]); "
            "rc2 = main(['validate', sys.argv[1], '--schema-only']); "
            "rc3 = main(['validate', sys.argv[1]]); "  # the converted recipe's model folder is not on this machine
            "assert rc == rc2 == 0 and rc3 == 2, (rc, rc2, rc3); assert 'torch' not in sys.modules, 'torch imported'")
    result = subprocess.run([sys.executable, "-c", code, str(tmp_path / "ev.yaml")], capture_output=True, text=True)
    assert result.returncode == 0, result.stderr
    assert "evaluation.model: models/qwen-grpo-gsm8k/checkpoint-200 does not exist" in result.stderr


@pytest.mark.parametrize("command, section", [("generate", "InferenceSection"), ("eval", "EvaluationSection"), ("compare", "EvaluationSection")])
def test_every_flag_has_a_recipe_key(command, section):
    """The recipe and the flags cannot drift apart: each option of the command is a key of its section."""
    import argparse

    from posttrain.cli import build_parser
    from posttrain.commands.task_recipe import RENAMED
    from posttrain.recipe import tasks

    parser = build_parser()
    sub = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction)).choices[command]
    keys = {RENAMED.get(k, (k,))[0] for k in getattr(tasks, section).model_fields}
    dests = {a.dest for a in sub._actions if a.option_strings and a.dest not in ("help", "recipe", "verbose")}  # output, not a setting
    assert not dests - keys, f"flags of posttrain {command} without a recipe key: {sorted(dests - keys)}"
