"""Refilling groups without reward variance (algorithms/refill.py) on a scripted trainer: which rows a step
trains on, how batches of different widths are joined, what is counted, and that processes stay in step."""

from __future__ import annotations

import doctest
from collections import defaultdict
from types import SimpleNamespace

import pytest
import torch

from posttrain.algorithms import refill
from posttrain.algorithms.refill import assemble, attach_refill

PAD = 9


def test_doctests():
    assert doctest.testmod(refill).failed == 0


def test_assemble_pads_prompts_left_and_completions_right_with_trl_values():
    a = {"prompt_ids": torch.tensor([[1, 2], [3, 4]]), "prompt_mask": torch.ones(2, 2, dtype=torch.long),
         "completion_ids": torch.tensor([[5], [6]]), "completion_mask": torch.ones(2, 1, dtype=torch.long),
         "tool_mask": torch.ones(2, 1, dtype=torch.long), "advantages": torch.tensor([0.5, -0.5]),
         "num_items_in_batch": torch.tensor(2)}
    b = {"prompt_ids": torch.tensor([[7]]), "prompt_mask": torch.ones(1, 1, dtype=torch.long),
         "completion_ids": torch.tensor([[8, 8, 8]]), "completion_mask": torch.tensor([[1, 1, 0]]),
         "tool_mask": torch.tensor([[1, 0, 1]]), "advantages": torch.tensor([1.0]), "num_items_in_batch": torch.tensor(2)}
    out = assemble([a, b], [torch.tensor([1]), torch.tensor([0])], PAD)
    assert out["prompt_ids"].tolist() == [[3, 4], [PAD, 7]]
    assert out["prompt_mask"].tolist() == [[1, 1], [0, 1]]
    assert out["completion_ids"].tolist() == [[6, PAD, PAD], [8, 8, 8]]
    assert out["completion_mask"].tolist() == [[1, 0, 0], [1, 1, 0]]
    assert out["tool_mask"].tolist() == [[1, 1, 1], [1, 0, 1]]  # TRL pads tool masks with 1
    assert out["advantages"].tolist() == [-0.5, 1.0]


class Scripted:
    """A trainer whose rollouts are scripted: a prompt's `score` 0 gives its group rewards [0, 0] (no signal), 1 gives
    [0, 1]. With two processes it plays rank `rank`; the other rank's groups come from `other` (one list a draw)."""

    def __init__(self, scores, world=1, rank=0, other=()):
        self.num_generations = 2
        self.args = SimpleNamespace(per_device_train_batch_size=4, steps_per_generation=1, seed=0)
        self.accelerator = SimpleNamespace(num_processes=world, process_index=rank,
                                           gather=lambda t: t.reshape(1).repeat(world))
        self.train_dataset = [{"prompt": i, "score": s} for i, s in enumerate(scores)]
        self.processing_class = SimpleNamespace(pad_token_id=PAD)
        self.reward_weights = torch.tensor([1.0])
        self.state = SimpleNamespace(global_step=0)
        self.model = SimpleNamespace(training=True)
        self._metrics = {"train": defaultdict(list), "eval": defaultdict(list)}
        self.other, self.world, self.rank = list(other), world, rank
        self.calls = []

    def _calculate_rewards(self, inputs):
        mine = [[float(row["score"] * (i % 2))] for i, row in enumerate(inputs)]
        theirs = [[float(s * (i % 2))] for s in self.other.pop(0) for i in range(2)] if self.world > 1 else []
        return torch.tensor(mine + theirs if self.rank == 0 else theirs + mine)

    def _generate_and_score_completions(self, inputs):
        self.calls.append([row["prompt"] for row in inputs])
        self._calculate_rewards(inputs)
        width = 1 + len(self.calls)  # each draw is padded to its own length
        n = len(inputs)
        return {"prompt_ids": torch.tensor([[row["prompt"]] * width for row in inputs]),
                "prompt_mask": torch.ones(n, width, dtype=torch.long),
                "completion_ids": torch.full((n, width), 100 + len(self.calls)),
                "completion_mask": torch.ones(n, width, dtype=torch.long),
                "advantages": torch.arange(n, dtype=torch.float), "num_items_in_batch": torch.tensor(n * width)}


def rows(trainer, prompts):
    return [dict(trainer.train_dataset[p]) for p in prompts for _ in range(2)]


def test_groups_without_signal_are_replaced_by_fresh_prompts_until_the_batch_is_full():
    trainer = Scripted([0] * 6 + [1] * 6)
    lines = []
    attach_refill(trainer, 5, lines.append)
    out = trainer._generate_and_score_completions(rows(trainer, [0, 6]))  # prompt 0 has no signal, 6 has
    kept = out["prompt_ids"][::2, -1].tolist()
    assert kept[0] == 6 and trainer.train_dataset[kept[1]]["score"] == 1 and len(kept) == 2
    assert kept[1] in trainer.calls[-1]  # taken from the last draw, which filled the batch
    draws = len(trainer.calls) - 1
    metrics = {k: v for k, v in trainer._metrics["train"].items()}
    assert metrics == {"refill/draws": [draws], "refill/groups_drawn": [2.0 * (draws + 1)], "refill/groups_kept": [2.0],
                       "refill/groups_short": [0.0]}
    assert out["completion_mask"].sum() == out["num_items_in_batch"] == 2 * 2 + 2 * (1 + len(trainer.calls))
    assert not lines


