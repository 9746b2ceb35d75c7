"""Vision-language SFT through TRL's SFTTrainer with the model's processor.

    posttrain train --recipe recipes/sft_vlm/tiny-cpu.yaml

Rows are chats (or prompt/completion pairs) with images (`posttrain.data.vision`); TRL's vision
collator renders each chat with the processor, which expands every image into its tokens. The loss
covers the assistant's text only: prompt/completion data through TRL's completion mask; chats
through posttrain's assistant mask, which works on any processor template (real processors' have
no `{% generation %}` markers, which TRL's own mask needs: `posttrain.data.chat_masks`), mapped
onto the processor's expanded tokens; and on top of both, the label of every image/video token is
removed, whatever the template does, so a model is never trained to predict placeholders. Every
row goes through the collator once at start-up for the token audit (and so every image through
the processor before training). The vision tower is frozen unless model.freeze_vision_tower is
false; LoRA adapts the language model only (PEFT's 'all-linear' would also adapt the tower and the
projector). Liu et al. 2023 (LLaVA, arXiv:2304.08485) train the projector and language model on a
frozen tower the same way.
"""

from __future__ import annotations

import copy


def media_masking_collator(processor, trl_config, completion_only_loss: bool, model_name: str = "this model"):
    """TRL's vision collator, plus: chats labelled on the assistant's tokens only (trl_config.assistant_only_loss),
    image/video tokens never."""
    import torch
    from trl.data_utils import prepare_multimodal_messages
    from trl.trainer.sft_trainer import DataCollatorForVisionLanguageModeling

    from posttrain.data.chat_masks import TemplateProblem, align_mask, assistant_token_mask, template_error
    from posttrain.data.token_audit import ROW_COLUMN, SOURCE_COLUMN
    from posttrain.models.vision import media_token_ids

    media_ids = media_token_ids(processor)
    assistant_only_loss, limit = bool(trl_config.assistant_only_loss), trl_config.max_length

    class MediaMaskingCollator(DataCollatorForVisionLanguageModeling):
        def torch_call(self, examples):
            batch = super().torch_call(examples)
            if assistant_only_loss and "messages" in examples[0]:
                for row, example in enumerate(examples):
                    length = int(batch["attention_mask"][row].sum())
                    expanded = batch["input_ids"][row][:length].tolist()  # right-padded
                    messages = prepare_multimodal_messages(example["messages"], images=example.get("images") or [])
                    try:
                        ids, mask = assistant_token_mask(processor, messages)
                        keep = align_mask(ids, mask, expanded, truncated=limit is not None and length >= limit)
                    except TemplateProblem as problem:
                        raise template_error(problem, example.get(SOURCE_COLUMN) or "training data", example.get(ROW_COLUMN, row),
                                             model_name) from None
                    batch["labels"][row][:length][torch.tensor(keep) == 0] = -100
            for token_id in media_ids:
                batch["labels"][batch["input_ids"] == token_id] = -100
            return batch

    return MediaMaskingCollator(
        processor=processor,
        max_length=limit,
        completion_only_loss=completion_only_loss,
        pad_to_multiple_of=trl_config.pad_to_multiple_of,
        dataset_text_field=trl_config.dataset_text_field,
        assistant_only_loss=False,  # TRL's would need generation markers; the subclass masks chats itself
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


def audit_rows(dataset, split: str, collator, max_length: int | None, tokenizer, generation_config):
    """(dataset without rows that train nothing, TokenAudits): each row through the collator, untruncated."""
    from posttrain.data.token_audit import SOURCE_COLUMN, Auditor, end_of_turn, kept_labels

    auditor = Auditor(split, max_length, end_of_turn(tokenizer, generation_config))
    keep = []
    for i in range(len(dataset)):
        row = dataset[i]
        labels = collator([row])["labels"][0].tolist()
        if auditor.add(row.get(SOURCE_COLUMN), len(labels), kept_labels(labels, max_length)):
            keep.append(i)
    audits = auditor.finish()
    return (dataset.select(keep) if len(keep) < len(dataset) else dataset), audits


def build_trainer(run):
    from posttrain.models.vision import render_parts

    from .common import log
    from .sft import audited_trainer_class

    prepare_model(run, log)
    args = run.trl_config
    model_name = run.loaded_recipe.recipe.model.base_model_name
    is_pairs = "completion" in run.train_dataset.column_names
    settings = dict(completion_only_loss=args.completion_only_loss is not False and is_pairs, model_name=model_name)
    processor = run.loaded.processor
    untruncated = copy.copy(args)  # the audit sees each row whole, then applies max_length as training will
    untruncated.max_length = None
    whole = media_masking_collator(processor, untruncated, **settings)
    generation_config = getattr(run.loaded.model, "generation_config", None)
    datasets = {"train": run.train_dataset, "eval": run.eval_dataset}
    for split, dataset in datasets.items():
        if dataset is not None:
            datasets[split], audits = audit_rows(dataset, split, whole, args.max_length, processor.tokenizer, generation_config)
            run.token_audits += audits
    run.train_dataset, run.eval_dataset = datasets["train"], datasets["eval"]
    trainer = audited_trainer_class()(model_name=model_name, data_collator=media_masking_collator(processor, args, **settings),
                                      **run.trainer_kwargs())
    log(render_parts(trainer.model))
    return trainer
