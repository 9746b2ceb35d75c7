"""Recipe errors name the key path and its source, say what is wrong, and suggest a fix."""

import pytest

from posttrain.recipe.errors import RecipeError
from posttrain.recipe.load import differences, load_recipe, resolved_dict


def recipe(**sections) -> dict:
    raw = {
        "model": {"base_model_name": "tiny:qwen2"},
        "data": {"datasets": [{"name": "train.jsonl"}]},
        "training": {"algorithm": "sft", "output_dir": "out"},
    }
    for name, value in sections.items():
        raw[name] = value if not isinstance(value, dict) or name not in raw else {**raw[name], **value}
    return raw


def error_of(raw, overrides=()) -> str:
    with pytest.raises(RecipeError) as e:
        load_recipe(None, overrides, raw=raw)
    return str(e.value)


@pytest.mark.parametrize(
    "raw, overrides, expected",
    [
        (recipe(modle={}), (), ["modle", "unknown key 'modle'", "Did you mean 'model'?"]),
        (recipe(model={"lora_rr": 8}), (), ["model.lora_rr", "Did you mean 'lora_r'"]),
        (recipe(), ["data.datasets[0].promt_column=q"], ["data.datasets[0].promt_column (from override)", "Did you mean 'prompt_column'"]),
        (recipe(training={"learning_rat": 1e-5}), (), ["training.learning_rat", "Did you mean 'learning_rate'?", "SFTConfig"]),
        (recipe(training={"max_steps": "ten"}), (), ["training.max_steps", "'ten' (str) is not valid: expected integer"]),
        (recipe(training={"eval_strategy": "step"}), (), ["training.eval_strategy", "choose one of 'no', 'steps' or 'epoch'", "Did you mean 'steps'?"]),
        (recipe(training={"algorithm": "sftt"}), (), ["training.algorithm", "'sftt' is not one posttrain runs", "Did you mean 'sft'?"]),
        (recipe(training={"learning_rate": None}), (), ["training.learning_rate", "null is not valid"]),
        (recipe(model={"lora_r": 0}), (), ["model.lora_r", "greater than or equal to 1"]),
        (recipe(model={"load_in_4bit": True, "load_in_8bit": True, "use_lora": True}), (), ["model", "choose one"]),
        (recipe(model={"load_in_4bit": True}), (), ["model", "set model.use_lora=true"]),
        (recipe(wandb={"project": "x"}), (), ["wandb", "tracking: {provider: wandb"]),
        (recipe(training={"max_prompt_length": 256}), (), ["training.max_prompt_length", "data.max_prompt_length"]),
        (recipe(), ["data.datasets[0].name="], ["data.datasets[0].name (from override)", "at least 1 character"]),
        (recipe(), ["model.use_lora=maybe"], ["model.use_lora", "'maybe' (str) is not valid: expected boolean"]),
        # YAML 1.2: yes/on/1 are not booleans, in recipes as in overrides, for posttrain's keys as for TRL's
        *((recipe(), [f"{key}={word}"], [key, f"(str) is not valid: expected boolean"])
          for key in ("model.use_lora", "data.few_shot", "training.bf16") for word in ("yes", "on")),
        (recipe(model={"use_lora": 1}), (), ["model.use_lora", "expected boolean"]),
        (recipe(training={"algorithm": "grpo", "rewards": [{"name": "answer_match"}], "use_vllm": True, "rollout_engine": "posttrain"}), (),
         ["training.rollout_engine", "with training.use_vllm=true vLLM generates"]),
        (recipe(training={"algorithm": "grpo", "rewards": [{"name": "answer_match"}], "rollout_engine": "hf"}), (),
         ["training.rollout_engine", "'posttrain' or 'transformers'"]),
        (recipe(training={"rollout_engine": "posttrain"}), (), ["training.rollout_engine", "unknown key"]),
    ],
    ids=lambda v: None,
)
def test_error_messages(raw, overrides, expected):
    text = error_of(raw, overrides)
    for piece in expected:
        assert piece in text, f"{piece!r} not in:\n{text}"


def test_missing_sections_and_algorithm_are_all_reported():
    text = error_of({"model": {}, "training": {}})
    assert "3 problems" in text
    assert "model.base_model_name (from recipe): is required but missing. What to train" in text
    assert "data (from recipe): is required but missing" in text
    assert "training.algorithm is required: one of cpt, sft" in text


