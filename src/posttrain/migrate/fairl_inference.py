"""FAI-RL inference and evaluation recipes -> posttrain generation / evaluation recipes.

    posttrain convert fai-rl/recipes/inference/llama3_3B.yaml -o gen.yaml && posttrain generate --recipe gen.yaml
    posttrain convert fai-rl/recipes/evaluation/mmlu/llama3_3B_multi_ckpt.yaml -o ev.yaml && posttrain compare --recipe ev.yaml

FAI-RL's inference recipe (`inference:`) becomes an `inference:` section for `posttrain generate`:
checkpoints (`model_paths`) become models, its `.format()` prompt templates become
`prompt_template` / `system_prompt`, and its defaults (temperature 1.0, top_p 0.9, 200 new tokens,
sampling on) are written because posttrain's are greedy. Its evaluation recipe (`evaluation:`)
becomes an `evaluation:` section: GSM8K and MMLU map to posttrain's tasks, which use their own
prompt and one answer parser shared with training rewards, so FAI-RL's JSON-answer prompt is not
carried over (the table says so). Several checkpoints of one run become `compare` over the run
directory (one arm per checkpoint, and a table of accuracy over steps).
"""

from __future__ import annotations

from pathlib import PurePosixPath
from typing import Any

from .table import Conversion

MEDIA = [f"{m}_{s}" for m in ("image", "video") for s in ("columns", "cache_dir", "fetch_timeout", "fetch_retries", "s3_region", "s3_endpoint_url")] + [
    "max_image_pixels", "video_num_frames", "video_fps", "video_backend"]
INFERENCE_DEFAULTS = {"temperature": 1.0, "top_p": 0.9, "max_new_tokens": 200, "do_sample": True}
EVALUATION_DEFAULTS = {"temperature": 1.0, "top_p": 0.9, "max_new_tokens": 10, "do_sample": False}
TASKS = {"openai/gsm8k": "gsm8k", "gsm8k": "gsm8k", "cais/mmlu": "mmlu"}


def convert_inference(raw: dict, source: str = "recipe") -> Conversion:
    kind = "inference" if "inference" in raw else "evaluation"
    conv = Conversion("generation" if kind == "inference" else "evaluation")
    for top in raw:
        if top != kind:
            conv.add(top, note=f"a FAI-RL {kind} recipe has only the `{kind}:` section", blocking=True)
    body = dict(raw.get(kind) or {})
    out: dict[str, Any] = {}
    models = _models(conv, body, out, kind)
    (_inference if kind == "inference" else _evaluation)(conv, body, out, models)
    _decoding(conv, body, out, INFERENCE_DEFAULTS if kind == "inference" else EVALUATION_DEFAULTS, kind)
    _shared(conv, body, out, kind)
    conv.recipe = {kind: out}
    conv.command = "posttrain generate --recipe OUT" if kind == "inference" else (
        "posttrain compare --recipe OUT" if "arms" in out else "posttrain eval --recipe OUT")
    return conv


def _models(conv: Conversion, body: dict, out: dict, kind: str) -> list[str]:
    paths = body.get("model_paths") or ([body["model_path"]] if body.get("model_path") else [])
    for key in ("model_paths", "model_path"):
        if key in body:
            conv.add(f"{kind}.{key}", f"{kind}.{'models' if kind == 'inference' else 'model/arms'}",
                     "s3:// checkpoints are downloaded once into the cache, as in FAI-RL")
    api_model = body.get("model")
    if api_model:
        endpoint = body.get("api_endpoint")
        spec = f"openai:{api_model}"
        paths = [*paths, spec]
        conv.add(f"{kind}.model", f"{kind}.models: openai:{api_model}" if kind == "inference" else f"{kind}.model: openai:{api_model}",
                 "an OpenAI-compatible chat API; posttrain retries 429/5xx with backoff and limits concurrency")
        from posttrain.recipe.tasks import EvaluationSection, InferenceSection

        section = InferenceSection if kind == "inference" else EvaluationSection
        if endpoint and "base_url" not in section.model_fields:
            conv.add(f"{kind}.api_endpoint", note=f"this build's `posttrain {'generate' if kind == 'inference' else 'eval'}` has no "
                     "base_url setting yet", blocking=True)
        elif endpoint:
            out["base_url"] = endpoint
            conv.add(f"{kind}.api_endpoint", f"{kind}.base_url", "the API root (e.g. https://host/v1); FAI-RL took the full URL: "
                     "drop a trailing /chat/completions if yours has one")
    if "api_key" in body:
        conv.add(f"{kind}.api_key", note="keys never go in a posttrain recipe: export it as OPENAI_API_KEY (or name another "
                 f"variable with {kind}.api_key_env); the key was not copied")
    if not paths:
        conv.add(f"{kind}.model_paths", note="no model_path(s) and no API model: nothing to run", blocking=True)
    return paths


