"""The token audit through the real CLI: what each dataset trains on, rows that train nothing dropped and
counted (never silently), a dataset with nothing to train an error, a template that rewrites history an
error naming the row and turn."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from posttrain.data.token_audit import Auditor, EndOfTurn, kept_labels

pytestmark = pytest.mark.e2e

LONG = "Count the apples again and again. " * 40  # about 300 tokens: fills max_length=64 on its own


def write(path: Path, rows: list[dict]) -> Path:
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


def test_auditor_counts_what_survives_truncation():
    auditor = Auditor("train", 4, EndOfTurn(frozenset({3}), "<eos>", True))
    assert auditor.add("a", 3, kept_labels([-100, 5, 3], 4))
    assert not auditor.add("a", 6, kept_labels([-100] * 4 + [7, 3], 4))  # its labels are cut away (keep_start)
    assert auditor.add("a", 6, kept_labels([-100] * 4 + [7, 3], 4, "keep_end"))
    assert auditor.add("b", 2, [9, -100])
    a, b = auditor.finish()
    assert (a.rows, a.no_label_rows, a.truncated_rows, a.label_tokens, a.end_of_turn_labelled) == (3, 1, 2, [2, 2], 2)
    assert b.label_tokens == [1] and b.end_of_turn_labelled == 0
    assert a.render() == ("token audit a (train): 3 rows; label tokens per row min 2 / median 2 / max 2; 1 rows without a label "
                          "token (dropped); 2 of 3 rows (66.7%) truncated at max_length=4 (keep_start: cuts the ends of the responses); end of turn (<eos>) labelled in 2 of 2 "
                          "rows (pad == eos: padding is masked by the attention mask, this one is trained)")


def test_rows_without_labels_are_dropped_counted_per_dataset(cli, tmp_path, data_dir):
    good = [json.loads(line) for line in (data_dir / "sft.jsonl").read_text().splitlines()[:20]]
    mixed = write(tmp_path / "mixed.jsonl", good[:10] + [{"prompt": LONG + str(i), "completion": " 4"} for i in range(3)])
    clean = write(tmp_path / "clean.jsonl", good[10:])
    out = tmp_path / "run"
    args = ["train", "--recipe", "recipes/sft/tiny-cpu.yaml", f"training.output_dir={out}", "training.max_steps=2",
            "training.max_length=64", f"data.datasets[0].name={mixed}", f"data.datasets[1].name={clean}"]
    refused = cli(*args)  # 3 of 13 rows lost is more than data.max_drop_fraction's default 0.1
    assert refused.returncode == 2, refused.stdout[-3000:] + refused.stderr[-3000:]
    assert (f"data.datasets[0] ({mixed}) lost 23.1% of its rows: 3 of 13 remaining rows without a label token"
            in refused.stderr), refused.stderr
    assert "data.datasets[1]" not in refused.stderr.split("data.max_drop_fraction=0.1")[1] and not out.exists()
    result = cli(*args, "data.max_drop_fraction=0.25")
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    lines = [line for line in result.stdout.splitlines() if line.startswith("token audit")]
    assert len(lines) == 2, result.stdout
    assert lines[0].startswith("token audit data.datasets[0] (train): 13 rows;")
    assert "; 3 rows without a label token (dropped); 3 of 13 rows (23.1%) truncated at max_length=64 (keep_start" in lines[0]
    assert lines[1].startswith("token audit data.datasets[1] (train): 10 rows;") and "; 0 rows without a label token;" in lines[1]
    audits = json.loads((out / "run_summary.json").read_text())["token_audit"]
    assert [(a["key"], a["rows"], a["no_label_rows"], a["truncated_rows"]) for a in audits] == [
        ("data.datasets[0]", 13, 3, 3), ("data.datasets[1]", 10, 0, 0)]
    assert all(a["label_tokens"]["min"] >= 1 and a["end_of_turn_labelled"] == 10 for a in audits)  # TRL appends eos to each completion


def test_a_dataset_with_nothing_to_train_is_an_error(cli, tmp_path):
    data = write(tmp_path / "long.jsonl", [{"prompt": LONG + str(i), "completion": " 4"} for i in range(4)])
    out = tmp_path / "run"
    result = cli("train", "--recipe", "recipes/sft/tiny-cpu.yaml", f"training.output_dir={out}", "training.max_length=64",
                 f"data.datasets[0].name={data}")
    assert result.returncode == 2, result.stdout[-2000:] + result.stderr[-2000:]
    assert "data.datasets[0] (train): none of its 4 rows has a token to train on after truncation at max_length=64" in result.stderr
    assert "Traceback" not in result.stderr and not out.exists()


def test_a_template_that_rewrites_history_stops_the_run_naming_row_and_turn(cli, tmp_path):
    template = tmp_path / "drops-think.jinja"
    template.write_text("{%- for m in messages -%}{%- if m.role == 'assistant' and not loop.last -%}"
                        "{{ '<|im_start|>assistant\\n' + m.content.split('</think>')[-1].lstrip() + '<|im_end|>\\n' }}"
                        "{%- else -%}{{ '<|im_start|>' + m.role + '\\n' + m.content + '<|im_end|>\\n' }}{%- endif -%}{%- endfor -%}"
                        "{%- if add_generation_prompt -%}{{ '<|im_start|>assistant\\n' }}{%- endif -%}")
    one = [{"role": "user", "content": "2+3?"}, {"role": "assistant", "content": "<think>2 and 3</think>5"}]
    two = one + [{"role": "user", "content": "and 4+4?"}, {"role": "assistant", "content": "<think>4 and 4</think>8"}]
    data = write(tmp_path / "chats.jsonl", [{"messages": one}] * 3 + [{"messages": two}])
    out = tmp_path / "run"
    result = cli("train", "--recipe", "recipes/sft/tiny-chat-cpu.yaml", f"training.output_dir={out}",
                 f"data.datasets[0].name={data}", f"training.chat_template_path={template}")
    assert result.returncode == 2, result.stdout[-2000:] + result.stderr[-2000:]
    assert "data.datasets[0], row 3, message 1: the template is not prefix-preserving" in result.stderr
    assert "training.chat_template_path=<file.jinja>" in result.stderr and "Traceback" not in result.stderr
    assert not out.exists()


def test_dpo_pairs_whose_prompt_fills_max_length_are_counted(cli, tmp_path):
    """TRL drops them without a word; the audit counts them, and trains on the rest."""
    pairs = [{"prompt": f"What is {i} + 1?", "chosen": f" {i + 1}", "rejected": f" {i + 2}"} for i in range(12)]
    data = write(tmp_path / "pairs.jsonl", pairs + [{"prompt": LONG + str(i), "chosen": " 4", "rejected": " 5"} for i in range(4)])
    out = tmp_path / "run"
    result = cli("train", "--recipe", "recipes/dpo/tiny-cpu.yaml", f"training.output_dir={out}", "training.max_steps=2",
                 "training.max_length=64", f"data.datasets[0].name={data}", "data.eval_fraction=null", "training.eval_strategy=no",
                 "training.eval_steps=null", "data.max_drop_fraction=0.3")  # 4 of 16 lost: over the default 0.1
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    line = next(line for line in result.stdout.splitlines() if line.startswith("token audit"))
    assert line.startswith("token audit data.datasets[0] (train): 16 pairs; label tokens per pair min ")
    assert "; 4 pairs without a label token (dropped); 4 of 16 pairs (25.0%) truncated at max_length=64" in line
    assert "labelled in 12 of 12 pairs" in line
