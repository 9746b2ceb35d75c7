"""The recipe schema: typed, strict (unknown keys are errors), one documented field at a time.

A recipe has the sections `model`, `data`, `training` and `tracking`. The `training` section is
chosen by `training.algorithm` (a tagged union), and holds posttrain's own keys plus *every* field
of that algorithm's TRL config, generated from the TRL snapshot (`trl_fields.py`): a TRL field is
typed, validated and forwarded to TRL by construction, so no key can be silently dropped. TRL
fields that posttrain drives from another section are rejected with a pointer to that section.

This module imports only pydantic and the standard library (no torch): `posttrain validate`
answers in about a second.
"""

from __future__ import annotations

import functools
import importlib
from collections.abc import Mapping
from typing import Annotated, Any, Union

from pydantic import ConfigDict, Field, create_model, model_validator

from .algorithms import ALGORITHMS, DATA_SHAPES, RL_ALGORITHMS, VISION_ALGORITHMS
from .data_section import DataSection, DatasetSpec  # noqa: F401  (importable from here, as before the split)
from .held_out_section import HeldOutSection
from .liveness import inactive_keys
from .model_section import ATTN_IMPLEMENTATIONS, HUB_KERNEL, LORA_KEYS, ModelSection  # noqa: F401
from .rl_section import RL_ONLY_HINTS, TOOL_KEYS, GRPOTrainingBase, GSPOTrainingBase, RewardSpec, RLTrainingBase  # noqa: F401
from .section import Problems, Section, raise_all
from .service_sections import S3Section, TrackingSection
from .training_section import OWNED_ELSEWHERE, TrainingBase, _training_model  # noqa: F401

class _TrainingModels(Mapping):
    """algorithm -> its training section model, built the first time it is asked for.

    Each model holds every field of a TRL config (~150) and takes pydantic ~20 ms to build; a run
    needs one of the six, so building them all on import was most of `posttrain validate`'s time.
    Membership and iteration read the names only and build nothing; `.values()` builds every one.
    """

    def __init__(self):
        self._built: dict[str, type[TrainingBase]] = {}

    def __getitem__(self, algorithm: str) -> type[TrainingBase]:
        if algorithm not in self._built:
            row = ALGORITHMS[algorithm]
            module, _, name = row.section.partition(":")
            base = getattr(importlib.import_module(module), name)  # a section module of this package (algorithms.py names it)
            self._built[algorithm] = _training_model(algorithm, row.family, base)
        return self._built[algorithm]

    def __contains__(self, algorithm) -> bool:
        return algorithm in ALGORITHMS

    def __iter__(self):
        return iter(ALGORITHMS)

    def __len__(self) -> int:
        return len(ALGORITHMS)


TRAINING_MODELS: Mapping[str, type[TrainingBase]] = _TrainingModels()
# algorithm -> TRL fields that do nothing there -> why: a view of the rows' `dead` (recipe/algorithms.py)
DEAD_FOR_ALGORITHM: dict[str, dict[str, str]] = {name: row.dead for name, row in ALGORITHMS.items()}
VISION_DATA_KEYS = ("max_image_pixels", "video_fps", "video_max_frames", "media_timeout", "media_retries")


# Data keys that only prompt-based algorithms read; elsewhere they would be silent no-ops.
PROMPT_ONLY_DATA_KEYS = ("max_prompt_length", "prompt_truncation", "use_chat_template", "system_prompt", "few_shot")
# Which `format` values and which per-dataset keys each algorithm reads: its data shape
# (recipe/algorithms.py DATA_SHAPES); a key an algorithm never reads is rejected.
DATASET_COLUMN_KEYS = tuple(dict.fromkeys(key for _formats, keys in DATA_SHAPES.values() for key in keys))


