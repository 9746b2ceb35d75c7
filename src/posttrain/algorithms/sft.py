"""SFT and CPT through TRL's SFTTrainer.

    posttrain train --recipe recipes/sft/tiny-cpu.yaml
    posttrain train --recipe recipes/cpt/tiny-cpu.yaml

SFT trains on prompt/completion pairs (loss on the completion), on `messages` chats (loss on
assistant turns) or on plain text. CPT is SFT's preset for raw text: no chat template, sequences
concatenated and cut into fixed blocks of `training.max_length` tokens (TRL's 'wrapped' packing),
loss on every token. The presets live in `posttrain.recipe.defaults`.

Loss on the assistant's turns works on any chat template: the assistant's tokens are found by
rendering each chat prefix (`posttrain.data.chat_masks`), not by TRL's `{% generation %}`
markers, which most real models' templates lack (TRL then refuses to start). Every dataset is
audited on the way (`posttrain.data.token_audit`): label tokens per row, truncation, rows that
train nothing (dropped and counted), whether the end-of-turn token is trained.

Padding-free batches (`training.padding_free`, chosen per device at start-up: see
`posttrain.algorithms.trl_config.batching_default`) flatten each batch into one row with per-row
position ids; the attention mask the model builds from those position ids is block-diagonal, so
no token attends across rows (tests/e2e/test_padding_free.py checks it on a constructed batch).
"""

from __future__ import annotations

import copy
import functools


def build_trainer(run):
    from posttrain.internals import require

    SFTTrainer = audited_trainer_class()
    args = run.trl_config
    model_name = run.loaded_recipe.recipe.model.base_model_name
    if not (args.padding_free and not args.packing and args.max_length is not None):
        trainer = SFTTrainer(model_name=model_name, **run.trainer_kwargs())
    else:
        # TRL 1.16 refuses padding_free with max_length ("max_length is not enforced" without packing):
        # its dataset step truncates only when it builds the trainer, and padding-free only changes the
        # collator. So the trainer is built padded (rows truncated to max_length, as the recipe says),
        # then its collator flattens batches. Nothing else in SFTTrainer reads `padding_free`.
        args.padding_free = False
        try:
            trainer = SFTTrainer(model_name=model_name, **run.trainer_kwargs())
        finally:
            args.padding_free = True
        # the collator's padding_free is a public field of TRL's DataCollatorForLanguageModeling (documented:
        # "padding_free: flatten the batch"); trainer.padding_free is read only in SFTTrainer.__init__
        # (posttrain/internals.py: a test keeps it so)
        require(trainer, "padding_free")
        trainer.padding_free = True
        trainer.data_collator.padding_free = True
    run.token_audits = trainer.token_audits
    return trainer


@functools.cache
def audited_trainer_class():
    """TRL's SFTTrainer with posttrain's chat masks and token audit in its dataset step.

    The one hook is `SFTTrainer._prepare_dataset` (TRL 1.16), called once per dataset at init. If
    an upgrade stops calling it, the trainer refuses to start instead of silently training
    without assistant masks (tests/e2e/test_real_model.py decodes the labels it builds;
    tests/e2e/test_token_audit.py reads its audit through the CLI).
    """
    from trl import SFTTrainer

    from posttrain.data import sft_tokens
    from posttrain.data.token_audit import end_of_turn

    from posttrain.internals import require

    class AuditedSFTTrainer(SFTTrainer):
        def __init__(self, *, model_name: str, args, **kwargs):
            # posttrain's own attributes carry its prefix: TRL's subclass namespace is not ours to take
            self.token_audits, self._posttrain_model_name = [], model_name
            self._posttrain_generation_config = getattr(kwargs.get("model"), "generation_config", None)
            self._posttrain_assistant_only = bool(require(args, "assistant_only_loss"))
            # TRL's own assistant-only path needs {% generation %} markers and stops at start-up on
            # most real templates; posttrain masks chats itself in _prepare_dataset. TRL reads the
            # field only while the trainer is built (posttrain/internals.py: a test keeps it so).
            args.assistant_only_loss = False
            try:
                super().__init__(args=args, **kwargs)
            finally:
                args.assistant_only_loss = self._posttrain_assistant_only
            if not self.token_audits and not require(self, "_skip_prepare_dataset"):
                raise RuntimeError("TRL's SFTTrainer no longer prepares datasets through _prepare_dataset: posttrain's "
                                   "assistant masks and token audit would be skipped. Pin trl==1.16.0 (pyproject.toml).")

        def _prepare_dataset(self, dataset, processing_class, args, packing, formatting_func, dataset_name):
            if "input_ids" in dataset.column_names:
                return super()._prepare_dataset(dataset, processing_class, args, packing, formatting_func, dataset_name)
            tokenizer = require(self, "_tokenizer")
            if self._posttrain_assistant_only:
                dataset = sft_tokens.mask_chats(dataset, tokenizer, model=self._posttrain_model_name,
                                                completion_only_loss=require(self, "completion_only_loss"))
            whole = copy.copy(args)  # tokenize and label, but truncate, pack and shuffle only after the audit
            whole.max_length, whole.shuffle_dataset = None, False
            dataset = super()._prepare_dataset(dataset, processing_class, whole, False, formatting_func, dataset_name)
            dataset, audits = sft_tokens.audit(dataset, dataset_name, max_length=args.max_length, truncation_mode=args.truncation_mode,
                                               packing=packing, eot=end_of_turn(tokenizer, self._posttrain_generation_config))
            self.token_audits += audits
            return super()._prepare_dataset(dataset, processing_class, args, packing, None, dataset_name)

    return AuditedSFTTrainer
