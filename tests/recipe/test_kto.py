"""KTO: its recipe rules, unpaired data (labels) and the imbalance note; in-process, no training."""

from __future__ import annotations

import json

import pytest

from posttrain.errors import UserError
from posttrain.recipe.load import load_recipe

RECIPE = "recipes/kto/tiny-cpu.yaml"



def test_kto_recipe_loads_with_its_weights_live(repo):
    training = load_recipe(repo / RECIPE, ["training.desirable_weight=0.8"]).recipe.training
    assert training.trl_kwargs()["desirable_weight"] == 0.8 and training.trl_kwargs()["undesirable_weight"] == 1.2


@pytest.mark.parametrize("override,key,needle", [
    ("training.per_device_train_batch_size=1", "training.per_device_train_batch_size", "KL term"),
    ("training.train_sampling_strategy=random", "training.train_sampling_strategy", "sequential"),
    ("training.undesirable_weight=0", "training.undesirable_weight", "positive weight"),
    (("training.loss_type=apo_zero_unpaired", "training.train_sampling_strategy=group_by_length"), "training.train_sampling_strategy",
     "Can only automatically infer lengths"),
    ("data.datasets[0].chosen_column=x", "data.datasets[0].chosen_column", "never reads"),
    ("training.rewards=[{name: format}]", "training.rewards", "no rewards"),
])
def test_kto_rules(recipe_problems, override, key, needle):
    message = recipe_problems(RECIPE, *([override] if isinstance(override, str) else override))
    assert key in message and needle in message


def test_apo_zero_unpaired_needs_no_batch_of_two(repo):
    load_recipe(repo / RECIPE, ["training.loss_type=apo_zero_unpaired", "training.per_device_train_batch_size=1"])


def test_unpaired_rows_need_a_label_column_and_true_false_labels(tmp_path):
    from posttrain.data.formats import prepare_dataset
    from posttrain.recipe.data_section import DatasetSpec

    path = tmp_path / "fb.jsonl"
    rows = [{"prompt": "2+2?", "completion": " 4", "label": True}, {"prompt": "2+3?", "completion": " 6", "label": "false"},
            {"prompt": "2+4?", "completion": " 6", "label": 1}, {"prompt": "2+5?", "completion": " 7", "label": 0.5},
            {"prompt": "2+6?", "completion": " ", "label": True}]
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    ds, report = prepare_dataset(DatasetSpec(name=str(path)), "data.datasets[0]", "unpaired", seed=0)
    assert ds["label"] == [True, False, True] and report.dropped == {"'label' not true/false": 1, "empty 'completion'": 1}
    path.write_text(json.dumps({"prompt": "2+2?", "completion": " 4"}) + "\n")
    with pytest.raises(UserError, match=r"column 'label' not found for format 'unpaired'.*data.datasets\[0\].label_column="):
        prepare_dataset(DatasetSpec(name=str(path)), "data.datasets[0]", "unpaired", seed=0)


def test_balance_note_gives_the_papers_ranges():
    from posttrain.algorithms.kto import balance_note

    assert "in KTO's recommended" in balance_note([True] * 10 + [False] * 9, 1.0, 1.0)  # 1.11
    note = balance_note([True] * 30 + [False] * 10, 1.0, 1.0)  # ratio 3
    assert "= 3," in note and "desirable_weight in [0.333, 0.444]" in note and "undesirable_weight in [2.25, 3]" in note
    assert "only desirable rows" in balance_note([True] * 4, 1.0, 1.0)
