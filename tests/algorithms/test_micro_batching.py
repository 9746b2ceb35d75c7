"""The CPU micro-batch rule: the padding each split computes, the choice it makes from a pass's cost in
tokens' work, and the losses it refuses to split. That a split trains the same run is
tests/e2e/test_padding_note.py."""

from posttrain.algorithms.micro_batching import choose, slots_by_micro_batch


def test_slots_count_each_micro_batch_padded_to_its_longest_row():
    # one batch of rows 1 and 9 tokens long: as one pass 2 x 9 slots, as two passes 1 + 9
    assert slots_by_micro_batch([1, 9], batch=2) == {2: (1, 18), 1: (2, 10)}
    # micro-batch sizes are the batch's divisors, and every split covers every row once
    split = slots_by_micro_batch([5] * 12, batch=6)
    assert sorted(split) == [1, 2, 3, 6]
    assert all(slots == 60 and passes == 12 // m for m, (passes, slots) in split.items())


def test_choice_weighs_padding_against_each_pass_fixed_cost():
    lengths = [10, 400] * 8  # batches of 4 rows: each batch pads the short rows to 400
    m, gain = choose(lengths, batch=4, pass_tokens=0)
    assert m == 1 and gain > 1.5  # about half the slots of padded batches are padding
    # a pass that costs more than the padding it saves: the batches stay
    m, gain = choose(lengths, batch=4, pass_tokens=10_000)
    assert m == 4 and gain == 1.0
    # rows of one length never pad: splitting only adds passes
    assert choose([50] * 16, batch=8, pass_tokens=1)[0] == 8
    # the rule's own constant: the demo's short chats stay whole (measured 2.4x slower split), long DPO pairs split
    assert choose([30, 48, 36, 41] * 8, batch=16)[0] == 16
    assert choose([80, 206, 120, 150, 95, 180, 110, 201] * 3, batch=8, rows_per_entry=2)[0] < 8


def test_pairs_count_two_rows_per_entry():
    lengths = [20, 300] * 4
    rows = choose(lengths, batch=2, pass_tokens=500)
    pairs = choose(lengths, batch=2, pass_tokens=500, rows_per_entry=2)
    # the fixed cost is the same per pass, the padding twice as much: pairs split sooner
    assert rows[1] < pairs[1]


def test_a_dpo_loss_over_the_whole_batch_is_never_split():
    from types import SimpleNamespace

    from posttrain.algorithms.micro_batching import PER_PAIR_DPO_LOSSES, why_not_exact

    assert why_not_exact(SimpleNamespace(loss_types=["sigmoid", "ipo"]), pairs=True) is None
    assert why_not_exact(SimpleNamespace(), pairs=False) is None  # SFT: the loss is normalised over the accumulated tokens
    # DPO losses over the whole batch: aot sorts the batch's pairs, sft averages the batch's tokens
    for loss_types, named in ((["aot"], "aot"), (["sigmoid", "sft"], "sft"), (["aot_unpaired"], "aot_unpaired")):
        reason = why_not_exact(SimpleNamespace(loss_types=loss_types), pairs=True)
        assert reason == f"loss_type {named} is computed over the whole batch, so a split would change the loss"
    # every TRL loss type is classified: a new one is refused until someone checks it splits exactly
    import trl.trainer.dpo_trainer as dpo

    known = set(inspect_loss_types(dpo))
    assert known - PER_PAIR_DPO_LOSSES == {"aot", "aot_unpaired", "sft"}


def inspect_loss_types(module) -> list[str]:
    """The loss types TRL's DPO loss code branches on (`loss_type == "..."`), read from its source."""
    import inspect
    import re

    return re.findall(r'loss_type == "(\w+)"', inspect.getsource(module))
