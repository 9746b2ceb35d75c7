"""Every key of every TRL config is live: set through a recipe, it arrives in the TRL config."""

import dataclasses

import pytest

from posttrain.recipe.ranges import range_for
import trl

from posttrain.algorithms.trl_config import build_trl_config, config_kwargs, runtime_defaults
from posttrain.models.loading import DeviceInfo
from posttrain.recipe.errors import RecipeError
from posttrain.recipe.liveness import LIVE_ONLY_WITH
from posttrain.recipe.load import load_recipe
from posttrain.recipe.migrations import MIGRATIONS
from posttrain.recipe.schema import DEAD_FOR_ALGORITHM, OWNED_ELSEWHERE, TOOL_KEYS, TRAINING_MODELS, TrainingBase
from posttrain.recipe.trl_fields import CONFIG_CLASSES
from posttrain.recipe.trl_fields import load_snapshot, snapshot_from_installed, trl_fields

CPU = DeviceInfo("cpu", bf16=False)
# Fields whose type is a Python object TRL builds itself (no YAML value can stand for one).
UNSETTABLE = {"parallelism_config"}


# RL batch fields must agree with each other (checked at load time), so they get one consistent,
# non-default set; generation_batch_size excludes steps_per_generation and is tested on its own.
RL_VALUES = {"per_device_train_batch_size": 6, "num_generations": 3, "steps_per_generation": 8,
             "gradient_accumulation_steps": 4, "importance_sampling_level": "sequence",
             "vllm_mode": "server"}  # TRL's vllm_mode is free text; posttrain accepts colocate | server
# Cross-field rules (schema.TrainingBase.cross_checks) hold between some fields: x_steps needs
# x_strategy=steps, fp16 excludes bf16. These keep the strategies at 'steps' so every *_steps arrives.
CONSISTENT = {"save_strategy": "steps", "logging_strategy": "steps", "eval_strategy": "steps", "bf16": False}


def base_recipe(algorithm: str, **training) -> dict:
    if algorithm in ("grpo", "gspo", "rloo", "rft"):
        training.setdefault("rewards", [{"name": "answer_match"}])
    if algorithm == "distill":
        training.setdefault("teacher_model_name_or_path", "tiny:qwen2-6m")
    dataset = {"name": "train.jsonl", "image_columns": ["image"]} if algorithm == "sft_vlm" else {"name": "train.jsonl"}
    return {
        "model": {"base_model_name": "tiny:llava" if algorithm == "sft_vlm" else "tiny:qwen2"},
        "data": {"datasets": [dataset]},
        "training": {"algorithm": algorithm, "output_dir": "out", **training},
    }


def non_default(spec: dict, rule=None):
    """A value of the field's type that differs from TRL's default (and is within the field's range)."""
    value = _non_default(spec)
    if rule is None or rule.check(value) is None:
        return value
    low = rule.low if rule.low is not None else 0
    high = rule.high if rule.high is not None else low + 10
    for candidate in ((low + high) / 2, (3 * low + high) / 4, low + 1):
        candidate = int(candidate) if "float" not in spec["kinds"] else candidate
        if candidate != spec["default"] and rule.check(candidate) is None:
            return candidate
    raise AssertionError(f"no in-range test value for {spec}")


def _non_default(spec: dict):
    default = spec["default"]
    if spec["choices"]:
        return next(c for c in spec["choices"] if c != default)
    kinds = spec["kinds"]
    if "bool" in kinds:
        return not default if isinstance(default, bool) else True
    if "int" in kinds:
        return default + 3 if isinstance(default, int) and not isinstance(default, bool) else 3
    if "float" in kinds:
        return (default or 0.0) * 2 + 0.5
    if "str" in kinds:
        return "posttrain-test-value"
    if "list" in kinds:
        return {"float": [0.25, 0.75], "int": [3]}.get(spec["item"], ["posttrain-test"])
    if "dict" in kinds:
        return {"posttrain_test": 1}
    if "any" in kinds:  # RLOO's reward_clip_range, a (min, max) pair
        return [-1.0, 1.0]
    raise AssertionError(f"no test value for {spec}")