class Recipe(Section):
    """A whole training recipe. Recipes are validated with `recipe_model(algorithm)`, this class with
    that algorithm's training section (only that one is built); this base is never built itself."""

    model_config = ConfigDict(defer_build=True)
    model: ModelSection
    data: DataSection
    training: TrainingBase
    tracking: TrackingSection = Field(default_factory=TrackingSection)
    s3: S3Section | None = Field(None, description="Upload checkpoints and the final model to S3 (or an S3-compatible store).")
    held_out: HeldOutSection | None = Field(
        None, description="Score a held-out task while training (the items and scorer of `posttrain eval`), at step 0 and every "
        "held_out.every steps; the run flags a significant fall below step 0 (held_out_regression) and keeps the best model.")

    @model_validator(mode="after")
    def _cross_section(self):
        raise_all(self._storage_checks() + self._distributed_checks() + self._held_out_checks() + self._keys_used_by_this_algorithm() + self._row_templates_used()
                  + self._vision_checks() + self._evaluation_is_wired() + inactive_keys(self) + self._tracking_keys_used()
                  + self._tool_checks() + self._difficulty_checks())
        return self

    def _difficulty_checks(self) -> list[tuple[str, str]]:
        """training.difficulty_filter scores text prompts with posttrain's decoding loop (algorithms/difficulty.py)."""
        if getattr(self.training, "difficulty_filter", None) is None:
            return []
        if self.uses_images:
            return [("training.difficulty_filter", "scoring image prompts is not supported yet (posttrain's decoding loop "
                     "scores text prompts); remove training.difficulty_filter or train on text prompts.")]
        if self.training.distributed in ("zero3", "zero3_offload"):
            return [("training.difficulty_filter", f"training.distributed={self.training.distributed!r} loads the weights "
                     "sharded, and the filter's scoring generates with whole weights on each process (not supported with "
                     "ZeRO-3 yet); use ddp, zero2 or fsdp, or remove training.difficulty_filter.")]
        return []

    def _tool_checks(self) -> list[tuple[str, str]]:
        """Tools need chat prompts: TRL reads tool calls from chat completions only, and renders the tools in the chat template."""
        if not getattr(self.training, "uses_tools", False):
            return []
        key = "training.tools" if self.training.tools else "training.environment"
        if not self.data.use_chat_template:
            return [("data.use_chat_template", f"false sends plain-text prompts, but {key} needs chat prompts (TRL renders the tools "
                     "into the chat template and reads tool calls from chat completions); remove data.use_chat_template.")]
        if self.data.prompt_truncation == "left" and self.data.max_prompt_length is not None:
            return [("data.prompt_truncation", f"'left' renders prompts to plain text, which {key} cannot use (tools need chat "
                     "prompts); use data.prompt_truncation=drop.")]
        if self.uses_images:
            return [(key, "tools with image prompts are not supported by posttrain yet; use text prompts.")]
        return []

    def _held_out_checks(self) -> list[tuple[str, str]]:
        """Held-out scoring generates with whole weights on each process; its flag needs it."""
        if self.held_out is not None and self.training.distributed in ("zero3", "zero3_offload", "fsdp"):
            return [("held_out", f"training.distributed={self.training.distributed!r} shards the weights, and posttrain's held-out "
                     "scoring generates with whole weights on each process (not supported with sharding yet); use ddp or zero2, "
                     "or score the checkpoints afterwards with posttrain compare.")]
        if self.held_out is None and "held_out_regression" in self.training.stop_on:
            return [("training.stop_on", "held_out_regression fires on held-out scores, and the recipe has no held_out section, "
                     "so it would never fire; add held_out (a task to score while training) or remove the flag.")]
        return []

    def _storage_checks(self) -> list[tuple[str, str]]:
        if self.s3 is not None and self.s3.delete_local_after_upload and self.training.load_best_model_at_end:
            return [("s3.delete_local_after_upload", "s3.delete_local_after_upload deletes the checkpoints that "
                     "training.load_best_model_at_end reloads; turn one off.")]
        return []

    def _row_templates_used(self) -> list[tuple[str, str]]:
        """Row templates apply to SFT and sft_vlm (text_template to CPT too); a templated dataset reads no column key."""
        algorithm = self.training.algorithm
        ignored = () if algorithm in ("sft", "sft_vlm") else ("prompt_template", "completion_template", "system_template") + (
            () if algorithm == "cpt" else ("text_template",))
        out = []
        for section in ("datasets", "eval_datasets"):
            for i, d in enumerate(getattr(self.data, section)):
                where = f"data.{section}[{i}]"
                found = [k for k in ignored if getattr(d, k) is not None]
                if found:
                    out.append((f"{where}.{found[0]}", f"row templates apply to sft and sft_vlm (text_template also to cpt); algorithm "
                                f"{algorithm} would ignore {found[0]}. Remove it."))
                elif d.row_templates:
                    dead = [k for k in (*DATASET_COLUMN_KEYS, "format") if k in d.model_fields_set]
                    if dead:
                        out.append((f"{where}.{dead[0]}", f"{dead[0]} is not read: the row templates name the columns they "
                                    "read. Remove it."))
        return out

    def _distributed_checks(self) -> list[tuple[str, str]]:
        """training.distributed or TRL's own backend keys, not both; QLoRA cannot be sharded by ZeRO-3/FSDP."""
        from posttrain.distributed.backends import BACKEND_KEYS

        t = self.training
        out = []
        if t.distributed is not None:
            both = [f"training.{k}" for k in BACKEND_KEYS if k in t.model_fields_set]
            if both:
                out.append(("training.distributed", f"training.distributed={t.distributed!r} brings its own config (posttrain/distributed/"
                            f"configs/{t.distributed}.yaml) and {', '.join(both)} is set too; keep one: remove "
                            f"training.distributed to use your own, or remove {both[0]}."))
        quantised = self.model.load_in_4bit or self.model.load_in_8bit
        if quantised and t.distributed in ("zero3", "zero3_offload", "fsdp"):
            out.append(("training.distributed",
                f"training.distributed={t.distributed!r} with a quantised base (QLoRA): ZeRO-3 and FSDP partition every "
                "weight as a float tensor, but bitsandbytes packs 4/8-bit weights into uint8 storage that they cannot "
                "shard (it would need bnb_4bit_quant_storage set to the compute dtype, which posttrain does not do and "
                "has never run). The 4-bit base is small anyway: use training.distributed=zero2 or ddp (LoRA weights and "
                "optimizer state are what grow), or drop model.load_in_4bit for zero3."))
        return out

    def _keys_used_by_this_algorithm(self) -> list[tuple[str, str]]:
        """Data keys the algorithm never reads are errors, not silent no-ops."""
        algorithm = self.training.algorithm
        out = []
        prompts = ALGORITHMS[algorithm].data == "prompt"  # the algorithms that read prompts (RL, distillation)
        if not prompts:
            used_by_dpo = ("max_prompt_length", "prompt_truncation") if ALGORITHMS[algorithm].prompt_length else ()
            unused = [f"data.{k}" for k in PROMPT_ONLY_DATA_KEYS if k in self.data.model_fields_set and k not in used_by_dpo]
            if unused:
                readers = "/".join(a.name for a in ALGORITHMS.values() if a.data == "prompt")
                out.append((unused[0], f"{', '.join(unused)} only apply to {readers}; algorithm {algorithm} would "
                            "ignore them. Remove them."))
        set_ = self.data.model_fields_set
        if "prompt_truncation" in set_ and self.data.max_prompt_length is None and (prompts or ALGORITHMS[algorithm].prompt_length):
            out.append(("data.prompt_truncation", "says what happens to a prompt over data.max_prompt_length, which is not set, "
                        "so it would do nothing; set data.max_prompt_length or remove prompt_truncation."))
        if "few_shot" in set_ and prompts and not self.uses_images:
            templated = any(d.template != "none" for d in (*self.data.datasets, *self.data.eval_datasets))
            if not templated:
                out.append(("data.few_shot", "adds a worked example in a math template's answer format, and no dataset sets "
                            "data.datasets[i].template (gsm8k or openmathinstruct2), so it would do nothing; set a template or "
                            "remove few_shot."))
            elif not self.data.use_chat_template:
                out.append(("data.few_shot", "the worked example is a chat turn, and data.use_chat_template=false sends plain-text "
                            "prompts, so it would do nothing; remove one of them."))
        formats, columns = DATA_SHAPES[ALGORITHMS[algorithm].data]
        for section in ("datasets", "eval_datasets"):
            for i, d in enumerate(getattr(self.data, section)):
                where = f"data.{section}[{i}]"
                if d.format not in formats:
                    reads = f"always reads {formats[1]!r}" if len(formats) == 2 else "reads prompts and gold answers"
                    out.append((f"{where}.format", f"{d.format!r} would be ignored: algorithm {algorithm} {reads}; remove the key"
                                + (f" or set it to {formats[1]!r}." if len(formats) == 2 else ".")))
                dead = [k for k in DATASET_COLUMN_KEYS if k in d.model_fields_set and k not in columns]
                if dead:
                    out.append((f"{where}.{dead[0]}", f"{', '.join(dead)}: algorithm {algorithm} never reads "
                                f"{'it' if len(dead) == 1 else 'them'}; it reads {', '.join(columns)}. Remove "
                                f"{'it' if len(dead) == 1 else 'them'}."))
        return out

    @property
    def uses_images(self) -> bool:
        """A vision-language run: sft_vlm, or a dataset with image/video columns."""
        specs = [*self.data.datasets, *self.data.eval_datasets]
        return self.training.algorithm == "sft_vlm" or any(d.image_columns or d.video_columns for d in specs)

    def _vision_checks(self) -> list[tuple[str, str]]:
        """Image/video keys act only in vision-language runs; elsewhere they would be silently ignored."""
        algorithm = self.training.algorithm
        out = []
        specs = [("data.datasets", self.data.datasets), ("data.eval_datasets", self.data.eval_datasets)]
        media = [f"{key}[{i}].{k}" for key, ds in specs for i, d in enumerate(ds) for k in ("image_columns", "video_columns") if getattr(d, k)]
        if media and algorithm not in VISION_ALGORITHMS:
            hint = " Use training.algorithm=sft_vlm." if algorithm == "sft" else ""
            out.append((media[0], f"{', '.join(media)}: algorithm {algorithm} trains on text only and would ignore the images.{hint}"))
        if algorithm == "sft_vlm":
            plain = [f"{key}[{i}]" for key, ds in specs for i, d in enumerate(ds) if not (d.image_columns or d.video_columns)]
            if plain:
                out.append((f"{plain[0]}.image_columns", f"{', '.join(plain)}: training.algorithm=sft_vlm needs image_columns (or "
                            "video_columns) on every dataset, e.g. image_columns: [image]; for text-only data use algorithm sft."))
        if not self.uses_images:
            unused = [f"data.{k}" for k in VISION_DATA_KEYS if k in self.data.model_fields_set]
            unused += ["model.freeze_vision_tower"] if "freeze_vision_tower" in self.model.model_fields_set else []
            if unused:
                out.append((unused[0], f"{', '.join(unused)} only apply to runs with images (algorithm sft_vlm, or datasets with "
                            "image_columns/video_columns); this run has none. Remove them."))
        video_keys = [f"data.{k}" for k in ("video_fps", "video_max_frames") if k in self.data.model_fields_set]
        if self.uses_images and video_keys and not any(d.video_columns for _, ds in specs for d in ds):
            out.append((video_keys[0], f"{', '.join(video_keys)}: no dataset has video_columns, so no video would be sampled; "
                        "add video_columns to the dataset with videos, or remove them."))
        if self.uses_images and algorithm in RL_ALGORITHMS:
            unsupported = [f"data.{k}" for k in ("max_prompt_length", "few_shot") if k in self.data.model_fields_set]
            unsupported += [f"{key}[{i}].template" for key, ds in specs for i, d in enumerate(ds) if "template" in d.model_fields_set]
            if unsupported:
                out.append((unsupported[0], f"{', '.join(unsupported)}: not supported with image prompts (the prompt is the "
                            "question as written, with its images); remove them."))
            if "use_chat_template" in self.data.model_fields_set:
                out.append(("data.use_chat_template", "image prompts are always chats (the question and its images as one user "
                            "turn, which the processor's template renders), so it would do nothing; remove it."))
        if self.model.use_lora and not self.model.freeze_vision_tower:
            out.append(("model.freeze_vision_tower", "model.freeze_vision_tower=false with model.use_lora=true: LoRA adapts the "
                        "language model only and PEFT freezes everything else. Train the tower with use_lora=false, or keep it frozen."))
        return out

    def _tracking_keys_used(self) -> list[tuple[str, str]]:
        """tags reach wandb only; project and run_name the providers that name runs (not tensorboard).

        provider 'none' switches tracking off as a whole (`tracking.provider=none` for one run), so
        the names the section keeps for the provider are not errors there."""
        tracking, out = self.tracking, []
        if tracking.provider == "none":
            return out
        readers = {"tags": ("wandb",), "project": ("wandb", "mlflow", "trackio"), "run_name": ("wandb", "mlflow", "trackio")}
        for key, providers in readers.items():
            if key in tracking.model_fields_set and getattr(tracking, key) not in (None, []) and tracking.provider not in providers:
                out.append((f"tracking.{key}", f"only {' and '.join(providers) if len(providers) < 3 else ', '.join(providers)} "
                            f"{'reads' if len(providers) == 1 else 'read'} it; tracking.provider={tracking.provider!r} would ignore "
                            f"it. Set tracking.provider={providers[0]} or remove tracking.{key}."))
        return out

    def _evaluation_is_wired(self) -> list[tuple[str, str]]:
        """Evaluation data, eval_strategy, best-model loading and early stopping need each other."""
        t = self.training
        strategy = t.eval_strategy or "no"
        if self.data.has_eval and strategy == "no":
            return [("training.eval_strategy", "evaluation data is given but training.eval_strategy is 'no', so it would never be "
                     "used; set training.eval_strategy=steps (and eval_steps) or epoch.")]
        if strategy != "no" and not self.data.has_eval:
            return [("training.eval_strategy", f"training.eval_strategy={strategy!r} needs evaluation data: set data.eval_datasets "
                     "or data.eval_fraction.")]
        if t.early_stopping_patience is None:
            if t.early_stopping_threshold is not None:
                return [("training.early_stopping_threshold", "training.early_stopping_threshold needs training.early_stopping_patience.")]
            return []
        if strategy == "no" or not t.load_best_model_at_end:
            return [("training.early_stopping_patience", "training.early_stopping_patience needs evaluation (eval_strategy, "
                     "data.eval_datasets or eval_fraction) and training.load_best_model_at_end=true.")]
        return []


