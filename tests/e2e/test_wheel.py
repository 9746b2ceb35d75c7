"""posttrain without the repository: the wheel built from this checkout, installed each way pip installs it
(a venv, `--user`, `--target DIR`), runs from an empty folder: the shipped recipes by name and copied out,
their data from the installed package (importlib.resources), the guide, and the whole demo.

The wheel is installed alone (`--no-deps --no-index`); its dependencies (torch, TRL, ...) come from the test
environment's site-packages through a path file or PYTHONPATH, so nothing is downloaded. Either adds that
folder without running its own `.pth` files, so the checkout's editable install is not active there:
`import posttrain` is the wheel's (checked in every mode)."""

import json
import os
import shutil
import subprocess
import sys
import sysconfig
import venv
import zipfile
from pathlib import Path

import pytest

pytestmark = pytest.mark.e2e
REPO = Path(__file__).resolve().parents[2]
DEPS = sysconfig.get_path("purelib")  # torch, TRL, ... of the test environment
SHIPPED = ("recipes", "examples", "docs")


@pytest.fixture(scope="module")
def wheel(tmp_path_factory) -> Path:
    """The wheel built from a copy of this checkout (no build folder or egg-info left in the checkout)."""
    work = tmp_path_factory.mktemp("wheel")
    source = work / "source"
    for part in ("src", *SHIPPED):  # src/posttrain/shipped/ links to ../../../{recipes,examples,docs}: copied as links
        shutil.copytree(REPO / part, source / part, symlinks=True, ignore=shutil.ignore_patterns("__pycache__", "*.egg-info"))
    for name in ("pyproject.toml", "README.md"):
        shutil.copy2(REPO / name, source / name)
    built = subprocess.run([sys.executable, "-m", "pip", "wheel", "-q", "--no-deps", "--no-build-isolation", "-w", str(work / "dist"),
                            str(source)], capture_output=True, text=True, timeout=600)
    assert built.returncode == 0, built.stdout[-2000:] + built.stderr[-2000:]
    [built_wheel] = (work / "dist").glob("posttrain-*.whl")
    return built_wheel


def pip_install(*args: str, env: dict | None = None) -> None:
    done = subprocess.run([sys.executable, "-m", "pip", *args], capture_output=True, text=True, timeout=600,
                          env={**os.environ, **(env or {})})
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]


def install(mode: str, wheel: Path, work: Path) -> tuple[Path, dict]:
    """Install the wheel `mode`'s way under `work`: the `posttrain` script to run and the environment to run it in."""
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "PYTHONUSERBASE", "PYTHONNOUSERSITE")}
    if mode == "venv":  # a fresh venv of its own; pip runs from here against it (`--python`), so none is installed in it
        venv.create(work / "venv", with_pip=False)
        python = work / "venv" / "bin" / "python"
        site = subprocess.run([str(python), "-c", "import sysconfig; print(sysconfig.get_path('purelib'))"],
                              capture_output=True, text=True, check=True).stdout.strip()
        (Path(site) / "test-deps.pth").write_text(DEPS + "\n")
        pip_install("--python", str(python), "install", "-q", "--no-deps", "--no-index", str(wheel))
        return work / "venv" / "bin" / "posttrain", env
    if mode == "user":  # the base interpreter (a venv has no user site), with a home of its own: ~/.local
        env["HOME"] = str(work / "home")
        python = Path(sys.base_prefix) / "bin" / f"python{sys.version_info.major}.{sys.version_info.minor}"
        # --break-system-packages: a distribution's Python (PEP 668) refuses --user installs too; this home is temporary
        pip_install("--python", str(python), "install", "-q", "--user", "--break-system-packages", "--no-deps", "--no-index",
                    str(wheel), env=env)
        return work / "home" / ".local" / "bin" / "posttrain", {**env, "PYTHONPATH": DEPS}
    assert mode == "target"  # a plain folder, put on PYTHONPATH by the user
    pip_install("install", "-q", "--no-deps", "--no-index", "--target", str(work / "target"), str(wheel))
    return work / "target" / "bin" / "posttrain", {**env, "PYTHONPATH": f"{work / 'target'}{os.pathsep}{DEPS}"}


