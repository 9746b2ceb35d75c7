"""What a new user reads first, through the real CLI: reward names written as TRL writes them get a did-you-mean
that leads somewhere, `posttrain recipes` prints whole descriptions, `posttrain env` says what a bug report needs."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

import pytest

from posttrain.cli import main

REPO = Path(__file__).resolve().parents[2]


def test_a_dotted_reward_name_gets_the_import_path_and_the_builtin(tmp_path, capsys):
    code = main(["validate", "recipes/grpo/tiny-cpu.yaml", "training.rewards=[{name: trl.rewards.accuracy_reward}]"])
    err = capsys.readouterr().err
    assert code == 2 and "Traceback" not in err
    assert "Did you mean 'trl.rewards:accuracy_reward'" in err and "Or the built-in 'math_match'" in err
    # an own function in dotted form too, without a built-in to offer
    assert main(["validate", "recipes/grpo/tiny-cpu.yaml", "training.rewards=[{name: my_rewards.digit_share}]"]) == 2
    err = capsys.readouterr().err
    assert "Did you mean 'my_rewards:digit_share'" in err and "Or the built-in" not in err


def test_the_suggested_import_path_is_one_validate_accepts(tmp_path, capsys):
    """TRL's accuracy_reward by the path the hint gives, on data with the 'solution' column it reads."""
    pytest.importorskip("math_verify")
    data = tmp_path / "math.jsonl"
    data.write_text("".join(json.dumps({"question": f"What is {n}/2?", "answer": str(n), "solution": f"\\frac{{{n}}}{{2}}"}) + "\n"
                            for n in range(1, 9)))
    code = main(["validate", "recipes/grpo/tiny-cpu.yaml", f"data.datasets[0].name={data}",
                 "training.rewards=[{name: 'trl.rewards:accuracy_reward'}]"])
    assert code == 0, capsys.readouterr().err


def recipe_names_and_descriptions(stdout: str) -> dict[str, str]:
    """`posttrain recipes`' lines: a name then its description, continuation lines indented under it."""
    entries: dict[str, str] = {}
    name = None
    for line in stdout.splitlines():
        if line.startswith(" ") and name:
            entries[name] += " " + line.strip()
        elif line.strip():
            name, _, text = line.partition("  ")
            entries[name] = text.strip()
    return entries


def test_recipes_prints_every_description_whole(capsys):
    from posttrain import shipped
    from posttrain.commands.recipes import description

    assert main(["recipes"]) == 0
    printed = recipe_names_and_descriptions(capsys.readouterr().out)
    assert set(printed) == set(shipped.names())
    for name, text in printed.items():
        header = shipped.find(name).read_text()
        assert text == description(header), name
        # whole: every line of the opening comment up to its first command line, ending where a sentence or a list ends
        prose = []
        for line in header.splitlines():
            if not line.startswith("# ") or line.startswith("#  "):
                break
            prose.append(line[2:].strip())
        assert prose and text.startswith(" ".join(prose)), name
        assert re.search(r"[.)]$|posttrain train --recipe \S+$", text), f"{name}: {text!r} ends mid-phrase"


def test_env_says_what_a_bug_report_needs_without_importing_torch():
    code = ("import sys; from posttrain.cli import main; code = main(['env']); "
            "print('torch imported' if 'torch' in sys.modules else 'torch not imported'); raise SystemExit(code)")
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, cwd=REPO)
    assert result.returncode == 0, result.stderr
    lines = dict(line.split(":", 1) for line in result.stdout.splitlines() if ":" in line)
    for key in ("posttrain", "python", "os", "cpu", "cpu flags", "torch", "transformers", "trl", "peft", "accelerate",
                "datasets", "torch cuda", "gpus"):
        assert key in lines, f"{key} missing from:\n{result.stdout}"
    from importlib.metadata import version

    assert lines["trl"].strip() == version("trl") and lines["torch"].strip() == version("torch")
    assert "commit " in lines["posttrain"]  # this suite runs from a checkout
    flags = Path("/proc/cpuinfo").read_text() if Path("/proc/cpuinfo").is_file() else ""
    if " avx2" in flags:
        assert "avx2" in lines["cpu flags"]
    assert result.stdout.rstrip().endswith("torch not imported")