def test_a_batch_with_signal_everywhere_is_trls_batch_untouched():
    trainer = Scripted([1] * 4)
    attach_refill(trainer, 3)
    original = trainer._generate_and_score_completions  # the wrapper
    out = original(rows(trainer, [0, 1]))
    assert len(trainer.calls) == 1 and out["advantages"].tolist() == [0, 1, 2, 3]
    assert trainer._metrics["train"]["refill/draws"] == [0.0]


def test_when_the_draws_run_out_the_batch_is_topped_up_and_it_is_said():
    trainer = Scripted([0] * 8)
    lines = []
    attach_refill(trainer, 2, lines.append)
    out = trainer._generate_and_score_completions(rows(trainer, [0, 1]))
    assert len(trainer.calls) == 3 and out["prompt_ids"][::2, -1].tolist() == [0, 1]  # the first groups dropped
    assert trainer._metrics["train"]["refill/groups_short"] == [2.0]
    assert len(lines) == 1 and "0 of 2 groups had reward variance after 2 extra draw(s)" in lines[0]


def test_processes_draw_together_until_every_one_is_full():
    """Rank 0 is full at once; rank 1 (scripted) has one group with signal per draw: both draw once more, and
    rank 0 keeps its first batch while the counts cover both ranks."""
    trainer = Scripted([1] * 8, world=2, rank=0, other=[[0, 1], [1, 0]])
    attach_refill(trainer, 4)
    out = trainer._generate_and_score_completions(rows(trainer, [0, 1]))
    assert len(trainer.calls) == 2 and out["prompt_ids"][::2, -1].tolist() == [0, 1]
    assert out["num_items_in_batch"] == 2 * out["completion_mask"].sum()  # gathered over both ranks (scripted alike)
    assert trainer._metrics["train"]["refill/groups_drawn"] == [8.0] and trainer._metrics["train"]["refill/groups_kept"] == [4.0]


def test_evaluation_passes_through():
    trainer = Scripted([0] * 4)
    attach_refill(trainer, 3)
    trainer.model.training = False
    trainer._generate_and_score_completions(rows(trainer, [0, 1]))
    assert len(trainer.calls) == 1 and not trainer._metrics["train"]


def test_fresh_prompts_depend_only_on_seed_step_and_draw():
    data = [{"prompt": i} for i in range(50)]
    a = refill.fresh_prompts(data, 0, 3, 1, 0, 4, 2)
    assert a == refill.fresh_prompts(data, 0, 3, 1, 0, 4, 2) and a != refill.fresh_prompts(data, 0, 4, 1, 0, 4, 2)
    assert [r["prompt"] for r in a[::2]] == [r["prompt"] for r in a[1::2]]  # each prompt twice in a row
    other = refill.fresh_prompts(data, 0, 3, 1, 1, 4, 2)
    assert not {r["prompt"] for r in a} & {r["prompt"] for r in other}  # ranks draw different prompts


@pytest.mark.parametrize("world, batch, ok", [(1, 4, True), (2, 2, False), (2, 4, True)])
def test_the_recipe_needs_whole_groups_per_process_with_several(world, batch, ok):
    """TRL accepts 2 processes x 2 rows in groups of 4 (a group spans the processes); refill keeps each process's
    own groups, so the recipe error names the key and both ways out (exit 2 in the CLI)."""
    from posttrain.recipe.errors import RecipeError
    from posttrain.recipe.load import load_recipe

    raw = {"model": {"base_model_name": "tiny:qwen2-1m"}, "data": {"datasets": [{"name": "x.jsonl"}]},
           "training": {"algorithm": "grpo", "output_dir": "out", "rewards": [{"name": "answer_match"}], "num_generations": 4,
                        "per_device_train_batch_size": batch, "refill_zero_variance_groups": 2}}
    if ok:
        assert load_recipe(None, raw=raw, world_size=world).recipe.training.refill_zero_variance_groups == 2
    else:
        with pytest.raises(RecipeError, match=r"training.refill_zero_variance_groups.*whole groups of num_generations=4.*"
                                              r"training.refill_zero_variance_groups=0"):
            load_recipe(None, raw=raw, world_size=world)


def test_the_key_is_off_by_default_and_checked():
    from posttrain.recipe.errors import RecipeError
    from posttrain.recipe.load import load_recipe

    raw = {"model": {"base_model_name": "tiny:qwen2-1m"}, "data": {"datasets": [{"name": "x.jsonl"}]},
           "training": {"algorithm": "rloo", "output_dir": "out", "rewards": [{"name": "answer_match"}]}}
    assert load_recipe(None, raw=raw).recipe.training.refill_zero_variance_groups == 0
    with pytest.raises(RecipeError, match=r"training.refill_zero_variance_groups \(from override\): -1 .*greater than or equal to 0"):
        load_recipe(None, ["training.refill_zero_variance_groups=-1"], raw=raw)
    with pytest.raises(RecipeError, match=r"training.refill_zero_variance_groups.*unknown key"):
        load_recipe(None, ["training.refill_zero_variance_groups=1"], raw={**raw, "training": {"algorithm": "sft", "output_dir": "o"}})
