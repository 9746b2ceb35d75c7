"""Loss only on the assistant's text: a rendered multi-image chat, decoded from its labels."""

from __future__ import annotations

from PIL import Image
from transformers import AutoProcessor
from trl import SFTConfig
from trl.trainer.sft_trainer import DataCollatorForVisionLanguageModeling

from posttrain.algorithms.sft_vlm import media_masking_collator
from posttrain.data.vision import content_parts, place_media
from posttrain.models.tiny_vlm import TOKENS_PER_IMAGE
from posttrain.models.vision import media_token_ids


def _example():
    red, blue = Image.new("RGB", (64, 64), "red"), Image.new("RGB", (50, 80), "blue")
    chat = [{"role": "system", "content": content_parts("Answer in one word.")},
            {"role": "user", "content": content_parts("Left: <image> right: <image>. Which is red?")},
            {"role": "assistant", "content": content_parts("<answer>left</answer>")},
            {"role": "user", "content": content_parts("And the other one?")},
            {"role": "assistant", "content": content_parts("blue")}]
    messages, images = place_media(chat, [red, blue], [])
    return {"messages": messages, "images": images}


def _labelled(batch, row=0):
    labels, ids = batch["labels"][row], batch["input_ids"][row]
    return ids[labels != -100].tolist()


def test_labels_hold_only_assistant_text(tiny_vlm_dir, tmp_path):
    """The tiny LLaVA's template has no {% generation %} markers, like real processors': the labels
    come from posttrain's mask, and TRL's own assistant mask would be all zero here."""
    processor = AutoProcessor.from_pretrained(tiny_vlm_dir)
    assert "{%- generation" not in processor.chat_template
    image_id = media_token_ids(processor)[0]
    config = SFTConfig(output_dir=str(tmp_path), assistant_only_loss=True, max_length=None, report_to="none", bf16=False)
    batch = media_masking_collator(processor, config, completion_only_loss=False)([_example(), _example()])
    assert (batch["input_ids"][0] == image_id).sum() == 2 * TOKENS_PER_IMAGE  # both images rendered
    decoded = processor.tokenizer.decode(_labelled(batch))
    assert decoded == "<answer>left</answer><|im_end|>blue<|im_end|>"
    assert image_id not in _labelled(batch)


def test_image_tokens_never_labelled_even_when_the_template_would(tiny_vlm_dir, tmp_path):
    """Without assistant_only_loss TRL labels every token, images included; posttrain's collator still
    removes the image tokens (and only them)."""
    processor = AutoProcessor.from_pretrained(tiny_vlm_dir)
    image_id = media_token_ids(processor)[0]
    config = SFTConfig(output_dir=str(tmp_path), assistant_only_loss=False, max_length=None, report_to="none", bf16=False)
    trl_batch = DataCollatorForVisionLanguageModeling(processor=processor)([_example()])
    ours = media_masking_collator(processor, config, completion_only_loss=False)([_example()])
    assert image_id in _labelled(trl_batch)
    assert image_id not in _labelled(ours)
    assert [t for t in _labelled(trl_batch) if t != image_id] == _labelled(ours)


def test_text_template_row_trains_on_the_whole_text_but_never_the_images(tiny_vlm_dir, tmp_path):
    """FAI-RL's flat mode (a text_template on sft_vlm): one user turn, every text token labelled, image tokens not."""
    processor = AutoProcessor.from_pretrained(tiny_vlm_dir)
    image_id = media_token_ids(processor)[0]
    messages, images = place_media([{"role": "user", "content": content_parts("Q: Which is red?\nA: left")}],
                                   [Image.new("RGB", (64, 64), "red")], [])
    config = SFTConfig(output_dir=str(tmp_path), assistant_only_loss=False, max_length=None, report_to="none", bf16=False)
    batch = media_masking_collator(processor, config, completion_only_loss=False)([{"messages": messages, "images": images}])
    decoded = processor.tokenizer.decode(_labelled(batch))
    assert "Q: Which is red?\nA: left" in decoded and image_id not in _labelled(batch)
