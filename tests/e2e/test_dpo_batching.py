"""DPO batching: length-grouped batches work (TRL 1.16's DPO data alone stops transformers' sampler),
also on a dataset that carries precomputed reference log-probs (grouping is opt-in; precomputing is the
default for multi-epoch runs)."""

import json
import os

import pytest

pytestmark = pytest.mark.e2e


def test_dpo_group_by_length_groups_pairs_by_length(tmp_path, data_dir, repo):
    from transformers.trainer_pt_utils import LengthGroupedSampler

    from posttrain.algorithms.run import build_run
    from posttrain.recipe.load import load_recipe

    here = os.getcwd()
    os.chdir(repo)
    try:
        loaded = load_recipe("recipes/dpo/tiny-cpu.yaml", [f"data.datasets[0].name={data_dir / 'preferences.jsonl'}",
                                                           f"training.output_dir={tmp_path / 'run'}",
                                                           "training.train_sampling_strategy=group_by_length",
                                                           "training.precompute_ref_log_probs=true"])
        run, trainer = build_run(loaded)
    finally:
        os.chdir(here)
    try:
        loader = trainer.get_train_dataloader()  # TRL alone: "Can only automatically infer lengths ... 'input_ids' key"
        assert isinstance(trainer._get_train_sampler(), LengthGroupedSampler)
        ds = trainer.train_dataset
        expected = [min(len(p) + max(len(c), len(r)), trainer.args.max_length)
                    for p, c, r in zip(ds["prompt_ids"], ds["chosen_ids"], ds["rejected_ids"])]
        assert ds["length"] == expected
        batches = list(loader)  # the collator ignores the extra column
        assert all("ref_chosen_logps" in b for b in batches)  # precomputed: no reference forward per step
        widths = [b["input_ids"].shape[1] for b in batches]
        assert len(widths) == -(-len(ds) // trainer.args.per_device_train_batch_size)
        trainer.get_eval_dataloader()  # the eval sampler groups too, and needs the lengths as well
    finally:
        run.lock.release()