def test_every_problem_at_once():
    raw = recipe(model={"lora_rr": 3}, training={"learning_rat": 1, "max_steps": "x"})
    assert "3 problems" in error_of(raw)


def test_defaults_overrides_and_layers():
    loaded = load_recipe(None, ["training.learning_rate=1e-4"], raw=recipe(training={"algorithm": "cpt", "max_steps": 5}))
    layers = {path: layer for path, _value, _default, layer in differences(loaded)}
    assert layers["training.learning_rate"] == "override"
    assert layers["training.max_steps"] == "recipe"
    assert layers["training.packing"] == "posttrain default"
    assert loaded.recipe.training.learning_rate == 1e-4


def test_resolved_recipe_redacts_secrets():
    loaded = load_recipe(None, raw=recipe(tracking={"provider": "wandb", "api_key": "sk-SECRET-123"}, training={"hub_token": "hf_SECRET", "push_to_hub": True}))
    text = str(resolved_dict(loaded.recipe))
    assert "SECRET" not in text
    assert loaded.recipe.tracking.api_key.get_secret_value() == "sk-SECRET-123"


def test_yaml_no_is_read_as_the_word_for_choice_fields():
    loaded = load_recipe(None, ["training.eval_strategy=no", "training.save_strategy=no"], raw=recipe())
    assert (loaded.recipe.training.eval_strategy, loaded.recipe.training.save_strategy) == ("no", "no")
    assert "not valid: expected boolean" in error_of(recipe(), ["model.use_lora=no-thanks"])


def test_http_reward_headers_and_url_credentials_are_redacted(tmp_path, capsys):
    """The http reward's headers (any name: they carry credentials) and user:password@ / ?api_key=
    in URLs never reach the resolved recipe, `validate`'s output or a recorded command line."""
    from posttrain.cli import main
    from posttrain.recipe.load import redact_overrides

    reward = {"name": "http", "url": "http://bob:pw-SECRET-1@127.0.0.1:9/score?api_key=SECRET-2&v=1",
              "headers": {"Authorization": "Bearer SECRET-3", "X-Team-Token": "SECRET-4"}}
    raw = recipe(training={"algorithm": "grpo", "rewards": [{"name": "answer_match"}, reward], "num_generations": 2,
                           "per_device_train_batch_size": 2})
    resolved = resolved_dict(load_recipe(None, raw=raw).recipe)
    assert "SECRET" not in str(resolved)
    http = resolved["training"]["rewards"][1]
    assert http["headers"] == {"Authorization": "***", "X-Team-Token": "***"}
    assert http["url"] == "http://bob:***@127.0.0.1:9/score?api_key=***&v=1"

    import yaml

    path = tmp_path / "r.yaml"
    path.write_text(yaml.safe_dump({**raw, "training": {**raw["training"], "rewards": [{"name": "answer_match"}]}}))
    override = 'training.rewards[1]={name: http, url: "http://127.0.0.1:9/s", headers: {X-Api-Key: SECRET-5}}'
    assert main(["validate", str(path), override, "training.rewards[1].headers.Cookie=SECRET-6", "--schema-only"]) == 0
    out = capsys.readouterr()
    assert "SECRET" not in out.out + out.err and "X-Api-Key: '***'" in out.out
    assert redact_overrides([override, "training.rewards[1].headers.Cookie=SECRET-6", "training.max_steps=3"]) == \
        ["training.rewards[1]=***", "training.rewards[1].headers.Cookie=***", "training.max_steps=3"]


GRPO = {"algorithm": "grpo", "output_dir": "out", "rewards": [{"name": "answer_match"}]}
IMAGES = {"datasets": [{"name": "train.jsonl", "image_columns": ["image"]}]}


