"""FAI-RL (github.com/Roblox/FAI-RL, 0.2.x) training recipes -> posttrain recipes.

    posttrain convert fai-rl/recipes/training/grpo/llama3_3B_lora.yaml -o recipes/grpo/llama3-lora.yaml

The rule: the converted recipe runs what the FAI-RL recipe *says*; where FAI-RL ran something
else, the table says what it really ran and the override that reproduces it. Where the recipe
says nothing, the converted recipe writes what FAI-RL really used whenever posttrain's default
differs. What FAI-RL really used was read from its trainers: each one built its TRL config from a
fixed list of keys (`FORWARDED`), so a key outside that list never reached TRL — DPO's `beta`,
GRPO's `beta`, every trainer's `data.max_prompt_length` as a prompt limit. FAI-RL's own defaults
(`FAIRL_DEFAULTS`) differ from TRL's (batch 1, accumulation 16, learning rate 1e-6, warm-up 50,
drop_last).

Keys with no equivalent are table rows with the reason; the ones whose loss would change the run
are "blocking" and make `convert` exit 2 naming them. Standard library + the recipe schema
(pydantic) only: no torch.
"""

from __future__ import annotations

from pathlib import PurePosixPath
from typing import Any

from .table import DROPPED, Conversion

ALGORITHMS = ("sft", "cpt", "dpo", "grpo", "gspo", "ppo", "sft_vlm")

# FAI-RL's TrainingConfig / DataConfig / ModelConfig defaults that reached TRL or the model.
FAIRL_DEFAULTS: dict[str, Any] = {
    "per_device_train_batch_size": 1, "per_device_eval_batch_size": 1, "gradient_accumulation_steps": 16,
    "learning_rate": 1e-6, "num_train_epochs": 3, "max_steps": -1, "warmup_steps": 50, "logging_steps": 10,
    "save_steps": 500, "dataloader_num_workers": 0, "dataloader_pin_memory": False, "dataloader_drop_last": True,
    "ddp_find_unused_parameters": False, "save_only_model": True, "prediction_loss_only": True,
    "num_generations": 8, "beta": 0.0, "epsilon": 3e-4, "epsilon_high": 4e-4, "steps_per_generation": 4,
    "importance_sampling_level": "sequence",
}
_COMMON = ["per_device_train_batch_size", "gradient_accumulation_steps", "learning_rate", "num_train_epochs", "max_steps",
           "logging_steps", "save_steps", "warmup_steps", "dataloader_num_workers", "dataloader_pin_memory",
           "dataloader_drop_last", "ddp_find_unused_parameters"]
# Training keys each FAI-RL trainer passed to its TRL config (read from trainers/*_trainer.py).
FORWARDED: dict[str, list[str]] = {
    "sft": _COMMON + ["per_device_eval_batch_size"],
    "sft_vlm": _COMMON + ["per_device_eval_batch_size"],
    "cpt": _COMMON,
    "dpo": _COMMON + ["save_only_model", "prediction_loss_only"],
    "grpo": _COMMON + ["save_only_model", "prediction_loss_only", "num_generations"],
    "gspo": _COMMON + ["save_only_model", "prediction_loss_only", "num_generations", "importance_sampling_level",
                       "epsilon", "epsilon_high", "beta", "steps_per_generation"],
}
# FAI-RL training keys handled one by one below (everything else in `training` is unknown to FAI-RL).
_SPECIAL = {"algorithm", "output_dir", "bf16", "fp16", "gradient_checkpointing", "deepspeed_config", "eval_steps",
            "eval_enabled", "early_stopping", "early_stopping_patience", "early_stopping_threshold", "eval_split_ratio",
            "metric_for_best_model", "beta", "epsilon", "epsilon_high", "steps_per_generation", "importance_sampling_level",
            "num_generations", "save_only_model", "prediction_loss_only", "per_device_eval_batch_size"}
MEDIA_DATA_KEYS = [f"{m}_{s}" for m in ("image", "video") for s in ("cache_dir", "fetch_timeout", "fetch_retries", "s3_region", "s3_endpoint_url")] + [
    "max_image_pixels", "video_num_frames", "video_fps", "video_backend"]


# FAI-RL media settings -> posttrain's names; the loader settings have no per-recipe key in posttrain.
MEDIA_RENAMED = {"video_num_frames": "video_max_frames"}
MEDIA_FETCH_KEYS = {f"{m}_fetch_{s}": f"data.media_{s}" for m in ("image", "video") for s in ("timeout", "retries")}
MEDIA_LOADER_KEYS = {k for k in MEDIA_DATA_KEYS if k.endswith(("cache_dir", "fetch_timeout", "fetch_retries", "s3_region", "s3_endpoint_url"))} | {"video_backend"}


def _posttrain_default(algorithm: str, key: str):
    """What posttrain would use for a training key the converted recipe leaves out."""
    from posttrain.recipe.defaults import defaults_for
    from posttrain.recipe.algorithms import ALGORITHMS
    from posttrain.recipe.trl_fields import trl_fields

    ours = defaults_for(algorithm, {})
    if key in ours:
        return ours[key]
    family = ALGORITHMS[algorithm].family if algorithm in ALGORITHMS else "sft"  # no schema built to learn it
    spec = trl_fields(family).get(key)
    return spec["default"] if spec else None


def schema_has(path: str) -> bool:
    """Does this posttrain build have the key `path` (dots; `[i]` for list items)?"""
    from posttrain.recipe.section import unwrap
    from posttrain.recipe.schema import TRAINING_MODELS, Recipe

    parts = path.replace("[i]", "").split(".")
    if parts[0] == "training":
        return any(parts[1] in m.model_fields for m in TRAINING_MODELS.values())
    model = Recipe
    for part in parts:
        info = model.model_fields.get(part) if model else None
        if info is None:
            return False
        found = unwrap(info.annotation)
        model = found[0] if found else None
    return True


