"""Padding-free SFT: no token attends across examples, and it learns what padded batches learn.

The first test runs the trainer's own collator and forward (`compute_loss`, which turns the KV
cache off as in training) on a constructed batch of three rows; the second trains twice with the
real CLI, padded and padding-free, and compares eval losses after the same real tokens.
"""

import json

import pytest

pytestmark = pytest.mark.e2e

# float32 on every CPU kind: the comparisons below are bounded by float32 summation order; on a CPU with native bf16
# posttrain trains under bf16 autocast by default, whose rounding depends on each batch's shape and the CPU's kernels
FLOAT32 = "training.bf16=false"


@pytest.fixture(scope="module")
def sft_trainer(tmp_path_factory, data_dir):
    import os

    from posttrain.algorithms.run import build_run
    from posttrain.recipe.load import load_recipe

    here = os.getcwd()
    os.chdir(os.path.dirname(os.path.dirname(os.path.dirname(__file__))))  # the repo: the recipe's relative paths
    try:
        out = tmp_path_factory.mktemp("pf") / "run"
        loaded = load_recipe("recipes/sft/tiny-cpu.yaml", [f"data.datasets[0].name={data_dir / 'sft.jsonl'}",
                                                            f"training.output_dir={out}", "training.padding_free=true",
                                                            FLOAT32])
        run, trainer = build_run(loaded)
    finally:
        os.chdir(here)
    yield trainer
    run.lock.release()


def logits_by_row(trainer, rows):
    """Per-row logits from one flattened batch, through the trainer's collator and compute_loss."""
    import torch

    batch = trainer.data_collator(rows)
    assert batch["input_ids"].shape[0] == 1 and "attention_mask" not in batch  # one flattened row, no padding
    trainer.model.eval()
    with torch.no_grad(), pytest.warns(FutureWarning):  # return_outputs: TRL recomputes the logits (deprecated)
        loss, out = trainer.compute_loss(trainer.model, dict(batch), return_outputs=True)
    lengths = [len(r["input_ids"]) for r in rows]
    return loss, list(out.logits[0].split(lengths)), batch


def test_no_token_attends_across_examples(sft_trainer):
    import torch

    trainer = sft_trainer
    assert trainer.args.padding_free and trainer.data_collator.padding_free and trainer.args.max_length == 128
    rows = [{"input_ids": trainer.train_dataset[i]["input_ids"], "labels": trainer.train_dataset[i]["labels"]} for i in (0, 1, 2)]
    assert len({len(r["input_ids"]) for r in rows}) > 1, "rows of different lengths, so padding would have been needed"

    _, packed, batch = logits_by_row(trainer, rows)
    assert batch["position_ids"][0].tolist() == [p for r in rows for p in range(len(r["input_ids"]))]
    alone = [logits_by_row(trainer, [r])[1][0] for r in rows]
    for i, (a, b) in enumerate(zip(packed, alone)):
        assert torch.allclose(a, b, atol=1e-5), f"row {i}: max difference {(a - b).abs().max().item()}"

    # Changing row 0's tokens (same length) changes row 0's logits and nothing else.
    vocab = trainer.model.config.vocab_size
    changed = [{**rows[0], "input_ids": [(t * 7 + 11) % vocab for t in rows[0]["input_ids"]]}, *rows[1:]]
    _, perturbed, _ = logits_by_row(trainer, changed)
    assert (perturbed[0] - packed[0]).abs().max() > 1e-2
    for i in (1, 2):
        assert torch.allclose(perturbed[i], packed[i], atol=1e-5)

    # The check can fail: the same flattened tokens with one running position (what a model that
    # ignores the resets would see) do attend across rows.
    flat = {"input_ids": [t for r in rows for t in r["input_ids"]], "labels": [t for r in rows for t in r["labels"]]}
    _, crossed, _ = logits_by_row(trainer, [flat])
    assert (crossed[0][len(rows[0]["input_ids"]):] - torch.cat(packed[1:])).abs().max() > 1e-2


def test_padding_free_loss_is_the_padded_loss(sft_trainer):
    """The loss of a flattened batch is the padded batch's loss: no padding token and no row boundary counts."""
    import torch

    trainer = sft_trainer
    rows = [{"input_ids": trainer.train_dataset[i]["input_ids"], "labels": trainer.train_dataset[i]["labels"]} for i in (3, 4, 5)]
    flat_loss, _, _ = logits_by_row(trainer, rows)
    trainer.data_collator.padding_free = False
    try:
        padded = trainer.data_collator(rows)
        assert padded["attention_mask"].sum() < padded["attention_mask"].numel()  # there is padding to ignore
        with torch.no_grad(), pytest.warns(FutureWarning):
            padded_loss, _ = trainer.compute_loss(trainer.model, dict(padded), return_outputs=True)
    finally:
        trainer.data_collator.padding_free = True
    assert abs(flat_loss.item() - padded_loss.item()) < 1e-5, (flat_loss.item(), padded_loss.item())


