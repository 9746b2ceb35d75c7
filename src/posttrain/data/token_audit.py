"""The token audit: what each dataset really trains on, printed at start-up and kept in run_summary.json.

    token audit data.datasets[0] (train): 64 rows; label tokens per row min 9 / median 12 / max 31; 0 rows
    without a label token; 2 of 64 rows (3.1%) truncated at max_length=128; end of turn (<|im_end|>)
    labelled in 64 of 64 rows (pad == eos: padding is masked by the attention mask, this one is trained)

A label token is a token the loss is computed on (label != -100), counted after `max_length`
truncation as the trainer applies it. Rows left with none cannot teach anything (a prompt that fills
max_length, a chat without assistant text): they are dropped and counted here — TRL drops them
silently — and a dataset that loses every row is an error. "End of turn labelled" says whether the
model is trained to stop: with pad == eos a collator that masked the pad id would never train it.

Pure functions over token id lists; no torch.
"""

from __future__ import annotations

import statistics
from dataclasses import asdict, dataclass, field, replace
from typing import NamedTuple

from posttrain.errors import UserError

# Added to SFT/CPT/DPO/VLM rows by the data step: which recipe dataset a row came from (so the audit
# can speak per dataset after they are mixed) and its index in that file (for error messages). The
# trainers drop them with every other unused column.
SOURCE_COLUMN = "posttrain_source"
ROW_COLUMN = "posttrain_row"


@dataclass
class TokenAudit:
    key: str  # data.datasets[i] / data.eval_datasets[i]
    split: str  # "train" or "eval"
    rows: int = 0  # rows audited, before dropping those without labels
    label_tokens: list[int] = field(default_factory=list, repr=False)  # per kept row
    no_label_rows: int = 0
    truncated_rows: int = 0
    max_length: int | None = None
    end_of_turn: str | None = None
    end_of_turn_labelled: int = 0
    pad_is_eos: bool = False
    unit: str = "row"  # DPO audits pairs
    truncation_mode: str = "keep_start"

    def render(self) -> str:
        unit = self.unit
        counts = self.label_tokens
        text = f"token audit {self.key} ({self.split}): {self.rows} {unit}s"
        if counts:
            text += f"; label tokens per {unit} min {min(counts)} / median {statistics.median(counts):g} / max {max(counts)}"
        text += f"; {self.no_label_rows} {unit}s without a label token" + (" (dropped)" if self.no_label_rows else "")
        if self.max_length is not None:
            share = self.truncated_rows / self.rows if self.rows else 0.0
            text += f"; {self.truncated_rows} of {self.rows} {unit}s ({share:.1%}) truncated at max_length={self.max_length}"
            if self.truncated_rows:
                cut = "the ends of the responses" if self.truncation_mode == "keep_start" else "the starts of the prompts"
                text += f" ({self.truncation_mode}: cuts {cut})"
        if self.end_of_turn is not None:
            text += f"; end of turn ({self.end_of_turn}) labelled in {self.end_of_turn_labelled} of {len(counts)} {unit}s"
            if self.pad_is_eos:
                text += " (pad == eos: padding is masked by the attention mask, this one is trained)"
        return text

    def to_dict(self) -> dict:
        out = {k: v for k, v in asdict(self).items() if k != "label_tokens"}
        counts = self.label_tokens
        out["label_tokens"] = {"min": min(counts), "median": statistics.median(counts), "max": max(counts),
                               "total": sum(counts)} if counts else None
        return out


def kept_labels(labels: list[int], max_length: int | None, truncation_mode: str = "keep_start") -> list[int]:
    """The labels that survive truncation to max_length (TRL's keep_start / keep_end)."""
    if max_length is None or len(labels) <= max_length:
        return labels
    return labels[:max_length] if truncation_mode == "keep_start" else labels[-max_length:]


class EndOfTurn(NamedTuple):
    """The tokens that end a turn (the tokenizer's eos and the generation config's), their text, and pad == eos."""

    ids: frozenset[int]
    text: str | None
    pad_is_eos: bool


class Auditor:
    """Collects one TokenAudit per (dataset key, split) while rows are checked one by one."""

    def __init__(self, split: str, max_length: int | None, eot: EndOfTurn, unit: str = "row", truncation_mode: str = "keep_start"):
        self.template = TokenAudit("", split, max_length=max_length, end_of_turn=eot.text, pad_is_eos=eot.pad_is_eos, unit=unit,
                                   truncation_mode=truncation_mode)
        self.end_of_turn_ids = eot.ids
        self.audits: dict[str, TokenAudit] = {}

    def add(self, key: str | None, length: int, labels_after_truncation: list[int]) -> bool:
        """Count one row (its full length, its labels after truncation); False when it has no label token."""
        key = key or self.template.split
        audit = self.audits.get(key)
        if audit is None:
            audit = self.audits[key] = replace(self.template, key=key, label_tokens=[])
        audit.rows += 1
        if audit.max_length is not None and length > audit.max_length:
            audit.truncated_rows += 1
        trained = [t for t in labels_after_truncation if t != -100]
        if not trained:
            audit.no_label_rows += 1
            return False
        audit.label_tokens.append(len(trained))
        if self.end_of_turn_ids and any(t in self.end_of_turn_ids for t in trained):
            audit.end_of_turn_labelled += 1
        return True

    def finish(self) -> list[TokenAudit]:
        """The audits; a dataset whose every row has no label token is an error naming it."""
        for audit in self.audits.values():
            if audit.rows and not audit.label_tokens:
                limit = f" after truncation at max_length={audit.max_length}" if audit.max_length is not None else ""
                raise UserError(
                    f"{audit.key} ({audit.split}): none of its {audit.rows} {audit.unit}s has a token to train on{limit}: the loss "
                    "would be computed on nothing. Check that the responses are not empty, that the prompt does not fill "
                    "training.max_length (raise it, or truncation_mode=keep_end), and that the loss mask matches the data "
                    "(training.completion_only_loss / assistant_only_loss).")
        return list(self.audits.values())


def end_of_turn(tokenizer, generation_config=None) -> EndOfTurn:
    """The turn-ending tokens of this tokenizer and generation config (see EndOfTurn)."""
    ids = []
    configured = getattr(generation_config, "eos_token_id", None)
    for value in ([tokenizer.eos_token_id] + (configured if isinstance(configured, list) else [configured])):
        if isinstance(value, int) and value not in ids:
            ids.append(value)
    text = " / ".join(tokenizer.convert_ids_to_tokens(ids)) if ids else None
    pad_is_eos = tokenizer.pad_token_id is not None and tokenizer.pad_token_id in ids
    return EndOfTurn(frozenset(ids), text, pad_is_eos)


@dataclass
class PromptAudit:
    """GRPO/GSPO: the prompts' tokens (the trained tokens are the completions, generated during the run)."""

    split: str
    prompt_tokens: list[int] = field(repr=False)
    max_completion_length: int | None

    def render(self) -> str:
        counts = self.prompt_tokens
        return (f"token audit prompts ({self.split}): {len(counts)} prompts; prompt tokens min {min(counts)} / median "
                f"{statistics.median(counts):g} / max {max(counts)} (chat template applied); trained tokens are the generated "
                f"completions, up to max_completion_length={self.max_completion_length} each")

    def to_dict(self) -> dict:
        counts = self.prompt_tokens
        return {"key": "prompts", "split": self.split, "rows": len(counts), "max_completion_length": self.max_completion_length,
                "prompt_tokens": {"min": min(counts), "median": statistics.median(counts), "max": max(counts)}}