def convert_training(raw: dict, source: str = "recipe") -> Conversion:
    conv = Conversion("training")
    out: dict[str, Any] = {"model": {}, "data": {}, "training": {}}
    training = dict(raw.get("training") or {})
    algorithm = str(training.get("algorithm") or "")
    for top in raw:
        if top not in ("model", "data", "training", "wandb", "s3", "reward_api", "local_reward_function"):
            conv.add(top, note="not a section of a FAI-RL training recipe (FAI-RL would have rejected it)", blocking=True)
    builtin = algorithm in ("grpo", "gspo") and not _has_reward(raw)
    _algorithm(conv, out, algorithm)
    _model(conv, out, dict(raw.get("model") or {}), algorithm)
    _data(conv, out, dict(raw.get("data") or {}), algorithm, builtin)
    _training(conv, out, training, algorithm, dict(raw.get("data") or {}))
    _rewards(conv, out, raw, algorithm, builtin)
    _wandb(conv, out, raw)
    _s3(conv, out, raw)
    conv.recipe = {k: v for k, v in out.items() if v or k in ("model", "data", "training")}
    conv.command = "posttrain train --recipe OUT"
    return conv


# ------------------------------------------------------------------------------------------ parts
def _algorithm(conv: Conversion, out: dict, algorithm: str) -> None:
    from posttrain.recipe.schema import TRAINING_MODELS

    if algorithm == "ppo":
        conv.add("training.algorithm", note="posttrain has no PPO (a value model trained beside the policy). Its "
                 "critic-free counterparts take the same reward model: training.algorithm=rloo (or grpo) with "
                 "training.rewards: [{model: <the reward model's folder>}] (recipes/rloo/tiny-cpu.yaml); the generation "
                 "and batch settings differ, so write that recipe by hand", blocking=True)
    elif algorithm == "sft_vlm" and algorithm not in TRAINING_MODELS:
        conv.add("training.algorithm", note="sft_vlm (vision-language SFT) is not in this build of posttrain yet; "
                 "nothing is converted rather than training a text-only model", blocking=True)
    elif algorithm not in TRAINING_MODELS:
        conv.add("training.algorithm", note=f"{algorithm!r} is not a FAI-RL algorithm ({', '.join(ALGORITHMS)})", blocking=True)
    else:
        conv.add("training.algorithm", "training.algorithm")
    out["training"]["algorithm"] = algorithm


def _model(conv: Conversion, out: dict, model: dict, algorithm: str) -> None:
    m = out["model"]
    same = ("base_model_name", "load_in_8bit", "load_in_4bit", "bnb_4bit_quant_type", "bnb_4bit_use_double_quant",
            "use_lora", "lora_dropout", "lora_target_modules")
    for key, value in model.items():
        k = f"model.{key}"
        if key in same:
            if key in ("load_in_8bit", "load_in_4bit") and value is False:
                conv.add(k, note="false is posttrain's default too")
                continue
            m[key] = value
            conv.add(k, k)
        elif key in ("lora_r", "lora_alpha"):
            continue  # below, with FAI-RL's defaults
        elif key == "torch_dtype":
            if value == "bfloat16":
                m["torch_dtype"] = "auto"
                conv.add(k, "model.torch_dtype=auto", "auto is bfloat16 on GPUs that support it (FAI-RL's setting) and "
                         "float32 on CPU/MPS, where bfloat16 is slow; write bfloat16 to force it")
            else:
                m["torch_dtype"] = value
                conv.add(k, k)
        elif key == "low_cpu_mem_usage":
            conv.add(k, note="transformers 5 always loads with low CPU memory use")
        elif key == "use_flash_attention":
            if value:
                m["attn_implementation"] = "flash_attention_2"
                conv.add(k, "model.attn_implementation=flash_attention_2")
            else:
                conv.add(k, note="false: transformers picks the attention implementation, as in FAI-RL")
        elif key == "bnb_4bit_compute_dtype":
            conv.add(k, note=f"4-bit layers compute in the model's dtype (bfloat16 on GPU); FAI-RL's {value!r} is not settable")
        elif key == "lora_bias":
            if value in (None, "none"):
                conv.add(k, note="'none': posttrain trains no LoRA biases either")
            else:
                conv.add(k, note=f"{value!r}: posttrain's LoRA trains no biases", blocking=True)
        elif key == "lora_exclude_modules":
            if value:
                conv.add(k, note="posttrain has no exclusion list; list the modules to adapt in model.lora_target_modules", blocking=True)
            else:
                conv.add(k, note="empty: nothing to exclude")
        elif key in ("s3_region", "s3_endpoint_url"):
            _s3_setting(conv, out, k, key.removeprefix("s3_"), value)
        elif key == "ignore_mismatched_sizes":
            conv.add(k, note="posttrain never loads weights of another shape", blocking=bool(value))
        elif key == "freeze_vision_tower":
            if algorithm == "sft_vlm" and schema_has("model.freeze_vision_tower"):
                m[key] = value
                conv.add(k, k)
            elif algorithm == "sft_vlm":
                conv.add(k, note="this build has no model.freeze_vision_tower", blocking=True)
            else:
                conv.add(k, note="text training: a model without images trains no vision tower")
        else:
            conv.add(k, note="not a FAI-RL model key (FAI-RL would have rejected it)", blocking=True)
    if model.get("use_lora"):
        for key, fairl in (("lora_r", 8), ("lora_alpha", 16)):
            value = model.get(key, fairl)
            m[key] = value
            conv.add(f"model.{key}", f"model.{key}", "" if key in model else f"not in the recipe: FAI-RL's default {fairl} written (posttrain's is {16 if key == 'lora_r' else 32})")
        if "lora_target_modules" not in model:
            m["lora_target_modules"] = ["q_proj", "v_proj"]
            conv.add("model.lora_target_modules", "model.lora_target_modules",
                     "not in the recipe: FAI-RL left it to PEFT's per-architecture default, [q_proj, v_proj] for Llama/Qwen; "
                     "written so (posttrain's default is all-linear)")
    else:
        for key in ("lora_r", "lora_alpha"):
            if key in model:
                conv.add(f"model.{key}", note="use_lora is off: FAI-RL ignored it too")


