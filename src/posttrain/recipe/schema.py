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
from collections.abc import Mapping
from typing import Annotated, Any, Literal, Union

from pydantic import AfterValidator, BaseModel, BeforeValidator, ConfigDict, Field, SecretStr, StrictBool, StrictInt, ValidationInfo, create_model, model_validator

from posttrain.monitoring.health import ALL_RUN_FLAGS, FLAGS

from .liveness import inactive_keys
from .ranges import range_for
from .trl_fields import CONFIG_CLASSES, trl_fields


class Problems(ValueError):
    """Several independent problems found by one cross-field check, each with its own key path.

    Pydantic stops a model's checks at the first ValueError; a check that gathers every problem it
    sees and raises them together lets `posttrain validate` report them in one pass.
    """

    def __init__(self, items: list[tuple[str, str]]):
        self.items = items  # (key path, message)
        super().__init__("; ".join(f"{k}: {m}" for k, m in items))


def raise_all(items: list[tuple[str, str]]) -> None:
    if items:
        raise Problems(items)


class Section(BaseModel):
    """Base of every recipe section: unknown keys are errors, values are validated on assignment."""

    model_config = ConfigDict(extra="forbid", validate_default=True, validate_assignment=True)


# --------------------------------------------------------------------------------------- model
class ModelSection(Section):
    base_model_name: str = Field(
        min_length=1,
        description="What to train: a hub id ('Qwen/Qwen2.5-0.5B-Instruct'), a local model directory, a PEFT "
        "adapter directory (its base is loaded and the adapter keeps training), a GGUF file ('models/x.Q4_K_M.gguf', "
        "or a folder holding one; dequantized to float32 once per machine, needs the gguf package), or 'tiny:[arch][-size]' for a "
        "small random model built locally in seconds (e.g. 'tiny:', 'tiny:llama-2m'; offline tests and demos)."
    )
    revision: str | None = Field(None, description="Hub revision (branch, tag or commit) of the model.")
    tokenizer_name: str | None = Field(None, description="Load the tokenizer from here instead of base_model_name.")
    trust_remote_code: bool = Field(False, description="Allow model code from the hub to run. Off by default: it executes downloaded code.")
    torch_dtype: Literal["auto", "float32", "bfloat16", "float16"] = Field(
        "auto", description="Weights' dtype. 'auto': bfloat16 on CUDA devices that support it, float32 on CPU and MPS."
    )
    attn_implementation: str | None = Field(
        None,
        description="Attention kernel: 'eager', 'sdpa' (transformers' default when unset: PyTorch's fused attention, "
        "on every device), 'flex_attention', 'flash_attention_2' / '_3' / '_4' (CUDA only, each needs its package: "
        "flash-attn, flash-attn-3, flash-attn-4), 'paged|eager', or a hub kernel 'org/repo' (needs the kernels package). "
        "Checked against the machine by `posttrain validate`.",
    )
    use_lora: bool = Field(False, description="Train a LoRA adapter instead of all weights; checkpoints then hold only the adapter.")
    lora_r: StrictInt = Field(16, ge=1, description="LoRA rank.")
    lora_alpha: StrictInt = Field(32, ge=1, description="LoRA scaling numerator (scale = alpha / r).")
    lora_dropout: float = Field(0.05, ge=0.0, lt=1.0, description="Dropout on the LoRA input.")
    lora_target_modules: list[str] | Literal["all-linear"] = Field(
        "all-linear", description="Modules that get adapters: 'all-linear' or a list of names such as [q_proj, v_proj]."
    )
    lora_modules_to_save: list[str] = Field(
        default_factory=list,
        description="Modules trained and saved in full beside the adapter (e.g. [embed_tokens, lm_head]). Empty by "
        "default so an adapter holds only LoRA weights; each entry can add hundreds of MB per checkpoint.",
    )
    load_in_4bit: bool = Field(False, description="QLoRA: load the frozen base in 4 bits (bitsandbytes, CUDA only). Needs use_lora.")
    load_in_8bit: bool = Field(False, description="Load the frozen base in 8 bits (bitsandbytes, CUDA only). Needs use_lora.")
    bnb_4bit_quant_type: Literal["nf4", "fp4"] = Field("nf4", description="4-bit data type; nf4 is QLoRA's.")
    bnb_4bit_use_double_quant: bool = Field(True, description="Quantise the quantisation constants too (QLoRA paper).")
    freeze_vision_tower: bool = Field(
        True,
        description="Vision-language runs (sft_vlm, or GRPO on image prompts): keep the vision tower's weights fixed and "
        "train the projector and language model. On by default: the tower is pre-trained on far more images than a "
        "fine-tuning set, and freezing it halves the memory it needs. With use_lora only the language model gets "
        "adapters, so the tower is always frozen.",
    )

    @model_validator(mode="after")
    def _quantisation_needs_lora(self):
        problems = []
        attn = self.attn_implementation
        if attn is not None and attn not in ATTN_IMPLEMENTATIONS and not HUB_KERNEL.fullmatch(attn):
            import difflib

            close = difflib.get_close_matches(attn, ATTN_IMPLEMENTATIONS, n=1)
            problems.append(("model.attn_implementation", f"{attn!r} is not an attention implementation transformers knows."
                             + (f" Did you mean {close[0]!r}?" if close else "") + f" Choose one of {', '.join(ATTN_IMPLEMENTATIONS)}, "
                             "a hub kernel 'org/repo', or remove the key (sdpa)."))
        if self.load_in_4bit and self.load_in_8bit:
            problems.append(("model.load_in_8bit", "load_in_4bit and load_in_8bit are both true; choose one (4-bit is QLoRA)."))
        if (self.load_in_4bit or self.load_in_8bit) and not self.use_lora:
            problems.append(("model.use_lora", "a quantised base cannot be trained in full: set model.use_lora=true (QLoRA) or turn quantisation off."))
        dead = [k for k in LORA_KEYS if k in self.model_fields_set]
        if dead and not self.use_lora:
            problems.append((f"model.{dead[0]}", f"{', '.join('model.' + k for k in dead)} only apply with model.use_lora=true, which "
                             "is false, so they would do nothing; set use_lora=true or remove them."))
        raise_all(problems)
        return self


