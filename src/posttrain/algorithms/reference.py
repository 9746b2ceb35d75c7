"""The reference model of full-fine-tuning DPO and GRPO is the policy as it was loaded.

TRL 1.16's DPOTrainer and GRPOTrainer build a full-fine-tuning reference model themselves, with
`create_model_from_path(model.config._name_or_path, dtype=..., attn_implementation=...)`: a second
load from the model's name, without the recipe's `model.revision` or `model.trust_remote_code`. A
run pinned to a revision then computes its KL (GRPO) or implicit reward (DPO) against the hub's
current main branch, or fails to load it offline; a run whose embeddings posttrain grew for a new
token gets a reference of another shape. (With LoRA there is no second model: the reference is
the base with the adapter switched off, and with DPO's precomputed reference log-probs the policy
itself computes them before its first step.)

posttrain hands the trainer a frozen copy of the policy instead: the same weights, dtype, attention
kernel and vocabulary, bit for bit, and no second read of the checkpoint. Under DeepSpeed ZeRO-3,
where the loaded weights are already partitioned across processes and cannot be copied, the
reference is loaded from the same place with the recipe's revision and trust_remote_code.

GRPOTrainer has no argument for a reference model, so the copy goes in through the one function
both trainers build it with, `create_model_from_path` in their modules, replaced only while the
trainer is constructed. `reference_is_the_policy` refuses to run when that function is gone from
a trainer module (a TRL upgrade), rather than silently train against another checkpoint.
"""

from __future__ import annotations

import contextlib
import copy


def frozen_copy(model):
    """A copy of `model` that does not train: eval mode, no gradients."""
    reference = copy.deepcopy(model)
    reference.eval()
    reference.requires_grad_(False)
    return reference


def is_partitioned() -> bool:
    """True under DeepSpeed ZeRO-3, which split the weights across processes as they loaded (they cannot
    be copied). transformers' public test, true while the run's TrainingArguments hold a ZeRO-3 config,
    rather than DeepSpeed's private per-parameter `ds_id`."""
    from transformers.integrations import is_deepspeed_zero3_enabled

    return is_deepspeed_zero3_enabled()


@contextlib.contextmanager
def reference_is_the_policy(trainer_module, policy, model_cfg):
    """While a DPO/GRPO trainer is built, its reference model is `frozen_copy(policy)` (or, under
    ZeRO-3, a load with the recipe's revision and trust_remote_code). Yields the list of model ids
    TRL asked for (empty when the run needs no reference: LoRA, beta=0, precomputed log-probs)."""
    from posttrain.errors import UserError

    original = getattr(trainer_module, "create_model_from_path", None)
    if original is None:
        raise UserError(f"{trainer_module.__name__} no longer builds its reference model with create_model_from_path "
                        "(a TRL version posttrain was not written for): posttrain cannot make the reference the policy's "
                        "own weights. Install the TRL version in pyproject.toml.")
    asked: list[str] = []

    def reference(model_id, *args, **kwargs):
        asked.append(model_id)
        if is_partitioned():
            if model_cfg.revision:
                kwargs["revision"] = model_cfg.revision
            kwargs["trust_remote_code"] = model_cfg.trust_remote_code
            return original(model_id, *args, **kwargs)
        return frozen_copy(policy)

    trainer_module.create_model_from_path = reference
    try:
        yield asked
    finally:
        trainer_module.create_model_from_path = original