def test_snapshot_matches_installed_trl():
    """Upgrading TRL without regenerating the snapshot fails here (python -m posttrain.recipe.trl_fields)."""
    assert load_snapshot() == snapshot_from_installed()


@pytest.mark.parametrize("algorithm", sorted(TRAINING_MODELS))
def test_every_trl_field_reaches_the_config(algorithm, monkeypatch):
    family = TRAINING_MODELS[algorithm]._family
    # Keys posttrain consumes itself (resume_from_checkpoint) are tested where they act.
    dead = DEAD_FOR_ALGORITHM.get(algorithm, {})  # rejected instead (test_dead_fields_are_rejected_with_the_reason)
    # Keys read only with a feature on are tested one at a time with it (test_conditional_fields_*).
    fields = {n: s for n, s in trl_fields(family).items()
              if n not in OWNED_ELSEWHERE and n not in UNSETTABLE and n not in TrainingBase.model_fields and n not in dead
              and not conditional(family, n)}
    values = {name: non_default(spec, range_for(family, name, spec)) for name, spec in fields.items()}
    values.update(CONSISTENT)
    if "eval_strategy" in dead:  # eval_steps would then do nothing
        del values["eval_strategy"], values["eval_steps"]
    if family in ("grpo", "rloo"):
        values.pop("generation_batch_size")
        values.update({k: v for k, v in RL_VALUES.items() if k in trl_fields(family)})  # RLOO has no importance_sampling_level
    raw = base_recipe(algorithm, **values)
    if family == "grpo":  # max_tool_calling_iterations acts only with tools
        raw["training"]["tools"] = ["posttrain.tools.calculator:calculator"]
    if "eval_strategy" not in dead:  # (RFT has no eval loss on prompts: held_out scores instead)
        raw["data"]["eval_fraction"] = 0.1  # eval_strategy is set to a non-default too, and needs data
    loaded = load_recipe(None, raw=raw)
    # TRL's __post_init__ checks combinations (fp16 needs a GPU, ...) that these values break on
    # purpose; skip it so the test sees exactly what the constructor received.
    config_cls = getattr(trl, CONFIG_CLASSES[family])
    monkeypatch.setattr(config_cls, "__post_init__", lambda self: None)
    config = build_trl_config(loaded.recipe, CPU, data_format="prompt_completion")
    arrived = {f.name: getattr(config, f.name) for f in dataclasses.fields(config)}
    missing = {n: (v, arrived.get(n)) for n, v in values.items() if arrived.get(n) != v}
    if family in ("grpo", "rloo"):
        assert arrived["reward_weights"] == [1.0]
    assert not missing, f"{len(missing)} fields did not arrive: {missing}"
    assert len(values) > (80 if "eval_strategy" in dead else 90)  # RFT refuses the evaluation loop's fields


@pytest.mark.parametrize("key", sorted(OWNED_ELSEWHERE))
def test_fields_posttrain_owns_are_rejected_with_a_pointer(key):
    with pytest.raises(RecipeError) as e:
        load_recipe(None, raw=base_recipe("sft", **{key: None}))
    assert f"training.{key}" in str(e.value)
    assert OWNED_ELSEWHERE[key] in str(e.value)


def conditional(family: str, key: str) -> bool:
    rule = LIVE_ONLY_WITH.get(key)
    return rule is not None and family in rule.families


def with_dotted(raw: dict, values: dict) -> dict:
    for path, value in values.items():
        section, key = path.split(".")
        raw.setdefault(section, {})[key] = value
    return raw


