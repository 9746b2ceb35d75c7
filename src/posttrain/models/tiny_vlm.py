"""Tiny, randomly initialised vision-language models built locally in seconds (``tiny:llava-2m``).

Same idea as `posttrain.models.tiny`: a real checkpoint (weights, processor, tokenizer, chat
template, generation config) that `AutoModelForImageTextToText` / `AutoProcessor` load, with no
hub. The tests, the shapes demo (`posttrain.data.shapes`) and the VLM recipes run on it.

Why LLaVA and not Qwen2-VL: transformers 5.24's Qwen2-VL processor requires a video processor,
and every video processor needs torchvision, which cannot be installed beside the CPU torch these
machines use. LLaVA's processor is an image processor plus a tokenizer, and its image processor has
a PIL backend, so the whole tiny VLM runs on pillow alone. Architecturally it is the common
vision-language shape: a vision tower (a 2-layer CLIP ViT, 32-pixel patches), a projector
(`multi_modal_projector`, two linear layers) and the same Qwen2 language model as `tiny:qwen2-SIZE`.
Images are padded to a square and resized to 64x64 pixels: 4 ``<image>`` tokens per image (32-pixel
patches; see PATCH_SIZE).
"""

from __future__ import annotations

from pathlib import Path

from .tiny_parts import CHAT_TEMPLATE, EOS_TOKEN, IM_END, MAX_POSITIONS, PAD_TOKEN, SIZES, build_tokenizer

# Bump when the build's output changes; part of the cache folder's name (tiny.dir_name).
VLM_BUILDER_VERSION = 3
IMAGE_TOKEN = "<image>"
IMAGE_SIZE = 64
# 32-pixel patches: 4 image tokens per image. With 8-pixel patches (64 tokens, v1) a random 2M model
# trained for 500 steps on the shapes task stayed at chance: a few shape tokens among 64 background
# ones give the untrained attention almost nothing to follow. Real VLMs use 14-16 pixel patches on
# 224-1000+ pixel images; here the images are tiny and so is the budget.
PATCH_SIZE = 32
TOKENS_PER_IMAGE = (IMAGE_SIZE // PATCH_SIZE) ** 2
VISION = dict(hidden_size=64, intermediate_size=128, num_hidden_layers=2, num_attention_heads=4)

# ChatML as for the text models, with an image content part rendered as the <image> placeholder
# that the processor expands into one token per patch, and without `{% generation %}` markers, as
# real processors' templates (LLaVA, Qwen2-VL, Idefics) are: sft_vlm must find the assistant's
# tokens without them (posttrain.data.chat_masks), and the tests meet the same template users do.
VLM_CHAT_TEMPLATE = CHAT_TEMPLATE.replace(
    "{%- if p.type == 'text' -%}{{ p.text }}{%- endif -%}",
    "{%- if p.type == 'text' -%}{{ p.text }}{%- elif p.type == 'image' -%}{{ '" + IMAGE_TOKEN + "' }}{%- endif -%}",
).replace("{%- generation -%}", "").replace("{%- endgeneration -%}", "")
assert VLM_CHAT_TEMPLATE != CHAT_TEMPLATE and "generation -%}" not in VLM_CHAT_TEMPLATE  # the text template changed: update this


def build_processor(seed: int = 0):
    """A LlavaProcessor: PIL image processor (pad to square, resize to IMAGE_SIZE) + the tiny tokenizer."""
    from transformers.models.llava.image_processing_pil_llava import LlavaImageProcessorPil
    from transformers.models.llava.processing_llava import LlavaProcessor

    tokenizer = build_tokenizer(seed, extra_special=(IMAGE_TOKEN,))
    image_processor = LlavaImageProcessorPil(
        size={"shortest_edge": IMAGE_SIZE}, crop_size={"height": IMAGE_SIZE, "width": IMAGE_SIZE}, do_pad=True
    )
    # CLIP adds a CLS embedding that the "default" strategy drops: +1 -1 = one token per patch.
    return LlavaProcessor(
        image_processor=image_processor, tokenizer=tokenizer, patch_size=PATCH_SIZE,
        vision_feature_select_strategy="default", num_additional_image_tokens=1, chat_template=VLM_CHAT_TEMPLATE,
    )


def build_tiny_vlm(out_dir, arch: str = "llava", size: str = "2m", seed: int = 0) -> Path:
    """Build a random LLaVA-style VLM (language model of ``tiny:qwen2-SIZE``) + processor into ``out_dir``."""
    import torch
    from transformers import AutoModelForImageTextToText, GenerationConfig, LlavaConfig

    if arch != "llava" or size not in SIZES:
        raise ValueError(f"arch must be 'llava' and size one of {tuple(SIZES)}; got {arch!r}, {size!r}")
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    processor = build_processor(seed)
    tokenizer = processor.tokenizer
    eos, pad, im_end, image = (tokenizer.convert_tokens_to_ids(t) for t in (EOS_TOKEN, PAD_TOKEN, IM_END, IMAGE_TOKEN))
    config = LlavaConfig(
        text_config=dict(model_type="qwen2", vocab_size=len(tokenizer), max_position_embeddings=MAX_POSITIONS,
                         tie_word_embeddings=False, bos_token_id=eos, eos_token_id=eos, pad_token_id=pad, **SIZES[size]),
        vision_config=dict(model_type="clip_vision_model", image_size=IMAGE_SIZE, patch_size=PATCH_SIZE, **VISION),
        image_token_id=image,
        vision_feature_select_strategy="default",
        vision_feature_layer=-1,
        tie_word_embeddings=False,
    )
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        model = AutoModelForImageTextToText.from_config(config, dtype=torch.float32)
    model.generation_config = GenerationConfig(bos_token_id=eos, eos_token_id=[im_end, eos], pad_token_id=pad, do_sample=False)
    model.save_pretrained(out)
    processor.save_pretrained(out)
    return out
