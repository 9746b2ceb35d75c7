"""The tokenizer rule: the vocabulary never changes by accident.

- A tokenizer that has a pad token keeps it.
- One without reuses eos as pad. No token is added, so the embedding matrix keeps its shape and a
  LoRA adapter holds only LoRA weights. This still trains the model to emit eos, because TRL's
  collators build labels from the attention mask, not from the pad id: the real eos at the end of
  a sequence is attended and labelled, only the padding after it is not
  (`tests/models/test_tokenizer_rules.py` checks this on a real TRL batch).
- The embedding matrix is never shrunk; it grows only when the tokenizer really has more tokens
  than the model has rows.
"""

from __future__ import annotations


def ensure_pad_token(tokenizer) -> str:
    """Give the tokenizer a pad token without adding one; return what was done, for the log."""
    if tokenizer.pad_token is not None:
        return f"pad token kept: {tokenizer.pad_token!r}"
    if tokenizer.eos_token is None:
        raise ValueError("the tokenizer has neither a pad nor an eos token; give one with training.pad_token / training.eos_token")
    tokenizer.pad_token = tokenizer.eos_token
    return f"pad token: none in the tokenizer, reusing eos {tokenizer.eos_token!r} (no token added)"


def fit_embeddings(model, tokenizer) -> str:
    """Grow the embedding matrix only if the tokenizer has more tokens than it has rows."""
    rows = model.get_input_embeddings().weight.shape[0]
    needed = len(tokenizer)
    if needed <= rows:
        return f"embeddings unchanged: {rows} rows for {needed} tokens"
    model.resize_token_embeddings(needed)
    return f"embeddings grown from {rows} to {needed} rows: the tokenizer has {needed - rows} token(s) the model lacked"
