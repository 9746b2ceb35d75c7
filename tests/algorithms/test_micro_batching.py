"""The CPU micro-batch rule: the padding each split computes, the choice it makes from measured costs,
and the timing that feeds it (on a real, tiny model). That a split trains the same run is
tests/e2e/test_padding_note.py."""

import pytest

from posttrain.algorithms.micro_batching import choose, pass_costs, slots_by_micro_batch


def test_slots_count_each_micro_batch_padded_to_its_longest_row():
    # one batch of rows 1 and 9 tokens long: as one pass 2 x 9 slots, as two passes 1 + 9
    assert slots_by_micro_batch([1, 9], batch=2) == {2: (1, 18), 1: (2, 10)}
    # micro-batch sizes are the batch's divisors, and every split covers every row once
    split = slots_by_micro_batch([5] * 12, batch=6)
    assert sorted(split) == [1, 2, 3, 6]
    assert all(slots == 60 and passes == 12 // m for m, (passes, slots) in split.items())


def test_choice_weighs_padding_against_each_pass_fixed_cost():
    lengths = [10, 400] * 8  # batches of 4 rows: each batch pads the short rows to 400
    m, gain = choose(lengths, batch=4, fixed_s=0.0, per_token_s=1e-3)
    assert m == 1 and gain > 1.5  # about half the slots of padded batches are padding
    # a pass that costs more than the padding it saves: the batches stay
    m, gain = choose(lengths, batch=4, fixed_s=10.0, per_token_s=1e-3)
    assert m == 4 and gain == 1.0
    # rows of one length never pad: splitting only adds passes
    assert choose([50] * 16, batch=8, fixed_s=1e-3, per_token_s=1e-3)[0] == 8


def test_pairs_count_two_rows_per_entry():
    lengths = [20, 300] * 4
    rows = choose(lengths, batch=2, fixed_s=0.05, per_token_s=1e-4)
    pairs = choose(lengths, batch=2, fixed_s=0.05, per_token_s=1e-4, rows_per_entry=2)
    # the fixed cost is the same per pass, the padding twice as much: pairs split sooner
    assert rows[1] < pairs[1]


def test_pass_costs_time_the_model_and_leave_the_run_as_it_was():
    import torch
    from transformers import AutoModelForCausalLM

    from posttrain.models.tiny import resolve_tiny

    model = AutoModelForCausalLM.from_pretrained(resolve_tiny("tiny:qwen2-1m"))
    model.train()
    torch.manual_seed(123)
    state = torch.get_rng_state()
    fixed, per_token = pass_costs(model, model.get_input_embeddings().num_embeddings)
    assert fixed >= 0 and per_token > 0 and fixed + 128 * per_token < 10
    assert torch.equal(torch.get_rng_state(), state)  # dropout's draws in training stay the ones they would have been
    assert all(p.grad is None for p in model.parameters())  # the first step's gradient is not polluted