@pytest.mark.parametrize("raw, key, live_with", [
    (recipe(training=GRPO, data={"prompt_truncation": "left"}), "data.prompt_truncation", "set data.max_prompt_length"),
    (recipe(training={"algorithm": "dpo"}, data={"prompt_truncation": "drop"}), "data.prompt_truncation", "set data.max_prompt_length"),
    (recipe(training=GRPO, data={"few_shot": True}), "data.few_shot", "data.datasets[i].template (gsm8k or openmathinstruct2)"),
    (recipe(training=GRPO, data={"datasets": [{"name": "t.jsonl", "template": "gsm8k"}], "few_shot": True, "use_chat_template": False}),
     "data.few_shot", "data.use_chat_template=false"),
    (recipe(model={"base_model_name": "tiny:llava"}, training=GRPO, data={**IMAGES, "use_chat_template": False}),
     "data.use_chat_template", "image prompts are always chats"),
    (recipe(training={"health_window": 5}), "training.health_window", "training.algorithm=grpo or gspo"),
    (recipe(training={"algorithm": "dpo", "health_window": 5}), "training.health_window", "training.algorithm=grpo or gspo"),
    (recipe(tracking={"provider": "tensorboard", "tags": ["a"]}), "tracking.tags", "Set tracking.provider=wandb"),
    (recipe(tracking={"provider": "mlflow", "tags": ["a"]}), "tracking.tags", "Set tracking.provider=wandb"),
    (recipe(tracking={"provider": "tensorboard", "project": "p"}), "tracking.project", "Set tracking.provider=wandb"),
    (recipe(tracking={"provider": "tensorboard", "run_name": "r"}), "tracking.run_name", "Set tracking.provider=wandb"),
    (recipe(training={**GRPO, "micro_batching": False}), "training.micro_batching", "splits padded SFT and DPO batches"),
    (recipe(training={"hub_model_id": "me/model"}), "training.hub_model_id", "set training.push_to_hub=true"),
    (recipe(training={"eval_packing": True}), "training.eval_packing", "set evaluation data"),
    (recipe(training={"algorithm": "dpo", "precompute_ref_batch_size": 4, "num_train_epochs": 1}), "training.precompute_ref_batch_size",
     "set training.precompute_ref_log_probs=true"),
])
def test_keys_that_would_change_nothing_are_refused_naming_what_makes_them_live(raw, key, live_with):
    message = error_of(raw)
    assert f"{key} (from recipe)" in message and live_with in message, message
    assert "would do nothing" in message or "would ignore" in message, message


@pytest.mark.parametrize("raw", [
    recipe(training=GRPO, data={"max_prompt_length": 64, "prompt_truncation": "left"}),
    recipe(training=GRPO, data={"datasets": [{"name": "t.jsonl", "template": "gsm8k"}], "few_shot": True}),
    recipe(training={**GRPO, "health_window": 5}),
    recipe(tracking={"provider": "wandb", "tags": ["a"], "project": "p", "run_name": "r"}),
    recipe(tracking={"provider": "mlflow", "project": "p", "run_name": "r"}),
    recipe(tracking={"provider": "none", "project": "p", "tags": ["a"]}),  # tracking switched off for a run
    recipe(training={"micro_batching": False}),
    recipe(training={"algorithm": "dpo", "micro_batching": "auto"}),
    recipe(training={"hub_model_id": "me/model", "push_to_hub": True}),
    recipe(training={"eval_packing": True, "eval_strategy": "steps"}, data={"eval_fraction": 0.1}),
    recipe(training={"algorithm": "dpo", "precompute_ref_batch_size": 4}),  # 3 epochs: posttrain precomputes
    recipe(training={"algorithm": "dpo", "precompute_ref_batch_size": 4, "max_steps": 5, "precompute_ref_log_probs": True}),
])
def test_the_same_keys_are_accepted_where_they_act(raw):
    assert load_recipe(None, raw=raw).recipe is not None


def test_batch_shapes_are_checked_for_the_world_size_passed_in_not_the_environment(monkeypatch):
    """2 completions per process hold a group of 4 only on two processes; the schema takes the process count from
    its caller (the CLI: --nproc or the launcher's WORLD_SIZE) and never reads the environment itself."""
    raw = recipe(training={**GRPO, "num_generations": 4, "per_device_train_batch_size": 2})
    assert "must hold whole groups of num_generations=4" in error_of(raw)
    assert load_recipe(None, raw=raw, world_size=2).recipe is not None
    monkeypatch.setenv("WORLD_SIZE", "2")
    assert "must hold whole groups of num_generations=4" in error_of(raw)  # the environment changes nothing
    monkeypatch.setenv("WORLD_SIZE", "1")
    assert load_recipe(None, raw=raw, world_size=2).recipe is not None