@pytest.mark.parametrize("algorithm,key", sorted((a, k) for a, keys in DEAD_FOR_ALGORITHM.items() for k in keys))
def test_dead_fields_are_rejected_with_the_reason(algorithm, key):
    family = TRAINING_MODELS[algorithm]._family
    value = non_default(trl_fields(family)[key])
    with pytest.raises(RecipeError) as e:
        load_recipe(None, raw=base_recipe(algorithm, **{key: value}))
    assert f"training.{key}" in str(e.value) and DEAD_FOR_ALGORITHM[algorithm][key] in str(e.value)
    live_in = [a for a in TRAINING_MODELS if key not in DEAD_FOR_ALGORITHM.get(a, {}) and key in trl_fields(TRAINING_MODELS[a]._family)
               and not conditional(TRAINING_MODELS[a]._family, key)]
    for other in live_in[:1]:  # where the key is live, the same value is accepted (tool keys: with a tool)
        tools = {"tools": ["posttrain.tools.calculator:calculator"]} if key in TOOL_KEYS else {}
        evaluation = {"eval_strategy": {}, "load_best_model_at_end": {"eval_strategy": "steps"}}.get(key)  # dead for RFT
        raw = base_recipe(other, **{key: value}, **tools, **(evaluation or {}))
        if evaluation is not None:  # where they are live, they need evaluation data
            raw["data"]["eval_fraction"] = 0.1
        assert load_recipe(None, raw=raw).recipe.training.value(key) == value


CONDITIONAL = sorted((a, k) for a in TRAINING_MODELS for k, rule in LIVE_ONLY_WITH.items()
                     if TRAINING_MODELS[a]._family in rule.families and k in trl_fields(TRAINING_MODELS[a]._family)
                     and k not in DEAD_FOR_ALGORITHM.get(a, {}))


# Features a base recipe has on by default (CPT packs; DPO precomputes its reference for TRL's 3 epochs; GRPO's beta is 0.04).
FEATURE_OFF = {("cpt", "packing_strategy"): {"packing": False}, ("dpo", "precompute_ref_batch_size"): {"max_steps": 5},
               ("grpo", "use_bias_correction_kl"): {"beta": 0.0}}


@pytest.mark.parametrize("algorithm,key", CONDITIONAL)
def test_conditional_fields_are_refused_without_their_feature_and_arrive_with_it(algorithm, key, monkeypatch):
    """A key read only when another key is on (hub_model_id: push_to_hub) is an error naming that key when it is off,
    and reaches the TRL config when it is on."""
    family = TRAINING_MODELS[algorithm]._family
    spec = trl_fields(family)[key]
    value = RL_VALUES["vllm_mode"] if key == "vllm_mode" else non_default(spec, range_for(family, key, spec))
    rule = LIVE_ONLY_WITH[key]
    with pytest.raises(RecipeError) as e:
        load_recipe(None, raw=base_recipe(algorithm, **{key: value}, **FEATURE_OFF.get((algorithm, key), {})))
    message = str(e.value)
    assert f"training.{key}" in message and f"only applies with {rule.needs}" in message and "would do nothing" in message
    raw = with_dotted(base_recipe(algorithm, **{key: value}), rule.enable)
    loaded = load_recipe(None, raw=raw)
    assert rule.live(loaded.recipe)
    monkeypatch.setattr(getattr(trl, CONFIG_CLASSES[family]), "__post_init__", lambda self: None)  # (fp16 etc. need a GPU)
    assert getattr(build_trl_config(loaded.recipe, CPU, data_format="prompt_completion"), key) == value


@pytest.mark.parametrize("path", sorted(p for p in MIGRATIONS if p.startswith("training.")))
def test_removed_upstream_fields_get_a_migration_message(path):
    key = path.split(".", 1)[1]
    for family in ("sft", "dpo", "grpo"):
        assert key not in trl_fields(family), f"{key} is live in {family}: remove its migration"
    with pytest.raises(RecipeError) as e:
        load_recipe(None, raw=base_recipe("sft", **{key: 1}))
    assert path in str(e.value) and MIGRATIONS[path] in str(e.value)


def test_real_config_gets_recipe_values_and_cpu_precision():
    loaded = load_recipe(None, raw=base_recipe("sft", learning_rate="1e-5", max_steps=7, lr_scheduler_type="cosine"))
    config = build_trl_config(loaded.recipe, CPU, data_format="prompt_completion")
    assert (config.learning_rate, config.max_steps, config.lr_scheduler_type.value) == (1e-5, 7, "cosine")
    assert config.bf16 is False  # TRL's default is bf16=True even on CPU: 6x slower there
    assert config.activation_checkpointing_kwargs == {"use_reentrant": False}