LORA_KEYS = ("lora_r", "lora_alpha", "lora_dropout", "lora_target_modules", "lora_modules_to_save")
# transformers 5's names (modeling_utils: "eager" + ALL_ATTENTION_FUNCTIONS.valid_keys()); a hub kernel
# is 'org/repo' with an optional ':function' or '@revision' (transformers' kernels pattern).
ATTN_IMPLEMENTATIONS = ("eager", "sdpa", "flex_attention", "flash_attention_2", "flash_attention_3", "flash_attention_4", "paged|eager")
HUB_KERNEL = __import__("re").compile(r"[\w.-]+/[\w.-]+(@[\w.-]+)?(:[\w.]+)?")


# ---------------------------------------------------------------------------------------- data
class DatasetSpec(Section):
    name: str = Field(min_length=1, description="A hub dataset id, or a local .jsonl/.json/.csv/.parquet file.")
    subset: str | None = Field(None, description="Hub configuration name (e.g. 'main' for openai/gsm8k).")
    split: str = Field("train", description="Split, with optional slice: 'train', 'train[:64]', 'test[10%:]'.")
    format: Literal["auto", "text", "prompt_completion", "messages", "preference"] = Field(
        "auto",
        description="How rows are read. 'auto' picks 'messages' if messages_column exists, else 'prompt_completion' if "
        "prompt_column and completion_column exist, else 'text'. CPT always reads 'text', DPO 'preference'.",
    )
    text_column: str = Field("text", description="Column with raw text (format 'text').")
    prompt_column: str = Field("prompt", description="Column with the prompt (format 'prompt_completion').")
    completion_column: str = Field("completion", description="Column with the response the model learns (format 'prompt_completion').")
    messages_column: str = Field("messages", description="Column with a chat: a list of {role, content} (format 'messages').")
    tools_column: str = Field("tools", description="Optional column with the function schemas offered in a chat (format 'messages'); used when present.")
    chosen_column: str = Field("chosen", description="DPO: the preferred response (text, or chat messages).")
    rejected_column: str = Field("rejected", description="DPO: the dispreferred response (text, or chat messages).")
    max_samples: StrictInt | None = Field(None, ge=1, description="Use at most this many rows (after dropping bad ones), shuffled with training.seed.")
    weight: float | None = Field(
        None, gt=0.0,
        description="Mixture weight: with weights, rows are drawn from the datasets in these proportions (seeded) until "
        "every dataset has been seen once, instead of concatenating them. Unset means 1 when another dataset has one.",
    )
    answer_column: str = Field("answer", description="GRPO/GSPO: column with the gold answer that rewards compare against (arrives as `answer`).")
    image_columns: list[str] = Field(
        default_factory=list,
        description="Vision-language runs: columns holding each row's images. A cell is one image or a list: a path "
        "(relative to the data file), bytes, base64 / data URI, a parquet-embedded image, an http(s) URL or an s3:// "
        "URI. Images go where the text has image placeholders ('<image>' in a string, {type: image} in a content "
        "list), else before the first user turn, in column order.",
    )
    video_columns: list[str] = Field(
        default_factory=list,
        description="Vision-language runs: columns holding each row's videos (a path, URL or list of them). Each video "
        "becomes its sampled frames (data.video_fps / data.video_max_frames), given to the model as images where "
        "'<video>' or {type: video} stands, else after the row's images.",
    )
    template: Literal["none", "gsm8k", "openmathinstruct2"] = Field(
        "none",
        description="GRPO/GSPO: a dataset template. 'gsm8k': prompt from `question`, gold after '####' in `answer`, "
        "system prompt asking for <think>...</think><answer>...</answer>. 'openmathinstruct2': prompt from `problem`, "
        "gold from `expected_answer`, same system prompt. Column keys you set explicitly win.",
    )

    # Row templates (SFT/CPT/sft_vlm): Python str.format() over the row's columns, e.g. "Q: {question}\nA: {answer}".
    text_template: str | None = Field(
        None,
        description="SFT/CPT/sft_vlm: build each row's training text from its columns with Python's str.format ('{question} "
        "{answer}'; '{{' for a literal brace); loss on the whole text (sft_vlm: the text is one user turn with the row's "
        "images, FAI-RL's flat mode). A row missing a named column is an error naming it.",
    )
    prompt_template: str | None = Field(
        None,
        description="SFT/sft_vlm: build each row as a chat from its columns: this str.format template is the user turn (with "
        "the row's images, for sft_vlm) and completion_template the assistant turn (loss on the assistant turn only, unless "
        "training.completion_only_loss is false). Needs completion_template.",
    )
    completion_template: str | None = Field(None, description="SFT/sft_vlm: the assistant turn's str.format template (with prompt_template).")
    system_template: str | None = Field(None, description="SFT/sft_vlm: a system turn before the user turn, a str.format template too (with prompt_template).")

    @model_validator(mode="after")
    def _row_templates(self):
        from string import Formatter

        set_ = {k for k in ("text_template", "prompt_template", "completion_template", "system_template") if getattr(self, k) is not None}
        if "text_template" in set_ and set_ - {"text_template"}:
            raise ValueError("text_template builds one text per row; prompt_template/completion_template/system_template build a chat. Use one kind.")
        if ("prompt_template" in set_) != ("completion_template" in set_):
            raise ValueError("prompt_template and completion_template go together (the user turn and the assistant turn).")
        if "system_template" in set_ and "prompt_template" not in set_:
            raise ValueError("system_template needs prompt_template and completion_template.")
        for key in sorted(set_):
            try:
                names = [f for _, f, _, _ in Formatter().parse(getattr(self, key)) if f is not None]
            except ValueError as e:
                raise ValueError(f"{key} is not a valid str.format template ({e}); write literal braces as '{{{{' and '}}}}'.") from None
            bad = [n for n in names if not n.isidentifier()]
            if bad:
                raise ValueError(f"{key}: placeholder {{{bad[0]}}} is not a column name; placeholders are plain column names like {{question}} "
                                 "(literal braces are written '{{{{' and '}}}}').")
        return self

    @property
    def row_templates(self) -> dict[str, str]:
        return {k: getattr(self, k) for k in ("text_template", "system_template", "prompt_template", "completion_template") if getattr(self, k) is not None}

    @model_validator(mode="after")
    def _template_columns(self):
        from posttrain.data.templates import TEMPLATE_COLUMNS

        for key, column in TEMPLATE_COLUMNS.get(self.template, {}).items():
            if key not in self.model_fields_set:
                self.__dict__[key] = column  # a preset for keys left unset; bypasses re-validation
        return self


