"""Full-fine-tuning DPO and GRPO measure against the policy's own starting weights, not a reload by name.

TRL reloads the reference with `from_pretrained(model.config._name_or_path)`, without the recipe's
revision or trust_remote_code: a pinned revision trained against whatever the name pointed at. Here
the checkpoint folder changes on disk after the policy loaded it (what a hub name does when its main
branch moves on while the recipe pins an older revision): the reference must still be the policy as
loaded. And the tokenizer is read at the pinned revision too.
"""

from __future__ import annotations

import json
import shutil

import pytest

pytestmark = pytest.mark.e2e


@pytest.fixture
def moving_model(tiny_dir, tmp_path, monkeypatch):
    """A private copy of the tiny model whose weights on disk change right after posttrain loads them."""
    import torch
    from safetensors.torch import load_file, save_file

    import posttrain.algorithms.run as run

    folder = tmp_path / "model"
    shutil.copytree(tiny_dir, folder)
    load_model = run.load_model

    def load_then_move(*args, **kwargs):
        loaded = load_model(*args, **kwargs)
        weights = folder / "model.safetensors"
        save_file({k: v + 1.0 for k, v in load_file(weights).items()}, weights, metadata={"format": "pt"})
        return loaded

    monkeypatch.setattr(run, "load_model", load_then_move)
    return folder


def build(recipe: dict, tmp_path):
    from posttrain.algorithms.run import build_run
    from posttrain.recipe.load import load_recipe

    return build_run(load_recipe(None, raw=recipe))


def same_weights(a, b) -> bool:
    import torch

    sa, sb = a.state_dict(), b.state_dict()
    return sa.keys() == sb.keys() and all(torch.equal(sa[k], sb[k]) for k in sa)


def test_dpo_reference_is_the_policy_as_loaded(moving_model, tmp_path, data_dir):
    recipe = {"model": {"base_model_name": str(moving_model), "revision": "v1"},
              "data": {"datasets": [{"name": str(data_dir / "preferences.jsonl"), "max_samples": 8}]},
              "training": {"algorithm": "dpo", "output_dir": str(tmp_path / "run"), "max_steps": 1, "max_length": 64,
                           "per_device_train_batch_size": 4, "activation_checkpointing": False}}
    run, trainer = build(recipe, tmp_path)
    try:
        assert not trainer.args.precompute_ref_log_probs and trainer.ref_model is not None
        assert trainer.ref_model is not trainer.model and same_weights(trainer.ref_model, trainer.model)
        assert not any(p.requires_grad for p in trainer.ref_model.parameters())
        trainer.train()  # and it trains with it
    finally:
        run.lock.release()


def test_grpo_reference_is_the_policy_as_loaded(moving_model, tmp_path, data_dir):
    recipe = {"model": {"base_model_name": str(moving_model), "revision": "v1"},
              "data": {"datasets": [{"name": str(data_dir / "problems.jsonl"), "template": "gsm8k", "max_samples": 8}]},
              "training": {"algorithm": "grpo", "output_dir": str(tmp_path / "run"), "rewards": [{"name": "answer_match"}],
                           "max_steps": 1, "num_generations": 2, "per_device_train_batch_size": 2, "max_completion_length": 4,
                           "activation_checkpointing": False}}
    run, trainer = build(recipe, tmp_path)
    try:
        assert trainer.beta == 0.04 and trainer.ref_model is not None
        assert trainer.ref_model is not trainer.model and same_weights(trainer.ref_model, trainer.model)
    finally:
        run.lock.release()


def test_the_tokenizer_is_read_at_the_pinned_revision(tiny_dir, monkeypatch):
    from transformers import AutoTokenizer

    from posttrain.models.loading import DeviceInfo, load_model
    from posttrain.recipe.schema import ModelSection

    calls = []
    original = AutoTokenizer.from_pretrained.__func__

    def spy(cls, source, *args, **kwargs):
        calls.append((str(source), kwargs))
        return original(cls, source, *args, **kwargs)

    monkeypatch.setattr(AutoTokenizer, "from_pretrained", classmethod(spy))
    load_model(ModelSection(base_model_name=str(tiny_dir), revision="v1"), DeviceInfo("cpu", bf16=False))
    assert calls and calls[0][1].get("revision") == "v1"
    calls.clear()
    load_model(ModelSection(base_model_name=str(tiny_dir), revision="v1", tokenizer_name=str(tiny_dir) + "/"), DeviceInfo("cpu", bf16=False))
    assert "revision" not in calls[0][1]  # another repository's tokenizer: the model's revision is not its own


def test_a_trl_without_the_hook_refuses_to_run():
    import types

    from posttrain.algorithms.reference import reference_is_the_policy
    from posttrain.errors import UserError

    with pytest.raises(UserError, match="no longer builds its reference model with create_model_from_path"):
        with reference_is_the_policy(types.ModuleType("trl.trainer.future_trainer"), None, None):
            pass
    from trl.trainer import dpo_trainer, grpo_trainer

    assert callable(dpo_trainer.create_model_from_path) and callable(grpo_trainer.create_model_from_path)