def _s3_setting(conv: Conversion, out: dict, key: str, name: str, value) -> None:
    if value is None:
        conv.add(key, note="null: the AWS environment decides, as in FAI-RL")
        return
    out.setdefault("_s3_settings", {})[name] = value
    conv.add(key, f"s3.{name}", "posttrain has one region/endpoint for uploads and s3:// sources")


def _templates(conv: Conversion, spec: dict, data: dict, i: int, algorithm: str) -> None:
    """FAI-RL's .format() templates (data.system_prompt over dataset_columns) -> per-dataset templates."""
    columns = spec.get("dataset_columns")
    system, user, assistant = data.get("system_prompt"), data.get("user_prompt"), data.get("assistant_prompt")
    key = f"data.datasets[{i}]"
    pure = lambda t: isinstance(t, str) and t.startswith("{") and t.endswith("}") and t[1:-1].isidentifier()  # noqa: E731
    if algorithm == "sft_vlm":
        return _vlm_templates(conv, key, columns, system, user, assistant, pure)
    if algorithm not in ("sft", "sft_vlm"):
        if columns:
            conv.add(f"{key}.dataset_columns", note=f"FAI-RL's {algorithm} never read it")
        return
    if user and assistant:
        spec_out = {"prompt_template": user, "completion_template": assistant}
        if system:
            spec_out["system_template"] = system
        conv.add(f"{key}.dataset_columns", f"{key}.prompt_template/completion_template",
                 "the columns named in the templates are read; a missing column is an error (FAI-RL trained on the unrendered template)")
        return spec_out
    if system and columns:
        conv.add(f"{key}.dataset_columns", f"{key}.text_template",
                 "data.system_prompt over these columns becomes this dataset's text_template: one text per row, loss on all of it "
                 "(as in FAI-RL); a missing column is an error (FAI-RL trained on the unrendered template)")
        return {"text_template": system}
    if columns:
        conv.add(f"{key}.dataset_columns", note="without a system_prompt FAI-RL's SFT read the 'text' column and ignored it")
    return None


def _vlm_templates(conv: Conversion, key: str, columns, system, user, assistant, pure):
    """FAI-RL's sft_vlm text: split mode (user_prompt + assistant_prompt, loss on the assistant turn) or flat mode
    (data.system_prompt over dataset_columns, else the columns joined by newlines: one user turn, loss on all of it)."""
    if user and assistant:
        if pure(user) and pure(assistant) and not system:
            conv.add(f"{key}.dataset_columns", f"{key}.prompt_column/completion_column",
                     f"user_prompt {user} and assistant_prompt {assistant} name one column each: read as the prompt and completion")
            return {"prompt_column": user[1:-1], "completion_column": assistant[1:-1]}
        out = {"prompt_template": user, "completion_template": assistant}
        if system:
            out["system_template"] = system
        conv.add(f"{key}.dataset_columns", f"{key}.{'system_template/' if system else ''}prompt_template/completion_template",
                 "FAI-RL's split mode: " + ("a system turn, " if system else "") + "the user turn (with the images) and the "
                 "assistant turn, loss on the assistant turn, as in posttrain; a missing column is an error (FAI-RL sent the "
                 "unrendered template)")
        return out
    if not columns:
        return None
    template = system or "\n".join("{" + c + "}" for c in columns)
    whole = "data.system_prompt over dataset_columns" if system else "dataset_columns joined by newlines"
    split = _split_at_last_field(template, str(columns[-1]))
    if split is None:
        conv.add(f"{key}.dataset_columns", f"{key}.text_template",
                 f"FAI-RL rendered {whole} as one user turn (with the images) and trained on all of it; so does text_template. "
                 f"The template does not end with the response column {{{columns[-1]}}}, so there is no response to train on "
                 "alone (posttrain's prompt_template + completion_template would)")
        return {"text_template": template}
    prompt, completion = split
    conv.add(f"{key}.dataset_columns", f"{key}.prompt_template/completion_template",
             f"MEANING CHANGE: FAI-RL rendered {whole} as ONE user turn (with the images) and trained on all of it: the "
             "instructions and the question as well as the response, which the model learned as part of the user's message. "
             f"Converted: the template up to {{{columns[-1]}}} is the user turn and the rest the assistant turn, with the loss on "
             "the assistant turn (posttrain's default). To train as FAI-RL did, write instead "
             f"{key}.text_template: {template!r} (one user turn, loss on the whole text)")
    return {"prompt_template": prompt, "completion_template": completion}


def _split_at_last_field(template: str, response: str) -> tuple[str, str] | None:
    """(text before the template's last field, that field and the rest), when the last field is `response` and text
    comes before it; trailing whitespace trimmed on both sides (the chat template separates the turns)."""
    from string import Formatter

    try:
        parts = list(Formatter().parse(template))
    except ValueError:
        return None
    last = max((i for i, p in enumerate(parts) if p[1] is not None), default=None)
    if last is None or parts[last][1] != response:
        return None
    escape = lambda text: text.replace("{", "{{").replace("}", "}}")  # noqa: E731

    def render(items) -> str:
        out = ""
        for literal, field, spec, conversion in items:
            out += escape(literal)
            if field is not None:
                out += "{" + field + (f"!{conversion}" if conversion else "") + (f":{spec}" if spec else "") + "}"
        return out

    before = render(parts[:last]) + escape(parts[last][0])
    after = render([("", *parts[last][1:])] + parts[last + 1:])
    if not before.strip():
        return None
    return before.rstrip(), after.rstrip()


