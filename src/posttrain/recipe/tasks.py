"""Generation and evaluation recipes: an `inference:` or `evaluation:` section instead of training.

    posttrain generate --recipe gen.yaml inference.temperature=0.7 --n 10
    posttrain eval --recipe eval.yaml          # evaluation.model
    posttrain compare --recipe eval.yaml       # evaluation.arms

Each key is a command-line flag of `generate` / `eval` / `compare`, written as a recipe key
(`--max-new-tokens` is `max_new_tokens`), so the recipe and the flags cannot drift apart. The
same rules as training recipes apply, with the same machinery (`load.py`): unknown keys are errors
with a did-you-mean, `key=value` overrides, every problem at once, exit 2, and the resolved
recipe is printed with secrets redacted. Precedence: flag default < recipe < override < flag
given on the command line.

Standard library, pydantic and yaml only (no torch).
"""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any, Literal

from pydantic import Field, StrictBool, StrictInt, ValidationError, model_validator

from .errors import Problem, RecipeError
from .section import Section

_GREEDY = "0 = greedy (deterministic)."


class Generation(Section):
    """Decoding and engine settings, shared by generate, eval and compare."""

    max_new_tokens: StrictInt | None = Field(None, ge=1, description="Tokens to generate at most per prompt.")
    temperature: float | None = Field(None, ge=0.0, description="Sampling temperature; " + _GREEDY)
    top_p: float | None = Field(None, gt=0.0, le=1.0, description="Nucleus sampling mass, with temperature > 0.")
    seed: StrictInt | None = Field(None, description="Sampling seed (evaluation: also the item shuffle).")
    # engines (posttrain.commands.engine_flags): each applies to the models it fits
    batch_size: StrictInt | None = Field(None, ge=1, description="Local models: prompts per generation batch (--batch-size).")
    decoder: Literal["posttrain", "transformers"] | None = Field(None, description="Local models: posttrain's decoding loop or transformers' generate (--decoder).")
    use_chat_template: StrictBool | None = Field(None, description="false: send plain-string prompts raw instead of as a user turn (--no-chat-template).")
    base_url: str | None = Field(None, description="API models: API root, e.g. http://localhost:8000/v1 (--base-url).")
    api_key_env: str | None = Field(None, description="API models: the environment variable holding the key; keys never go in a recipe (--api-key-env).")
    concurrency: StrictInt | None = Field(None, ge=1, description="API models: requests in flight at once (--concurrency).")
    timeout: float | None = Field(None, gt=0, description="API models: seconds to wait for an answer (--timeout).")
    retries: StrictInt | None = Field(None, ge=0, description="API models: retries on 429/5xx/connection errors (--retries).")
    on_error: Literal["fail", "continue"] | None = Field(None, description="API models: stop at a failed request or record it and go on (--on-error).")
    progress: StrictBool | None = Field(None, description="false: no progress bars (--no-progress).")
    # tools (posttrain.commands.tool_flags): the model may call them while it answers, as GRPO with training.tools
    tools: list[str] | None = Field(None, description="Functions the model may call, 'package.module:function' (--tools, repeated).")
    environment: str | None = Field(None, description="A class whose public methods are tools, one instance per item (--environment).")
    environment_kwargs: dict[str, Any] | None = Field(None, description="Keyword arguments for the environment's constructor (--environment-kwargs).")
    max_tool_turns: StrictInt | None = Field(None, ge=0, description="Turns of tool calls per item at most (--max-tool-turns; default 5).")
    tool_timeout: float | None = Field(None, gt=0, description="Seconds one tool call may run (--tool-timeout; default 10).")


