"""Vision-language SFT through TRL's SFTTrainer with the model's processor.

    posttrain train --recipe recipes/sft_vlm/tiny-cpu.yaml

Rows are chats (or prompt/completion pairs) with images (`posttrain.data.vision`); TRL's vision
collator renders each chat with the processor, which expands every image into its tokens. The loss
covers the assistant's text only: prompt/completion data through TRL's completion mask, chats
through the template's generation mask (`assistant_only_loss`), and on top of both this module's
collator removes the label of every image/video token, whatever the template does, so a model is
never trained to predict placeholders. The vision tower is frozen unless model.freeze_vision_tower
is false; LoRA adapts the language model only (PEFT's 'all-linear' would also adapt the tower and
the projector). Liu et al. 2023 (LLaVA, arXiv:2304.08485) train the projector and language model
on a frozen tower the same way.
"""

from __future__ import annotations


def media_masking_collator(processor, trl_config, completion_only_loss: bool):
    """TRL's vision collator, plus: labels of image/video tokens are always -100."""
    from trl.trainer.sft_trainer import DataCollatorForVisionLanguageModeling

    from posttrain.models.vision import media_token_ids

    media_ids = media_token_ids(processor)

    class MediaMaskingCollator(DataCollatorForVisionLanguageModeling):
        def torch_call(self, examples):
            batch = super().torch_call(examples)
            for token_id in media_ids:
                batch["labels"][batch["input_ids"] == token_id] = -100
            return batch

    return MediaMaskingCollator(
        processor=processor,
        max_length=trl_config.max_length,
        completion_only_loss=completion_only_loss,
        pad_to_multiple_of=trl_config.pad_to_multiple_of,
        dataset_text_field=trl_config.dataset_text_field,
        assistant_only_loss=trl_config.assistant_only_loss,
    )


def prepare_model(run, log) -> object:
    """Freeze the tower and aim LoRA at the language model; returns the PEFT config (or None)."""
    from posttrain.models.vision import freeze_vision_tower, language_lora_targets

    model_cfg = run.loaded_recipe.recipe.model
    model = run.loaded.model
    if model_cfg.freeze_vision_tower:
        log(f"vision tower frozen: {freeze_vision_tower(model):,} parameters (model.freeze_vision_tower=true)")
    if run.peft_config is not None:
        run.peft_config.target_modules = language_lora_targets(model, model_cfg.lora_target_modules)
    return run.peft_config


def build_trainer(run):
    from trl import SFTTrainer

    from posttrain.models.vision import render_parts

    from .run import log

    prepare_model(run, log)
    completion_only = run.trl_config.completion_only_loss
    is_pairs = "completion" in run.train_dataset.column_names
    collator = media_masking_collator(run.loaded.processor, run.trl_config, completion_only is not False and is_pairs)
    trainer = SFTTrainer(data_collator=collator, **run.trainer_kwargs())
    log(render_parts(trainer.model))
    return trainer