def _data(conv: Conversion, out: dict, data: dict, algorithm: str, builtin: bool = False) -> None:
    d = out["data"]
    per_algo = {"sft": ("text_column",), "sft_vlm": ("text_column",), "cpt": ("text_column",),
                "dpo": ("prompt_column", "chosen_column", "rejected_column"),
                "grpo": ("prompt_column", "answer_column"), "gspo": ("prompt_column", "answer_column")}.get(algorithm, ())
    datasets = []
    templated = False
    for i, spec in enumerate(data.get("datasets") or []):
        spec = dict(spec or {})
        new: dict[str, Any] = {}
        for key, value in spec.items():
            k = f"data.datasets[{i}].{key}"
            if key in ("name", "split", "subset"):
                if key == "split" and value == "train":
                    conv.add(k, note="'train' is posttrain's default too")
                    continue
                if value is None:
                    conv.add(k, note="null: none")
                    continue
                new[key] = value
                conv.add(k, k)
            elif key in ("text_column", "prompt_column", "chosen_column", "rejected_column", "answer_column"):
                if key in per_algo:
                    new[key] = value
                    conv.add(k, k)
                else:
                    conv.add(k, note=f"FAI-RL's {algorithm} never read it")
            elif key == "dataset_columns":
                continue  # with the templates below
            elif key in ("image_columns", "video_columns"):
                target = f"data.datasets[i].{key}"
                if value and algorithm == "sft_vlm" and schema_has(target):
                    new[key] = value
                    conv.add(k, k)
                elif value:
                    conv.add(k, note=f"this build of posttrain has no vision-language data key {target}", blocking=True)
                else:
                    conv.add(k, note="empty: no media")
            elif key in ("s3_region", "s3_endpoint_url"):
                _s3_setting(conv, out, k, key.removeprefix("s3_"), value)
            else:
                conv.add(k, note="not a FAI-RL dataset key", blocking=True)
        if builtin:
            _builtin_template(conv, new, spec, i)
        made = _templates(conv, spec, data, i, algorithm)
        if made:
            new.update(made)
            templated = True
        datasets.append(new)
    d["datasets"] = datasets
    for key, value in data.items():
        k = f"data.{key}"
        if key == "datasets":
            continue
        if key in ("system_prompt", "user_prompt", "assistant_prompt"):
            if builtin and key == "system_prompt":
                conv.add(k, note=f"FAI-RL's {algorithm} without a reward_api never read it: its dataset templates set the system turn")
            elif algorithm in ("grpo", "gspo") and key == "system_prompt":
                if value:
                    d["system_prompt"] = value
                    conv.add(k, k, "a literal system turn before each prompt, as in FAI-RL (it was not a template there either)")
            elif templated:
                conv.add(k, "data.datasets[i].*_template", "moved into each dataset's templates")
            elif algorithm == "sft_vlm" and key == "system_prompt" and any(r.key == "data.system_prompt" for r in conv.rows):
                continue  # already a row (with the templates)
            elif algorithm == "sft_vlm" and value and any((ds or {}).get("dataset_columns") for ds in data.get("datasets") or []):
                conv.add(k, note="part of the template over dataset_columns (see that row)")
            elif algorithm in ("sft", "sft_vlm") and value:
                conv.add(k, note="FAI-RL used it only together with dataset_columns (or user_prompt + assistant_prompt); here it did nothing")
            elif value:
                conv.add(k, note=f"FAI-RL's {algorithm} never read it")
            continue
        if key == "max_length":
            if algorithm in ("grpo", "gspo"):
                continue  # with max_prompt_length in _training
            out["training"]["max_length"] = value
            conv.add(k, "training.max_length", "the same sequence length, in the training section")
        elif key == "max_prompt_length":
            if algorithm in ("grpo", "gspo", "dpo"):
                d["max_prompt_length"] = value
                conv.add(k, k, f"FAI-RL DEFECT: it never limited prompts (its {algorithm} trainer passed no prompt limit to TRL"
                         + ("; it only set max_completion_length = max_length - max_prompt_length" if algorithm != "dpo" else "")
                         + "). posttrain drops prompts longer than this and reports how many; to run as FAI-RL did, "
                         "delete data.max_prompt_length")
            else:
                conv.add(k, note=f"FAI-RL's {algorithm} never read it; posttrain's {algorithm} has no prompt limit")
        elif key == "remove_unused_columns":
            conv.add(k, note="posttrain keeps exactly the columns the algorithm needs")
        elif key == "dataset_num_proc":
            if algorithm in ("sft", "sft_vlm") and value not in (None, 1):
                out["training"]["dataset_num_proc"] = value
                conv.add(k, "training.dataset_num_proc")
            else:
                conv.add(k, note="1 process (the default), or an algorithm whose FAI-RL trainer never read it")
        elif key in MEDIA_DATA_KEYS:
            target = f"data.{MEDIA_RENAMED.get(key, key)}"
            if value is None:
                conv.add(k, note="null: the default")
            elif key in MEDIA_FETCH_KEYS and algorithm == "sft_vlm" and schema_has(MEDIA_FETCH_KEYS[key]):
                name = MEDIA_FETCH_KEYS[key].split(".")[1]
                both = [f"data.{other}" for other, setting in MEDIA_FETCH_KEYS.items() if setting == MEDIA_FETCH_KEYS[key]
                        and data.get(other) is not None]
                d[name] = max(value, d.get(name, value))
                conv.add(k, MEDIA_FETCH_KEYS[key], "one setting for image and video downloads in posttrain: the larger of "
                         f"{' and '.join(both)} is written" if len(both) > 1 else "the same, for image and video downloads alike")
            elif key in MEDIA_LOADER_KEYS and schema_has("data.datasets[i].image_columns"):
                conv.add(k, note="posttrain's media loader caches downloads per machine (~/.cache/posttrain) and reads s3:// "
                         "with the AWS environment; no per-recipe setting")
            elif key in ("video_num_frames", "video_fps") and not any((ds or {}).get("video_columns") for ds in data.get("datasets") or []):
                conv.add(k, note="no dataset has video_columns, so FAI-RL sampled no video frames either; nothing to carry over")
            elif algorithm == "sft_vlm" and schema_has(target):
                d[target.split(".")[1]] = value
                conv.add(k, target, "" if target == f"data.{key}" else "renamed")
            else:
                conv.add(k, note=f"this build of posttrain has no vision-language data key {target}", blocking=True)
        else:
            conv.add(k, note="not a FAI-RL data key", blocking=True)
    if builtin:
        d["system_prompt"] = FAIRL_MATH_SYSTEM_PROMPT
        conv.add("data.system_prompt (absent)", "data.system_prompt", "FAI-RL's math templates sent this system turn (answer in "
                 "<think>/<answer> tags) through the chat template; written so. Delete it for posttrain's own math prompt, the one "
                 "`posttrain eval` sends")
        if any(ds.get("template") for ds in d["datasets"]):
            d["few_shot"] = True
            conv.add("data.few_shot (absent)", "data.few_shot=true", "FAI-RL's math templates put one worked example (a user "
                     "question and an assistant answer in the tags) before each question; posttrain's few_shot does the same "
                     "with its own example (Mia's shells, not FAI-RL's largest single-digit prime)")
    elif algorithm in ("grpo", "gspo") and not data.get("system_prompt"):
        d["use_chat_template"] = False
        conv.add("data.system_prompt (absent)", "data.use_chat_template=false",
                 "FAI-RL sent each prompt as raw text when no system_prompt was set; posttrain would wrap it in the chat template")


