"""The recipe's `training` section: posttrain's own keys plus every field of the algorithm's TRL
config, generated from the TRL snapshot (`trl_fields.py`), so a TRL field is typed, validated and
forwarded by construction. Which TRL config, and which fields are dead, comes from the algorithm's
row (`recipe/algorithms.py`)."""

from __future__ import annotations

from typing import Annotated, Any, Literal, Union

from pydantic import AfterValidator, BeforeValidator, ConfigDict, Field, StrictBool, StrictInt, ValidationInfo, create_model, model_validator

from posttrain.monitoring.health import ALL_RUN_FLAGS, FLAGS

from .algorithms import ALGORITHMS, CONFIG_CLASSES, RL_ALGORITHMS
from .ranges import range_for
from .section import Section, raise_all
from .trl_fields import trl_fields

# TRL fields that posttrain drives from another key: setting them in `training` is an error that
# names the key to use instead (otherwise they would be silently ignored or fight posttrain).
OWNED_ELSEWHERE: dict[str, str] = {
    "model_init_kwargs": "posttrain loads the model itself; use the model section (torch_dtype, attn_implementation, ...).",
    "trust_remote_code": "use model.trust_remote_code.",
    "dataset_text_field": "use data.datasets[i].text_column; posttrain maps every dataset to TRL's standard columns.",
    "report_to": "use tracking.provider.",
    "run_name": "use tracking.run_name.",
    "project": "use tracking.project.",
    "do_train": "has no effect in TRL's trainers; training always runs.",
    "do_eval": "has no effect in TRL's trainers; set eval_strategy instead.",
    "do_predict": "has no effect in TRL's trainers.",
    "gradient_checkpointing": "deprecated by transformers 5: use training.activation_checkpointing.",
    "gradient_checkpointing_kwargs": "deprecated by transformers 5: use training.activation_checkpointing_kwargs.",
    "reward_weights": "give each reward its weight in training.rewards: [{name: answer_match, weight: 1.0}, ...].",
}

_KIND_TYPES: dict[str, Any] = {"bool": StrictBool, "int": StrictInt, "float": float, "str": str, "dict": dict[str, Any], "any": Any}
_ITEM_TYPES: dict[str | None, Any] = {None: Any, "bool": bool, "int": int, "float": float, "str": str}


def dead_fields(algorithm: str) -> dict[str, str]:
    """TRL fields that do nothing for this algorithm -> why (its row's `dead`)."""
    row = ALGORITHMS.get(algorithm)
    return row.dead if row is not None else {}


def _yaml_word(choices: tuple):
    """YAML 1.1 reads an unquoted `no` as False: give choice fields their word back (eval_strategy: no)."""

    def restore(value):
        if isinstance(value, bool):
            word = "yes" if value else "no"
            return word if word in choices else value
        return value

    return BeforeValidator(restore)


def _in_range(rule):
    def check(value):
        problem = rule.check(value)
        if problem:
            raise ValueError(problem)
        return value

    return AfterValidator(check)


def _annotation(spec: dict, rule=None) -> Any:
    types: list[Any] = []
    for kind in spec["kinds"]:
        if kind == "null":
            continue
        if kind == "str" and spec["choices"]:
            choices = tuple(spec["choices"])
            types.append(Annotated[Literal[choices], _yaml_word(choices)])
        elif kind == "list":
            types.append(list[_ITEM_TYPES[spec["item"]]])
        else:
            types.append(_KIND_TYPES[kind])
    if "float" in spec["kinds"] and "int" not in spec["kinds"]:
        types.insert(0, StrictInt)  # 2 is a fine learning rate or logging_steps; keep it an int
    tp = types[0] if len(types) == 1 else Union[tuple(types)]
    if rule is not None:
        tp = Annotated[tp, _in_range(rule)]
    return tp | None if "null" in spec["kinds"] else tp