def run(script: Path, env: dict, cwd: Path, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run([str(script), *args], cwd=cwd, env=env, capture_output=True, text=True, timeout=600)


def package_file(script: Path, env: dict, cwd: Path) -> Path:
    """Where the installed script's Python imports posttrain from."""
    python = script.read_text().splitlines()[0].removeprefix("#!").strip()
    where = subprocess.run([python, "-c", "import posttrain; print(posttrain.__file__)"], cwd=cwd, env=env,
                           capture_output=True, text=True)
    assert where.returncode == 0, where.stderr[-2000:]
    return Path(where.stdout.strip())


@pytest.fixture(scope="module")
def installed(wheel, tmp_path_factory) -> tuple[Path, dict]:
    """The wheel in a fresh venv: its `posttrain` script and environment."""
    return install("venv", wheel, tmp_path_factory.mktemp("venv-install"))


def test_the_wheel_carries_every_recipe_template_example_and_guide_file(wheel):
    """The package data follow the links in src/posttrain/shipped/: every file of recipes/, examples/ and docs/ is in
    the wheel, and nothing else is under shipped/ but the package's own code."""
    source = wheel.parent.parent / "source"  # the checkout as it was built
    inside = {n.removeprefix("posttrain/shipped/") for n in zipfile.ZipFile(wheel).namelist() if n.startswith("posttrain/shipped/")}
    files = {p.relative_to(source).as_posix() for part in SHIPPED for p in (source / part).rglob("*") if p.is_file()}
    assert {"recipes/sft/tiny-cpu.yaml", "examples/rewards/my_reward.py", "docs/getting-started.md"} <= files
    assert inside - {"__init__.py"} == files


@pytest.mark.slow
@pytest.mark.parametrize("mode", ["user", "target"])  # a venv: the quick start below
def test_every_install_mode_lists_copies_and_trains_a_recipe_from_an_empty_folder(mode, wheel, tmp_path):
    script, env = install(mode, wheel, tmp_path)
    home = tmp_path / "empty"
    home.mkdir()
    assert str(tmp_path) in str(package_file(script, env, home)) and str(REPO) not in str(package_file(script, env, home))

    listed = run(script, env, home, "recipes")
    assert listed.returncode == 0, listed.stderr[-2000:]
    assert "sft/tiny-cpu " in listed.stdout and "grpo/qwen3-1.7b-gsm8k-lora " in listed.stdout
    page = run(script, env, home, "docs", "getting-started")
    assert page.returncode == 0 and page.stdout == (REPO / "docs" / "getting-started.md").read_text(), page.stderr[-2000:]

    copied = run(script, env, home, "recipes", "copy", "sft/tiny-cpu", "mine")
    assert copied.returncode == 0, copied.stderr[-2000:]
    mine = home / "mine"
    assert (mine / "examples" / "data" / "sft.jsonl").read_text() == (REPO / "examples" / "data" / "sft.jsonl").read_text()
    trained = run(script, env, mine, "train", "--recipe", "recipes/sft/tiny-cpu.yaml", "training.max_steps=1",
                  "training.save_strategy=no", "training.save_steps=null")
    assert trained.returncode == 0, trained.stdout[-2000:] + trained.stderr[-2000:]
    summary = json.loads((mine / "runs" / "sft-tiny" / "run_summary.json").read_text())
    assert summary["global_step"] == 1, summary
    assert "name: examples/data/sft.jsonl" in (mine / "runs" / "sft-tiny" / "resolved_recipe.yaml").read_text()  # the copy's data


def test_the_quick_start_runs_from_an_empty_folder_with_the_wheel_alone(installed, tmp_path):
    script, env = installed
    home = tmp_path / "empty"
    home.mkdir()
    site = package_file(script, env, home).parent
    assert str(REPO) not in str(site)

    listed = run(script, env, home, "recipes")
    assert listed.returncode == 0, listed.stderr[-2000:]
    assert "sft/tiny-cpu " in listed.stdout and "grpo/qwen3-1.7b-gsm8k-lora " in listed.stdout
    page = run(script, env, home, "docs", "guides/grpo", "--path")
    assert page.returncode == 0 and Path(page.stdout.strip()) == site / "shipped" / "docs" / "guides" / "grpo.md", page.stderr

    trained = run(script, env, home, "train", "--recipe", "sft/tiny-cpu", "training.max_steps=2", "training.save_strategy=no",
                  "training.save_steps=null")
    assert trained.returncode == 0, trained.stdout[-2000:] + trained.stderr[-2000:]
    assert (home / "runs" / "sft-tiny" / "run_summary.json").is_file()  # the run folder is where the user is
    resolved = (home / "runs" / "sft-tiny" / "resolved_recipe.yaml").read_text()
    assert str(site / "shipped" / "examples" / "data" / "sft.jsonl") in resolved  # the data from the installed package

    scored = run(script, env, home, "eval", "--model", "runs/sft-tiny", "--task", "arithmetic", "--n", "4", "--max-new-tokens", "8",
                 "--out", "eval", "--no-progress")
    assert scored.returncode == 0, scored.stderr[-2000:]
    assert json.loads((home / "eval" / "summary.json").read_text())["arms"][0]["n"] == 4

    copied = run(script, env, home, "recipes", "copy", "grpo/tiny-cpu", "mine")
    assert copied.returncode == 0, copied.stderr[-2000:]
    assert (home / "mine" / "recipes" / "grpo" / "tiny-cpu.yaml").is_file() and (home / "mine" / "examples" / "data" / "problems.jsonl").is_file()
    checked = run(script, env, home / "mine", "validate", "recipes/grpo/tiny-cpu.yaml")
    assert checked.returncode == 0, checked.stderr[-2000:]
    assert "name: examples/data/problems.jsonl" in checked.stdout  # the copy reads its own data, by its own relative path

    reward = run(script, env, home, "recipes", "copy", "examples/rewards/my_reward.py", ".")  # the own-reward guide's first step
    assert reward.returncode == 0, reward.stderr[-2000:]
    assert (home / "examples" / "rewards" / "my_reward.py").read_text() == (REPO / "examples" / "rewards" / "my_reward.py").read_text()


@pytest.mark.slow
def test_the_demo_runs_from_the_wheel_into_the_folder_the_user_names(installed, tmp_path):
    """`posttrain demo`, shortened to 2 steps a stage: both models, the comparison of the three arms and the telemetry."""
    script, env = installed
    ran = run(script, env, tmp_path, "demo", "--out", "first-demo", "training.max_steps=2")
    assert ran.returncode == 0, ran.stdout[-3000:] + ran.stderr[-3000:]
    out = tmp_path / "first-demo"
    assert json.loads((out / "sft" / "run_summary.json").read_text())["global_step"] == 2
    assert json.loads((out / "grpo" / "run_summary.json").read_text())["global_step"] == 2
    compared = json.loads((out / "compare" / "report.json").read_text())
    held_out = package_file(script, env, tmp_path).parent / "shipped" / "recipes" / "demo" / "data" / "eval.jsonl"
    items = len(held_out.read_text().splitlines())
    assert [arm["arm"] for arm in compared["arms"]] == ["base", "sft", "grpo"] and all(arm["n"] == items for arm in compared["arms"])
    assert "grpo" in (out / "telemetry.md").read_text()
    assert "demo done" in ran.stdout and "posttrain compare --arm base=tiny:qwen2-1m" in ran.stdout  # each command, printed


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