def _training(conv: Conversion, out: dict, training: dict, algorithm: str, data: dict) -> None:
    t = out["training"]
    forwarded = FORWARDED.get(algorithm, _COMMON)
    for key in training:
        k = f"training.{key}"
        if key in _SPECIAL or key in forwarded:
            continue
        if key in FAIRL_DEFAULTS or key in sum(FORWARDED.values(), []):
            conv.add(k, note=f"FAI-RL's {algorithm} trainer never passed it to TRL")
        else:
            conv.add(k, note="not a FAI-RL training key", blocking=True)
    if "output_dir" in training:
        t["output_dir"] = training["output_dir"]
        conv.add("training.output_dir", "training.output_dir")
    from posttrain.recipe.training_section import dead_fields

    dead = dead_fields(algorithm)
    for key in forwarded:
        value = training.get(key, FAIRL_DEFAULTS.get(key))
        if key in dead:  # a TRL key no posttrain trainer reads: the recipe would be refused
            if key in training:
                conv.add(f"training.{key}", note=f"dropped: {dead[key]}" + (" Evaluation reports the loss only, as true asked."
                                                                            if key == "prediction_loss_only" and value else ""))
            continue
        if key in training:
            if key in ("epsilon", "epsilon_high", "beta", "steps_per_generation", "importance_sampling_level"):
                continue  # GSPO keys: below
            t[key] = value
            conv.add(f"training.{key}", f"training.{key}")
        elif key in FAIRL_DEFAULTS and value != _posttrain_default(algorithm, key) and key not in ("epsilon", "epsilon_high", "beta", "steps_per_generation", "importance_sampling_level"):
            t[key] = value
            conv.add(f"training.{key} (absent)", f"training.{key}", f"FAI-RL's default {value!r} written (posttrain's is {_posttrain_default(algorithm, key)!r})")
    for key in ("save_only_model", "prediction_loss_only", "per_device_eval_batch_size", "num_generations"):
        if key in training and key not in forwarded:
            conv.add(f"training.{key}", note=f"FAI-RL's {algorithm} trainer never passed it to TRL")
    _precision(conv, t, training)
    if training.get("gradient_checkpointing") is False:
        t["activation_checkpointing"] = False
        conv.add("training.gradient_checkpointing", "training.activation_checkpointing", "transformers 5's name for it")
    elif "gradient_checkpointing" in training:
        conv.add("training.gradient_checkpointing", "training.activation_checkpointing",
                 "on by posttrain's default (non-reentrant, as FAI-RL set it); transformers 5's name")
    stage = _zero_stage(training.get("deepspeed_config"))
    if stage and schema_has("training.distributed"):
        t["distributed"] = stage
        conv.add("training.deepspeed_config", f"training.distributed={stage}",
                 f"posttrain's own {stage} settings instead of FAI-RL's JSON (told apart by its file name); "
                 "write training.deepspeed: PATH to keep the JSON")
    elif training.get("deepspeed_config"):
        t["deepspeed"] = training["deepspeed_config"]
        conv.add("training.deepspeed_config", "training.deepspeed",
                 "the same DeepSpeed JSON, passed to TRL as FAI-RL did; launch with `accelerate launch` or `deepspeed` "
                 "(FAI-RL's launcher did that for you); the path is read relative to where you run")
    elif "deepspeed_config" in training:
        conv.add("training.deepspeed_config", note="null: no DeepSpeed (plain DDP under torchrun), as in FAI-RL")
    _evaluation(conv, out, training, algorithm)
    if algorithm in ("grpo", "gspo"):
        _rl(conv, t, training, data, algorithm)
    elif algorithm == "dpo" and "beta" in training:
        t["beta"] = training["beta"]
        conv.add("training.beta", "training.beta",
                 f"FAI-RL DEFECT: its DPO trainer never passed beta to TRL, so FAI-RL ran TRL's default 0.1 whatever the recipe "
                 f"said; posttrain runs {training['beta']!r} as written (training.beta=0.1 reproduces the FAI-RL run)")
    else:
        for key in ("beta", "epsilon", "epsilon_high", "steps_per_generation", "importance_sampling_level"):
            if key in training:
                conv.add(f"training.{key}", note=f"FAI-RL's {algorithm} trainer never passed it to TRL")


def _zero_stage(path) -> str | None:
    """FAI-RL's DeepSpeed configs are named by stage (configs/deepspeed/zero3_config.json); ZeRO-1 has no preset."""
    name = PurePosixPath(str(path)).name.lower() if path else ""
    if "zero3" in name:
        return "zero3_offload" if "offload" in name else "zero3"
    return "zero2" if "zero2" in name else None


