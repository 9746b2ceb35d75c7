import pytest

from posttrain.recipe.errors import RecipeError
from posttrain.recipe.overrides import apply_overrides, parse_path, parse_value


@pytest.mark.parametrize(
    "path, parts",
    [
        ("training.learning_rate", ["training", "learning_rate"]),
        ("data.datasets[0].name", ["data", "datasets", 0, "name"]),
        ("data.datasets.0.name", ["data", "datasets", 0, "name"]),
        ("a[1][2].b", ["a", 1, 2, "b"]),
    ],
)
def test_paths(path, parts):
    assert parse_path(path) == parts


@pytest.mark.parametrize("bad", ["", "a..b", "a[x].b", "a[0]b", ".a", "a."])
def test_malformed_paths(bad):
    with pytest.raises(ValueError, match="malformed key path"):
        parse_path(bad)


@pytest.mark.parametrize(
    "text, value",
    [("true", True), ("false", False), ("null", None), ("1e-5", 1e-5), ("3.0e-4", 3e-4), ("-2E3", -2000.0),
     ("7", 7), ("[a, b]", ["a", "b"]), ("{k: 1}", {"k": 1}), ("", ""), ("hello world", "hello world"),
     ("tiny:qwen2", "tiny:qwen2"), ("'007'", "007")],
)
def test_values_are_yaml_scalars(text, value):
    parsed = parse_value(text)
    assert parsed == value and type(parsed) is type(value)


@pytest.mark.parametrize(
    "text, value",
    # YAML 1.1 (PyYAML's default) reads these as 83, 90, 90, False, True, a truncated 'exp' and a date.
    [("0123", 123), ("1:30", "1:30"), ("1:30:00", "1:30:00"), ("no", "no"), ("on", "on"), ("exp #3", "exp #3"),
     ("2026-01-01", "2026-01-01"), ("0x1F", 31), ("0o17", 15), ("+5", 5), ("1_000", "1_000"), ("~", None),
     ("a: b", "a: b"), ("-.inf", float("-inf")), ("[1, 0123, no]", [1, 123, "no"])],
)
def test_values_follow_yaml_1_2_not_1_1(text, value):
    parsed = parse_value(text)
    assert parsed == value and type(parsed) is type(value)


def test_recipe_files_follow_yaml_1_2(tmp_path):
    from posttrain.recipe.load import read_yaml

    path = tmp_path / "r.yaml"
    path.write_text("training:\n  save_steps: 0123   # a comment\n  eval_strategy: no\n  learning_rate: 1e-5\n")
    assert read_yaml(path)["training"] == {"save_steps": 123, "eval_strategy": "no", "learning_rate": 1e-5}


def test_list_items_are_set_and_appended():
    raw = {"data": {"datasets": [{"name": "a.jsonl"}]}}
    apply_overrides(raw, ["data.datasets[0].name=b.jsonl", "data.datasets.1.name=c.jsonl", "data.datasets[1].split=train[:8]"])
    assert raw["data"]["datasets"] == [{"name": "b.jsonl"}, {"name": "c.jsonl", "split": "train[:8]"}]


def test_creates_missing_sections():
    raw, touched = apply_overrides({}, ["training.beta=0.0", "data.datasets[0].name="])
    assert raw == {"training": {"beta": 0.0}, "data": {"datasets": [{"name": ""}]}}
    assert touched == {"training.beta", "data.datasets[0].name"}


def test_all_problems_reported_at_once():
    raw = {"data": {"datasets": [{"name": "a"}]}, "model": {"base_model_name": "x"}}
    with pytest.raises(RecipeError) as e:
        apply_overrides(raw, ["data.datasets[5].name=x", "model.base_model_name[0]=y", "nokey", "a..b=1"])
    text = str(e.value)
    assert "4 problems" in text
    assert "index 5 is out of range: the list has 1 item(s)" in text
    assert "model.base_model_name is not a list" in text
    assert "must look like key.path=value" in text
    assert "malformed key path 'a..b'" in text


def test_null_removes_a_key_that_cannot_be_null(repo):
    """The dead-key error's own advice works: `key=null` takes the key out, so its default applies."""
    from posttrain.recipe.load import load_recipe

    recipe = repo / "recipes/sft/tiny-cpu.yaml"
    with pytest.raises(RecipeError, match="save_steps"):
        load_recipe(recipe, ["training.save_strategy=epoch"])
    loaded = load_recipe(recipe, ["training.save_strategy=epoch", "training.save_steps=null"])
    assert "save_steps" not in loaded.recipe.training.model_fields_set
    assert loaded.recipe.training.trl_kwargs()["save_strategy"] == "epoch"
    assert load_recipe(recipe, ["model.lora_r=null"]).recipe.model.lora_r == 16  # back to the schema default
    # a key that does accept null keeps it
    assert load_recipe(recipe, ["training.resume_from_checkpoint=null"]).recipe.training.resume_from_checkpoint is None


def test_an_item_of_an_overridden_list_is_blamed_on_the_override(repo):
    from posttrain.recipe.load import load_recipe

    with pytest.raises(RecipeError) as e:
        load_recipe(repo / "recipes/grpo/tiny-cpu.yaml", ["training.stop_on=[bogus]"])
    assert "training.stop_on[0] (from override)" in str(e.value)
