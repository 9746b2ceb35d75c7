"""Every private TRL (and transformers/accelerate) internal posttrain touches, in one table.

Where TRL 1.16 offers an extension point (a callback, a collator, a config field, a subclass hook
it documents) posttrain uses it. Where it offers none, posttrain wraps or reads a private name, and
an upgrade that renames it would silently lose the feature (no timing split, no token audit, a
reference model loaded by name). So each such name is listed here with what it is for, and:

- `check(family)` runs before a trainer is built: a name missing from the installed TRL stops the
  run with exit 2, naming the attribute, the TRL version and the feature, instead of training
  without it;
- `require(obj, name)` is how the code reaches each one (the same error, at the point of use);
- tests/architecture/test_trl_internals.py checks every entry exists in the installed TRL and that
  TRL still *calls* it (the `called_as` text is in the caller's source), so an upgrade fails a test.
"""

from __future__ import annotations

import importlib
from dataclasses import dataclass

PINNED = "trl==1.16.0"


@dataclass(frozen=True)
class Internal:
    module: str  # where the owner lives
    owner: str  # class name, or "" for a module-level function
    name: str  # the private attribute
    purpose: str  # what posttrain loses without it
    families: tuple[str, ...]  # the algorithm families (recipe/algorithms.py) whose runs need it
    called_as: str = ""  # text that must appear in `caller`'s source: TRL still calls it (tests only)
    caller: str = ""  # 'module:Class' whose source holds `called_as` (default: the owner)
    instance: bool = False  # set on each instance in __init__ (not on the class): checked where it is used

    @property
    def where(self) -> str:
        return f"{self.module}.{self.owner + '.' if self.owner else ''}{self.name}"

    def resolve(self):
        module = importlib.import_module(self.module)
        return getattr(module, self.owner) if self.owner else module


INTERNALS = [
    Internal("trl.trainer.sft_trainer", "SFTTrainer", "_prepare_dataset",
             "posttrain's assistant-token masks and token audit (algorithms/sft.py subclasses it)", ("sft",),
             "self._prepare_dataset("),
    Internal("trl.trainer.sft_trainer", "SFTTrainer", "_tokenizer",
             "the tokenizer the token audit reads inside _prepare_dataset (algorithms/sft.py)", ("sft",),
             "self._tokenizer = ", instance=True),
    Internal("trl.trainer.sft_trainer", "SFTTrainer", "_skip_prepare_dataset",
             "telling a skipped dataset step from a missing one (algorithms/sft.py)", ("sft",),
             "self._skip_prepare_dataset = ", instance=True),
    Internal("trl.trainer.dpo_trainer", "", "create_model_from_path",
             "the reference model as the policy's own weights (algorithms/reference.py); TRL would reload it by name",
             ("dpo",), "create_model_from_path(", "trl.trainer.dpo_trainer:DPOTrainer"),
    Internal("trl.trainer.grpo_trainer", "", "create_model_from_path",
             "the reference model as the policy's own weights (algorithms/reference.py); TRL would reload it by name",
             ("grpo",), "create_model_from_path(", "trl.trainer.grpo_trainer:GRPOTrainer"),
    Internal("transformers.trainer", "Trainer", "_set_signature_columns_if_needed",
             "keeping DPO's length column for length-grouped batches (algorithms/dpo.py add_lengths)", ("dpo",),
             "self._signature_columns"),
    Internal("transformers.trainer", "Trainer", "_train_batch_size",
             "the CPU micro-batch split (algorithms/micro_batching.py): the batch size the dataloader takes, read from the "
             "args when the trainer was built", ("sft", "dpo"), "batch_size=self._train_batch_size", instance=True),
    Internal("trl.trainer.grpo_trainer", "GRPOTrainer", "_generate",
             "the generation/scoring time split of each RL step (algorithms/monitor.py attach_timers)", ("grpo",),
             "self._generate("),
    Internal("trl.trainer.grpo_trainer", "GRPOTrainer", "_calculate_rewards",
             "the scoring time and the empty <think> share (algorithms/monitor.py attach_timers)", ("grpo",),
             "self._calculate_rewards("),
    Internal("trl.trainer.grpo_trainer", "GRPOTrainer", "_get_per_token_logps_and_entropies",
             "the log-prob time of each RL step (algorithms/monitor.py attach_timers)", ("grpo",),
             "self._get_per_token_logps_and_entropies("),
    Internal("trl.trainer.grpo_trainer", "GRPOTrainer", "_tool_call_loop",
             "tool-call counts and health flags of runs with tools (algorithms/tool_use.py)", ("grpo",),
             "self._tool_call_loop("),
    Internal("trl.trainer.grpo_trainer", "GRPOTrainer", "_generate_and_score_completions",
             "tool-call counts of runs with tools (algorithms/tool_use.py)", ("grpo",),
             "self._generate_and_score_completions("),
    Internal("trl.trainer.grpo_trainer", "GRPOTrainer", "_generate_single_turn",
             "posttrain's decoding loop for rollouts (algorithms/grpo.py route_generate replaces the unwrapped "
             "model's generate, which this method calls)", ("grpo",), "unwrapped_model.generate("),
    # RLOO runs through GRPO's builder (algorithms/grpo.py build_rl_trainer): the same names on RLOOTrainer.
    Internal("trl.trainer.rloo_trainer", "", "create_model_from_path",
             "the reference model as the policy's own weights (algorithms/reference.py); TRL would reload it by name",
             ("rloo",), "create_model_from_path(", "trl.trainer.rloo_trainer:RLOOTrainer"),
    *(Internal("trl.trainer.rloo_trainer", "RLOOTrainer", name, purpose, ("rloo",), called_as) for name, purpose, called_as in (
        ("_generate", "the generation/scoring time split of each RL step (algorithms/monitor.py attach_timers)", "self._generate("),
        ("_calculate_rewards", "the scoring time and the empty <think> share (algorithms/monitor.py attach_timers)",
         "self._calculate_rewards("),
        ("_get_per_token_logps_and_entropies", "the log-prob time of each RL step (algorithms/monitor.py attach_timers)",
         "self._get_per_token_logps_and_entropies("),
        ("_generate_single_turn", "posttrain's decoding loop for rollouts (algorithms/grpo.py route_generate replaces the "
         "unwrapped model's generate, which this method calls)", "unwrapped_model.generate("))),
]


def _error(where: str, purpose: str) -> Exception:
    from posttrain.errors import UserError

    try:
        import trl

        version = trl.__version__
    except ImportError:  # pragma: no cover - trl is a dependency
        version = "?"
    return UserError(f"TRL {version} has no {where}, which posttrain uses for {purpose}. posttrain was written against "
                     f"{PINNED} and refuses to run without it rather than silently lose the feature: install {PINNED} "
                     "(pyproject.toml pins it).")


def check(family: str) -> None:
    """Before a trainer of this family is built: every private name its run needs exists (else exit 2)."""
    for internal in INTERNALS:
        if family in internal.families and not internal.instance and not hasattr(internal.resolve(), internal.name):
            raise _error(internal.where, internal.purpose)


def require(obj, name: str):
    """`getattr(obj, name)` for a name in INTERNALS, or the refusal naming it."""
    missing = object()
    found = getattr(obj, name, missing)
    if found is missing:
        entry = next((i for i in INTERNALS if i.name == name), None)
        raise _error(f"{type(obj).__name__}.{name}", entry.purpose if entry else "a feature")
    return found