def train(cli, tmp_path, name, data, *overrides):
    """One epoch of 48 rows in 6 steps of 8 (every run trains on exactly the same real tokens), eval before and after."""
    out = tmp_path / name
    result = cli("train", "--recipe", "recipes/sft/tiny-cpu.yaml", f"data.datasets[0].name={data}", f"training.output_dir={out}",
                 "data.datasets[0].max_samples=60", "data.eval_fraction=0.2", "training.eval_strategy=steps", "training.eval_steps=6",
                 "training.eval_on_start=true", "training.max_steps=-1", "training.num_train_epochs=1",
                 "training.per_device_train_batch_size=8", "training.logging_steps=1", "training.save_strategy=no",
                 "training.save_steps=null", "training.learning_rate=3e-3", FLOAT32, *overrides, timeout=900)
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    records = [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()]
    evals = [r["eval_loss"] for r in records if "eval_loss" in r]
    tokens = [r["num_tokens"] for r in records if "num_tokens" in r]
    return evals, tokens[-1], json.loads((out / "trl_config.json").read_text()), result.stdout


@pytest.fixture(scope="module")
def runs(cli, tmp_path_factory, data_dir):
    tmp = tmp_path_factory.mktemp("learn")
    data = data_dir / "sft.jsonl"
    return {"padded": train(cli, tmp, "padded", data, "training.train_sampling_strategy=random", "training.padding_free=false"),
            "padding_free": train(cli, tmp, "free", data, "training.padding_free=true", "training.train_sampling_strategy=random"),
            "default": train(cli, tmp, "default", data),
            "grouped": train(cli, tmp, "grouped", data, "training.train_sampling_strategy=group_by_length",
                             "training.padding_free=false")}


def test_padded_and_padding_free_runs_learn_the_same(runs):
    """Same data, seed and batches: the same real tokens, and eval losses equal to 1e-4 relative.

    (Tolerance: the two runs differ only in float32 summation order; a 4-step run of
    benchmarks/padding.py's data gave eval losses equal to 1e-9.)
    """
    padded, free = runs["padded"], runs["padding_free"]
    assert padded[2]["padding_free"] is False and free[2]["padding_free"] is True
    (start_p, end_p), (start_f, end_f) = padded[0], free[0]
    assert end_p < start_p - 0.3, padded[0]  # it learned something, so equal losses mean something
    assert padded[1] == free[1]  # the same real (non-padding) tokens
    assert abs(start_p - start_f) <= 1e-4 * start_p and abs(end_p - end_f) <= 1e-4 * end_p, (padded[0], free[0])


def test_cpu_default_is_padding_free_and_grouping_is_opt_in(runs):
    """On CPU posttrain flattens TRL's random batches (posttrain's CPU attention, or the model's own with
    transformers' packed-sequence mask, keeps the rows apart: on every CPU kind) and says so at start-up:
    the very run `training.padding_free=true` makes. Length grouping (it changed what `make demo` learned)
    is used when the recipe sets it and, on this data, learns within 3% of padded.

    (Tolerance: grouping changes which rows share a step, so the runs take different paths; 3% of
    the loss is about a tenth of the >0.3-nat drop both runs must show.)
    """
    padded, default, free, grouped = runs["padded"], runs["default"], runs["padding_free"], runs["grouped"]
    assert "training.train_sampling_strategy = " not in default[3]
    assert default[2]["train_sampling_strategy"] == "random" and default[2]["padding_free"] is True
    assert "training.padding_free = True  (posttrain at start-up: cpu: batches flattened into one row" in default[3]
    assert default[0] == free[0] and default[1] == free[1] == padded[1]  # the very same run as padding_free=true
    assert grouped[2]["train_sampling_strategy"] == "group_by_length"
    (start_p, end_p), (start_g, end_g) = padded[0], grouped[0]
    assert grouped[1] == padded[1] and end_g < start_g - 0.3, grouped[0]
    assert abs(end_g - end_p) <= 0.03 * end_p, (padded[0], grouped[0])
