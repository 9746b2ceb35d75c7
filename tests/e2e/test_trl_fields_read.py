"""Every TRL field a recipe may set is one the trainer reads: a dead field fails here.

tests/recipe/test_trl_fields.py checks that each field *arrives* in the TRL config. That is not
enough: a trainer can ignore a field it was given (TRL 1.16's DPOTrainer ignores padding_free).
Here each algorithm trains one step (with evaluation and a checkpoint) on a tiny model, in this
process, with a TRL config class that records every attribute the trainer, transformers,
accelerate or posttrain read from it after construction. A field the schema accepts for that
algorithm must then be

- read during the run, or
- read only by the config's own constructor, which acts on it there (`CONSTRUCTION_ONLY`), or
- read only with a feature this run has off, which the schema refuses to accept alone
  (`posttrain.recipe.liveness.LIVE_ONLY_WITH`), or
- read only in a situation a one-process run from scratch lacks (`SITUATIONAL`).

Anything else is a key that changes nothing: reject it (`schema.DEAD_FOR_ALGORITHM`) or make it act.
"""

from __future__ import annotations

import contextlib
import sys

import pytest

from posttrain.recipe.liveness import LIVE_ONLY_WITH
from posttrain.recipe.schema import DEAD_FOR_ALGORITHM, OWNED_ELSEWHERE, TRAINING_MODELS, TrainingBase
from posttrain.recipe.trl_fields import CONFIG_CLASSES, trl_fields

pytestmark = pytest.mark.e2e

# field -> what the config's constructor (transformers' TrainingArguments / TRL's __post_init__) does with it.
CONSTRUCTION_ONLY = {
    "activation_checkpointing_kwargs": "becomes the checkpointing arguments transformers passes to the model",
    "ddp_backend": "chooses the process group backend when the config sets up devices",
    "deepspeed": "is loaded into the DeepSpeed config accelerate runs with",
    "fp16": "sets the mixed precision accelerate runs with (a float32 run, posttrain's default on a CPU without "
            "avx512_bf16, never reads it again; a bf16 one does)",
    "fsdp_config": "is parsed into the FSDP plugin settings",
    "tf32": "switches torch's TF32 matmul flags",
    "torch_compile": "sets the dynamo backend accelerate compiles with",
    "use_cpu": "makes accelerate's state a CPU job (several CPU processes form one DDP job)",
    "use_transformers_paged": "deprecated alias: turns use_transformers_continuous_batching on",
}
# field -> the situation it is read in, which no one-process run from scratch has.
SITUATIONAL = {
    "ddp_timeout": "several processes: the process group's timeout",
    "ignore_data_skip": "resuming: whether to skip the batches the checkpoint already saw",
    "restore_callback_states_from_checkpoint": "resuming: whether callbacks get their saved state back",
}

_state = {"phase": "construction", "recording": True}
_reads: dict[str, set[str]] = {"construction": set(), "run": set()}


def _recording(cls):
    """A subclass of the TRL config that notes every public attribute read (to_dict's full sweep excluded)."""

    def __getattribute__(self, name):
        if _state["recording"] and not name.startswith("_"):
            _reads[_state["phase"]].add(name)
        return cls.__getattribute__(self, name)

    def to_dict(self):
        recording, _state["recording"] = _state["recording"], False
        try:
            return cls.to_dict(self)
        finally:
            _state["recording"] = recording

    sub = type(f"Recording{cls.__name__}", (cls,), {"__getattribute__": __getattribute__, "to_dict": to_dict, "__module__": __name__})
    setattr(sys.modules[__name__], sub.__name__, sub)  # training_args.bin pickles the config by its class's name
    return sub


STEP = ["training.max_steps=1", "training.save_steps=1", "training.logging_steps=1", "training.eval_strategy=steps",
        "training.eval_steps=1", "training.per_device_train_batch_size=4", "training.per_device_eval_batch_size=4",
        "data.datasets[0].max_samples=16"]
