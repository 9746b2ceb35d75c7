"""The SFT/CPT dataset step posttrain adds to TRL's: chats masked by posttrain's rule, then audited.

`algorithms.sft` calls these from its `SFTTrainer._prepare_dataset`:

1. `mask_chats`: rows whose loss is on the assistant's turns (chats with assistant_only_loss) are
   tokenized here, by `chat_masks`' rule that works on any chat template, into `input_ids` +
   `assistant_masks`; TRL builds the labels from those. Other rows are tokenized by TRL as usual.
2. TRL tokenizes the rest and builds labels, untruncated.
3. `audit`: label tokens per row after max_length truncation, rows truncated, rows with no label
   token (dropped here and counted, instead of TRL's silent filter), end-of-turn labelled; per
   recipe dataset (`SOURCE_COLUMN`).
4. TRL truncates, packs and shuffles as it would have.
"""

from __future__ import annotations

from .chat_masks import TemplateProblem, assistant_token_mask, template_error
from .token_audit import ROW_COLUMN, SOURCE_COLUMN, Auditor, EndOfTurn, kept_labels


def mask_chats(dataset, tokenizer, *, model: str, completion_only_loss: bool | None):
    """Chats (messages, or prompt/completion chats) as input_ids + assistant_masks by posttrain's rule."""
    columns = dataset.column_names
    first = dataset[0]
    pairs = "prompt" in columns and "completion" in columns
    if not (isinstance(first.get("messages"), list) or (pairs and isinstance(first["prompt"], list))):
        return dataset  # not chats: TRL's own tokenization (text, prompt/completion text)
    skip_prompt = pairs and completion_only_loss is not False  # prompt/completion chats: loss on the completion's turns only

    def tokenize(row, index):
        messages = row["prompt"] + row["completion"] if pairs else row["messages"]
        first_turn = len(row["prompt"]) if skip_prompt else 0
        try:
            ids, mask = assistant_token_mask(tokenizer, messages, row.get("tools"), first_turn=first_turn)
        except TemplateProblem as problem:
            raise template_error(problem, row.get(SOURCE_COLUMN) or "training data", row.get(ROW_COLUMN, index), model) from None
        return {"input_ids": ids, "assistant_masks": mask}

    chat_columns = [c for c in ("messages", "prompt", "completion", "tools") if c in columns]
    return dataset.map(tokenize, with_indices=True, remove_columns=chat_columns, desc="Masking assistant turns")


def audit(dataset, split: str, *, max_length: int | None, truncation_mode: str, packing: bool, eot: EndOfTurn):
    """(dataset without rows that train nothing, TokenAudits) for a tokenized, labelled, untruncated dataset."""
    limit = None if packing else max_length  # packing cuts fixed blocks: nothing is truncated away
    auditor = Auditor(split, limit, eot, truncation_mode=truncation_mode)
    sources = dataset[SOURCE_COLUMN] if SOURCE_COLUMN in dataset.column_names else [None] * len(dataset)
    keep = [i for i, (labels, source) in enumerate(zip(dataset["labels"], sources))
            if auditor.add(source, len(labels), kept_labels(labels, limit, truncation_mode))]
    audits = auditor.finish()
    if len(keep) < len(dataset):
        dataset = dataset.select(keep)
    extra = [c for c in (SOURCE_COLUMN, ROW_COLUMN) if c in dataset.column_names]
    return dataset.remove_columns(extra), audits
