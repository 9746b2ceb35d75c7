"""A plan file is read whole and every problem is named at once, with exit 2; the lock refuses a changed plan."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
import yaml

from posttrain.cli import main
from posttrain.errors import UserError
from posttrain.experiment.lock import check_lock, write_lock
from posttrain.experiment.plan import load_plan

REPO = Path(__file__).resolve().parents[2]
PLAN = REPO / "experiments" / "grpo-real.yaml"


@pytest.fixture(autouse=True)
def _at_repo_root(monkeypatch):
    monkeypatch.chdir(REPO)  # plans name recipes relative to the working directory, as recipes name data


def _write(tmp_path: Path, **changes) -> Path:
    raw = yaml.safe_load(PLAN.read_text())
    raw.update(changes)
    path = tmp_path / "plan.yaml"
    path.write_text(yaml.safe_dump(raw, sort_keys=False))
    return path


def test_the_shipped_plan_reads_and_states_its_power(capsys):
    assert main(["experiment", "check", str(PLAN)]) == 0
    out = capsys.readouterr().out
    assert "4 hypothesis(es), rule per_seed" in out
    # the loose hypothesis, at 300 items and 3 seeds that must each be significant, is underpowered: stated, not hidden
    assert "H1: 0.18 at 300 items" in out and "UNDERPOWERED" in out and "H2: 1.00 at 300 items" in out


def test_every_problem_is_named_at_once_with_exit_2(tmp_path, capsys):
    path = _write(tmp_path, arms={"start": {"recipe": "recipes/nope.yaml", "seeds": [0, 0]}},
                  hypotheses={"H1": {"arm": "grpo", "baseline": "nowhere", "metric": "exact"}},
                  decision={"rule": "vote", "alpha": 0.7}, colour="red")
    assert main(["experiment", "check", str(path)]) == 2
    err = capsys.readouterr().err
    for expected in ("unknown key 'colour'", "arms.start.recipe: 'recipes/nope.yaml' is not a file", "arms.start.seeds: a list of distinct",
                     "'start': an arm or control name", "hypotheses.H1.baseline: 'nowhere' is not a model of the plan",
                     "hypotheses.H1.metric: 'exact'", "decision.rule: 'vote'", "decision.alpha: 0.7",
                     "controls.more-sft.matched_to: 'grpo' is not an arm"):
        assert expected in err, expected


def test_per_seed_pairs_seeds_so_both_arms_need_the_same(tmp_path):
    path = _write(tmp_path, arms={"a": {"recipe": "recipes/demo-real/grpo.yaml", "seeds": [0, 1, 2]},
                                  "b": {"recipe": "recipes/demo-real/grpo.yaml", "seeds": [3, 4]}},
                  controls={}, hypotheses={"H1": {"arm": "a", "baseline": "b"}}, descriptive={}, fast={})
    with pytest.raises(UserError, match="seed s of a meets seed s of b"):
        load_plan(path)
    raw = yaml.safe_load(path.read_text())
    raw["decision"]["rule"] = "pooled"  # pooled needs no pairing of seeds
    path.write_text(yaml.safe_dump(raw))
    assert load_plan(path).rule == "pooled"


def test_the_experiment_sets_start_folder_and_seed_itself(tmp_path):
    path = _write(tmp_path, arms={"grpo": {"recipe": "recipes/demo-real/grpo.yaml", "overrides": ["training.seed=3"]}})
    with pytest.raises(UserError, match="training.seed is set by the experiment"):
        load_plan(path)


def test_run_refuses_without_a_lock_and_after_any_change(tmp_path, capsys):
    plan_path = tmp_path / "p.yaml"
    shutil.copyfile(PLAN, plan_path)
    assert main(["experiment", "run", str(plan_path), "--fast", "--out", str(tmp_path / "out")]) == 2
    assert "has no lock" in capsys.readouterr().err and not (tmp_path / "out").exists()
    plan = load_plan(plan_path)
    lock = json.loads(write_lock(plan).read_text())
    assert lock["plan_sha256"] and lock["test_set"] == "recipes/demo-real/data/test.jsonl" and set(lock["recipes"]) == set(plan.recipes())
    assert check_lock(plan)["lock_sha256"]
    plan_path.write_text(plan_path.read_text().replace("n: 300", "n: 200"))  # fewer test items after the fact
    assert main(["experiment", "run", str(plan_path), "--fast", "--out", str(tmp_path / "out")]) == 2
    err = capsys.readouterr().err
    assert "the plan" in err and "changed since the lock" in err and "posttrain experiment lock" in err
    assert not (tmp_path / "out").exists()


def test_the_lock_pins_the_test_set(tmp_path):
    data = tmp_path / "test.jsonl"
    data.write_text('{"prompt": "1+1", "answer": 2}\n')
    path = _write(tmp_path, test={"task": "custom", "data": str(data), "max_new_tokens": 8})
    plan = load_plan(path)
    write_lock(plan)
    data.write_text('{"prompt": "1+1", "answer": 3}\n')
    with pytest.raises(UserError, match=r"the test set \(.*test.jsonl\) changed since the lock"):
        check_lock(plan)


PLATEAU = REPO / "experiments" / "rl-from-plateau.yaml"


def test_the_plateau_plan_gates_its_arms_on_dev_items_and_pins_them(tmp_path, capsys):
    plan = load_plan(PLATEAU)
    assert plan.start.use == "best" and plan.gate["k"] == 8 and plan.gate["min_headroom"] == 0.10
    assert plan.gate["data"] != plan.test["data"]
    assert main(["experiment", "check", str(PLATEAU)]) == 0
    assert "H1: 0.84 at 1500 items" in capsys.readouterr().out  # the test was sized by this power analysis
    dev = tmp_path / "dev.jsonl"
    dev.write_text('{"prompt": "1+1", "answer": 2}\n')
    copy = tmp_path / "plateau.yaml"
    copy.write_text(PLATEAU.read_text().replace("data: recipes/demo-real/data/eval.jsonl, max_new_tokens: 40, k: 8",
                                                f"data: {dev}, max_new_tokens: 40, k: 8"))
    write_lock(load_plan(copy))
    dev.write_text('{"prompt": "1+1", "answer": 3}\n')
    with pytest.raises(UserError, match=r"the gate's items \(.*dev.jsonl\) changed since the lock"):
        check_lock(load_plan(copy))


def test_a_gate_and_a_start_use_are_checked(tmp_path, capsys):
    raw = yaml.safe_load(PLATEAU.read_text())
    raw["start"]["use"] = "last"
    raw["gate"] = {"data": raw["test"]["data"], "k": 1, "min_headroom": 10, "metric": "exact", "colour": 1}
    path = tmp_path / "plan.yaml"
    path.write_text(yaml.safe_dump(raw, sort_keys=False))
    assert main(["experiment", "check", str(path)]) == 2
    err = capsys.readouterr().err
    for expected in ("start.use: 'last' is final", "gate: unknown key 'colour'", "gate.data: the gate's items are the test set's",
                     "gate.k: 1 must be a whole number of at least 2", "gate.metric: 'exact'", "gate.min_headroom: 10 must be a share"):
        assert expected in err, expected


@pytest.mark.parametrize("headroom", [0.04, 0.10])
def test_the_gate_stops_the_experiment_below_its_headroom(tmp_path, headroom):
    """The gate reads `posttrain eval --pass-k`'s summary of the start: below min_headroom no arm may run."""
    from posttrain.experiment.stages import GateFailed, check_gate

    plan = load_plan(PLATEAU)
    (tmp_path / "gate").mkdir()
    loose = {"pass@8": 0.5 + headroom, "greedy": 0.5, "headroom": headroom, "reached_only_by_sampling": 12}
    (tmp_path / "gate" / "summary.json").write_text(json.dumps({"pass_at_k": {"k": 8, "n": 100, "loose": loose, "strict": loose}}))
    if headroom < plan.gate["min_headroom"]:
        with pytest.raises(GateFailed, match=r"gate failed: .*pass@8 .* is 54.0% against greedy 50.0% on 100 gate items: "
                                             r"headroom \+4.0 points, below the plan's 10. No arm ran"):
            check_gate(plan, tmp_path)
    else:
        assert check_gate(plan, tmp_path)["passed"] is True
    assert json.loads((tmp_path / "gate.json").read_text())["passed"] is (headroom >= 0.10)


