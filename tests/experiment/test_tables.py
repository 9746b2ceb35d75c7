"""The tables and the verdict, on answers built by construction: no statistic overstates.

A results folder is written by code (plan.yaml, lock.json, meta.json, samples/), then `posttrain experiment
tables` rebuilds it; nothing trains.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml

from posttrain.cli import main
from posttrain.evaluation.pooled import pooled_comparison
from posttrain.evaluation.statistics import mcnemar_exact
from posttrain.experiment.tables import build, holm

N = 100


def _record(i: int, strict: bool, loose: bool | None = None) -> dict:
    loose = strict if loose is None else loose
    return {"id": f"q{i}", "gold": "1", "completion": "<answer>1</answer>" if strict else "1", "strict": strict, "loose": loose,
            "format": 1.0 if strict else 0.0, "completion_tokens": 5, "finish_reason": "stop", "error": None, "cached": False}


def folder(tmp_path: Path, models: dict[str, list[list[bool]]], hypotheses: dict, rule: str = "per_seed", correction: str = "none",
           controls: dict | None = None, loose: dict[str, list[list[bool]]] | None = None) -> Path:
    """An experiment folder: `models` maps a model to its seeds' per-item strict outcomes (loose the same unless given)."""
    tmp_path.mkdir(parents=True, exist_ok=True)
    arms = {name: {"recipe": "unused.yaml", "seeds": list(range(len(runs)))} for name, runs in models.items() if name != "start"}
    plan = {"experiment": "constructed", "model": "tiny:qwen2-1m", "start": {"recipe": "unused.yaml"}, "arms": arms,
            "controls": controls or {}, "test": {"task": "custom", "data": "unused.jsonl", "max_new_tokens": 8},
            "hypotheses": hypotheses, "decision": {"rule": rule, "alpha": 0.05, "correction": correction}}
    (tmp_path / "plan.yaml").write_text(yaml.safe_dump(plan, sort_keys=False))
    (tmp_path / "lock.json").write_text(json.dumps({"plan": "plan.yaml", "plan_sha256": "0" * 64, "test_set": "unused.jsonl",
                                                    "test_set_sha256": "1" * 64, "commit": "abc1234", "locked_at": "2026-12-06 10:00 UTC"}))
    (tmp_path / "meta.json").write_text(json.dumps({"fast": False, "stages": {}}))
    samples = tmp_path / "samples"
    samples.mkdir()
    listed = []
    for name, runs in models.items():
        for k, run in enumerate(runs):
            file = f"{name}@run-{k}" if len(runs) > 1 else name
            listed.append({"name": file, "spec": f"runs/{file}"})
            looses = (loose or {}).get(name, runs)[k]
            (samples / f"{file}.jsonl").write_text("".join(json.dumps(_record(i, s, lo)) + "\n" for i, (s, lo) in enumerate(zip(run, looses))))
    (samples / "arms.json").write_text(json.dumps(listed))
    return tmp_path


def test_a_single_start_enters_the_pooled_test_once(tmp_path):
    """Three seeds that fixed the same 3 items and broke the same 1: copying the start once per seed would make
    CMH significant (p 0.025); entered once, it is not (0.083), and the item-level test sees one item's worth of change."""
    start = [i < 40 for i in range(N)]
    seed = [(1 <= i < 40) or (40 <= i < 43) for i in range(N)]
    copied = pooled_comparison([start] * 3, [seed] * 3)
    once = pooled_comparison([start], [seed] * 3)
    assert copied.p_value < 0.05 <= once.p_value  # the construction: copying would overstate
    result = build(folder(tmp_path, {"start": [start], "rl": [seed] * 3}, {"H1": {"arm": "rl", "baseline": "start"}}, rule="pooled"))
    pooled = result["tests"]["H1"]["pooled"]
    assert pooled["baseline_models"] == 1 and pooled["cmh_p"] == once.p_value and pooled["item_p"] == once.item_p_value
    assert not result["verdict"]["hypotheses"]["H1"]["holds"] and result["verdict"]["goal"] == "not met"


def test_per_seed_holds_only_when_every_seed_is_significant(tmp_path):
    start = [i < 40 for i in range(N)]
    strong = [i < 55 for i in range(N)]  # 15 fixed, 0 broken: p = 6e-5
    weak = [i < 44 for i in range(N)]  # 4 fixed: p = 0.125
    result = build(folder(tmp_path, {"start": [start], "rl": [strong, strong, weak]}, {"H1": {"arm": "rl", "baseline": "start"}}))
    h = result["verdict"]["hypotheses"]["H1"]
    assert h["p"] == mcnemar_exact(4, 0) and not h["holds"] and (h["significant"], h["positive"], h["seeds"]) == (2, 3, 3)


def test_direction_is_part_of_the_hypothesis(tmp_path):
    start = [i < 40 for i in range(N)]
    worse = [i < 20 for i in range(N)]
    hypotheses = {"up": {"arm": "rl", "baseline": "start"}, "down": {"arm": "rl", "baseline": "start", "direction": "less"}}
    verdict = build(folder(tmp_path, {"start": [start], "rl": [worse]}, hypotheses))["verdict"]["hypotheses"]
    assert not verdict["up"]["holds"] and verdict["down"]["holds"]