RL = ["training.num_generations=2", "training.max_completion_length=8"]
RUNS = {
    "sft": ("recipes/sft/tiny-cpu.yaml", "examples/data/sft.jsonl", ["data.eval_fraction=0.25"]),
    "cpt": ("recipes/cpt/tiny-cpu.yaml", "examples/data/text.jsonl", ["data.eval_fraction=0.25"]),
    "sft_vlm": ("recipes/sft_vlm/tiny-cpu.yaml", "examples/data/shapes/train.jsonl", ["data.eval_fraction=0.25"]),
    "dpo": ("recipes/dpo/tiny-cpu.yaml", "examples/data/preferences.jsonl", []),  # holds out 20% itself
    "reward": ("recipes/reward/tiny-cpu.yaml", "examples/data/preferences_refusal.jsonl", []),  # holds out 20% itself
    "grpo": ("recipes/grpo/tiny-cpu.yaml", "examples/data/problems.jsonl", ["data.eval_fraction=0.25", *RL]),
    "gspo": ("recipes/gspo/tiny-cpu.yaml", "examples/data/problems.jsonl", ["data.eval_fraction=0.25", *RL]),
    "rloo": ("recipes/grpo/tiny-cpu.yaml", "examples/data/problems.jsonl",
             ["training.algorithm=rloo", "training.health_window=null", "training.stop_on=[]", "data.eval_fraction=0.25", *RL]),
    "kto": ("recipes/kto/tiny-cpu.yaml", "examples/data/unpaired.jsonl", []),  # holds out 20% itself
    "distill": ("recipes/distill/tiny-cpu.yaml", "examples/data/problems.jsonl",  # holds out 10% itself; the student as its own teacher
                ["training.teacher_model_name_or_path=tiny:qwen2-1m", "training.max_completion_length=8", "training.eval_on_start=false"]),
    # one round of 4 rows (one step); threshold 0 keeps every sample of the random model; no eval loss (held_out instead)
    "rft": ("recipes/rft/tiny-cpu.yaml", "recipes/demo/data/grpo.jsonl",
            ["model.base_model_name=tiny:qwen2-1m", "training.rewards=correct_loose", "training.reward_threshold=0.0",
             "training.rounds=1", "training.num_generations=2", "training.prompts_per_round=4", "training.max_completion_length=8",
             "training.save_strategy=steps", "held_out.n=2"]),
}
# STEP keys an algorithm refuses (its schedule or evaluation works another way): left out of its run
NOT_FOR = {"rft": ("training.max_steps", "training.eval_strategy", "training.eval_steps", "training.per_device_eval_batch_size")}


@pytest.fixture(scope="module")
def reads(repo, tmp_path_factory, isolated_cache):
    """algorithm -> (fields read at construction, fields read afterwards, the run's recipe)."""
    import trl

    import posttrain.algorithms.run as run
    from posttrain.recipe.load import load_recipe

    out = {}
    with pytest.MonkeyPatch.context() as mp, contextlib.redirect_stdout(sys.stderr):
        for name in CONFIG_CLASSES.values():
            mp.setattr(trl, name, _recording(getattr(trl, name)))
        make_config = run.make_trl_config

        def recorded_config(*args, **kwargs):
            _state["phase"] = "construction"
            try:
                return make_config(*args, **kwargs)
            finally:
                _state["phase"] = "run"

        mp.setattr(run, "make_trl_config", recorded_config)
        for algorithm, (recipe, data, overrides) in RUNS.items():
            for phase in _reads.values():
                phase.clear()
            step = [o for o in STEP if o.split("=")[0] not in NOT_FOR.get(algorithm, ())]
            loaded = load_recipe(repo / recipe, [*step, *overrides, f"data.datasets[0].name={repo / data}",
                                                 f"training.output_dir={tmp_path_factory.mktemp(algorithm)}"])
            run.run_training(loaded)
            out[algorithm] = (set(_reads["construction"]), set(_reads["run"]), loaded.recipe)
    return out


@pytest.mark.parametrize("algorithm", list(RUNS))
def test_the_trainer_reads_every_field_the_recipe_may_set(algorithm, reads):
    construction, during_run, recipe = reads[algorithm]
    family = TRAINING_MODELS[algorithm]._family
    accepted = [n for n in trl_fields(family) if n not in OWNED_ELSEWHERE and n not in TrainingBase.model_fields
                and n not in DEAD_FOR_ALGORITHM.get(algorithm, {})]
    dead, stale = [], []
    for name in accepted:
        rule = LIVE_ONLY_WITH.get(name)
        if name in during_run:
            continue
        if rule is not None and family in rule.families:
            if rule.live(recipe):
                dead.append(f"{name} (its feature, {rule.needs}, is on in this run)")
            continue
        if name in CONSTRUCTION_ONLY:
            if name not in construction:
                stale.append(name)
            continue
        if name not in SITUATIONAL:
            dead.append(name + (" (read only by the config's constructor)" if name in construction else ""))
    assert not stale, f"CONSTRUCTION_ONLY lists fields the constructor no longer reads: {stale}"
    assert not dead, (f"{algorithm}: the trainer never reads {dead}; reject them (schema.DEAD_FOR_ALGORITHM), "
                      "or list the feature that makes them live (recipe/liveness.py)")
    assert len(during_run & set(accepted)) > 80  # the recording saw the run


def test_the_recording_tells_read_fields_from_ignored_ones(reads):
    """The check itself: no trainer reads prediction_loss_only (posttrain passes no compute_metrics, and
    transformers then evaluates the loss only without looking), while DPO's beta is read by DPO alone."""
    for algorithm, (construction, during_run, _) in reads.items():
        assert "prediction_loss_only" not in construction | during_run, algorithm
    assert "beta" in reads["dpo"][1] and "beta" not in reads["sft"][1]