def test_cpus_with_native_bf16_train_in_bf16_unless_the_recipe_says():
    """bf16 autocast where the CPU computes bf16 (1.5-1.7x faster on tiny:qwen2-6m: README "Models and the tokenizer rule"), float32 elsewhere."""
    native = DeviceInfo("cpu", bf16=True)
    sft = load_recipe(None, raw=base_recipe("sft")).recipe
    assert build_trl_config(sft, native, "prompt_completion").bf16 is True
    assert build_trl_config(sft, native, "prompt_completion").use_cpu is True  # what TRL needs to run bf16 without a GPU
    assert "native bf16" in runtime_defaults(sft, native, "prompt_completion")["bf16"][1]
    assert build_trl_config(sft, CPU, "prompt_completion").bf16 is False
    pinned = load_recipe(None, raw=base_recipe("sft", bf16=False)).recipe
    assert build_trl_config(pinned, native, "prompt_completion").bf16 is False and "bf16" not in runtime_defaults(pinned, native, None)
    assert build_trl_config(sft, DeviceInfo("mps", bf16=False), "prompt_completion").bf16 is False


def test_null_leaves_the_per_device_choice_to_posttrain():
    """`key=null` is no choice, like an absent key: TRL would read bf16=None as bf16 on (emulated on most
    CPUs, ~6x slower) and transformers activation_checkpointing=None as off, bypassing the device rule."""
    nulls = load_recipe(None, raw=base_recipe("sft", bf16=None, activation_checkpointing=None)).recipe
    config = build_trl_config(nulls, CPU, "prompt_completion")
    assert (config.bf16, config.activation_checkpointing) == (False, True)
    kwargs = config_kwargs(nulls, DeviceInfo("cuda", bf16=True), "prompt_completion")  # (no GPU here to build it)
    assert (kwargs["bf16"], kwargs["activation_checkpointing"]) == (True, True)


def test_activation_checkpointing_is_chosen_per_device_unless_the_recipe_sets_it():
    """On for CUDA and CPU alike (on a CPU, SmolLM2 + LoRA trained as fast with it and in half the memory)."""
    cuda = DeviceInfo("cuda", bf16=True)
    for algorithm in ("sft", "dpo", "grpo"):
        recipe = load_recipe(None, raw=base_recipe(algorithm)).recipe
        assert build_trl_config(recipe, CPU, data_format=None).activation_checkpointing is True
        assert runtime_defaults(recipe, cuda, None)["activation_checkpointing"][0] is True
    chosen = load_recipe(None, raw=base_recipe("grpo", activation_checkpointing=False)).recipe
    assert build_trl_config(chosen, CPU, data_format=None).activation_checkpointing is False
    assert "activation_checkpointing" not in runtime_defaults(chosen, CPU, None)


def test_a_run_resumes_across_the_per_device_checkpointing_choice():
    from posttrain.algorithms.recipe_history import recipe_changes

    allowed, refused = recipe_changes({"training": {"activation_checkpointing": True, "beta": 0.04}}, {"training": {"beta": 0.04}})
    assert allowed == [("training.activation_checkpointing", True, "<unset>")] and refused == []


def test_cpt_preset_packs_fixed_blocks():
    config = build_trl_config(load_recipe(None, raw=base_recipe("cpt")).recipe, CPU, data_format="text")
    assert (config.packing, config.packing_strategy, config.completion_only_loss) == (True, "wrapped", False)


def test_explicit_recipe_value_beats_posttrain_default():
    loaded = load_recipe(None, raw=base_recipe("cpt", packing=False))
    assert build_trl_config(loaded.recipe, CPU, data_format="text").packing is False
    assert loaded.layer("training.packing") == "recipe"


def test_generation_batch_size_arrives():
    loaded = load_recipe(None, raw=base_recipe("grpo", generation_batch_size=16, num_generations=4, per_device_train_batch_size=8))
    assert build_trl_config(loaded.recipe, CPU, data_format="prompt").generation_batch_size == 16


def batching(algorithm="sft", device=CPU, model=None, **training):
    from posttrain.algorithms.trl_config import batching_defaults

    raw = base_recipe(algorithm, **training)
    raw["model"].update(model or {})
    return {k: v for k, (v, _why) in batching_defaults(load_recipe(None, raw=raw).recipe, device).items()}