def _template(conv: Conversion, body: dict, out: dict, kind: str) -> None:
    """FAI-RL's prompt: system_prompt (flat mode: the whole prompt; split mode: a system turn) over dataset_columns."""
    system, user = body.get("system_prompt"), body.get("user_prompt")
    columns = body.get("dataset_columns")
    if user:
        out["prompt_template"] = user
        conv.add(f"{kind}.user_prompt", f"{kind}.prompt_template", "the user turn, a str.format template over the row's columns")
        if system:
            out["system_prompt"] = system
            conv.add(f"{kind}.system_prompt", f"{kind}.system_prompt", "a system turn, a str.format template too (as in FAI-RL)")
    elif system:
        out["prompt_template"] = system
        conv.add(f"{kind}.system_prompt", f"{kind}.prompt_template",
                 "FAI-RL's flat mode sent the rendered template as the whole prompt; posttrain sends it as the user turn "
                 "through the chat template (inference.use_chat_template=false sends it raw); a missing column is an error")
    if "dataset_columns" not in body:
        return
    if system or user:
        conv.add(f"{kind}.dataset_columns", f"{kind}.prompt_template placeholders", "the template names the columns it reads")
    elif columns:
        out["prompt_template"] = "\n".join("{" + c + "}" for c in columns)
        conv.add(f"{kind}.dataset_columns", f"{kind}.prompt_template",
                 "FAI-RL concatenated these columns into the prompt; written as a template joining them with newlines (edit the separator if yours differed)")
    else:
        conv.add(f"{kind}.dataset_columns", note="empty: the 'prompt' column is read")


def _inference(conv: Conversion, body: dict, out: dict, models: list[str]) -> None:
    out["models"] = models
    dataset = body.get("dataset_name", "Roblox/FAI-RL-inference-dataset")
    out["dataset"] = dataset
    conv.add("inference.dataset_name" if "dataset_name" in body else "inference.dataset_name (absent)", "inference.dataset",
             "" if "dataset_name" in body else "FAI-RL's default dataset written")
    split = body.get("dataset_split", "test")
    out["split"] = split
    conv.add("inference.dataset_split" if "dataset_split" in body else "inference.dataset_split (absent)", "inference.split",
             "" if "dataset_split" in body else "FAI-RL's default 'test' written (posttrain's is train)")
    if body.get("dataset_subset"):
        out["subset"] = body["dataset_subset"]
        conv.add("inference.dataset_subset", "inference.subset")
    _template(conv, body, out, "inference")
    output = body.get("output_file", "outputs/inference_results.json")
    path = PurePosixPath(output)
    out["out"] = str(path.with_suffix(".jsonl"))
    out["csv"] = True
    conv.add("inference.output_file" if "output_file" in body else "inference.output_file (absent)",
             "inference.out + inference.csv=true", f"one JSON line per (model, prompt) in {path.with_suffix('.jsonl')} and the same rows in "
             f"{path.with_suffix('.csv')}; the row's 'model' field names the checkpoint")
    for key, why in (("response_column", "the completion is the row's 'completion' field"),
                     ("confidence_column", "posttrain records token counts and finish_reason, not a confidence"),
                     ("checkpoint_column", "the row's 'model' field names the checkpoint")):
        if key in body:
            conv.add(f"inference.{key}", note=why)


