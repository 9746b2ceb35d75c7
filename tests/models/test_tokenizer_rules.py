"""The vocabulary never changes by accident, and reusing eos as pad still teaches the model to stop."""

import pytest
import torch
from transformers import AutoModelForCausalLM, AutoTokenizer
from trl.trainer.sft_trainer import DataCollatorForLanguageModeling

from posttrain.models.tokenizer_rules import ensure_pad_token, fit_embeddings


@pytest.fixture
def tok(tiny_dir):
    return AutoTokenizer.from_pretrained(tiny_dir)


def test_existing_pad_token_is_kept(tok):
    before = (tok.pad_token, len(tok))
    assert "kept" in ensure_pad_token(tok)
    assert (tok.pad_token, len(tok)) == before


def test_missing_pad_reuses_eos_without_adding_a_token(tok, tiny_dir):
    tok.pad_token = None
    size = len(tok)
    note = ensure_pad_token(tok)
    assert tok.pad_token == tok.eos_token and len(tok) == size and "no token added" in note
    model = AutoModelForCausalLM.from_pretrained(tiny_dir)
    rows = model.get_input_embeddings().weight.shape[0]
    assert "unchanged" in fit_embeddings(model, tok)
    assert model.get_input_embeddings().weight.shape[0] == rows


def test_eos_is_still_a_label_when_it_doubles_as_pad(tok):
    """TRL's collator labels by attention, so the real eos is trained even though pad == eos."""
    tok.pad_token = None
    ensure_pad_token(tok)
    eos = tok.eos_token_id
    short = tok("12 + 7 = 19.")["input_ids"] + [eos]
    long = tok("Tom has 12 apples and buys 7 more.")["input_ids"] + [eos]
    batch = DataCollatorForLanguageModeling(pad_token_id=tok.pad_token_id)([{"input_ids": short}, {"input_ids": long}])
    labels = batch["labels"][0]
    assert labels[len(short) - 1].item() == eos  # the sequence's own eos is learned
    assert (labels[len(short):] == -100).all()  # padding after it is not
    assert batch["input_ids"][0, len(short):].eq(eos).all()


def test_embeddings_grow_only_for_really_added_tokens(tok, tiny_dir):
    model = AutoModelForCausalLM.from_pretrained(tiny_dir)
    rows = model.get_input_embeddings().weight.shape[0]
    tok.add_tokens(["<new_a>", "<new_b>"])
    assert "grown" in fit_embeddings(model, tok)
    assert model.get_input_embeddings().weight.shape[0] == rows + 2
    bigger = AutoModelForCausalLM.from_pretrained(tiny_dir)
    bigger.resize_token_embeddings(rows + 64)
    fit_embeddings(bigger, AutoTokenizer.from_pretrained(tiny_dir))  # fewer tokens than rows
    assert bigger.get_input_embeddings().weight.shape[0] == rows + 64  # never shrunk
