"""Held-out means held out: no question that a shipped recipe scores as held-out, or that a shipped test set
asks, appears in a training file of that run or of the run it starts from.

A question is compared as text (the user's turn, or the prompt/question column), case and spacing ignored,
so "3 + 4" and "3+4" are the same question. Runs chain through `model.base_model_name`: a recipe that
starts from `runs/demo/sft` starts from the shipped recipe whose output_dir that is, and that recipe's
training files count too.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
import yaml

REPO = Path(__file__).resolve().parents[2]
RECIPES = REPO / "recipes"

# Test sets the Makefile's and the experiments' `posttrain compare` runs use, with the recipe folder whose runs they compare.
TEST_SETS = {"recipes/demo/data/eval.jsonl": "recipes/demo", "recipes/demo-real/data/test.jsonl": "recipes/demo-real",
             "recipes/demo-real/data/eval.jsonl": "recipes/demo-real", "recipes/tool-use/data/eval.jsonl": "recipes/tool-use",
             "recipes/demo/kl-real/data/heldout-chats.jsonl": "recipes/demo/kl-real"}


def _normal(text: str) -> str:
    return re.sub(r"\s+", "", text).lower()


def questions(path: Path) -> set[str]:
    """Every question a data file asks: user turns of chats and prompts, or its prompt/question column."""
    found = set()
    for line in path.read_text().splitlines():
        if not line.strip():
            continue
        row = json.loads(line)
        for key in ("messages", "prompt", "chosen"):
            turns = row.get(key)
            if isinstance(turns, list):
                found |= {_normal(t["content"]) for t in turns if isinstance(t, dict) and t.get("role") == "user"
                          and isinstance(t.get("content"), str)}
        for key in ("prompt", "question"):
            if isinstance(row.get(key), str):
                found.add(_normal(row[key]))
    return found


def _recipe(path: Path) -> dict:
    return yaml.safe_load(path.read_text()) or {}


def _local_files(recipe: dict) -> list[Path]:
    names = [d.get("name", "") for d in (recipe.get("data") or {}).get("datasets") or []]
    return [REPO / n for n in names if (REPO / n).is_file()]


def _by_output_dir() -> dict[str, Path]:
    out = {}
    for path in RECIPES.rglob("*.yaml"):
        output_dir = (_recipe(path).get("training") or {}).get("output_dir")
        if output_dir:
            out.setdefault(str(output_dir).rstrip("/"), path)
    return out


def training_files(path: Path, seen: frozenset = frozenset()) -> list[Path]:
    """The local training files of a recipe's run and of every run it starts from."""
    recipe = _recipe(path)
    files = _local_files(recipe)
    start = str((recipe.get("model") or {}).get("base_model_name") or "").rstrip("/")
    parent = _by_output_dir().get(start)
    if parent is not None and parent not in seen:
        files += training_files(parent, seen | {path})
    return files


HELD_OUT_RECIPES = sorted(p for p in RECIPES.rglob("*.yaml") if isinstance(_recipe(p).get("held_out"), dict))


@pytest.mark.parametrize("path", HELD_OUT_RECIPES, ids=lambda p: str(p.relative_to(RECIPES)))
def test_held_out_items_are_in_no_training_file_of_the_run_or_its_start(path):
    recipe = _recipe(path)
    held_out = recipe["held_out"]
    if held_out.get("data"):
        asked = questions(REPO / held_out["data"])
        assert asked, held_out["data"]
        for train in training_files(path):
            shared = asked & questions(train)
            assert not shared, f"{path.name}'s held-out items ({held_out['data']}) share {len(shared)} questions with {train}: {sorted(shared)[:5]}"
    else:  # a built-in task from the hub (GSM8K's test split): no training dataset of the run may be that split
        task = held_out["task"]
        for dataset in (recipe.get("data") or {}).get("datasets") or []:
            assert not (task in str(dataset.get("name", "")).lower() and dataset.get("split") == "test"), (path.name, dataset)


@pytest.mark.parametrize("test_set, folder", sorted(TEST_SETS.items()))
def test_shipped_test_sets_are_in_no_training_file_of_their_recipes(test_set, folder):
    asked = questions(REPO / test_set)
    recipes = sorted((REPO / folder).glob("*.yaml"))
    assert asked and recipes
    for train in {f for r in recipes for f in training_files(r)}:
        shared = asked & questions(train)
        assert not shared, f"{test_set} shares {len(shared)} questions with {train}: {sorted(shared)[:5]}"


def test_the_check_catches_a_shared_question(tmp_path):
    """The same question in another spelling, inside a chat, is found."""
    chat = tmp_path / "train.jsonl"
    chat.write_text(json.dumps({"messages": [{"role": "user", "content": "3 +  4"}, {"role": "assistant", "content": "7"}]}) + "\n")
    held = tmp_path / "held.jsonl"
    held.write_text(json.dumps({"id": "a", "prompt": [{"role": "user", "content": "3+4"}], "answer": 7}) + "\n")
    assert questions(chat) & questions(held) == {"3+4"}


PLANS = sorted((REPO / "experiments").glob("*.yaml"))


@pytest.mark.parametrize("plan", PLANS, ids=lambda p: p.name)
def test_experiment_test_sets_are_in_no_training_file_of_any_stage(plan, monkeypatch):
    """Every training file of the plan's start, arms and controls, after the plan's overrides (a plan may point
    a recipe at other data), against the plan's test set."""
    from posttrain.experiment.plan import load_plan
    from posttrain.recipe.load import apply_overrides

    monkeypatch.chdir(REPO)
    loaded = load_plan(plan)
    assert loaded.test.get("data"), f"{plan.name}: a shipped plan tests on a file the lock can hash"
    asked = questions(REPO / loaded.test["data"])
    stages = [s for s in [loaded.start, *loaded.arms.values(), *loaded.controls.values()] if s is not None]
    for stage in stages:
        recipe, _ = apply_overrides(_recipe(REPO / stage.recipe), list(stage.overrides))
        for train in _local_files(recipe):
            shared = asked & questions(train)
            assert not shared, f"{plan.name}: {loaded.test['data']} shares {len(shared)} questions with {train} ({stage.name})"
    if loaded.gate:  # the gate decides on dev items before the test: they are neither test items nor trained on
        dev = questions(REPO / loaded.gate["data"])
        assert not dev & asked, f"{plan.name}: the gate's items share questions with the test set"
        for stage in stages:
            recipe, _ = apply_overrides(_recipe(REPO / stage.recipe), list(stage.overrides))
            for train in _local_files(recipe):
                assert not dev & questions(train), f"{plan.name}: the gate's items are in {train} ({stage.name})"