def test_sft_batching_default_per_device(monkeypatch):
    """Padding-free (TRL's batches flattened, no padding) where attention keeps the rows apart: CUDA +
    flash attention, and a CPU when the recipe names no attention (posttrain's CPU attention where it runs,
    transformers' packed-sequence mask elsewhere); otherwise TRL's padded random batches (length grouping
    changed what the demo learned, so it is opt-in)."""
    from posttrain.algorithms.trl_config import batching_defaults
    from posttrain.models import cpu_paths

    for kind, keeps in (("avx2", "the model's attention"), ("amx", "the model's attention"), ("avx512_bf16", "posttrain's CPU attention")):
        monkeypatch.setattr(cpu_paths, "cpu_kind", lambda cpuinfo=None, kind=kind: kind)
        assert batching() == {"padding_free": True}, kind  # on every kind: the rows stay apart either way
        why = batching_defaults(load_recipe(None, raw=base_recipe("sft")).recipe, CPU)["padding_free"][1]
        assert f"no padding computed; {keeps} attends within each row" in why, (kind, why)
    monkeypatch.setattr(cpu_paths, "cpu_kind", lambda cpuinfo=None: "avx512_bf16")
    cuda = DeviceInfo("cuda", bf16=True)
    assert batching() == {"padding_free": True}
    assert batching(device=cuda) == {}  # sdpa: a dense mask over the flattened batch
    assert batching(device=cuda, model={"attn_implementation": "flash_attention_2"}) == {"padding_free": True}
    assert batching(model={"attn_implementation": "sdpa"}) == {}  # the recipe chose sdpa: no rows apart on CPU
    assert batching(model={"attn_implementation": "flash_attention_2"}) == {}  # no CUDA, no varlen kernels
    config = build_trl_config(load_recipe(None, raw=base_recipe("sft")).recipe, CPU, data_format="prompt_completion")
    assert (config.train_sampling_strategy, config.padding_free, config.packing) == ("random", True, False)


@pytest.mark.parametrize("explicit", [{"train_sampling_strategy": "random"}, {"padding_free": True}, {"packing": True},
                                      {"padding_free": False}])
def test_an_explicit_batching_key_wins(explicit):
    cuda = DeviceInfo("cuda", bf16=True)
    assert batching(**explicit) == {} and batching(device=cuda, model={"attn_implementation": "flash_attention_2"}, **explicit) == {}
    config = build_trl_config(load_recipe(None, raw=base_recipe("sft", **explicit)).recipe, CPU, data_format="prompt_completion")
    assert config.train_sampling_strategy == explicit.get("train_sampling_strategy", "random")


def test_dpo_batching_stays_trls():
    assert batching("dpo") == {}
    assert batching("dpo", device=DeviceInfo("cuda", bf16=True), model={"attn_implementation": "flash_attention_2"}) == {}


def test_no_batching_default_where_it_does_not_apply():
    assert batching("cpt") == {}  # packs fixed blocks already
    assert batching("sft_vlm") == {}  # TRL refuses padding-free and packing with images; grouping is not measured there


def test_dpo_precomputes_reference_log_probs_only_for_several_epochs():
    from posttrain.algorithms.trl_config import reference_defaults

    def chosen(**training):
        return {k: v for k, (v, _) in reference_defaults(load_recipe(None, raw=base_recipe("dpo", **training)).recipe).items()}

    assert chosen() == {"precompute_ref_log_probs": True}  # TRL's default schedule: 3 epochs, no max_steps
    assert chosen(num_train_epochs=2) == {"precompute_ref_log_probs": True}
    assert chosen(num_train_epochs=1) == {}  # one pass: the reference pass costs what it saves
    assert chosen(max_steps=20) == {}  # may stop before an epoch
    assert chosen(sync_ref_model=True) == {}  # a moving reference cannot be precomputed
    assert chosen(precompute_ref_log_probs=False) == {}  # the recipe's value wins
    assert reference_defaults(load_recipe(None, raw=base_recipe("sft")).recipe) == {}
    config = build_trl_config(load_recipe(None, raw=base_recipe("dpo")).recipe, CPU, data_format="preference")
    assert config.precompute_ref_log_probs is True
