"""Rejection-sampling fine-tuning through the real CLI, on a random tiny model (algorithms/rft.py).

The shipped tiny recipe starts from the demo's SFT model; here it starts from tiny:qwen2-1m, which solves no sum, so
the rewards come from GRPO's end-to-end reward file (`user_rewards:letter_share`, the share of ASCII letters in a
completion) with a threshold about half of its random completions pass: what is kept, and how often, is then known from
the files the run writes."""

from __future__ import annotations

import json
import math
import os
from pathlib import Path

import pytest

pytestmark = pytest.mark.e2e

HERE = Path(__file__).resolve().parent
THRESHOLD = 0.82  # about the median letter share of tiny:qwen2-1m's samples of these prompts
SMALL = ["model.base_model_name=tiny:qwen2-1m", "training.rewards=[{name: 'user_rewards:letter_share'}]",
         f"training.reward_threshold={THRESHOLD}", "training.temperature=1.0", "training.max_completion_length=16",
         "training.rounds=2", "training.num_generations=4", "training.prompts_per_round=8", "training.per_device_train_batch_size=4",
         "training.learning_rate=1e-3", "training.max_length=96"]


def rft(cli, out: Path, *overrides):
    pythonpath = os.pathsep.join(filter(None, [str(HERE), os.environ.get("PYTHONPATH")]))
    return cli("train", "--recipe", "recipes/rft/tiny-cpu.yaml", f"training.output_dir={out}", *SMALL, *overrides,
               env={"PYTHONPATH": pythonpath})


def records(out: Path) -> list[dict]:
    return [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines() if line.strip()]


def letter_share(text: str) -> float:
    return sum(ch.isascii() and ch.isalpha() for ch in text) / max(1, len(text))


def test_rft_samples_keeps_and_trains_round_by_round(cli, tmp_path, tiny_dir):
    """Two rounds of 8 prompts x 4 samples, 8 rows each (2 steps a round), full fine-tuning, held-out scoring on."""
    from safetensors.torch import load_file

    out = tmp_path / "rft"
    result = rft(cli, out, "held_out.n=6", "held_out.every=2")
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    logged = records(out)
    rounds = [r for r in logged if "rft/round" in r]
    # one record a round, at the step it began: round 2 samples after round 1's 2 optimizer steps
    assert [(r["rft/round"], r["step"]) for r in rounds] == [(1, 0), (2, 2)]
    for r in rounds:
        assert r["rft/sampled"] == 8 * 4 and r["rft/rows"] == 8
        assert r["rft/acceptance"] == pytest.approx(r["rft/accepted"] / r["rft/sampled"], abs=1e-6)
        assert r["rft/kept"] == r["rft/accepted"] - r["rft/duplicates"] > 0
        assert 0 < r["rft/prompts_solved"] <= 1
        kept = [json.loads(line) for line in (out / "rft" / f"round-{r['rft/round']}.jsonl").read_text().splitlines()]
        assert len(kept) == r["rft/kept"]
        # every kept completion passed the recipe's reward and threshold, and none is kept twice for its prompt
        assert all(letter_share(k["completion"]) >= THRESHOLD for k in kept)
        pairs = [(k["position"], k["completion"].strip()) for k in kept]
        assert len(set(pairs)) == len(pairs)
        assert all(k["prompt"][-1]["role"] == "user" for k in kept)  # the prompt as GRPO reads it: a chat
    assert "rft round 1/2 (step 0): 32 completions sampled (8 prompts x 4)" in result.stdout
    # round 2's own pairs went through SFT's dataset step (tokens, labels, audit) before its epoch
    assert f"rft round 2: token audit train (train): {rounds[1]['rft/kept']} rows" in result.stdout
    losses = [r["loss"] for r in logged if "loss" in r]
    assert len(losses) == 4 and all(math.isfinite(x) for x in losses)
    assert [r["step"] for r in logged if "held_out/loose" in r] == [0, 2, 4]  # held-out scoring works beside the rounds
    summary = json.loads((out / "run_summary.json").read_text())
    assert summary["algorithm"] == "rft" and summary["global_step"] == 4
    assert summary["rft"]["sequences_trained"] == 16 and [r["acceptance"] for r in summary["rft"]["rounds"]] == [
        r["rft/acceptance"] for r in rounds]
    assert summary["token_audit"][0]["no_label_rows"] == 0 and summary["token_audit"][0]["end_of_turn_labelled"] > 0
    config = json.loads((out / "trl_config.json").read_text())
    assert config["num_train_epochs"] == 2 and config["padding_free"] is True  # a round per epoch; SFT's CPU batching
    before, after = load_file(tiny_dir / "model.safetensors"), load_file(out / "model.safetensors")
    changed = [name for name in before if not before[name].equal(after[name])]
    assert len(changed) > len(before) // 2  # full fine-tuning moved the weights