def _precision(conv: Conversion, t: dict, training: dict) -> None:
    bf16, fp16 = training.get("bf16", True), training.get("fp16", False)
    if fp16:
        t["fp16"] = True
        conv.add("training.fp16", "training.fp16")
        if "bf16" in training:
            conv.add("training.bf16", note="fp16 is on" if not bf16 else "bf16 and fp16 both true: TRL refuses that; fp16 kept")
        return
    if bf16:
        conv.add("training.bf16" if "bf16" in training else "training.bf16 (absent)", note="posttrain turns bf16 on where the device "
                 "computes it natively: a bf16 GPU (FAI-RL's setting) or a CPU with avx512_bf16/amx_bf16 (FAI-RL: float32 on every CPU; "
                 "write training.bf16=false for that); float32 elsewhere")
    else:
        t["bf16"] = False
        conv.add("training.bf16", "training.bf16", "false: full precision everywhere, as in FAI-RL")
    if "fp16" in training:
        conv.add("training.fp16", note="false is TRL's default too")


def _evaluation(conv: Conversion, out: dict, training: dict, algorithm: str) -> None:
    """FAI-RL 0.2.x's held-out evaluation / early stopping (SFT, CPT, DPO) -> data.eval_fraction + eval keys."""
    t, d = out["training"], out["data"]
    enabled = training.get("eval_enabled", training.get("early_stopping", False))
    keys = [k for k in ("eval_enabled", "early_stopping", "early_stopping_patience", "early_stopping_threshold",
                        "eval_split_ratio", "metric_for_best_model", "eval_steps") if k in training]
    if not enabled or algorithm in ("grpo", "gspo"):
        for k in keys:
            conv.add(f"training.{k}", note="FAI-RL evaluated nothing here (no evaluation data); posttrain evaluates only when asked")
        if algorithm not in ("grpo", "gspo") and "eval_enabled" not in training and "early_stopping" not in training:
            conv.add("training.early_stopping (absent)", note="FAI-RL 0.2.19 defaults early_stopping to true (10% held out, "
                     "patience 3); earlier 0.2.x evaluated nothing. Converted: no evaluation. To match 0.2.19 add "
                     "data.eval_fraction=0.1 training.eval_strategy=steps training.eval_steps=500 "
                     "training.early_stopping_patience=3 training.load_best_model_at_end=true")
        return
    d["eval_fraction"] = training.get("eval_split_ratio", 0.1)
    t["eval_strategy"] = "steps"
    t["eval_steps"] = training.get("eval_steps", 500)
    conv.add("training.eval_enabled", "data.eval_fraction + training.eval_strategy=steps", "a seeded held-out share, as in FAI-RL")
    for k in ("eval_steps", "eval_split_ratio"):
        if k in training:
            conv.add(f"training.{k}", "training.eval_steps" if k == "eval_steps" else "data.eval_fraction")
    if training.get("early_stopping", False):
        t["early_stopping_patience"] = training.get("early_stopping_patience", 3)
        t["early_stopping_threshold"] = training.get("early_stopping_threshold", 0.0)
        t["load_best_model_at_end"] = True
        t["metric_for_best_model"] = training.get("metric_for_best_model", "eval_loss")
        conv.add("training.early_stopping", "training.early_stopping_patience (+ load_best_model_at_end=true)",
                 "posttrain stops early only with the best checkpoint reloaded at the end")
        for k in ("early_stopping_patience", "early_stopping_threshold", "metric_for_best_model"):
            if k in training:
                conv.add(f"training.{k}", f"training.{k}")
    elif "early_stopping" in training:
        conv.add("training.early_stopping", note="false: no early stopping")


def _rl(conv: Conversion, t: dict, training: dict, data: dict, algorithm: str) -> None:
    max_length, max_prompt = data.get("max_length", 512), data.get("max_prompt_length", 256)
    t["max_completion_length"] = max_length - max_prompt
    src = "data.max_length" if "max_length" in data else "data.max_length (absent, FAI-RL default 512)"
    conv.add(src, "training.max_completion_length",
             f"FAI-RL generated at most max_length - max_prompt_length = {max_length} - {max_prompt} = {max_length - max_prompt} tokens; written so")
    if algorithm == "grpo":
        written = training.get("beta")
        t["beta"] = written if written is not None else 0.0
        if written is None:
            conv.add("training.beta (absent)", "training.beta=0.0",
                     "FAI-RL ran TRL's beta 0.0 (no KL term, no reference model); posttrain's GRPO default is 0.04, so 0.0 is "
                     "written to keep the run; delete it to get the KL term")
        else:
            conv.add("training.beta", "training.beta",
                     f"FAI-RL DEFECT: its GRPO trainer never passed beta to TRL, so FAI-RL ran 0.0 (no KL term); posttrain runs "
                     f"{written!r} as written (training.beta=0.0 reproduces the FAI-RL run)")
        for key in ("epsilon", "epsilon_high", "steps_per_generation", "importance_sampling_level"):
            if key in training:
                conv.add(f"training.{key}", note="FAI-RL's grpo trainer never passed it to TRL (GSPO-only there)")
        return
    # GSPO: FAI-RL passed these, with its own defaults; loss_type stayed TRL's.
    for key in ("importance_sampling_level", "epsilon", "epsilon_high", "beta"):
        value = training.get(key, FAIRL_DEFAULTS[key])
        value = float(value) if key != "importance_sampling_level" else value
        label = f"training.{key}" if key in training else f"training.{key} (absent)"
        if value != _posttrain_default("gspo", key):
            t[key] = value
            conv.add(label, f"training.{key}")
        else:
            conv.add(label, f"training.{key}", "" if key in training else f"FAI-RL's {value!r} is posttrain's GSPO preset too")
    t["loss_type"] = "dapo"
    conv.add("training.loss_type (absent)", "training.loss_type=dapo",
             "FAI-RL left TRL's default loss 'dapo'; posttrain's GSPO preset is the paper's 'grpo' loss, so dapo is written "
             "to keep the run; delete it for the paper's loss")
    spg = training.get("steps_per_generation", FAIRL_DEFAULTS["steps_per_generation"])
    gas = training.get("gradient_accumulation_steps", FAIRL_DEFAULTS["gradient_accumulation_steps"])
    batch = training.get("per_device_train_batch_size", FAIRL_DEFAULTS["per_device_train_batch_size"])
    groups = training.get("num_generations", FAIRL_DEFAULTS["num_generations"])
    fixed = 4 * gas
    t["steps_per_generation"] = fixed
    problems = []
    if (batch * spg) % groups:
        problems.append(f"on one GPU TRL rejects it: the generation batch {batch} x {spg} = {batch * spg} does not hold whole "
                        f"groups of num_generations={groups}")
    if spg <= gas:
        problems.append(f"with steps_per_generation={spg} <= gradient_accumulation_steps={gas} every rollout is used within "
                        "one optimizer step, so the sequence ratio is 1 and GSPO ran as GRPO without clipping")
    label = "training.steps_per_generation" if "steps_per_generation" in training else "training.steps_per_generation (absent)"
    if problems:
        conv.add(label, f"training.steps_per_generation={fixed}",
                 f"FAI-RL DEFECT: {spg}: " + "; ".join(problems) + f". posttrain's preset, 4 x gradient_accumulation_steps = "
                 f"{fixed}, is written (4 mini-batches per rollout, the paper's setting)")
    else:
        t["steps_per_generation"] = spg
        conv.add(label, "training.steps_per_generation")