class DataSection(Section):
    datasets: list[DatasetSpec] = Field(min_length=1, description="Training data; several datasets are concatenated.")
    # Prompt handling for GRPO/GSPO (rejected for algorithms that do not use prompts this way).
    max_prompt_length: StrictInt | None = Field(
        None, ge=1,
        description="GRPO/GSPO: longest prompt in tokens, after the chat template. TRL 1.x has no such key; posttrain "
        "enforces it in the data step and reports how many prompts it dropped or truncated.",
    )
    prompt_truncation: Literal["drop", "left"] = Field(
        "drop", description="What happens to a prompt over max_prompt_length: 'drop' the row, or keep its last tokens ('left')."
    )
    use_chat_template: bool = Field(
        True, description="GRPO/GSPO: wrap plain-text prompts as a user message so the model's chat template applies (when it has one)."
    )
    system_prompt: str | None = Field(None, description="GRPO/GSPO: system message for every prompt (default: the template's, if any).")
    few_shot: bool = Field(False, description="GRPO/GSPO with a math template: add one worked example in the answer format before the question.")
    # Images and videos (vision-language runs).
    max_image_pixels: StrictInt | None = Field(
        None, ge=1,
        description="Vision-language runs: downscale any image with more pixels than this (width x height), keeping its "
        "aspect ratio, when it is read. Bounds the image tokens per row (and so memory) for processors that keep the "
        "native resolution (Qwen2-VL: one token per 28x28 pixels).",
    )
    video_fps: float | None = Field(None, gt=0.0, description="Vision-language runs: frames sampled per second of video (default: the media loader's).")
    media_timeout: float | None = Field(
        None, gt=0.0, description="Vision-language runs: seconds to connect to, and between reads of, an http(s) image or video "
        "download (default 30).")
    media_retries: StrictInt | None = Field(
        None, ge=0, description="Vision-language runs: extra attempts for an image or video download that failed in a way worth "
        "retrying (timeouts, connection errors, 408/429/5xx), with exponential backoff (default 3); a row whose media still "
        "fail is dropped and counted.")
    video_max_frames: StrictInt | None = Field(None, ge=1, description="Vision-language runs: at most this many frames per video, evenly spaced.")
    max_drop_fraction: float = Field(
        0.1, ge=0.0, le=1.0,
        description="Largest share of a dataset's rows that may be dropped before training (unreadable media, empty "
        "fields, gold answers a reward cannot compare, prompts over max_prompt_length, rows with no token to train "
        "on); a dataset that loses more is an error naming each reason and count, before training starts. 0.1: a few "
        "broken rows are normal, but a tenth of the data gone is a different dataset (every long prompt, every "
        "non-integer answer, every row of a broken media folder) trained on silently. 1 turns the check off.",
    )
    # Evaluation during training: nothing is held out unless the recipe asks.
    eval_datasets: list[DatasetSpec] = Field(default_factory=list, description="Evaluation data, read like `datasets` (needs training.eval_strategy).")
    eval_fraction: float | None = Field(
        None, gt=0.0, lt=1.0, description="Hold out this fraction of the training data (shuffled with training.seed) for evaluation instead."
    )

    @model_validator(mode="after")
    def _one_eval_source(self):
        if self.eval_datasets and self.eval_fraction is not None:
            raise ValueError("data.eval_datasets and data.eval_fraction are both set; give evaluation data one way.")
        return self

    @property
    def has_eval(self) -> bool:
        return bool(self.eval_datasets) or self.eval_fraction is not None