class TrainingBase(Section):
    """Keys of posttrain's own in every training section (the rest are the TRL config's fields)."""

    # A TRL field left at None is "unset": posttrain's or TRL's default applies. Which keys were set
    # is `model_fields_set`; `trl_kwargs()` forwards exactly those. Explicit null is still validated.
    model_config = ConfigDict(validate_default=False)
    _family: str = "sft"
    _rl: bool = False  # an RL algorithm (recipe/algorithms.py): its health checks and windows apply

    early_stopping_patience: StrictInt | None = Field(
        None, ge=1,
        description="Stop when the eval metric (metric_for_best_model, default eval loss) has not improved for this many "
        "evaluations. Needs evaluation data, eval_strategy and load_best_model_at_end=true.",
    )
    early_stopping_threshold: float | None = Field(None, ge=0.0, description="Smallest change that counts as an improvement (with early_stopping_patience).")
    stop_on: list[Literal[tuple(FLAGS)]] = Field(
        default_factory=list,
        description="Health flags that stop the run (saving a checkpoint where it stops), e.g. [no_learning_signal]: "
        "every flag is always checked and printed; these also end the run. `posttrain docs grpo` (Run health) gives each flag's threshold.",
    )
    health_window: StrictInt = Field(
        10, ge=1,
        description="Steps a windowed health condition must hold before its flag fires (no_learning_signal, all_truncated, "
        "length and entropy collapse, empty_think), and the early/late span the reward_divergence check compares.",
    )
    distributed: Literal["ddp", "zero2", "zero3", "zero3_offload", "fsdp"] | None = Field(
        None,
        description="How several processes share the model (posttrain train --nproc N, torchrun, accelerate, srun...): "
        "'ddp' (every process holds the whole model), 'zero2' / 'zero3' / 'zero3_offload' (DeepSpeed ZeRO: optimizer "
        "state and gradients / also weights / also offloaded to CPU RAM; needs the deepspeed package) or 'fsdp' (PyTorch "
        "FSDP2). Each is a shipped, commented config (posttrain/distributed/configs/). Unset: plain DDP when there are "
        "several processes. Or set TRL's own training.deepspeed / fsdp / fsdp_config instead (not both).",
    )
    micro_batching: Literal["auto", False] = Field(
        "auto",
        description="DPO (and SFT with padding_free false; SFT on a CPU is padding-free by default) on one CPU process: "
        "'auto' (default) splits each padded batch into micro-batches with gradient accumulation when that is estimated at "
        "least 1.05x faster from the run's own token lengths (a pass's fixed cost counted as 100 tokens' work, never a "
        "timing: seeded runs split alike): the same rows per optimizer step and the same loss, less padding computed (said "
        "at start-up). DPO losses over the whole batch (aot, aot_unpaired, sft) are never split. false keeps the batches "
        "as per_device_train_batch_size says.",
    )
    resume_from_checkpoint: Literal["auto", False] | str | None = Field(
        None,
        description="'auto' (posttrain's default): continue from the newest complete checkpoint in output_dir, if there is one, so a "
        "crashed run restarted with the same command picks up where it stopped; the recipe must be the checkpoint's own except "
        "for the schedule (max_steps, epochs, save/logging/eval cadence), tracking and s3, or it is an error listing the keys. "
        "'force': like auto, but resume even with other keys changed (they are printed). false: start fresh; or a checkpoint path.",
    )

    def value(self, key: str):
        """A TRL field as the trainer will see it: the recipe's value, else TRL's default."""
        if key in self.model_fields_set:
            return getattr(self, key)
        spec = trl_fields(self._family).get(key)
        return spec["default"] if spec else None

    def cross_checks(self, world_size: int = 1) -> list[tuple[str, str]]:
        """Rules between keys that transformers/TRL enforce only when the trainer starts (or never).
        `world_size`: the processes the run will have (validation context `world_size`, default 1)."""
        v, out = self.value, []
        for key, why in dead_fields(getattr(self, "algorithm", "")).items():
            if key in self.model_fields_set:
                out.append((f"training.{key}", f"does nothing for algorithm {self.algorithm}: {why} Remove it."))
        for kind in ("eval", "save", "logging"):  # x_steps is read only with x_strategy='steps'
            strategy = v(f"{kind}_strategy")
            if f"{kind}_steps" in self.model_fields_set and getattr(self, f"{kind}_steps") is not None and strategy != "steps":
                out.append((f"training.{kind}_steps", f"is only read with training.{kind}_strategy=steps, but that is "
                            f"{strategy!r}, so it would do nothing; set {kind}_strategy=steps or remove {kind}_steps (an override: "
                            f"training.{kind}_steps=null)."))
        rl_only = [f for f in self.stop_on if f not in ALL_RUN_FLAGS]
        if rl_only and not self._rl:
            out.append(("training.stop_on", f"{', '.join(rl_only)} watch(es) RL telemetry ({'/'.join(RL_ALGORITHMS)}) and would never fire in a "
                        f"{self._family} run; keep only {', '.join(ALL_RUN_FLAGS)} here."))
        algorithm = getattr(self, "algorithm", self._family)
        if "micro_batching" in self.model_fields_set and not getattr(ALGORITHMS.get(algorithm), "padding_note", False):
            out.append(("training.micro_batching", f"splits padded SFT and DPO batches; algorithm {algorithm} batches another "
                        "way, so it would do nothing. Remove it."))
        if v("bf16") and v("fp16"):
            out.append(("training.fp16", "bf16 and fp16 are both true; choose one."))
        if v("load_best_model_at_end") and v("save_strategy") != "best":
            if v("eval_strategy") != v("save_strategy"):
                out.append(("training.load_best_model_at_end", f"needs save_strategy ({v('save_strategy')!r}) to equal eval_strategy "
                            f"({v('eval_strategy')!r}), or save_strategy='best' (transformers' rule)."))
            elif v("eval_strategy") == "steps" and isinstance(v("eval_steps"), int) and isinstance(v("save_steps"), int) \
                    and v("eval_steps") >= 1 and v("save_steps") % v("eval_steps"):
                out.append(("training.save_steps", f"{v('save_steps')} must be a multiple of eval_steps={v('eval_steps')} with "
                            "load_best_model_at_end (transformers' rule: the best checkpoint must have been saved)."))
        if v("lr_scheduler_type") in ("reduce_lr_on_plateau", "greedy") and v("eval_strategy") == "no":
            out.append(("training.lr_scheduler_type", f"{v('lr_scheduler_type')!r} steps on the eval metric: it needs "
                        "training.eval_strategy (and evaluation data)."))
        if "health_window" in self.model_fields_set and not self._rl:
            out.append(("training.health_window", f"sets how many steps an RL run's windowed health checks wait (training.algorithm="
                        f"{' or '.join(RL_ALGORITHMS)}); algorithm {getattr(self, 'algorithm', self._family)} checks only {', '.join(ALL_RUN_FLAGS)}, "
                        "which fire on a single step, so it would do nothing. Remove it."))
        return out

    @model_validator(mode="after")
    def _cross_field(self, info: ValidationInfo):
        raise_all(self.cross_checks(world_size=int((info.context or {}).get("world_size", 1))))
        return self

    def trl_kwargs(self) -> dict[str, Any]:
        """The TRL config arguments this section sets (explicitly or by posttrain default); posttrain's own keys stay here."""
        names = trl_fields(self._family)
        own = TrainingBase.model_fields
        return {k: getattr(self, k) for k in self.model_fields_set if k in names and k not in own}


def _training_model(algorithm: str, family: str, base: type[TrainingBase] = TrainingBase) -> type[TrainingBase]:
    fields: dict[str, Any] = {"algorithm": (Literal[algorithm], Field(description="Which post-training algorithm runs."))}
    for name, spec in trl_fields(family).items():
        if name in OWNED_ELSEWHERE or name in base.model_fields:
            continue
        fields[name] = (_annotation(spec, range_for(family, name, spec)), Field(None, description=spec["help"] or None))
    model = create_model(f"{algorithm.upper()}Training", __base__=base, __module__="posttrain.recipe.schema", **fields)  # pickle finds it there
    model._family = family
    model._rl = ALGORITHMS[algorithm].rl
    model.__doc__ = f"training section for algorithm={algorithm} (TRL {CONFIG_CLASSES[family]})"
    return model


def _spec_shape(what: str):
    """A 'package.module:attribute' spec, checked for its shape (the import happens in preflight)."""

    def check(value: str) -> str:
        from posttrain.user_code import split_spec

        split_spec(value, what)
        return value

    return AfterValidator(check)