def _has_reward(raw: dict) -> bool:
    local = raw.get("local_reward_function")
    return isinstance(raw.get("reward_api"), dict) or (isinstance(local, dict) and bool(local.get("function")))


# FAI-RL's GRPO/GSPO trainers without a reward_api (trainers/grpo_trainer.py, gspo_trainer.py): dataset templates
# (trainers/templates/*_template.py) by hub name, and four reward functions (trainers/rewards/*.py).
FAIRL_TEMPLATES = {"openai/gsm8k": "gsm8k", "nvidia/OpenMathInstruct-2": "openmathinstruct2"}
FAIRL_MATH_SYSTEM_PROMPT = "\nRespond in the following format:\n\n<think>\n...\n</think>\n<answer>\n...\n</answer>\n"
# (FAI-RL function, posttrain reward written, what changes)
FAIRL_BUILTIN_REWARDS = [
    ("exact_match_reward_func", {"name": "text_match", "weight": 2.0},
     "2.0 when the answer equals the gold, as FAI-RL paid. FAI-RL compared the text after the last <answer> as a raw string "
     "('1,400' != '1400', '7.0' != '7', any case difference fails; a completion without tags was compared whole); posttrain's "
     "text_match needs exactly one <answer> block and compares numbers as numbers, text case-insensitively: the strict score "
     "`posttrain eval` gives"),
    ("structured_xml_reward_func (count_xml)", {"name": "format", "weight": 0.5},
     "at most 0.5, as in FAI-RL. FAI-RL's count_xml paid 0.125 per tag present once, in any order, and took 0.001 per character "
     "after </answer> off without a floor (a 2,000-character tail scored -1.5: unbounded below); posttrain's format reward "
     "(weight 0.5) pays only <think> then one non-empty <answer>, in order, and text outside costs at most half of it"),
    ("digit_reward_func", {"name": "numeric_answer", "weight": 0.5},
     "0.5 when the answer is a number, as in FAI-RL; FAI-RL's str.isdigit() refused signs, decimals and commas ('-3', '2.5'), "
     "posttrain's numeric_answer takes any one number in one <answer> block"),
]


def _builtin_template(conv: Conversion, new: dict, spec: dict, i: int) -> None:
    """FAI-RL's math templates by dataset name -> posttrain's dataset templates (same columns and gold rule)."""
    name = spec.get("name")
    template = FAIRL_TEMPLATES.get(name)
    key = f"data.datasets[{i}].name"
    if template:
        new["template"] = template
        conv.add(f"{key} (template)", f"data.datasets[{i}].template={template}",
                 f"FAI-RL's {template} template: the gold answer " + ("after '####'" if template == "gsm8k" else "as written")
                 + ", the question after a system turn and one worked example")
    else:
        conv.add(f"{key} (template)", f"data.datasets[{i}].template=none",
                 f"FAI-RL DEFECT: without a reward_api its trainer formats only openai/gsm8k and nvidia/OpenMathInstruct-2 and "
                 f"stopped with 'Dataset {name!r} is not supported'; converted: the prompt column as the question after FAI-RL's "
                 "system turn (no worked example: posttrain's few_shot belongs to its math templates), the answer column as the gold")


