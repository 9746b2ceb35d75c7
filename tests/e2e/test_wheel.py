"""posttrain without the repository: the wheel built from this checkout, installed into a fresh venv
outside it, runs the quick start from an empty folder (shipped recipes by name, their data from the
installed copy, the run folder where the user is).

The fresh venv gets the wheel alone (`--no-deps --no-index`); its dependencies (torch, TRL, ...)
come from the test environment's site-packages through a path file, so nothing is downloaded. A
path file adds that folder without running its own `.pth` files, so the checkout's editable install
is not active there: `import posttrain` is the wheel's (checked)."""

import json
import os
import shutil
import subprocess
import sys
import sysconfig
import venv
from pathlib import Path

import pytest

pytestmark = pytest.mark.e2e
REPO = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def installed(tmp_path_factory) -> Path:
    """The bin folder of a fresh venv holding the wheel built from a copy of this checkout."""
    work = tmp_path_factory.mktemp("wheel")
    source = work / "source"
    for part in ("src", "recipes", "examples"):
        shutil.copytree(REPO / part, source / part, ignore=shutil.ignore_patterns("__pycache__", "*.egg-info"))
    for name in ("pyproject.toml", "README.md"):
        shutil.copy2(REPO / name, source / name)
    built = subprocess.run([sys.executable, "-m", "pip", "wheel", "-q", "--no-deps", "--no-build-isolation", "-w", str(work / "dist"),
                            str(source)], capture_output=True, text=True, timeout=600)
    assert built.returncode == 0, built.stdout[-2000:] + built.stderr[-2000:]
    [wheel] = (work / "dist").glob("posttrain-*.whl")
    env_dir = work / "venv"
    venv.create(env_dir, with_pip=True)
    bin_dir = env_dir / "bin"
    site = Path(subprocess.run([str(bin_dir / "python"), "-c", "import sysconfig; print(sysconfig.get_path('purelib'))"],
                               capture_output=True, text=True, check=True).stdout.strip())
    (site / "test-deps.pth").write_text(sysconfig.get_path("purelib") + "\n")  # torch, TRL, ... from the test environment
    install = subprocess.run([str(bin_dir / "python"), "-m", "pip", "install", "-q", "--no-deps", "--no-index", str(wheel)],
                             capture_output=True, text=True, timeout=600)
    assert install.returncode == 0, install.stdout[-2000:] + install.stderr[-2000:]
    return bin_dir


def posttrain(bin_dir: Path, cwd: Path, *args: str) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONPATH": ""}
    return subprocess.run([str(bin_dir / "posttrain"), *args], cwd=cwd, env=env, capture_output=True, text=True, timeout=600)


def test_the_quick_start_runs_from_an_empty_folder_with_the_wheel_alone(installed, tmp_path):
    home = tmp_path / "empty"
    home.mkdir()
    where = subprocess.run([str(installed / "python"), "-c", "import posttrain; print(posttrain.__file__)"], cwd=home,
                           capture_output=True, text=True, env={**os.environ, "PYTHONPATH": ""})
    assert str(installed.parent) in where.stdout and str(REPO) not in where.stdout, where.stdout + where.stderr

    listed = posttrain(installed, home, "recipes")
    assert listed.returncode == 0, listed.stderr[-2000:]
    assert "sft/tiny-cpu " in listed.stdout and "grpo/qwen3-1.7b-gsm8k-lora " in listed.stdout

    trained = posttrain(installed, home, "train", "--recipe", "sft/tiny-cpu", "training.max_steps=2", "training.save_strategy=no",
                        "training.save_steps=null")
    assert trained.returncode == 0, trained.stdout[-2000:] + trained.stderr[-2000:]
    assert (home / "runs" / "sft-tiny" / "run_summary.json").is_file()  # the run folder is where the user is
    resolved = (home / "runs" / "sft-tiny" / "resolved_recipe.yaml").read_text()
    assert str(installed.parent / "share" / "posttrain" / "examples" / "data" / "sft.jsonl") in resolved

    scored = posttrain(installed, home, "eval", "--model", "runs/sft-tiny", "--task", "arithmetic", "--n", "4", "--max-new-tokens", "8",
                       "--out", "eval", "--no-progress")
    assert scored.returncode == 0, scored.stderr[-2000:]
    assert json.loads((home / "eval" / "summary.json").read_text())["arms"][0]["n"] == 4

    copied = posttrain(installed, home, "recipes", "copy", "grpo/tiny-cpu", "mine")
    assert copied.returncode == 0, copied.stderr[-2000:]
    assert (home / "mine" / "recipes" / "grpo" / "tiny-cpu.yaml").is_file() and (home / "mine" / "examples" / "data" / "problems.jsonl").is_file()
    checked = posttrain(installed, home / "mine", "validate", "recipes/grpo/tiny-cpu.yaml")
    assert checked.returncode == 0, checked.stderr[-2000:]
    assert "name: examples/data/problems.jsonl" in checked.stdout  # the copy reads its own data, by its own relative path


def test_a_shipped_recipe_by_name_reads_shipped_data_and_writes_where_the_user_is(tmp_path, monkeypatch):
    """From a checkout too: the data it names come from recipes/ and examples/, but a runs/ folder that happens to exist
    in the checkout is not where the user's run goes."""
    from posttrain import shipped
    from posttrain.recipe.problems import read_yaml

    monkeypatch.chdir(tmp_path)
    raw = read_yaml("dpo/tiny-cpu")
    assert raw["data"]["datasets"][0]["name"] == str(shipped.root() / "examples" / "data" / "preferences.jsonl")
    assert raw["training"]["output_dir"] == "runs/dpo-tiny"  # relative to the working directory, whatever the checkout holds
    assert shipped.rooted({"a": "runs/x", "b": "recipes/sft/tiny-cpu.yaml"}, REPO) == {"a": "runs/x", "b": str(REPO / "recipes/sft/tiny-cpu.yaml")}