@functools.cache
def recipe_model(algorithm: str | None) -> type[Recipe]:
    """The Recipe model for one algorithm, built on first use and kept.

    With None (a recipe whose training.algorithm is missing, not a string or not one posttrain
    runs) `training` is the tagged union of every algorithm's section, so pydantic itself reports
    the bad tag, together with every other problem of the recipe, as it always has.
    """
    if algorithm is None:
        training: Any = Annotated[Union[tuple(TRAINING_MODELS.values())], Field(discriminator="algorithm")]
        name = "AnyAlgorithmRecipe"
    else:
        training, name = TRAINING_MODELS[algorithm], f"{algorithm.upper()}Recipe"
    return create_model(name, __base__=Recipe, training=(training, ...))


def schema_for(raw: dict) -> type[Recipe]:
    """The model that validates this raw recipe mapping: its algorithm's, else the union (see recipe_model)."""
    training = raw.get("training") if isinstance(raw, dict) else None
    algorithm = training.get("algorithm") if isinstance(training, dict) else None
    return recipe_model(algorithm if isinstance(algorithm, str) and algorithm in ALGORITHMS else None)


def __getattr__(name: str):
    """The lazily built classes by name (`schema.SFTTraining`, `schema.GRPORecipe`), as pickle looks them up."""
    for algorithm in ALGORITHMS:
        if name == f"{algorithm.upper()}Training":
            return TRAINING_MODELS[algorithm]
        if name == f"{algorithm.upper()}Recipe":
            return recipe_model(algorithm)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