# ------------------------------------------------------------------------------------ tracking
class TrackingSection(Section):
    provider: Literal["none", "wandb", "tensorboard", "mlflow", "trackio"] = Field("none", description="Where metrics go besides output_dir/metrics.jsonl.")
    project: str | None = Field(None, description="Project name at the provider.")
    run_name: str | None = Field(None, description="Run name (default: the output directory's name).")
    tags: list[str] = Field(default_factory=list, description="Tags for the run (wandb).")
    mode: Literal["online", "offline"] = Field("online", description="wandb only: 'offline' logs locally with no network; sync later.")
    api_key: SecretStr | None = Field(None, description="Provider API key. Prefer the environment (WANDB_API_KEY); never written to logs or files.")

    @model_validator(mode="after")
    def _key_needs_a_service(self):
        if self.api_key is not None and self.provider in ("none", "tensorboard"):
            raise ValueError(f"tracking.api_key is set but provider {self.provider!r} uses no key; remove it.")
        if self.mode == "offline" and self.provider != "wandb":
            raise ValueError("tracking.mode=offline applies to wandb only.")
        return self


# ---------------------------------------------------------------------------------- storage
class S3Section(Section):
    bucket: str = Field(min_length=1, description="Bucket that receives checkpoints and the final model.")
    prefix: str = Field("", description="Key prefix of this run: s3://bucket/prefix/checkpoint-N/ and .../final/.")
    region: str | None = Field(None, description="Region (default: the AWS environment's).")
    endpoint_url: str | None = Field(None, description="An S3-compatible server (MinIO, Ceph, R2, ...); also used for s3:// model and data sources.")
    upload_checkpoints: bool = Field(True, description="Upload each checkpoint in the background as it is saved (training does not wait).")
    upload_final_model: bool = Field(True, description="Upload the final model to .../final/ after it is saved; the run waits for all uploads and reports them.")
    delete_local_after_upload: bool = Field(
        False, description="Delete a local checkpoint once its upload is verified complete (every file present with the right size)."
    )

    @model_validator(mode="after")
    def _delete_needs_upload(self):
        if self.delete_local_after_upload and not self.upload_checkpoints:
            raise ValueError("s3.delete_local_after_upload needs s3.upload_checkpoints=true (nothing would be uploaded before deleting).")
        return self


# ------------------------------------------------------------------------------------ training
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

# TRL fields that exist in an algorithm's config but do nothing there: setting them (to any value) is
# an error with the reason, instead of a key that looks live and is not.
# Found by tests/e2e/test_trl_fields_read.py, which records the fields each trainer reads in a real run.
_NO_METRICS = ("shapes what a compute_metrics function receives, and posttrain's trainers have none: evaluation during "
               "training reports the loss and TRL's own metrics.")
_VISION_UNPREPARED = ("TRL 1.16 skips dataset preparation for vision datasets (the processor renders each batch in the "
                      "collator), which is where this key acts.")
_OWN_LOSS = ("counts label tokens across processes for transformers' loss, which this trainer replaces with its own "
             "(TRL 1.16's %s computes and normalises its loss itself).")