def _evaluation(conv: Conversion, body: dict, out: dict, models: list[str]) -> None:
    name = body.get("dataset_name", "cais/mmlu")
    task = TASKS.get(name)
    key = "evaluation.dataset_name" if "dataset_name" in body else "evaluation.dataset_name (absent)"
    if task is None:
        out["task"] = "custom"
        conv.add(key, "evaluation.task=custom + evaluation.data", "posttrain's custom task reads a local file with a question "
                 "column and a numeric gold answer, scored by the shared answer parser")
        if "." not in PurePosixPath(name).name:
            conv.add(key, note=f"{name!r} is a hub dataset; posttrain's custom task reads a local file: download it first", blocking=True)
        out["data"] = name
        if body.get("ground_truth_column"):
            out["answer_column"] = body["ground_truth_column"]
            conv.add("evaluation.ground_truth_column", "evaluation.answer_column")
        columns = body.get("dataset_columns") or []
        prompt = next((c for c in columns if c != body.get("ground_truth_column")), None)
        if prompt:
            out["prompt_column"] = prompt
        conv.add("evaluation.dataset_columns", "evaluation.prompt_column",
                 f"the first non-answer column ({prompt!r}) is the question; FAI-RL's template is not used (posttrain's "
                 "prompt asks for <answer> tags, which the parser reads)")
    else:
        out["task"] = task
        conv.add(key, f"evaluation.task={task}", f"posttrain's {task} task: hub {name}, test split, its own prompt and parser")
        for k in ("dataset_columns", "ground_truth_column"):
            if k in body:
                conv.add(f"evaluation.{k}", note=f"the {task} task knows its columns")
        if body.get("dataset_split", "test") != "test":
            conv.add("evaluation.dataset_split", note=f"posttrain's {task} task evaluates the test split", blocking=True)
        elif "dataset_split" in body:
            conv.add("evaluation.dataset_split", note="test: the task's split")
        subset = body.get("dataset_subset")
        if subset not in (None, "all", "main"):
            conv.add("evaluation.dataset_subset", note=f"{subset!r}: posttrain's {task} task evaluates all subjects", blocking=True)
        elif "dataset_subset" in body:
            conv.add("evaluation.dataset_subset", note=f"{subset!r}: the task's default")
    for k in ("system_prompt", "prompt_template", "user_prompt"):
        if body.get(k):
            conv.add(f"evaluation.{k}", note="MEANING CHANGE: posttrain's tasks send their own prompt (answer in <answer> tags) "
                     "and score strict (the tags) and loose (the last number/letter), one parser shared with training rewards; "
                     "FAI-RL's JSON-answer prompt is not sent")
    for k in ("choice_labels", "response_column", "checkpoint_column"):
        if k in body:
            conv.add(f"evaluation.{k}", note={"choice_labels": "MMLU choices are lettered A, B, C, ...",
                                                "response_column": "the answer is the sample's 'completion' field",
                                                "checkpoint_column": "each checkpoint is an arm of its own"}[k])
    output = PurePosixPath(body.get("output_file", "outputs/evaluation_results.csv"))
    out["out"] = str(output.with_suffix(""))
    conv.add("evaluation.output_file" if "output_file" in body else "evaluation.output_file (absent)", "evaluation.out",
             f"a directory: {output.with_suffix('')}/summary.md|json and samples (compare: report.md|json, samples/ARM.jsonl)")
    if len(models) == 1:
        out["model"] = models[0]
        return
    parents = {str(PurePosixPath(m).parent) for m in models}
    if len(parents) == 1 and all(PurePosixPath(m).name.startswith("checkpoint-") for m in models):
        run_dir = parents.pop()
        out["arms"] = {PurePosixPath(run_dir).name or "run": run_dir}
        conv.add("evaluation.model_paths (checkpoints of one run)", f"evaluation.arms: {{{PurePosixPath(run_dir).name}: {run_dir}}}",
                 "`posttrain compare` on the run directory: every checkpoint-N and the final model become arms, with paired "
                 "tests between them and accuracy over steps (all checkpoints, not only the ones listed)")
    else:
        out["arms"] = {PurePosixPath(m).name or m: m for m in models}
        conv.add("evaluation.model_paths (several models)", "evaluation.arms", "`posttrain compare`: one arm per model, paired tests between them")


def _decoding(conv: Conversion, body: dict, out: dict, defaults: dict, kind: str) -> None:
    value = {k: body.get(k, v) for k, v in defaults.items()}
    if not value["do_sample"]:
        out["temperature"] = 0.0
        conv.add(f"{kind}.do_sample", f"{kind}.temperature=0", "greedy decoding" + ("" if "do_sample" in body else " (FAI-RL's default)"))
        for k in ("temperature", "top_p"):
            if k in body:
                conv.add(f"{kind}.{k}", note="unused with do_sample: false (greedy), as in FAI-RL")
    else:
        conv.add(f"{kind}.do_sample" if "do_sample" in body else f"{kind}.do_sample (absent)", f"{kind}.temperature > 0",
                 "posttrain samples whenever temperature > 0" + ("" if "do_sample" in body else "; FAI-RL sampled by default"))
        for k in ("temperature", "top_p"):
            out[k] = value[k]
            conv.add(f"{kind}.{k}" if k in body else f"{kind}.{k} (absent)", f"{kind}.{k}",
                     "" if k in body else f"FAI-RL's default {value[k]} written (posttrain decodes greedily by default)")
        if value["temperature"] == 0:
            conv.add(f"{kind}.temperature", note="do_sample: true with temperature 0: transformers refuses that; posttrain decodes greedily")
    out["max_new_tokens"] = value["max_new_tokens"]
    conv.add(f"{kind}.max_new_tokens" if "max_new_tokens" in body else f"{kind}.max_new_tokens (absent)", f"{kind}.max_new_tokens",
             "" if "max_new_tokens" in body else f"FAI-RL's default {value['max_new_tokens']} written")


