"""The CLI answers fast and teaches: help without torch, validate without torch, exit codes."""

import subprocess
import sys

import pytest

from pathlib import Path

REPO = Path(__file__).resolve().parents[2]


def test_importing_the_cli_and_schema_does_not_import_torch():
    code = "import sys, posttrain.cli, posttrain.recipe.load, posttrain.recipe.preflight; " \
           "posttrain.cli.build_parser(); heavy = [m for m in ('torch', 'transformers', 'trl', 'peft', 'datasets') if m in sys.modules]; print(heavy)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "[]"


def test_help_lists_commands(cli):
    result = cli("--help")
    assert result.returncode == 0
    for command in ("train", "validate", "inspect", "make-tiny-model"):
        assert command in result.stdout


def test_train_help_explains_overrides(cli):
    result = cli("train", "--help")
    assert "data.datasets[0].name" in result.stdout and "Precedence" in result.stdout


def test_validate_prints_resolved_recipe_and_differences(cli):
    result = cli("validate", "recipes/sft/tiny-cpu.yaml", "training.learning_rate=1e-4")
    assert result.returncode == 0, result.stderr
    assert "valid (sft)" in result.stdout
    assert "training.learning_rate" in result.stdout and "override" in result.stdout
    assert "posttrain default" in result.stdout


def test_python_dash_m_and_console_script_agree():
    script = REPO / ".venv" / "bin" / "posttrain"
    exe = [str(script)] if script.exists() else [sys.executable, "-m", "posttrain"]
    result = subprocess.run([*exe, "validate", "recipes/cpt/tiny-cpu.yaml"], cwd=REPO, capture_output=True, text=True)
    assert result.returncode == 0 and "valid (cpt)" in result.stdout


@pytest.mark.parametrize("argv", [
    ["validate", "recipes/sft/tiny-cpu.yaml", "--schema-only", "training.max_steps=0123", "tracking.run_name=exp #3"],
    ["validate", "--schema-only", "recipes/sft/tiny-cpu.yaml", "training.max_steps=0123", "tracking.run_name=exp #3"],
    ["validate", "training.max_steps=0123", "--schema-only", "--recipe", "recipes/sft/tiny-cpu.yaml", "tracking.run_name=exp #3"],
])
def test_overrides_anywhere_on_the_line(argv, capsys, repo, monkeypatch):
    from posttrain.cli import main

    monkeypatch.chdir(repo)
    assert main(argv) == 0
    out = capsys.readouterr().out
    assert "max_steps: 123" in out and "run_name: 'exp #3'" in out


def test_stray_flag_or_override_where_none_is_taken(capsys):
    from posttrain.cli import main

    with pytest.raises(SystemExit) as e:
        main(["validate", "recipes/sft/tiny-cpu.yaml", "--bogus"])
    assert e.value.code == 2 and "--bogus" in capsys.readouterr().err
    with pytest.raises(SystemExit) as e:
        main(["inspect", "somewhere", "a=1"])
    assert e.value.code == 2 and "a=1" in capsys.readouterr().err


def test_posttrain_log_records_reach_stderr_concisely_at_the_chosen_level(capsys, monkeypatch):
    import logging

    from posttrain.cli import main
    from posttrain.log import configure_logging

    configure_logging()
    logging.getLogger("posttrain.storage").info("uploaded %d files", 3)
    logging.getLogger("posttrain.net").warning("retry %d of %d", 1, 3)
    logging.getLogger("posttrain.storage").debug("not shown at INFO")
    assert capsys.readouterr().err == "[storage] uploaded 3 files\n[net] warning: retry 1 of 3\n"
    configure_logging("WARNING")
    logging.getLogger("posttrain.storage").info("hidden")
    assert capsys.readouterr().err == ""
    assert len(logging.getLogger("posttrain").handlers) == 1  # configuring twice adds no second handler
    configure_logging()
    monkeypatch.setenv("POSTTRAIN_LOG_LEVEL", "LOUD")
    assert main(["validate", str(REPO / "recipes/sft/tiny-cpu.yaml"), "--schema-only"]) == 2
    assert "POSTTRAIN_LOG_LEVEL=LOUD: expected one of DEBUG, INFO, WARNING, ERROR" in capsys.readouterr().err


def test_validate_and_an_already_complete_train_do_not_import_torch(tmp_path):
    """validate reads local data (with `datasets`) but loads no model; `train` on a finished run answers
    "already complete" before the heavy imports."""
    out = tmp_path / "run"
    code = f"""
import json, sys
from pathlib import Path
from posttrain.cli import main
from posttrain.recipe.load import load_recipe, resolved_dict, to_yaml
argv = ["recipes/sft/tiny-cpu.yaml", "training.output_dir={out}"]
assert main(["validate", *argv]) == 0
ckpt = Path("{out}") / "checkpoint-30"
ckpt.mkdir(parents=True)
(ckpt / "trainer_state.json").write_text(json.dumps({{"global_step": 30}}))
(ckpt / "model.safetensors").write_bytes(b"w")
(ckpt / "posttrain_recipe.yaml").write_text(to_yaml(resolved_dict(load_recipe(argv[0], argv[1:]).recipe)))
(Path("{out}") / "run_summary.json").write_text(json.dumps({{"state": "finished", "global_step": 30}}))
assert main(["train", *argv]) == 0
print([m for m in ("torch", "transformers", "trl", "peft") if m in sys.modules], file=sys.stderr)
"""
    result = subprocess.run([sys.executable, "-c", code], cwd=REPO, capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stderr[-2000:]
    assert "already complete at step 30" in result.stdout
    assert result.stderr.strip().splitlines()[-1] == "[]"
