"""Out-of-range numbers and keys that would do nothing are errors at load, all in one pass."""

import pytest

from posttrain.recipe.errors import RecipeError
from posttrain.recipe.load import load_recipe
from posttrain.recipe.ranges import FAMILY_RULES, RULES, interval_from_help, range_for
from posttrain.recipe.trl_fields import trl_fields


def recipe(algorithm="sft", model=None, dataset=None, data=None, **training):
    if algorithm in ("grpo", "gspo"):
        training.setdefault("rewards", [{"name": "answer_match"}])
    return {
        "model": {"base_model_name": "tiny:qwen2", **(model or {})},
        "data": {"datasets": [{"name": "train.jsonl", **(dataset or {})}], **(data or {})},
        "training": {"algorithm": algorithm, "output_dir": "out", **training},
    }


def problems(raw) -> str:
    with pytest.raises(RecipeError) as e:
        load_recipe(None, raw=raw)
    return str(e.value)


def test_every_rule_names_a_field_trl_still_has():
    """A field TRL removes or renames leaves a rule behind: this fails until the table follows."""
    known = {name for family in ("sft", "dpo", "grpo") for name in trl_fields(family)}
    assert not set(RULES) - known
    assert all(name in trl_fields(family) for family, rules in FAMILY_RULES.items() for name in rules)


def test_ranges_stated_in_trl_help_are_read_from_it():
    assert range_for("grpo", "top_p", trl_fields("grpo")["top_p"]).describe() == "in (0, 1]"
    assert interval_from_help("Must be in [0, 1).").describe() == "in [0, 1)"
    assert interval_from_help("A number.") is None


def test_rules_marked_trl_are_rejected_by_trl_itself():
    """Where a rule says TRL/transformers reject the value too (only later), check that they still do."""
    import trl

    cases = [(family, name, rule) for family in ("sft", "grpo") for name, spec in trl_fields(family).items()
             if (rule := range_for(family, name, spec)) is not None and rule.source == "trl"]
    assert {name for _, name, _ in cases} >= {"num_generations", "warmup_steps", "logging_steps"}
    for family, name, rule in cases:
        bad = rule.low - 1 if not rule.low_open else rule.low
        cls = {"sft": trl.SFTConfig, "grpo": trl.GRPOConfig}[family]
        with pytest.raises(ValueError):
            cls(output_dir="/tmp/unused", bf16=False, use_cpu=True, **{name: bad})


@pytest.mark.parametrize("algorithm, key, value, text", [
    ("sft", "per_device_train_batch_size", 0, "must be >= 1"),
    ("sft", "gradient_accumulation_steps", 0, "must be >= 1"),
    ("sft", "learning_rate", -1e-5, "must be >= 0"),
    ("sft", "max_steps", 0, ">= 1 or -1"),
    ("sft", "num_train_epochs", 0, "must be > 0"),
    ("sft", "adam_beta2", 1.0, "in [0, 1)"),
    ("sft", "warmup_steps", -1, "must be >= 0"),
    ("sft", "save_total_limit", 0, "must be >= 1"),
    ("dpo", "beta", 0.0, "must be > 0"),
    ("grpo", "beta", -0.1, "must be >= 0"),
    ("grpo", "num_generations", 1, "at least 2"),
    ("grpo", "temperature", 0.0, "must be > 0"),
    ("grpo", "top_p", 1.5, "in (0, 1]"),
    ("grpo", "max_completion_length", 0, "must be >= 1"),
    ("gspo", "epsilon", -3e-4, "must be > 0"),
])
def test_out_of_range_is_an_error_naming_the_key(algorithm, key, value, text):
    message = problems(recipe(algorithm, **{key: value}))
    assert f"training.{key}" in message and text in message, message


def test_in_range_edges_are_accepted():
    load_recipe(None, raw=recipe("sft", max_steps=-1, learning_rate=0, warmup_steps=0.1, save_steps=0.5))
    load_recipe(None, raw=recipe("grpo", beta=0.0, num_generations=2, per_device_train_batch_size=2, top_p=1.0))


@pytest.mark.parametrize("raw, text", [
    (recipe("sft", eval_steps=5), "training.eval_steps"),
    (recipe("sft", save_strategy="epoch", save_steps=10), "training.save_steps"),
    (recipe("sft", logging_strategy="no", logging_steps=3), "training.logging_steps"),
    (recipe("sft", model={"lora_r": 8}), "model.lora_r only apply with model.use_lora=true"),
    (recipe("sft", model={"lora_target_modules": ["q_proj"], "use_lora": False}), "model.lora_target_modules"),
    (recipe("cpt", dataset={"format": "prompt_completion"}), "data.datasets[0].format"),
    (recipe("dpo", dataset={"format": "messages"}), "always reads 'preference'"),
    (recipe("grpo", dataset={"format": "text"}), "data.datasets[0].format"),
    (recipe("dpo", dataset={"completion_column": "answer"}), "data.datasets[0].completion_column"),
    (recipe("cpt", dataset={"prompt_column": "q"}), "data.datasets[0].prompt_column"),
    (recipe("sft", dataset={"chosen_column": "good"}), "data.datasets[0].chosen_column"),
    (recipe("sft", fp16=True, bf16=True), "training.fp16"),
    (recipe("sft", lr_scheduler_type="reduce_lr_on_plateau"), "training.lr_scheduler_type"),
    (recipe("sft", dataloader_prefetch_factor=2), "training.dataloader_prefetch_factor"),
    (recipe("sft", data={"eval_fraction": 0.1}, eval_strategy="steps", save_strategy="epoch", load_best_model_at_end=True),
     "training.load_best_model_at_end"),
    (recipe("sft", data={"eval_fraction": 0.1}, eval_strategy="steps", eval_steps=3, save_steps=10, load_best_model_at_end=True),
     "multiple of eval_steps=3"),
])
def test_keys_that_would_do_nothing_are_errors(raw, text):
    assert text in problems(raw)


def test_honoured_variants_are_accepted():
    load_recipe(None, raw=recipe("sft", data={"eval_fraction": 0.1}, eval_strategy="steps", eval_steps=5))
    load_recipe(None, raw=recipe("sft", model={"use_lora": True, "lora_r": 8}))
    load_recipe(None, raw=recipe("cpt", dataset={"format": "text", "text_column": "body"}))
    load_recipe(None, raw=recipe("dpo", dataset={"format": "preference", "chosen_column": "good"}))
    load_recipe(None, raw=recipe("sft", eval_strategy="no", eval_steps=None))  # an override's eval_steps=null removes it


def test_independent_problems_are_reported_in_one_pass():
    """A GSPO recipe with five unrelated mistakes gets all five at once, each under its own key."""
    raw = recipe("gspo", model={"lora_r": 8}, dataset={"format": "messages"},
                 importance_sampling_level="token", eval_steps=10, per_device_train_batch_size=0, learning_rate=-1.0)
    message = problems(raw)
    for key in ("training.per_device_train_batch_size", "training.learning_rate", "model.lora_r"):
        assert key in message, message
    # cross-field checks inside one section all appear together too
    raw = recipe("gspo", importance_sampling_level="token", eval_steps=10, fp16=True, bf16=True)
    message = problems(raw)
    for key in ("training.importance_sampling_level", "training.eval_steps", "training.fp16"):
        assert key in message, message
    assert "3 problems" in message
    # and across sections once each section is valid on its own
    message = problems(recipe("grpo", dataset={"format": "text", "chosen_column": "x"}, data={"eval_fraction": 0.1}))
    for key in ("data.datasets[0].format", "data.datasets[0].chosen_column", "training.eval_strategy"):
        assert key in message, message