class InferenceSection(Generation):
    """`posttrain generate --recipe`: completions from one or more models for the same prompts."""

    models: list[str] = Field(min_length=1, description="Model specs (--model, repeated): hub id, dir, tiny:..., vllm:..., openai:MODEL, ...")
    prompts: str | None = Field(None, description="A .jsonl file with a 'prompt' or 'messages' column, or a .txt file with one prompt per line (--prompts).")
    dataset: str | None = Field(None, description="A hub dataset or local .jsonl/.json/.csv/.parquet file (--dataset).")
    subset: str | None = Field(None, description="Dataset configuration name (--subset).")
    split: str | None = Field(None, description="Dataset split, slices allowed (--split; default train).")
    n: StrictInt | None = Field(None, ge=1, description="Use only the first N prompts (--n).")
    prompt_column: str | None = Field(None, description="Column holding the prompt (--prompt-column).")
    prompt_template: str | None = Field(
        None, description="Build each prompt from the row's columns with Python's str.format ('Persona: {persona}\\n{prompt}') "
        "instead of reading one column (--prompt-template).")
    system_prompt: str | None = Field(None, description="A system turn before every prompt; a str.format template over the row's columns too (--system-prompt).")
    out: str | None = Field(None, description="Output .jsonl file (--out).")
    csv: StrictBool | None = Field(None, description="Also write the rows as CSV beside out (--csv).")
    # vision-language models: each row's images and videos, read and placed as sft_vlm training does
    image_columns: list[str] | None = Field(None, description="Columns with each row's images (--image-column, repeated).")
    video_columns: list[str] | None = Field(None, description="Columns with each row's video, given as sampled frames (--video-column, repeated).")
    max_image_pixels: StrictInt | None = Field(None, ge=1, description="Downscale larger images and frames to this many pixels (--max-image-pixels).")
    video_fps: float | None = Field(None, gt=0.0, description="Frames sampled per second of video (--video-fps).")
    video_max_frames: StrictInt | None = Field(None, ge=1, description="At most this many frames per video (--video-max-frames).")
    media_timeout: float | None = Field(None, gt=0.0, description="Seconds to connect to / between reads of a media download, default 30 (--media-timeout).")
    media_retries: StrictInt | None = Field(None, ge=0, description="Extra attempts for a media download worth retrying, default 3 (--media-retries).")

    @model_validator(mode="after")
    def _one_source(self):
        if (self.prompts is None) == (self.dataset is None):
            raise ValueError("give the prompts one way: inference.prompts (a .jsonl/.txt file) or inference.dataset (a dataset).")
        if self.prompt_template is not None and self.prompt_column is not None:
            raise ValueError("inference.prompt_template builds the prompt from columns; inference.prompt_column reads one column. Use one.")
        media = [k for k in ("max_image_pixels", "media_timeout", "media_retries") if getattr(self, k) is not None]
        if media and not (self.image_columns or self.video_columns):
            raise ValueError(f"inference.{media[0]} applies to images and videos: set inference.image_columns or video_columns, or remove it.")
        frames = [k for k in ("video_fps", "video_max_frames") if getattr(self, k) is not None]
        if frames and not self.video_columns:
            raise ValueError(f"inference.{frames[0]} samples videos: set inference.video_columns, or remove it.")
        return self