def _rewards(conv: Conversion, out: dict, raw: dict, algorithm: str, builtin: bool = False) -> None:
    rewards = []
    if builtin:
        for function, reward, note in FAIRL_BUILTIN_REWARDS:
            rewards.append(dict(reward))
            conv.add(f"(built in) {function}", f"training.rewards[{len(rewards) - 1}]: {reward['name']}, "
                     f"weight {reward['weight']}", note)
        conv.add("(built in) custom_reward_func", note="a placeholder that returns 0.0 for every completion: a "
                 "constant changes no advantage in a group, so it trained nothing; not carried over (put your own reward in "
                 "training.rewards as package.module:function)")
        out["training"]["rewards"] = rewards
        return
    api, local = raw.get("reward_api"), raw.get("local_reward_function")
    if isinstance(api, dict):
        reward: dict[str, Any] = {"name": "http", "url": api.get("endpoint")}
        conv.add("reward_api.endpoint", "training.rewards[0].url",
                 "posttrain's http reward posts {prompts, completions, columns} and reads {rewards}; check your service takes that body")
        for key, value in api.items():
            k = f"reward_api.{key}"
            if key == "endpoint":
                continue
            if key == "timeout_seconds":
                reward["timeout"] = value
                conv.add(k, "training.rewards[0].timeout")
            elif key == "max_retries":
                reward["retries"] = value
                conv.add(k, "training.rewards[0].retries")
            elif key == "retry_backoff_seconds":
                reward["backoff"] = value
                conv.add(k, "training.rewards[0].backoff")
            elif key == "verify_ssl" and value is not False:
                conv.add(k, note="certificates are always verified")
            elif key in ("headers", "extra_body") and not value:
                conv.add(k, note="empty")
            elif key == "response_field" and value == "rewards":
                conv.add(k, note="'rewards' is what posttrain reads too")
            elif key in ("key", "api_key") and value:
                reward["api_key_env"] = "REWARD_API_KEY"
                conv.add(k, "training.rewards[0].api_key_env=REWARD_API_KEY", "a secret does not go in a recipe: export "
                         "REWARD_API_KEY=<the key> (sent as 'Authorization: Bearer ...'); the key was not copied")
            elif key in ("key", "api_key"):
                conv.add(k, note="null: no key")
            elif key == "model":
                conv.add(k, note="FAI-RL's LLM-judge (subjective) reward called a model itself; posttrain's http reward posts "
                         "completions to your service, which picks the judge model", blocking=True)
            elif key == "headers":
                conv.add(k, note="headers hold secrets that a recipe must not: put the key in an environment variable and set "
                         "training.rewards[0].api_key_env (sent as 'Authorization: Bearer ...')", blocking=True)
            else:
                conv.add(k, note="posttrain's http reward has no such setting", blocking=True)
        rewards.append(reward)
    if isinstance(local, dict) and local.get("function"):
        rewards.append({"name": local["function"], **(local.get("kwargs") or {})})
        conv.add("local_reward_function", f"training.rewards[{len(rewards) - 1}]",
                 "the function is called as fn(completions, **dataset_columns) (the gold answer as `answer`), not with FAI-RL's "
                 "prompts/logger arguments; its kwargs become the reward's options")
    if algorithm in ("grpo", "gspo"):
        if not rewards:
            conv.add("reward_api", note=f"FAI-RL's {algorithm} requires a reward; this recipe has none", blocking=True)
        out["training"]["rewards"] = rewards
    elif rewards:
        conv.add("reward_api", note=f"FAI-RL's {algorithm} uses no reward")


def _wandb(conv: Conversion, out: dict, raw: dict) -> None:
    wandb = raw.get("wandb")
    if wandb is None:
        out["tracking"] = {"provider": "wandb", "project": "rl"}
        conv.add("wandb (absent)", "tracking.provider=wandb, project=rl",
                 "FAI-RL logged to W&B project 'rl' when a recipe had no wandb section (enabled defaulted to true); kept")
        return
    wandb = dict(wandb)
    if wandb.get("enabled", True) is False:
        conv.add("wandb", note="enabled: false: no tracking, posttrain's default; the section is dropped")
        return
    tracking: dict[str, Any] = {"provider": "wandb", "project": wandb.get("project", "rl")}
    for key, value in wandb.items():
        k = f"wandb.{key}"
        if key == "enabled":
            conv.add(k, "tracking.provider=wandb")
        elif key == "project":
            conv.add(k, "tracking.project")
        elif key == "name":
            tracking["run_name"] = value
            conv.add(k, "tracking.run_name")
        elif key == "tags":
            tracking["tags"] = list(value or [])
            conv.add(k, "tracking.tags")
        elif key == "api_key":
            if value:
                conv.add(k, note="the key was not copied (a converted recipe is printed and shared): export it as WANDB_API_KEY")
            else:
                conv.add(k, note="null: WANDB_API_KEY from the environment, as in FAI-RL")
        elif key in ("entity", "base_url"):
            var = "WANDB_ENTITY" if key == "entity" else "WANDB_BASE_URL"
            conv.add(k, note=f"no recipe key: set {var}={value} in the environment" if value else "null")
        else:
            conv.add(k, note="not a FAI-RL wandb key", blocking=True)
    if "project" not in wandb:
        conv.add("wandb.project (absent)", "tracking.project=rl", "FAI-RL's default project 'rl' written")
    out["tracking"] = tracking


def _s3(conv: Conversion, out: dict, raw: dict) -> None:
    s3 = raw.get("s3")
    settings = out.pop("_s3_settings", {})
    if not isinstance(s3, dict) or not s3.get("enabled", False):
        if isinstance(s3, dict):
            conv.add("s3", note="enabled: false (or absent): no uploads, posttrain's default; the section is dropped")
        if settings:
            conv.add("model/data s3_region, s3_endpoint_url", note="posttrain reads the region/endpoint for s3:// sources from "
                     "the s3 section, which needs an upload bucket; set AWS_DEFAULT_REGION / AWS_ENDPOINT_URL_S3 instead", blocking=True)
        return
    new: dict[str, Any] = {}
    for key, value in s3.items():
        k = f"s3.{key}"
        if key == "enabled":
            conv.add(k, "s3", "a present s3 section uploads")
        elif key in ("bucket", "prefix", "region", "endpoint_url", "upload_checkpoints", "upload_final_model", "delete_local_after_upload"):
            if value is not None:
                new[key] = value
            conv.add(k, k)
        elif key == "uploader":
            conv.add(k, note="posttrain uploads with boto3, verified and retried")
        else:
            conv.add(k, note="not a FAI-RL s3 key", blocking=True)
    for name, value in settings.items():
        if new.get(name) not in (None, value):
            conv.add(f"model/data s3_{name}", note=f"{value!r} differs from s3.{name}={new[name]!r}; posttrain has one", blocking=True)
        new.setdefault(name, value)
    out["s3"] = new
