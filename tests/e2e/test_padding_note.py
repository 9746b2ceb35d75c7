"""The start-up padding note: how much of a run's batches is padding, and an alternative that is the same run.

The note's claim is tested as a user would act on it: the suggested micro-batches of one row with
gradient accumulation train the same rows per optimizer step, so the loss of every step equals the
padded run's, and the same real tokens pass.
"""

import json

import pytest

from posttrain.data.padding import padding_share

pytestmark = pytest.mark.e2e


def test_padding_share_counts_the_slots_a_batch_pads():
    assert padding_share([5, 5, 5, 5], [5, 5, 5, 5], batch_size=2) == 0
    # one batch of rows 1 and 9 tokens long: 18 slots, 10 tokens (whatever the order drawn)
    assert padding_share([1, 9], [1, 9], batch_size=2) == pytest.approx(1 - 10 / 18)
    # a DPO pair is two rows padded to the longer one: prompt 2 + answers 1 and 3 -> 2 x 5 slots, 8 tokens
    assert padding_share([5], [8], batch_size=1, rows_per_entry=2) == pytest.approx(1 - 8 / 10)
    assert padding_share([1, 9], [1, 9], batch_size=1) == 0  # rows alone never pad


@pytest.fixture(scope="module")
def varied(tmp_path_factory):
    """Prompt/completion rows from 3 to ~120 tokens: most of a random batch's slots are padding."""
    rows = [{"prompt": f"Count to {n}.", "completion": " ".join(str(i) for i in range(1, n + 1))} for n in
            [1, 40, 3, 25, 2, 60, 5, 12, 1, 33, 8, 50, 2, 18, 4, 45] * 2]
    path = tmp_path_factory.mktemp("varied") / "varied.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


def run(cli, out, recipe, *overrides):
    result = cli("train", "--recipe", recipe, f"training.output_dir={out}", "training.max_steps=3", "training.logging_steps=1",
                 "training.save_strategy=no", "training.save_steps=null", "training.learning_rate=3e-3",
                 "training.bf16=false",  # float32: bf16 rounding depends on each batch's shape
                 *overrides, timeout=600)
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    records = [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()]
    return result.stdout, [r["loss"] for r in records if "loss" in r], [r["num_tokens"] for r in records if "num_tokens" in r]


def test_sft_note_names_micro_batches_that_train_the_same_rows(cli, tmp_path, varied):
    stdout, losses, tokens = run(cli, tmp_path / "padded", "recipes/sft/tiny-cpu.yaml", f"data.datasets[0].name={varied}",
                                 "training.per_device_train_batch_size=8", "training.micro_batching=false", "training.padding_free=false")
    note = next(line for line in stdout.splitlines() if line.startswith("padding: "))
    assert "in batches of 8 rows" in note
    share = int(note.split("padding: ")[1].split("%")[0])
    assert 40 <= share <= 90, note
    advice = "training.per_device_train_batch_size=1 training.gradient_accumulation_steps=8"
    assert advice in note  # this machine is a CPU: the suite runs without a GPU

    stdout1, losses1, tokens1 = run(cli, tmp_path / "micro", "recipes/sft/tiny-cpu.yaml", f"data.datasets[0].name={varied}",
                                    *advice.split(), "training.padding_free=false")
    assert not any(line.startswith("padding: ") for line in stdout1.splitlines())  # nothing left to pad
    assert tokens1 == tokens and len(losses1) == len(losses) == 3
    assert losses1 == pytest.approx(losses, rel=1e-5)  # the same rows per step, the same loss (float32 order aside)
    assert losses[-1] < losses[0]  # it trained, so equal losses mean something

    # posttrain's micro-batch rule (on a CPU when batches are padded) picks a split or keeps the batches, from the
    # rows' lengths alone: whichever it picks, the start-up line, the saved TRL config and the losses say the same run
    stdout2, losses2, tokens2 = run(cli, tmp_path / "auto", "recipes/sft/tiny-cpu.yaml", f"data.datasets[0].name={varied}",
                                    "training.per_device_train_batch_size=8", "training.padding_free=false")
    config = json.loads((tmp_path / "auto" / "trl_config.json").read_text())
    micro, accumulation = config["per_device_train_batch_size"], config["gradient_accumulation_steps"]
    assert micro * accumulation == 8
    decided = [line for line in stdout2.splitlines() if "micro-batch" in line]
    if micro < 8:
        assert decided[0].startswith(f"training.per_device_train_batch_size = {micro}, gradient_accumulation_steps = {accumulation}  "
                                     "(posttrain at start-up: cpu: the same 8 rows per optimizer step"), decided
    else:
        assert decided[0].startswith("micro-batching: batches of 8 rows kept (a pass's fixed cost counted as 100 tokens' work"), decided
    assert tokens2 == tokens and losses2 == pytest.approx(losses, rel=1e-5)

    # SFT's CPU default, on every CPU kind: each batch of 8 flattened into one row (no padding, no note, no split), the
    # same run again
    stdout3, losses3, tokens3 = run(cli, tmp_path / "flat", "recipes/sft/tiny-cpu.yaml", f"data.datasets[0].name={varied}",
                                    "training.per_device_train_batch_size=8")
    config = json.loads((tmp_path / "flat" / "trl_config.json").read_text())
    assert config["padding_free"] and config["per_device_train_batch_size"] == 8 and config["gradient_accumulation_steps"] == 1
    assert "training.padding_free = True  (posttrain at start-up: cpu: batches flattened" in stdout3
    assert not any(line.startswith("padding: ") or "micro-batch" in line for line in stdout3.splitlines())
    assert tokens3 == tokens and losses3 == pytest.approx(losses, rel=1e-5)


def test_dpo_note_counts_pairs_and_the_micro_batches_train_the_same_pairs(cli, tmp_path, varied):
    pairs = [json.loads(line) for line in varied.read_text().splitlines()]
    data = tmp_path / "pairs.jsonl"
    data.write_text("".join(json.dumps({"prompt": r["prompt"], "chosen": r["completion"], "rejected": r["completion"] + " 0"}) + "\n"
                            for r in pairs))
    common = [f"data.datasets[0].name={data}", "training.precompute_ref_log_probs=false"]
    stdout, losses, _ = run(cli, tmp_path / "padded", "recipes/dpo/tiny-cpu.yaml", *common, "training.per_device_train_batch_size=4",
                            "training.micro_batching=false")
    note = next(line for line in stdout.splitlines() if line.startswith("padding: "))
    assert "in batches of 4 pairs" in note and "training.gradient_accumulation_steps=4" in note
    _, losses1, _ = run(cli, tmp_path / "micro", "recipes/dpo/tiny-cpu.yaml", *common, "training.per_device_train_batch_size=1",
                        "training.gradient_accumulation_steps=4")
    assert len(losses1) == len(losses) == 3 and losses1 == pytest.approx(losses, rel=1e-5)

    # a loss over the whole batch (aot sorts its pairs) cannot be split exactly: the rule keeps the batches and says why
    stdout2, _, _ = run(cli, tmp_path / "aot", "recipes/dpo/tiny-cpu.yaml", *common, "training.per_device_train_batch_size=4",
                        "training.loss_type=[aot]")
    assert "micro-batching: batches of 4 pairs kept (loss_type aot is computed over the whole batch, so a split would change the loss)" in stdout2
    assert json.loads((tmp_path / "aot" / "trl_config.json").read_text())["per_device_train_batch_size"] == 4