def test_rft_with_lora_trains_the_adapter_and_resumes_from_its_rounds(cli, tmp_path):
    """LoRA: only the adapter is saved, and it moved from its zero start. A run resumed from round 1's checkpoint
    with a longer schedule reads round 1's kept pairs from rft/round-1.jsonl and samples round 2 afresh."""
    from safetensors.torch import load_file

    out = tmp_path / "lora"
    first = rft(cli, out, "model.use_lora=true", "training.rounds=1", "training.save_strategy=steps", "training.save_steps=2",
                "held_out.every=100", "held_out.n=2")
    assert first.returncode == 0, first.stdout[-3000:] + first.stderr[-3000:]
    adapter = load_file(out / "adapter_model.safetensors")
    assert not (out / "model.safetensors").exists()
    lora_b = [t for name, t in adapter.items() if "lora_B" in name]
    assert lora_b and any(t.abs().sum() > 0 for t in lora_b)  # B starts at zero: the adapter trained
    kept_1 = (out / "rft" / "round-1.jsonl").read_text()

    again = rft(cli, out, "model.use_lora=true", "training.rounds=2", "training.save_strategy=steps", "training.save_steps=2",
                "held_out.every=100", "held_out.n=2")  # a longer schedule continues the finished run
    assert again.returncode == 0, again.stdout[-3000:] + again.stderr[-3000:]
    assert "rft round 1: " in again.stdout and "kept pairs read from" in again.stdout
    assert "rft round 2/2 (step 2)" in again.stdout
    assert (out / "rft" / "round-1.jsonl").read_text() == kept_1
    assert [(r["rft/round"], r["step"]) for r in records(out) if "rft/round" in r] == [(1, 0), (2, 2)]  # each round logged once
    summary = json.loads((out / "run_summary.json").read_text())["rft"]
    assert [r["round"] for r in summary["rounds"]] == [1, 2] and summary["sequences_trained"] == 16  # the whole run's


def test_rft_on_two_processes_samples_their_shares_and_trains_the_gathered_rows(cli, tmp_path):
    """Each process samples its share of the round's prompts; every process trains on the same gathered rows (2 x 2 per
    step: the one-process schedule of 4), and the main process alone logs and writes each round."""
    out = tmp_path / "two"
    result = rft(cli, out, "--nproc", "2", "training.per_device_train_batch_size=2", "held_out.n=4", "held_out.every=100")
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    assert "2 processes (2 on this node)" in result.stdout
    rounds = [r for r in records(out) if "rft/round" in r]
    assert [(r["rft/round"], r["step"], r["rft/sampled"]) for r in rounds] == [(1, 0, 32), (2, 2, 32)]
    positions = set()
    for r in rounds:
        kept = (out / "rft" / f"round-{r['rft/round']}.jsonl").read_text().splitlines()
        assert len(kept) == r["rft/kept"] > 0
        positions |= {json.loads(line)["position"] for line in kept}
    assert {p % 2 for p in positions} == {0, 1}  # process 0 samples the even positions, process 1 the odd: both gathered
    assert json.loads((out / "run_summary.json").read_text())["global_step"] == 4


@pytest.mark.parametrize("override, key, says", [
    ("training.rounds=0", "training.rounds", "greater than or equal to 1"),
    ("training.max_steps=10", "training.max_steps", "training.rounds"),
    ("training.num_train_epochs=2", "training.num_train_epochs", "training.rounds"),
    ("training.packing=true", "training.packing", "rows_per_round"),
    ("training.eval_strategy=steps", "training.eval_strategy", "held_out"),
    ("training.temperature=0", "training.temperature", "greater than 0"),
    ("training.rewards=[{model: runs/rm}]", "training.rewards[0].model", "algorithm grpo"),
    ("training.rewards=correct_lose", "training.rewards", "correct_loose"),
    ("training.round=3", "training.round", "rounds"),
    ("training.distributed=fsdp", "training.distributed", "use ddp or zero2"),
])
def test_bad_rft_keys_are_exit_2_naming_the_key_and_the_fix(cli, override, key, says):
    result = cli("validate", "recipes/rft/tiny-cpu.yaml", "model.base_model_name=tiny:qwen2-1m", override)
    assert result.returncode == 2, result.stdout[-2000:] + result.stderr[-2000:]
    problem = [line for line in result.stderr.splitlines() if line.strip().startswith(f"- {key} ")]
    assert problem and says in problem[0], result.stderr