def test_holm_across_hypotheses():
    assert holm({"a": 0.01, "b": 0.04, "c": 0.03}) == pytest.approx({"a": 0.03, "c": 0.06, "b": 0.06})
    assert holm({"a": 0.5, "b": 0.6}) == {"a": 1.0, "b": 1.0}


def test_holm_when_planned_turns_a_marginal_hypothesis_down(tmp_path):
    start = [i < 40 for i in range(N)]
    marginal = [i < 46 for i in range(N)]  # 6 fixed, 0 broken: p = 0.031, below 0.05 but not below 0.025
    hypotheses = {"H1": {"arm": "rl", "baseline": "start"}, "H2": {"arm": "rl", "baseline": "start", "metric": "loose"}}
    plain = build(folder(tmp_path / "plain", {"start": [start], "rl": [marginal]}, hypotheses))
    corrected = build(folder(tmp_path / "holm", {"start": [start], "rl": [marginal]}, hypotheses, correction="holm"))
    assert plain["verdict"]["goal"] == "met" and corrected["verdict"]["goal"] == "not met"
    assert corrected["verdict"]["hypotheses"]["H1"]["p_adjusted"] == pytest.approx(2 * mcnemar_exact(6, 0))


def test_forced_format_control_is_the_sources_loose_answers_in_tags(tmp_path):
    start_strict = [False] * N
    start_loose = [i < 40 for i in range(N)]  # right, never tagged
    tagged = [i < 42 for i in range(N)]  # the arm: the same plus 2, all tagged
    result = build(folder(tmp_path, {"start": [start_strict], "rl": [tagged]},
                          {"format": {"arm": "rl", "baseline": "start"}, "skill": {"arm": "rl", "baseline": "forced"}},
                          controls={"forced": {"forced_format": "start"}}, loose={"start": [start_loose]}))
    verdict = result["verdict"]["hypotheses"]
    assert verdict["format"]["holds"] and not verdict["skill"]["holds"]  # 42 tagged answers beat 0, not 40 forced ones
    assert result["tests"]["skill"]["per_seed"][0]["fixed"] == 2 and result["models"]["forced"]["strict"] == 0.4


def test_a_missing_seed_makes_the_verdict_partial(tmp_path):
    start = [i < 40 for i in range(N)]
    out = folder(tmp_path, {"start": [start], "rl": [[i < 60 for i in range(N)]] * 3}, {"H1": {"arm": "rl", "baseline": "start"}})
    (out / "samples" / "arms.json").write_text(json.dumps([{"name": n, "spec": n} for n in ("start", "rl@run-0", "rl@run-2")]))
    result = build(out)
    assert [t["seed"] for t in result["tests"]["H1"]["per_seed"]] == [0, 2]  # each seed keeps its own number
    verdict = result["verdict"]
    assert not verdict["hypotheses"]["H1"]["holds"] and verdict["goal"] == "not met (partial: no answers from rl seed 1)"
    assert result["models"]["rl"]["seeds"] == 2


def test_tables_rebuild_byte_for_byte(tmp_path, capsys):
    start = [i < 40 for i in range(N)]
    out = folder(tmp_path, {"start": [start], "rl": [[i < 50 for i in range(N)], [i < 45 for i in range(N)]]},
                 {"H1": {"arm": "rl", "baseline": "start"}}, rule="both")
    assert main(["experiment", "tables", str(out)]) == 0
    first = {f: (out / f).read_bytes() for f in ("results.md", "results.json")}
    assert "**Goal: " in capsys.readouterr().out
    assert main(["experiment", "tables", str(out)]) == 0
    assert {f: (out / f).read_bytes() for f in first} == first


def test_tables_of_a_folder_that_is_no_experiment(tmp_path, capsys):
    assert main(["experiment", "tables", str(tmp_path)]) == 2
    assert "is not an experiment's folder: plan.yaml, lock.json, meta.json, samples/arms.json missing" in capsys.readouterr().err


def test_accuracy_inside_and_outside_a_subset_is_the_mean_over_seeds():
    from posttrain.experiment.tables import by_subset

    def run(loose):  # items a, b, c, d
        return {i: {"strict": False, "loose": v} for i, v in zip("abcd", loose)}

    split = by_subset({"start": [run([True, False, True, False])], "grpo": [run([True, True, False, False]), run([True, True, True, False]), None]},
                      inside={"a", "b"})
    assert split["start"] == {"in": {"n": 2, "strict": 0.0, "loose": 0.5}, "out": {"n": 2, "strict": 0.0, "loose": 0.5}}
    assert split["grpo"]["in"]["loose"] == 1.0 and split["grpo"]["out"]["loose"] == 0.25  # (0/2 + 1/2) / 2 seeds; a missing seed left out