def test_subsets_name_columns_of_a_jsonl_test_file(tmp_path):
    path = _write(tmp_path, subsets={"seen": "fact_in_sft"}, test={"task": "arithmetic", "n": 50})
    with pytest.raises(UserError, match="subsets: name true/false columns of the test file, which must then be a .jsonl file"):
        load_plan(path)


def test_the_toy_gate_is_checked_as_the_gate_is(tmp_path):
    raw = yaml.safe_load(PLATEAU.read_text())
    raw["fast"]["gate"] = {"k": 1}
    path = tmp_path / "plan.yaml"
    path.write_text(yaml.safe_dump(raw, sort_keys=False))
    with pytest.raises(UserError, match="fast.gate.k: 1 must be a whole number of at least 2"):
        load_plan(path)


def test_an_amended_plan_continues_its_folder_but_another_experiment_or_test_set_does_not(tmp_path):
    """A plan locked again after an amendment runs on in its folder (stage markers keep the unchanged stages); another
    experiment's folder, or one whose answers came from another test set, is refused."""
    from posttrain.commands.experiment import check_folder

    out = tmp_path / "out"
    out.mkdir()
    plan = load_plan(PLAN)
    lock = {"test_set_sha256": "abc"}
    assert check_folder(out, plan, lock) is None  # a new folder
    (out / "lock.json").write_text(json.dumps(lock))
    (out / "plan.yaml").write_text(PLAN.read_text() + "\n# amended: one arm's overrides changed, locked again\n")
    assert "was amended since" in check_folder(out, plan, lock) and "the others run again" in check_folder(out, plan, lock)
    with pytest.raises(UserError, match="the test set changed since this folder's run"):
        check_folder(out, plan, {"test_set_sha256": "def"})
    (out / "plan.yaml").write_text(PLAN.read_text().replace("experiment: grpo-real", "experiment: other"))
    with pytest.raises(UserError, match=r"holds another experiment \('other', not 'grpo-real'\)"):
        check_folder(out, plan, lock)
