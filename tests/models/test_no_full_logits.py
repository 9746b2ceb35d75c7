"""Big vocabularies: no training loss posttrain computes builds the full [tokens x vocabulary] logits.

With 262,144 vocabulary rows (Gemma 3) a step of 4,096 tokens would hold 4.3 GB of float32 logits,
and as much again for their gradient. TRL 1.16's trainers score tokens through a fused LM head
(`add_fused_lm_head`: tiles of 32,768 vocabulary rows, the head's weight used directly) and its
distillation through a chunked divergence; posttrain's own paths (padding-free batches, GRPO's
flattened scoring, the decoding loop with `logits_to_keep=1`) must not undo that. Each algorithm
trains one step in-process here with a hook on every layer that outputs vocabulary-wide rows: it
may run for the last position of a row (decoding), never over a whole sequence.
benchmarks/big_vocab.py measures what it saves on Gemma 3 270M.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]

RECIPES = {
    "sft": ("recipes/sft/tiny-cpu.yaml", ()),
    "sft padding-free": ("recipes/sft/tiny-cpu.yaml", ("training.padding_free=true",)),
    "cpt": ("recipes/cpt/tiny-cpu.yaml", ()),
    "dpo": ("recipes/dpo/tiny-cpu.yaml", ("data.eval_fraction=null", "training.eval_strategy=no", "training.eval_steps=null")),
    "kto": ("recipes/kto/tiny-cpu.yaml", ("data.eval_fraction=null", "training.eval_strategy=no", "training.eval_steps=null")),
    "grpo": ("recipes/grpo/tiny-cpu.yaml", ("training.num_generations=2", "training.max_completion_length=8")),
    "rloo": ("recipes/rloo/tiny-cpu.yaml", ("training.num_generations=2", "training.max_completion_length=8",
                                          "training.rewards=[{name: answer_match, weight: 1.0}]")),
    "distill": ("recipes/distill/tiny-cpu.yaml", ("training.max_completion_length=8", "training.teacher_model_name_or_path=tiny:qwen2-1m")),
}


@pytest.mark.parametrize("name", RECIPES)
def test_no_training_step_builds_the_whole_sequences_logits(name, tmp_path, isolated_cache):
    import torch

    from posttrain.algorithms.run import build_run
    from posttrain.recipe.load import load_recipe

    recipe, overrides = RECIPES[name]
    here = os.getcwd()
    os.chdir(REPO)  # the recipe's relative paths
    try:
        loaded = load_recipe(recipe, [f"training.output_dir={tmp_path / 'run'}", "training.max_steps=1", "training.save_strategy=no",
                                      "training.save_steps=null", "training.per_device_train_batch_size=4", *overrides])
        run, trainer = build_run(loaded, [])
        try:
            vocab = trainer.model.config.get_text_config().vocab_size
            models = [trainer.model] + [m for m in (getattr(trainer, "ref_model", None), getattr(trainer, "teacher_model", None))
                                        if isinstance(m, torch.nn.Module)]
            shapes: list[tuple[int, ...]] = []
            heads = [m for model in models for m in model.modules() if isinstance(m, torch.nn.Linear) and m.out_features == vocab]
            assert heads, f"{name}: no output layer of {vocab} rows found"
            for head in heads:
                head.register_forward_hook(lambda module, args, out: shapes.append(tuple(out.shape)))
            trainer.train()
        finally:
            run.lock.release()
    finally:
        os.chdir(here)
    whole = [s for s in shapes if len(s) != 3 or s[1] != 1]
    assert not whole, f"{name}: the output layer ran over whole sequences: {whole[:3]}"
    if name in ("grpo", "rloo", "distill"):
        assert shapes, f"{name}: its rollouts decode through the head, one position at a time"
