"""The KL ablation as a plan (experiments/kl-ablation.yaml, `make kl-ablation`), in seconds and without training.

The plan checks and its lock holds; its test set is the held-out split the committed run evaluated; the data
generator (benchmarks/kl_data.py) writes the committed files byte for byte, refuses when it would not, and
stops on a held-out question in training data; and every run of the plan is the committed run's command
(benchmarks/results/kl_ablation/dose-gameable-heldout.md) but for its folders. The committed results hold
no per-item answers, so there are no tables to rebuild; the toy training run of `posttrain experiment`
itself is tests/e2e/test_experiment.py's.
"""

from __future__ import annotations

import importlib.util
import json
import re
import shlex
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
PLAN = REPO / "experiments" / "kl-ablation.yaml"
DATA = REPO / "recipes" / "demo" / "kl-ablation" / "data"
RESULTS = REPO / "benchmarks" / "results" / "kl_ablation"


def _kl_data():
    spec = importlib.util.spec_from_file_location("kl_data", REPO / "benchmarks" / "kl_data.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses look their module up while the file executes
    spec.loader.exec_module(module)
    return module


@pytest.fixture
def plan(monkeypatch):
    from posttrain.experiment.plan import load_plan

    monkeypatch.chdir(REPO)  # a plan's paths are relative to the working directory
    return load_plan("experiments/kl-ablation.yaml")


def test_the_plan_checks_and_states_its_power(cli):
    result = cli("experiment", "check", "experiments/kl-ablation.yaml")
    assert result.returncode == 0, result.stdout + result.stderr
    assert "4 arm(s), 0 control(s), 2 hypothesis(es), rule pooled, alpha 0.05, correction none" in result.stdout
    assert re.search(r"^  KL: 0\.\d\d at 500 items .* pooled, 3 seed\(s\)", result.stdout, re.M)
    assert re.search(r"^  DOSE: 0\.\d\d at 500 items", result.stdout, re.M)


def test_the_lock_pins_this_plan_its_recipes_and_test_set(plan):
    from posttrain.experiment.lock import check_lock

    lock = check_lock(plan)  # raises when the plan, a recipe or the test set changed since the lock
    assert lock["test_set"] == "recipes/demo/kl-ablation/data/heldout.jsonl"
    assert sorted(lock["recipes"]) == ["recipes/demo/kl-ablation/base.yaml", "recipes/demo/kl-ablation/grpo-beta0.04.yaml"]


def test_the_test_set_is_the_heldout_split_the_run_evaluated(plan):
    """The committed file asks exactly what `compare --task arithmetic --data-seed 1234 --n 500 --seed 0` asked."""
    from posttrain.evaluation.tasks import load_task

    t = plan.test
    asked = load_task(t["task"], data=t["data"], prompt_column=t["prompt_column"], n=t["n"], seed=t["seed"])
    generated = load_task("arithmetic", n=500, seed=0, data_seed=1234)
    assert len(asked) == 500  # every item of the file, in another order (pairing is by id)
    assert sorted((i["id"], str(i["prompt"]), i["gold"], i["scorer"]) for i in asked) == \
        sorted((i["id"], str(i["prompt"]), i["gold"], i["scorer"]) for i in generated)


def test_the_generator_writes_the_committed_files(tmp_path):
    kl_data = _kl_data()
    manifest = kl_data.build_data(tmp_path / "data", kl_data.ABLATION, kl_data.ABLATION_TAG_SHARE)
    assert manifest == json.loads((DATA / "manifest.json").read_text())
    for name in ("grpo", "heldout", "dev"):  # committed; base.jsonl (7 MB) is pinned by its sha256 in the manifest
        assert (tmp_path / "data" / f"{name}.jsonl").read_bytes() == (DATA / f"{name}.jsonl").read_bytes(), name
    assert manifest["heldout_questions_in_training"] == 0 and manifest["counts"]["base"] == 30_000


def test_the_generator_refuses_to_write_other_bytes_than_the_manifest_pins(tmp_path, monkeypatch, capsys):
    kl_data = _kl_data()
    monkeypatch.setattr(kl_data, "ABLATION", kl_data.Scale(model_size="1m", n_base=16, turns=8, n_grpo=8, n_eval=8, max_new_tokens=8))
    out = tmp_path / "data"
    kl_data.ablation_files(out)  # no manifest yet: written
    pinned = json.loads((out / "manifest.json").read_text())
    kl_data.ablation_files(out)  # the same bytes again: fine
    pinned["files"]["grpo"]["sha256"] = "0" * 64  # as if the generator had moved since
    (out / "manifest.json").write_text(json.dumps(pinned, indent=1) + "\n")
    (out / "base.jsonl").unlink()
    with pytest.raises(SystemExit) as stop:
        kl_data.ablation_files(out)
    assert stop.value.code == 2 and "grpo differ(s)" in capsys.readouterr().err
    assert not (out / "base.jsonl").exists()  # nothing written


def test_a_heldout_question_in_training_data_stops_the_generator(tmp_path, monkeypatch):
    kl_data = _kl_data()
    scale = kl_data.Scale(model_size="1m", n_base=16, turns=8, n_grpo=8, n_eval=8, max_new_tokens=8)
    from posttrain.evaluation.tasks import load_task

    leaked = load_task("arithmetic", n=scale.n_eval, seed=kl_data.EVAL_SEED, data_seed=kl_data.HELDOUT_SEED)[0]["question"]
    real = kl_data.tagged
    monkeypatch.setattr(kl_data, "tagged", lambda solution, answer: real(solution, answer) + " " + leaked)
    with pytest.raises(SystemExit, match="held-out/dev question"):
        kl_data.build_data(tmp_path / "data", scale, tag_share=1.0)


def _committed_commands() -> dict[str, list[str]]:
    """Each stage's `posttrain ...` command, as the committed held-out report lists them."""
    rows = re.findall(r"^\| ([\w.-]+) \| `posttrain (.+?)` \| ", (RESULTS / "dose-gameable-heldout.md").read_text(), re.M)
    return {name: shlex.split(command) for name, command in rows}


def _same_but_folders(argv: list[str]) -> list[str]:
    """A command without what only names a folder of its run; data files by name; the reward module by name."""
    out = []
    for a in argv:
        key, _, value = a.partition("=")
        if key in ("model.base_model_name", "training.output_dir"):
            continue
        out.append(f"{key}={Path(value).name}" if key == "data.datasets[0].name" else a.replace("benchmarks.kl_rewards:", "kl_rewards:"))
    return sorted(out)


def test_every_run_of_the_plan_is_the_committed_runs_command(plan, tmp_path):
    from posttrain.experiment.stages import commands

    committed = _committed_commands()
    planned = {c.name: c.argv[3:] for group in commands(plan, tmp_path, 2).values() for c in group}  # after `python -m posttrain`
    runs = [f"beta{b}-s{s}" for b in ("0", "0.04", "0.2", "1") for s in (0, 1, 2)]
    assert sorted(n for n in planned if n.startswith("beta")) == sorted(runs)
    for name in runs:
        assert _same_but_folders(planned[name]) == _same_but_folders(committed[name]), name
    assert _same_but_folders(planned["start"]) == _same_but_folders(committed["base"])
    assert "model.base_model_name=tiny:qwen2-2m" in planned["start"] and "model.base_model_name=tiny:qwen2-2m" in committed["base"]
    compare = planned["compare"]  # the same items (test_the_test_set_is_...), the same budget and decoding
    assert {"--n=500", "--seed=0", "--max-new-tokens=48"} <= set(compare)
    assert all(o in committed["compare"] for o in ("--n", "500", "--seed", "0", "--max-new-tokens", "48"))


def test_the_gameable_rewards_resolve_from_the_repository(cli, plan):
    """`posttrain experiment run` starts each run from the repository root: the reward module imports there."""
    arm = plan.arms["beta0"]
    result = cli("validate", "--recipe", arm.recipe, *arm.overrides)
    assert result.returncode == 0, result.stdout + result.stderr  # validate imports every reward it names


@pytest.mark.parametrize("fast", [False, True], ids=["plan", "toy"])
def test_every_stage_of_the_plan_and_its_toy_resolves(plan, fast, tmp_path, monkeypatch):
    """Each training command's recipe and overrides load (the toy's on the shipped example data), each run with its
    own beta and seed: what `posttrain experiment run [--fast]` would start."""
    from posttrain.experiment.stages import commands
    from posttrain.recipe.load import load_recipe

    monkeypatch.syspath_prepend(str(REPO))  # the runs start in the repository root: benchmarks.kl_rewards imports
    chosen = plan.with_fast() if fast else plan
    trains = [c for group in ("start", "lanes") for c in commands(chosen, tmp_path, 2)[group]]
    assert len(trains) == 1 + 4 * (2 if fast else 3)
    betas = {}
    for command in trains:
        args = command.argv[command.argv.index("--recipe") + 1:]
        overrides = [a for a in args[1:] if not a.startswith("model.base_model_name=")]
        training = load_recipe(args[0], [f"model.base_model_name={chosen.model}", *overrides]).recipe.training
        assert training.output_dir == str(command.folder)
        if command.name != "start":
            betas[command.name] = (training.beta, training.seed, [r.name for r in training.rewards])
    gameable = ["answer_match", "benchmarks.kl_rewards:lenient_format", "benchmarks.kl_rewards:brevity"]
    seeds = (0, 1) if fast else (0, 1, 2)
    assert betas == {f"beta{b:g}-s{s}": (b, s, gameable) for b in (0.0, 0.04, 0.2, 1.0) for s in seeds}