_EVERY_ALGORITHM = {
    "local_rank": "a field transformers keeps for old launchers' command lines and never reads (the rank comes from the "
                  "LOCAL_RANK environment variable torchrun sets).",
    "prediction_loss_only": _NO_METRICS, "include_for_metrics": _NO_METRICS, "batch_eval_metrics": _NO_METRICS,
}
DEAD_FOR_ALGORITHM: dict[str, dict[str, str]] = {
    "cpt": dict(_EVERY_ALGORITHM),
    "sft": dict(_EVERY_ALGORITHM),
    "dpo": {**_EVERY_ALGORITHM,
            "padding_free": "TRL 1.16's DPOTrainer has padding-free batches 'temporarily unavailable' (dpo_trainer.py): "
            "it warns and pads every batch whatever this key says. posttrain's DPO pads each batch to its longest pair only.",
            "average_tokens_across_devices": _OWN_LOSS % "DPOTrainer"},
    "sft_vlm": {**_EVERY_ALGORITHM,
                "padding_free": "TRL 1.16 refuses padding-free batches for vision datasets (images are expanded into tokens "
                "by the processor per batch); vision-language batches are always padded.",
                "packing": "TRL 1.16 refuses packing for vision datasets; vision-language batches are always padded.",
                "packing_strategy": "TRL 1.16 refuses packing for vision datasets; vision-language batches are always padded.",
                "eval_packing": "TRL 1.16 refuses packing for vision datasets; vision-language batches are always padded.",
                "dataset_num_proc": _VISION_UNPREPARED, "shuffle_dataset": _VISION_UNPREPARED,
                "truncation_mode": "vision batches are cut at max_length by the collator, keeping the start (TRL refuses keep_end).",
                "pad_token": "the processor's own pad token pads vision batches (posttrain's collator is the processor's)."},
    **{algorithm: {**_EVERY_ALGORITHM,
                   "average_tokens_across_devices": _OWN_LOSS % "GRPOTrainer",
                   "train_sampling_strategy": "GRPOTrainer draws its batches with its own sampler (each prompt repeated "
                   "num_generations times), so transformers' sampling strategies never apply.",
                   "length_column_name": "GRPOTrainer draws its batches with its own sampler, so transformers' length-grouped "
                   "sampling, the only reader of this column, never runs."} for algorithm in ("grpo", "gspo")},
}