class EvaluationSection(Generation):
    """`posttrain eval --recipe` (model) or `posttrain compare --recipe` (arms)."""

    model: str | None = Field(None, description="The model to evaluate (eval's --model).")
    arms: dict[str, str] | None = Field(None, description="NAME: SPEC arms to compare (compare's --arm NAME=SPEC); a training run directory expands into its checkpoints.")
    no_base: StrictBool | None = Field(None, description="compare: do not add the adapters' base model as arm 'base' (--no-base).")
    task: str = Field(min_length=1, description="arithmetic | gsm8k | mmlu | math | custom (--task).")
    data: str | None = Field(None, description="A local data file instead of the hub (--data).")
    prompt_column: str | None = Field(None, description="custom task: column with the question (--prompt-column).")
    answer_column: str | None = Field(None, description="custom task: column with the numeric gold answer (--answer-column).")
    image_columns: list[str] | None = Field(None, description="custom task: columns with each item's images (--image-column, repeated).")
    data_seed: StrictInt | None = Field(None, description="arithmetic task: generator seed (--data-seed).")
    n: StrictInt | None = Field(None, ge=1, description="Evaluate the first N items after a seeded shuffle (--n).")
    alpha: float | None = Field(None, gt=0.0, lt=1.0, description="Significance level of verdicts; 1 - level of the CIs (--alpha).")
    max_error_share: float | None = Field(None, ge=0.0, lt=1.0, description="Share of a pair's items that may fail (API errors, "
                                          "left out for both arms) before its verdict is withheld (--max-error-share; default 0.05).")
    out: str | None = Field(None, description="Output directory (--out).")
    cache_dir: str | None = Field(None, description="Generation cache (--cache-dir).")
    no_cache: StrictBool | None = Field(None, description="Generate everything afresh (--no-cache).")
    plot: str | None = Field(None, description="Also draw accuracy per arm to this .png (--plot).")
    pass_k: StrictInt | None = Field(None, ge=1, description="eval: also sample K answers per item and report pass@K against "
                                     "greedy accuracy, the headroom RL can reach (--pass-k).")
    pass_temperature: float | None = Field(None, ge=0.0, description="eval: sampling temperature of pass_k's answers, default 1.0 (--pass-temperature).")

    @model_validator(mode="after")
    def _model_or_arms(self):
        if self.model is not None and self.arms is not None:
            raise ValueError("evaluation.model (for eval) and evaluation.arms (for compare) are both set; give one.")
        if self.model is None and not self.arms:
            raise ValueError("evaluation needs model (posttrain eval) or arms (posttrain compare).")
        if self.arms is not None:
            bad = [name for name in self.arms if not name or "=" in name]
            if bad:
                raise ValueError(f"evaluation.arms: arm name {bad[0]!r} must be non-empty and have no '='.")
        return self


class TaskRecipe(Section):
    inference: InferenceSection | None = None
    evaluation: EvaluationSection | None = None

    @model_validator(mode="after")
    def _one_section(self):
        if (self.inference is None) == (self.evaluation is None):
            raise ValueError("a generation/evaluation recipe has one section: inference (posttrain generate) or evaluation "
                             "(posttrain eval / compare).")
        return self

    @property
    def section(self) -> InferenceSection | EvaluationSection:
        return self.inference if self.inference is not None else self.evaluation


def load_task_recipe(path: str | Path | None, overrides=(), raw: dict | None = None) -> TaskRecipe:
    """Read, override and validate a generation/evaluation recipe; RecipeError lists every problem."""
    from .problems import LoadedRecipe, _problems, fairl_message, read_yaml
    from .migrations import fairl_signs
    from .overrides import apply_overrides

    source = Path(path) if path is not None else None
    raw = copy.deepcopy(raw) if raw is not None else read_yaml(source)
    raw, overridden = apply_overrides(raw, list(overrides))
    if fairl_signs_in_task(raw):
        raise RecipeError(Problem("", fairl_message(source, fairl_signs(raw) or ["inference/evaluation"])))
    try:
        return TaskRecipe.model_validate(raw)
    except ValidationError as e:
        loaded = LoadedRecipe(None, source, overridden)  # type: ignore[arg-type]
        raise RecipeError(_problems(e, raw, loaded, root=TaskRecipe)) from None


# FAI-RL's inference/evaluation keys: a section holding one of them is FAI-RL's, not posttrain's.
# One key of the first set, or two of the second, make the section FAI-RL's.
FAIRL_TASK_KEYS = {"model_path", "model_paths", "dataset_name", "dataset_split", "dataset_subset", "dataset_columns",
                   "output_file", "do_sample", "response_column", "ground_truth_column", "checkpoint_column", "choice_labels"}
FAIRL_TASK_HINTS = {"api_endpoint", "api_key", "user_prompt", "confidence_column"}


def fairl_signs_in_task(raw: dict) -> bool:
    for name in ("inference", "evaluation"):
        keys = set(raw.get(name) or {}) if isinstance(raw.get(name), dict) else set()
        if keys & FAIRL_TASK_KEYS or len(keys & FAIRL_TASK_HINTS) >= 2:
            return True
    return False


def resolved(recipe: TaskRecipe) -> dict:
    return recipe.model_dump(mode="json", exclude_none=True)


def is_task_recipe(raw: dict) -> bool:
    return isinstance(raw, dict) and ("inference" in raw or "evaluation" in raw) and "training" not in raw
