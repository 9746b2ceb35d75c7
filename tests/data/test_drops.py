"""data.max_drop_fraction: each dataset's lost share over the stages that drop rows, and the error above the limit."""

from collections import Counter

import pytest

from posttrain.data.drops import DropLedger
from posttrain.data.formats import DataReport
from posttrain.data.token_audit import TokenAudit
from posttrain.errors import UserError


def report(key="data.datasets[0]", rows_in=100, **dropped) -> DataReport:
    return DataReport(key, "train.jsonl", "prompt", rows_in, rows_in - sum(dropped.values()), Counter(dropped))


def test_stages_compound_on_what_the_previous_one_kept():
    ledger = DropLedger(0.5)
    ledger.add_report(report(image_unreadable=20))  # 80 left
    ledger.add_stage("data.datasets[0]", "over data.max_prompt_length=64", seen=60, dropped=6)  # a max_samples=60 subset
    ledger.add_audits([TokenAudit("data.datasets[0]", "train", rows=40, no_label_rows=4),
                       TokenAudit("data.datasets[0]", "eval", rows=10, no_label_rows=1)])  # eval_fraction: one stage
    assert ledger.lost_share("data.datasets[0]") == pytest.approx(1 - 0.8 * 0.9 * 0.9)
    assert ledger.over_limit() == []


def test_over_the_limit_names_every_dataset_each_reason_and_count():
    ledger = DropLedger(0.1)
    ledger.add_report(report(**{"'answer' not a number the rewards can compare": 11, "empty 'question'": 1}))
    ledger.add_report(report("data.datasets[1]", rows_in=50))
    ledger.add_audits([TokenAudit("data.datasets[1]", "train", rows=50, no_label_rows=6)])
    ledger.add_report(report("data.datasets[2]", rows_in=50, empty_prompt=5))  # 10%: within the limit
    with pytest.raises(UserError) as e:
        ledger.check()
    text = str(e.value)
    assert "data.max_drop_fraction=0.1: 2 dataset(s)" in text
    assert ("data.datasets[0] (train.jsonl) lost 12.0% of its rows: 12 of 100 rows at reading (11 'answer' not a number the "
            "rewards can compare, 1 empty 'question')") in text
    assert "data.datasets[1] (train.jsonl) lost 12.0% of its rows: 6 of 50 remaining rows without a label token" in text
    assert "data.datasets[2]" not in text and "raise data.max_drop_fraction" in text
    assert "(data.max_drop_fraction=0.12 lets this data through)" in text  # the largest loss, 12.0%: exactly enough


def test_exactly_at_the_limit_passes_and_one_turns_it_off():
    at = DropLedger(0.1)
    at.add_report(report(empty_prompt=10))
    at.check()
    off = DropLedger(1.0)
    off.add_report(report(empty_prompt=99))
    off.check()