def test_a_first_round_that_keeps_nothing_is_exit_2_before_output_dir_is_written(cli, tmp_path):
    out = tmp_path / "none"
    result = rft(cli, out, "training.reward_threshold=2.0")  # a share is at most 1
    assert result.returncode == 2, result.stdout[-2000:] + result.stderr[-2000:]
    assert "rft round 1: none of the 32 sampled completions" in result.stderr and "training.reward_threshold=2.0" in result.stderr
    assert not out.exists()


def test_rounds_draw_every_prompt_once_per_pass_through_the_data():
    """prompts_per_round 4 of 10 prompts: rounds 1-2 and half of 3 are one seeded shuffle (each prompt once), then a
    new one; 15 a round: a prompt recurs within the round only as the next pass begins. The same seed, the same draw."""
    from posttrain.algorithms.rft import Rounds

    rounds = Rounds.__new__(Rounds)  # the draw needs only the prompts, the count and the seed
    rounds.prompts, rounds.per_round, rounds.seed = list(range(10)), 4, 0
    stream = [i for number in (1, 2, 3, 4, 5) for i in rounds.drawn(number)]
    assert sorted(stream[:10]) == list(range(10)) and sorted(stream[10:20]) == list(range(10))
    assert stream[:10] != stream[10:20]  # a fresh shuffle on each pass
    rounds.per_round = 15
    assert rounds.drawn(1) == stream[:15]
    rounds.seed = 1
    assert rounds.drawn(1) != stream[:15]


def test_each_epoch_trains_the_rows_its_round_kept(repo, tmp_path, monkeypatch, isolated_cache):
    """The swap is what trains: in the run (in this process, to watch the dataset), every row the DataLoader reads
    before round 2 is one of round 1's, and every row after it one of round 2's."""
    import contextlib
    import sys

    import posttrain.algorithms.run as run
    from posttrain.algorithms import rft as rft_module
    from posttrain.recipe.load import load_recipe

    monkeypatch.syspath_prepend(str(HERE))
    served, rows_of = [], rft_module.Rounds.rows_of

    def recorded_rows(self, round_, tokenized):
        rows = rows_of(self, round_, tokenized)
        served.append(("round", round_.number, {tuple(r["input_ids"]) for r in rows}))
        return rows

    def read(self, i):
        served.append(("read", tuple(self.rows[i]["input_ids"])))
        return self.rows[i]

    monkeypatch.setattr(rft_module.Rounds, "rows_of", recorded_rows)
    monkeypatch.setattr(rft_module.RoundRows, "__getitem__", read)
    loaded = load_recipe(repo / "recipes/rft/tiny-cpu.yaml", [*SMALL, f"training.output_dir={tmp_path / 'run'}",
                                                              f"data.datasets[0].name={repo / 'recipes/demo/data/grpo.jsonl'}",
                                                              f"held_out.data={repo / 'recipes/demo/data/eval.jsonl'}", "held_out.n=2",
                                                              "held_out.every=100"])
    with contextlib.redirect_stdout(sys.stderr):
        assert run.run_training(loaded) == 0
    marks = [i for i, event in enumerate(served) if event[0] == "round"]
    assert [served[i][1] for i in marks] == [1, 2]
    first, second = served[marks[0]][2], served[marks[1]][2]
    reads_1 = [e[1] for e in served[marks[0] + 1:marks[1]] if e[0] == "read"]
    reads_2 = [e[1] for e in served[marks[1] + 1:] if e[0] == "read"]
    assert len(reads_1) == len(reads_2) == 8  # rows_per_round: one epoch each
    assert set(reads_1) <= first and set(reads_2) <= second and set(reads_2) - first  # round 2 trains its own rows