def _shared(conv: Conversion, body: dict, out: dict, kind: str) -> None:
    handled = {"model_paths", "model_path", "model", "api_endpoint", "api_key", "dataset_name", "dataset_split", "dataset_subset",
               "dataset_columns", "system_prompt", "user_prompt", "output_file", "response_column", "confidence_column",
               "checkpoint_column", "ground_truth_column", "choice_labels", "prompt_template", "temperature", "top_p",
               "max_new_tokens", "do_sample"}
    for key, value in body.items():
        k = f"{kind}.{key}"
        if key in handled:
            continue
        if key in MEDIA:
            if value in (None, [], ""):
                conv.add(k, note="unset: no media" if key.endswith("columns") else "unset: the default")
            elif kind == "inference":
                _media(conv, body, out, key, value)
            else:
                conv.add(k, note="this build of posttrain has no vision-language setting for it", blocking=True)
        elif key in ("s3_region", "s3_endpoint_url"):
            conv.add(k, note="s3:// checkpoints use the AWS environment (AWS_DEFAULT_REGION, AWS_ENDPOINT_URL_S3)" if value else "null",
                     blocking=False)
        elif key == "s3_upload_results":
            conv.add(k, note="posttrain writes results locally only; copy them with `aws s3 cp`", blocking=bool(value))
        elif key in ("s3_bucket", "s3_prefix", "s3_uploader"):
            conv.add(k, note="only with s3_upload_results")
        else:
            conv.add(k, note=f"not a FAI-RL {kind} key", blocking=True)


# FAI-RL inference media keys -> `posttrain generate`'s (posttrain.generation.media_prompts): one loader, one
# timeout and one retry count for images and videos alike.
MEDIA_TARGETS = {"image_columns": "image_columns", "video_columns": "video_columns", "max_image_pixels": "max_image_pixels",
                 "video_num_frames": "video_max_frames", "video_fps": "video_fps", "image_fetch_timeout": "media_timeout",
                 "video_fetch_timeout": "media_timeout", "image_fetch_retries": "media_retries", "video_fetch_retries": "media_retries"}


def _media(conv: Conversion, body: dict, out: dict, key: str, value) -> None:
    k = f"inference.{key}"
    target = MEDIA_TARGETS.get(key)
    if target in ("media_timeout", "media_retries"):
        both = [f"inference.{o}" for o, t in MEDIA_TARGETS.items() if t == target and body.get(o) is not None]
        out[target] = max(value, out.get(target, value))
        conv.add(k, f"inference.{target}", f"one setting for image and video downloads: the larger of {' and '.join(both)} is "
                 "written" if len(both) > 1 else "the same, for image and video downloads alike")
    elif target == "video_columns":
        out[target] = list(value)
        conv.add(k, f"inference.{target}", "each video reaches the model as its sampled frames, one image each (as posttrain's "
                 "sft_vlm trains on them); FAI-RL handed the frames to the processor as a video")
    elif target == "image_columns":
        out[target] = list(value)
        conv.add(k, f"inference.{target}", "the images go before the prompt's text in the user turn, as in FAI-RL (or where "
                 "the text says <image>)")
    elif target:
        out[target] = value
        conv.add(k, f"inference.{target}", "" if target == key else "renamed")
    elif key.endswith("cache_dir"):
        conv.add(k, note="posttrain caches downloaded media once per machine ($POSTTRAIN_CACHE/media); no per-recipe folder")
    elif key.endswith(("s3_region", "s3_endpoint_url")):
        conv.add(k, note="s3:// media are read with the AWS environment (AWS_DEFAULT_REGION, AWS_ENDPOINT_URL_S3)")
    elif key == "video_backend":
        conv.add(k, note="posttrain decodes videos with PyAV" + (", as this recipe asked" if value == "pyav" else
                 f"; {value!r} samples the same evenly spaced frames"))
    else:
        conv.add(k, note="this build of posttrain has no vision-language setting for it", blocking=True)
