"""The tiny vision-language model: loads with the Auto classes, its processor expands images into
tokens, and the pixels reach the logits."""

from __future__ import annotations

import torch
from PIL import Image
from transformers import AutoModelForImageTextToText, AutoProcessor

from posttrain.models import tiny, tiny_vlm
from posttrain.models.vision import freeze_vision_tower, language_lora_targets, media_token_ids, parameter_parts


def test_spec_parses_and_cli_builds(cli, tmp_path):
    assert tiny.parse_tiny_spec("tiny:llava-2m") == ("llava", "2m")
    r = cli("make-tiny-model", tmp_path / "m", "--arch", "llava", "--size", "1m")
    assert r.returncode == 0, r.stderr
    assert (tmp_path / "m" / "processor_config.json").is_file() and (tmp_path / "m" / "model.safetensors").is_file()


def test_loads_with_auto_classes_and_images_reach_the_logits(tiny_vlm_dir):
    model = AutoModelForImageTextToText.from_pretrained(tiny_vlm_dir)
    processor = AutoProcessor.from_pretrained(tiny_vlm_dir)
    tok = processor.tokenizer
    assert type(model).__name__ == "LlavaForConditionalGeneration"
    assert len(tok) == tiny.VOCAB_SIZE == model.get_input_embeddings().num_embeddings
    image_id = tok.convert_tokens_to_ids(tiny_vlm.IMAGE_TOKEN)
    assert media_token_ids(processor) == [image_id]
    chat = [{"role": "user", "content": [{"type": "image"}, {"type": "text", "text": "What colour is the square?"}]}]
    prompt = processor.apply_chat_template(chat, add_generation_prompt=True, tokenize=False)
    assert prompt == "<|im_start|>user\n<image>What colour is the square?<|im_end|>\n<|im_start|>assistant\n"
    red, blue = Image.new("RGB", (90, 40), (255, 0, 0)), Image.new("RGB", (90, 40), (0, 0, 255))
    batch = processor(text=[prompt, prompt], images=[[red], [blue]], return_tensors="pt")
    # pad to square, resize to 64x64, one token per 8x8 patch
    assert batch["pixel_values"].shape == (2, 3, 64, 64)
    assert (batch["input_ids"][0] == image_id).sum() == (tiny_vlm.IMAGE_SIZE // tiny_vlm.PATCH_SIZE) ** 2
    with torch.no_grad():
        logits = model(**batch).logits[:, -1]
    assert not torch.allclose(logits[0], logits[1])  # different pixels, different next-token scores
    out = model.generate(**batch, max_new_tokens=4, do_sample=False)
    assert out.shape[1] <= batch["input_ids"].shape[1] + 4


def test_parts_freeze_and_lora_targets(tiny_vlm_dir):
    model = AutoModelForImageTextToText.from_pretrained(tiny_vlm_dir)
    parts = parameter_parts(model)
    assert all(parts[p][0] > 0 for p in ("vision", "projector", "language"))
    assert sum(n for n, _ in parts.values()) == model.num_parameters()
    frozen = freeze_vision_tower(model)
    parts = parameter_parts(model)
    assert frozen == parts["vision"][0] and parts["vision"][1] == 0
    assert parts["projector"][1] == parts["projector"][0] and parts["language"][1] == parts["language"][0]
    import re

    pattern = language_lora_targets(model, "all-linear")
    hits = [n for n, m in model.named_modules() if isinstance(m, torch.nn.Linear) and re.fullmatch(pattern, n)]
    assert hits and all("language_model" in n for n in hits)
    assert {n.rsplit(".", 1)[-1] for n in hits} == {"q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"}
    assert not any(re.fullmatch(pattern, n) for n, _ in model.named_modules() if "vision_tower" in n or "projector" in n)
