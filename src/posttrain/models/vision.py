"""Vision-language models: loading with their processor, the three parts, freezing, LoRA targets.

A VLM is a vision tower (ViT), a projector that maps its features into the language model's
embedding space, and a language model. posttrain names the parts from parameter names, which
follow a few conventions across transformers' families:

    LLaVA / LLaVA-style    model.vision_tower.*   model.multi_modal_projector.*   model.language_model.*
    Qwen2-VL / Qwen2.5-VL  model.visual.*         model.visual.merger.*           model.language_model.*
    Idefics3 / SmolVLM     model.vision_model.*   model.connector.*               model.text_model.*

The projector is looked for first (Qwen's merger sits inside `visual`). Everything that is neither
vision nor projector (embeddings, decoder layers, lm_head) is the language model.
"""

from __future__ import annotations

import re
from pathlib import Path

from posttrain.errors import UserError

PROJECTOR_KEYS = ("multi_modal_projector", "mm_projector", "visual.merger", "connector", "merger")
VISION_KEYS = ("vision_tower", "vision_model", "visual", "vision_encoder", "image_encoder")
PARTS = ("vision", "projector", "language")


def part_of(name: str) -> str:
    """'vision', 'projector' or 'language' for a parameter name."""
    pieces = name.split(".")
    joined = "." + name + "."
    if any(f".{key}." in joined for key in PROJECTOR_KEYS):
        return "projector"
    if any(key in pieces for key in VISION_KEYS):
        return "vision"
    return "language"


def parameter_parts(model) -> dict[str, tuple[int, int]]:
    """part -> (parameters, trainable parameters)."""
    out = {p: [0, 0] for p in PARTS}
    for name, param in model.named_parameters():
        counts = out[part_of(name)]
        counts[0] += param.numel()
        counts[1] += param.numel() if param.requires_grad else 0
    return {p: (total, trainable) for p, (total, trainable) in out.items()}


def render_parts(model) -> str:
    """One start-up line: trainable / total parameters per part."""
    parts = parameter_parts(model)
    return "trainable parameters: " + ", ".join(f"{p} {t:,} of {n:,}" for p, (n, t) in parts.items())


def freeze_vision_tower(model) -> int:
    """Stop gradients into the vision tower (not the projector); returns the parameters frozen."""
    frozen = 0
    for name, param in model.named_parameters():
        if part_of(name) == "vision" and param.requires_grad:
            param.requires_grad_(False)
            frozen += param.numel()
    return frozen


def language_lora_targets(model, targets) -> str:
    """A PEFT `target_modules` regex that puts LoRA on the language model's linear layers only.

    PEFT's 'all-linear' also adapts the vision tower and the projector; on a VLM the recipe's
    `lora_target_modules` ('all-linear' or names such as [q_proj, v_proj]) is applied inside the
    language model, and lm_head is left out as PEFT does for 'all-linear'.
    """
    import torch

    names = set()
    for name, module in model.named_modules():
        if isinstance(module, torch.nn.Linear) and part_of(name + ".weight") == "language" and not name.endswith("lm_head"):
            names.add(name.rsplit(".", 1)[-1])
    if targets != "all-linear":
        missing = sorted(set(targets) - names)
        if missing:
            raise UserError(f"model.lora_target_modules: {missing} are not linear layers of the language model; it has {sorted(names)}")
        names = set(targets)
    if not names:
        raise UserError("model.use_lora: found no linear layers in the language model to adapt")
    excluded = "|".join(re.escape(k) for k in VISION_KEYS + PROJECTOR_KEYS)
    return rf"^(?!.*\b({excluded})\b).*\.({'|'.join(sorted(map(re.escape, names)))})$"


def media_token_ids(processor) -> list[int]:
    """Ids of the tokens that stand for image or video content (never trained on)."""
    tokenizer = getattr(processor, "tokenizer", processor)
    ids = set()
    for attr in ("image_token", "video_token", "boi_token", "eoi_token", "image_start_token", "image_end_token",
                 "vision_start_token", "vision_end_token", "fake_image_token", "global_image_token"):
        token = getattr(processor, attr, None) or getattr(tokenizer, attr, None)
        if isinstance(token, str):
            tid = tokenizer.convert_tokens_to_ids(token)
            if isinstance(tid, int) and tid != tokenizer.unk_token_id:
                ids.add(tid)
    for attr in ("image_token_id", "video_token_id"):
        tid = getattr(processor, attr, None)
        if isinstance(tid, int):
            ids.add(tid)
    return sorted(ids)


def is_vision_language(source: str, model_cfg, key: str | None = "model.base_model_name") -> bool:
    """Whether the model at `source` (a local dir or hub id) is a VLM, from its config alone; `key` is
    what the error names (a recipe key, or None for a model given on the command line)."""
    from transformers import AutoConfig
    from transformers.models.auto.modeling_auto import MODEL_FOR_IMAGE_TEXT_TO_TEXT_MAPPING_NAMES

    try:
        config = AutoConfig.from_pretrained(source, trust_remote_code=model_cfg.trust_remote_code, revision=model_cfg.revision)
    except (OSError, ValueError) as e:
        name = model_cfg.base_model_name or source
        raise UserError(f"{key + ': ' if key else ''}cannot load {name!r}: {e}") from None
    return config.model_type in MODEL_FOR_IMAGE_TEXT_TO_TEXT_MAPPING_NAMES or hasattr(config, "vision_config")


def require_vision_language(model_cfg, why: str) -> str:
    """The resolved source of a VLM, or a UserError naming the (text-only) model; loads only its config."""
    from .sources import adapter_base, resolve_source

    source = resolve_source(model_cfg.base_model_name)
    base = adapter_base(source) if Path(source).is_dir() else None
    if not is_vision_language(resolve_source(base) if base else source, model_cfg):
        raise UserError(
            f"model.base_model_name: {model_cfg.base_model_name!r} is a text-only model, but {why}. Use a "
            "vision-language model (one that AutoModelForImageTextToText loads, e.g. Qwen/Qwen2.5-VL-3B-Instruct "
            "or tiny:llava-2m), or remove the image/video columns."
        )
    return source
