"""The recipe's `data` section: datasets, their columns, splits, prompts and media limits."""

from __future__ import annotations

from typing import Literal

from pydantic import Field, StrictBool, StrictInt, model_validator

from .section import Section


class DatasetSpec(Section):
    name: str = Field(min_length=1, description="A hub dataset id, or a local .jsonl/.json/.csv/.parquet file.")
    subset: str | None = Field(None, description="Hub configuration name (e.g. 'main' for openai/gsm8k).")
    split: str = Field("train", description="Split, with optional slice: 'train', 'train[:64]', 'test[10%:]'.")
    format: Literal["auto", "text", "prompt_completion", "messages", "preference", "unpaired"] = Field(
        "auto",
        description="How rows are read. 'auto' picks 'messages' if messages_column exists, else 'prompt_completion' if "
        "prompt_column and completion_column exist, else 'text'. CPT always reads 'text', DPO and reward 'preference', KTO 'unpaired'.",
    )
    text_column: str = Field("text", description="Column with raw text (format 'text').")
    prompt_column: str = Field("prompt", description="Column with the prompt (format 'prompt_completion').")
    completion_column: str = Field("completion", description="Column with the response the model learns (format 'prompt_completion').")
    messages_column: str = Field("messages", description="Column with a chat: a list of {role, content} (format 'messages').")
    tools_column: str = Field("tools", description="Optional column with the function schemas offered in a chat (format 'messages'); used when present.")
    chosen_column: str = Field("chosen", description="DPO: the preferred response (text, or chat messages).")
    rejected_column: str = Field("rejected", description="DPO: the dispreferred response (text, or chat messages).")
    label_column: str = Field("label", description="KTO (format 'unpaired'): whether the row's completion is desirable: true/false "
                              "(or 1/0, 'true'/'false'). Rows with another value are dropped and counted.")
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
    use_chat_template: StrictBool = Field(
        True, description="GRPO/GSPO: wrap plain-text prompts as a user message so the model's chat template applies (when it has one)."
    )
    system_prompt: str | None = Field(None, description="GRPO/GSPO: system message for every prompt (default: the template's, if any).")
    few_shot: StrictBool = Field(False, description="GRPO/GSPO with a math template: add one worked example in the answer format before the question.")
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