_KIND_TYPES: dict[str, Any] = {"bool": StrictBool, "int": StrictInt, "float": float, "str": str, "dict": dict[str, Any], "any": Any}
_ITEM_TYPES: dict[str | None, Any] = {None: Any, "bool": bool, "int": int, "float": float, "str": str}


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

    early_stopping_patience: StrictInt | None = Field(
        None, ge=1,
        description="Stop when the eval metric (metric_for_best_model, default eval loss) has not improved for this many "
        "evaluations. Needs evaluation data, eval_strategy and load_best_model_at_end=true.",
    )
    early_stopping_threshold: float | None = Field(None, ge=0.0, description="Smallest change that counts as an improvement (with early_stopping_patience).")
    stop_on: list[Literal[tuple(FLAGS)]] = Field(
        default_factory=list,
        description="Health flags that stop the run (saving a checkpoint where it stops), e.g. [no_learning_signal]: "
        "every flag is always checked and printed; these also end the run. See README 'Run health' for each flag's threshold.",
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
        for key, why in DEAD_FOR_ALGORITHM.get(getattr(self, "algorithm", ""), {}).items():
            if key in self.model_fields_set:
                out.append((f"training.{key}", f"does nothing for algorithm {self.algorithm}: {why} Remove it."))
        for kind in ("eval", "save", "logging"):  # x_steps is read only with x_strategy='steps'
            strategy = v(f"{kind}_strategy")
            if f"{kind}_steps" in self.model_fields_set and getattr(self, f"{kind}_steps") is not None and strategy != "steps":
                out.append((f"training.{kind}_steps", f"is only read with training.{kind}_strategy=steps, but that is "
                            f"{strategy!r}, so it would do nothing; set {kind}_strategy=steps or remove {kind}_steps (an override: "
                            f"training.{kind}_steps=null)."))
        rl_only = [f for f in self.stop_on if f not in ALL_RUN_FLAGS]
        if rl_only and self._family != "grpo":
            out.append(("training.stop_on", f"{', '.join(rl_only)} watch(es) GRPO/GSPO telemetry and would never fire in a "
                        f"{self._family} run; keep only {', '.join(ALL_RUN_FLAGS)} here."))
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
        if "health_window" in self.model_fields_set and self._family != "grpo":
            out.append(("training.health_window", f"sets how many steps GRPO/GSPO's windowed health checks wait (training.algorithm="
                        f"grpo or gspo); algorithm {getattr(self, 'algorithm', self._family)} checks only {', '.join(ALL_RUN_FLAGS)}, "
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
    model = create_model(f"{algorithm.upper()}Training", __base__=base, **fields)
    model._family = family
    model.__doc__ = f"training section for algorithm={algorithm} (TRL {CONFIG_CLASSES[family]})"
    return model


def _spec_shape(what: str):
    """A 'package.module:attribute' spec, checked for its shape (the import happens in preflight)."""

    def check(value: str) -> str:
        from posttrain.user_code import split_spec

        split_spec(value, what)
        return value

    return AfterValidator(check)


# Keys of GRPO/GSPO's training section that another algorithm's user may reach for; the unknown-key
# error says why they do not apply there.
RL_ONLY_HINTS = {
    "tools": "tools are called while GRPO/GSPO generate rollouts (training.algorithm=grpo or gspo); to teach tool calls "
             "with {algorithm}, put them in the data: chats whose assistant turns have tool_calls, tool turns with the "
             "results, and a `tools` column with the schemas (posttrain.data.synthetic writes such chats).",
    "environment": "environments are acted in while GRPO/GSPO generate rollouts (training.algorithm=grpo or gspo); "
                   "{algorithm} trains on recorded data.",
    "rewards": "rewards score rollouts in GRPO/GSPO (training.algorithm=grpo or gspo); {algorithm} has no rewards.",
}


TOOL_KEYS = ("tools", "environment", "environment_kwargs", "tool_timeout", "tool_result_max_chars", "max_tool_calling_iterations")


class RewardSpec(BaseModel):
    """One reward: a built-in name, `http`, or `package.module:function`, its weight, and its options."""

    model_config = ConfigDict(extra="allow")  # the options: checked against the function's parameters
    name: str = Field(min_length=1, description="Built-in (answer_match, format, numeric_answer, loose_match, http) or 'package.module:function'.")
    weight: float = Field(1.0, description="Weight of this reward in the sum TRL normalises per group.")

    @property
    def options(self) -> dict[str, Any]:
        return dict(self.model_extra or {})

    @model_validator(mode="after")
    def _known_reward(self):
        if ":" not in self.name:  # built-ins are checked now; import paths when the run starts
            from posttrain.rewards.builtin import get_reward

            get_reward(self.name, **self.options)  # raises ValueError naming the problem
        return self


class RLTrainingBase(TrainingBase):
    @model_validator(mode="after")
    def _vllm_keys_need_vllm(self):
        """vllm_mode is TRL's free text, checked here."""
        if self.use_vllm and self.vllm_mode is not None and self.vllm_mode not in ("colocate", "server"):
            raise ValueError(f"training.vllm_mode={self.vllm_mode!r}: TRL knows 'colocate' (vLLM inside each training "
                             "process) and 'server' (a separate `posttrain vllm-serve`).")
        if self.use_vllm and "rollout_engine" in self.model_fields_set:
            raise ValueError("training.rollout_engine chooses between posttrain's and transformers' generation; with "
                             "training.use_vllm=true vLLM generates and it would do nothing. Remove one of them.")
        return self  # vllm_* keys without use_vllm: recipe.liveness

    rollout_engine: Literal["posttrain", "transformers"] = Field(
        "posttrain",
        description="What generates the completions when use_vllm is off. 'posttrain': posttrain's decoding loop "
        "(generation/decoding.py: CPU weights pre-packed and kept while unchanged, LoRA without dropout, each prompt "
        "prefilled once for its group, no cache copies; the same tokens as transformers' generate up to float32 rounding, sampled without LoRA "
        "dropout), falling back to generate for settings it does not implement (said at start-up). 'transformers': "
        "TRL's own model.generate. README 'Speed of rollouts' has the measurements.",
    )
    rewards: list[RewardSpec] = Field(
        min_length=1,
        description="Rewards summed (with weights) into each completion's score. Dataset columns reach each reward "
        "as keyword lists; the gold answer arrives as `answer`.",
    )
    # Agentic RL: tools and environments the policy acts through while it generates (TRL's GRPOTrainer
    # tools= / environment_factory=), run isolated by posttrain.tools.
    tools: list[Annotated[str, _spec_shape("tool")]] = Field(
        default_factory=list,
        description="Functions the policy may call while it generates, as 'package.module:function' (imported like "
        "custom rewards). Each needs type hints and a Google-style docstring: the model reads a schema built from "
        "them. Calls run in a worker process (a tool that hangs, crashes or exits costs that call only); a failure "
        "reaches the model as the tool's error message and is counted (tools/errors, tools/timeouts). The chat "
        "template must render tools and tool calls; multi-turn rollouts stop after max_tool_calling_iterations "
        "turns of calls (posttrain's default 5; TRL's is unbounded).",
    )
    environment: Annotated[str, _spec_shape("environment")] | None = Field(
        None,
        description="'package.module:Class' whose public methods are tools with state per rollout. One instance per "
        "rollout, each in its own worker process, built with environment_kwargs: reset(**row) starts a rollout (a "
        "returned string is appended to the prompt), get_reward() (optional) scores it as its own reward channel "
        "named after the class, weight 1. Rewards receive the instances as `environments` and may read their "
        "attributes. A timed-out or crashed instance is rebuilt for the next rollout.",
    )
    environment_kwargs: dict[str, Any] = Field(default_factory=dict, description="Keyword arguments for the environment's constructor.")
    tool_timeout: float = Field(
        10.0, gt=0,
        description="Seconds one tool call (or environment method) may run; past that its worker is stopped and the "
        "model reads a timeout error (counted in tools/timeouts; the tool_timeouts health flag fires).",
    )
    tool_result_max_chars: StrictInt = Field(
        4000, ge=1,
        description="Longest tool result the model reads, in characters; a longer one is cut, with a note giving its "
        "length (counted in tools/truncated). Results count toward max_completion_length: TRL drops a tool turn "
        "that would overflow it.",
    )
    chat_template_path: str | None = Field(
        None,
        description="A Jinja chat template file to use instead of the tokenizer's; it is saved with the trained model. "
        "For tools on a ChatML model whose template ignores them (SmolLM2): recipes/templates/chatml-tools.jinja.",
    )

    def trl_kwargs(self) -> dict[str, Any]:
        return {**super().trl_kwargs(), "reward_weights": [r.weight for r in self.rewards]}

    @property
    def uses_tools(self) -> bool:
        return bool(self.tools or self.environment)

    def cross_checks(self, world_size: int = 1) -> list[tuple[str, str]]:
        """TRL's own checks, at load time and with the numbers: a generation batch holds whole groups."""
        out = super().cross_checks(world_size)
        if not self.uses_tools:
            dead = [k for k in TOOL_KEYS[2:] if k in self.model_fields_set]
            if dead:
                out.append((f"training.{dead[0]}", f"{', '.join('training.' + k for k in dead)} only act(s) with training.tools "
                            "or training.environment, and this recipe has neither; add them or remove the key(s)."))
        twice = sorted({t for t in self.tools if self.tools.count(t) > 1})
        if twice:
            out.append(("training.tools", f"{twice[0]} is listed twice; list each tool once."))
        value = self.value
        num_generations = value("num_generations")
        if num_generations is not None and num_generations < 2:
            return out  # the range check names it
        world = world_size
        batch = value("per_device_train_batch_size") * world
        if value("generation_batch_size") is not None and value("steps_per_generation") is not None:
            out.append(("training.generation_batch_size", "training.generation_batch_size and training.steps_per_generation are both set; set one (the other follows)."))
            return out
        gen_batch = value("generation_batch_size") or batch * (value("steps_per_generation") or value("gradient_accumulation_steps"))
        if gen_batch % batch:
            out.append(("training.generation_batch_size", f"training.generation_batch_size={gen_batch} must be a multiple of per_device_train_batch_size x processes = {batch}."))
        elif num_generations and gen_batch % num_generations:
            out.append(("training.num_generations",
                f"the generation batch ({gen_batch} = per_device_train_batch_size {value('per_device_train_batch_size')} x "
                f"{world} process(es) x steps_per_generation {gen_batch // batch}) must hold whole groups of "
                f"num_generations={num_generations}; make one a multiple of the other."
            ))
        return out


class GRPOTrainingBase(RLTrainingBase):
    def cross_checks(self, world_size: int = 1) -> list[tuple[str, str]]:
        out = super().cross_checks(world_size)
        level = self.importance_sampling_level or "token"
        if level == "token" and self.epsilon is not None and self.epsilon < 0.01:
            out.append(("training.epsilon",
                f"training.epsilon={self.epsilon} is GSPO's sequence-level clipping; with importance_sampling_level=token "
                "it clips almost every token. Set training.algorithm=gspo, or use a token-level epsilon such as 0.2."
            ))
        return out


class GSPOTrainingBase(RLTrainingBase):
    def cross_checks(self, world_size: int = 1) -> list[tuple[str, str]]:
        out = super().cross_checks(world_size)
        if self.importance_sampling_level != "sequence":
            out.append(("training.importance_sampling_level", 
                f"training.importance_sampling_level={self.importance_sampling_level!r}: GSPO is defined by sequence-level "
                "importance ratios. Remove the key (GSPO's preset sets 'sequence') or use training.algorithm=grpo."
            ))
        gas = self.gradient_accumulation_steps or 1
        steps = self.steps_per_generation or gas
        iterations = self.num_iterations or 1
        if steps <= gas and iterations <= 1 and self.generation_batch_size is None:
            out.append(("training.steps_per_generation",
                f"this GSPO run is on-policy (steps_per_generation={steps} <= gradient_accumulation_steps={gas}, "
                f"num_iterations={iterations}): the sequence-level ratio is exactly 1 and GSPO equals GRPO without "
                "clipping. Set steps_per_generation to a multiple of gradient_accumulation_steps (the preset uses 4x) "
                "or num_iterations > 1."
            ))
        return out


# algorithm -> (its TRL config family, the base of its training section); an algorithm joins here
# once it trains end to end.
ALGORITHMS: dict[str, tuple[str, type[TrainingBase]]] = {
    "cpt": ("sft", TrainingBase), "sft": ("sft", TrainingBase), "sft_vlm": ("sft", TrainingBase), "dpo": ("dpo", TrainingBase),
    "grpo": ("grpo", GRPOTrainingBase), "gspo": ("grpo", GSPOTrainingBase),
}


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
            family, base = ALGORITHMS[algorithm]
            self._built[algorithm] = _training_model(algorithm, family, base)
        return self._built[algorithm]

    def __contains__(self, algorithm) -> bool:
        return algorithm in ALGORITHMS

    def __iter__(self):
        return iter(ALGORITHMS)

    def __len__(self) -> int:
        return len(ALGORITHMS)


TRAINING_MODELS: Mapping[str, type[TrainingBase]] = _TrainingModels()
RL_ALGORITHMS = ("grpo", "gspo")
# Algorithms that read image/video columns: sft_vlm always has them; GRPO/GSPO when the prompts have images.
VISION_ALGORITHMS = ("sft_vlm", "grpo", "gspo")
VISION_DATA_KEYS = ("max_image_pixels", "video_fps", "video_max_frames", "media_timeout", "media_retries")


# Data keys that only prompt-based algorithms read; elsewhere they would be silent no-ops.
PROMPT_ONLY_DATA_KEYS = ("max_prompt_length", "prompt_truncation", "use_chat_template", "system_prompt", "few_shot")
# Which `format` values and which per-dataset keys each algorithm reads ("rl" = grpo and gspo); a
# key an algorithm never reads is rejected (data/formats.py and data/prompts.py are the readers).
FORMATS_READ = {"cpt": ("auto", "text"), "dpo": ("auto", "preference"), "rl": ("auto",),
                "sft": ("auto", "text", "prompt_completion", "messages", "preference"),
                "sft_vlm": ("auto", "prompt_completion", "messages")}
DATASET_COLUMN_KEYS = ("text_column", "prompt_column", "completion_column", "messages_column", "tools_column", "chosen_column",
                       "rejected_column", "answer_column", "template")
COLUMNS_READ = {
    "cpt": ("text_column",),
    "sft": ("text_column", "prompt_column", "completion_column", "messages_column", "tools_column"),
    "sft_vlm": ("prompt_column", "completion_column", "messages_column"),
    "dpo": ("prompt_column", "chosen_column", "rejected_column"),
    "rl": ("prompt_column", "answer_column", "template"),
}


class Recipe(Section):
    """A whole training recipe. Recipes are validated with `recipe_model(algorithm)`, this class with
    that algorithm's training section (only that one is built); this base is never built itself."""

    model_config = ConfigDict(defer_build=True)
    model: ModelSection
    data: DataSection
    training: TrainingBase
    tracking: TrackingSection = Field(default_factory=TrackingSection)
    s3: S3Section | None = Field(None, description="Upload checkpoints and the final model to S3 (or an S3-compatible store).")

    @model_validator(mode="after")
    def _cross_section(self):
        raise_all(self._storage_checks() + self._distributed_checks() + self._keys_used_by_this_algorithm() + self._row_templates_used()
                  + self._vision_checks() + self._evaluation_is_wired() + inactive_keys(self) + self._tracking_keys_used()
                  + self._tool_checks())
        return self

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
        if algorithm not in RL_ALGORITHMS:
            used_by_dpo = ("max_prompt_length", "prompt_truncation") if algorithm == "dpo" else ()
            unused = [f"data.{k}" for k in PROMPT_ONLY_DATA_KEYS if k in self.data.model_fields_set and k not in used_by_dpo]
            if unused:
                out.append((unused[0], f"{', '.join(unused)} only apply to {'/'.join(RL_ALGORITHMS)}; algorithm {algorithm} would "
                            "ignore them. Remove them."))
        set_ = self.data.model_fields_set
        if "prompt_truncation" in set_ and self.data.max_prompt_length is None and (algorithm in RL_ALGORITHMS or algorithm == "dpo"):
            out.append(("data.prompt_truncation", "says what happens to a prompt over data.max_prompt_length, which is not set, "
                        "so it would do nothing; set data.max_prompt_length or remove prompt_truncation."))
        if "few_shot" in set_ and algorithm in RL_ALGORITHMS and not self.uses_images:
            templated = any(d.template != "none" for d in (*self.data.datasets, *self.data.eval_datasets))
            if not templated:
                out.append(("data.few_shot", "adds a worked example in a math template's answer format, and no dataset sets "
                            "data.datasets[i].template (gsm8k or openmathinstruct2), so it would do nothing; set a template or "
                            "remove few_shot."))
            elif not self.data.use_chat_template:
                out.append(("data.few_shot", "the worked example is a chat turn, and data.use_chat_template=false sends plain-text "
                            "prompts, so it would do nothing; remove one of them."))
        family = "rl" if algorithm in RL_ALGORITHMS else algorithm
        formats = FORMATS_READ[family]
        for section in ("datasets", "eval_datasets"):
            for i, d in enumerate(getattr(self.data, section)):
                where = f"data.{section}[{i}]"
                if d.format not in formats:
                    reads = f"always reads {formats[1]!r}" if len(formats) == 2 else "reads prompts and gold answers"
                    out.append((f"{where}.format", f"{d.format!r} would be ignored: algorithm {algorithm} {reads}; remove the key"
                                + (f" or set it to {formats[1]!r}." if len(formats) == 2 else ".")))
                dead = [k for k in DATASET_COLUMN_KEYS if k in d.model_fields_set and k not in COLUMNS_READ[family]]
                if dead:
                    out.append((f"{where}.{dead[0]}", f"{', '.join(dead)}: algorithm {algorithm} never reads "
                                f"{'it' if len(dead) == 1 else 'them'}; it reads {', '.join(COLUMNS_READ[family])}. Remove "
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
