"""Reward models through TRL's RewardTrainer, and a trained one as an RL reward.

    posttrain train --recipe recipes/reward/tiny-cpu.yaml

An outcome reward model (Ouyang et al. 2022, InstructGPT section 3.5; Stiennon et al. 2020) is the
base model's body with a one-output score head (AutoModelForSequenceClassification, num_labels=1):
it scores a whole prompt + response at its last non-pad token. It learns from the same
prompt/chosen/rejected pairs as DPO with the Bradley-Terry loss -log sigmoid(r(chosen) - r(rejected))
(TRL's `center_rewards_coefficient` adds Eisenstein et al.'s centering term when set).

What posttrain adds to TRL's trainer:
- the pairs TRL drops without a word (chosen or rejected longer than `max_length`) are counted in the
  token audit and against `data.max_drop_fraction`;
- with evaluation data, the held-out pair accuracy (the share of held-out pairs whose chosen response
  scores strictly above the rejected one; ties count as wrong) before the first step and after the
  last, exact over every pair, in run_summary.json as `pair_accuracy` (TRL's `eval_accuracy` is a
  mean of per-batch means);
- with LoRA the adapter is a sequence-classification adapter (PEFT task SEQ_CLS), so the new score
  head trains and is saved with it.

As a reward in GRPO/RLOO (`training.rewards: [{model: runs/rm, weight: 1.0}]`): `load_reward_model`
loads it (any model spec: directory, adapter directory, hub id, s3://), refuses a causal LM, and
hands TRL the model with its own tokenizer. TRL's trainer (public `reward_funcs` /
`reward_processing_classes` arguments) places it on the policy's device, re-tokenizes each prompt +
completion text with the reward model's tokenizer (chats through its chat template), scores the
whole generation batch in one forward pass, and logs it as `rewards/<folder name>/mean` like any
reward; so a reward model need not share the policy's tokenizer.
"""

from __future__ import annotations

from pathlib import Path

from transformers import TrainerCallback


def build_trainer(run):
    from trl import RewardTrainer

    if run.peft_config is not None:
        run.peft_config.task_type = "SEQ_CLS"  # PEFT adds the score head to modules_to_save: it trains and is saved
    trainer = RewardTrainer(**run.trainer_kwargs())
    audit_pairs(run, trainer)
    if trainer.eval_dataset is not None:
        trainer.add_callback(PairAccuracyCallback(trainer, run.summary))
    return trainer


def audit_pairs(run, trainer) -> None:
    """The token audit of the tokenized pairs, per recipe dataset; pairs TRL filtered out for length are
    counted as dropped (TRL's RewardTrainer drops a pair whose chosen or rejected text exceeds max_length)."""
    from collections import Counter

    from posttrain.data.token_audit import SOURCE_COLUMN, Auditor, end_of_turn

    from .common import log

    eot = end_of_turn(trainer.processing_class)
    max_length = trainer.args.max_length
    for split, before, after in (("train", run.train_dataset, trainer.train_dataset), ("eval", run.eval_dataset, trainer.eval_dataset)):
        if before is None or after is None or isinstance(after, dict):
            continue
        auditor = Auditor(split, None, eot, unit="pair")
        sources = after[SOURCE_COLUMN] if SOURCE_COLUMN in after.column_names else [None] * len(after)
        for chosen, rejected, source in zip(after["chosen_ids"], after["rejected_ids"], sources):
            auditor.add(source, max(len(chosen), len(rejected)), chosen + rejected)
        dropped = len(before) - len(after)
        if dropped and SOURCE_COLUMN in before.column_names:
            for source, n in (Counter(before[SOURCE_COLUMN]) - Counter(sources)).items():
                for _ in range(n):
                    auditor.add(source, (max_length or 0) + 1, [])
        if dropped:
            log(f"reward ({split}): {dropped} of {len(before)} pairs dropped, chosen or rejected longer than training.max_length="
                f"{max_length} tokens (TRL's RewardTrainer filters them; raise max_length to keep them)")
        run.token_audits += auditor.finish()


def pair_accuracy(trainer) -> tuple[int, int]:
    """(correct, pairs) over the trainer's evaluation data: chosen scored strictly above rejected.

    Every process scores its share of the batches; gather_for_metrics joins them without the padding
    copies a distributed sampler adds, so the count is over each held-out pair once.
    """
    import torch

    model = trainer.model
    was_training = model.training
    model.eval()
    correct = total = 0
    try:
        with torch.inference_mode():
            for batch in trainer.get_eval_dataloader():
                scores = model(input_ids=batch["input_ids"], attention_mask=batch["attention_mask"], use_cache=False).logits[:, 0]
                chosen, rejected = scores.float().chunk(2)
                wins = trainer.accelerator.gather_for_metrics(chosen > rejected)
                correct += int(wins.sum())
                total += int(wins.numel())
    finally:
        model.train(was_training)
    return correct, total


class PairAccuracyCallback(TrainerCallback):
    """Held-out pair accuracy at the start and at the end of training, into the run summary and the log."""

    def __init__(self, trainer, summary: dict):
        self.trainer, self.summary = trainer, summary

    def _measure(self, when: str, step: int) -> None:
        from .common import log

        correct, pairs = pair_accuracy(self.trainer)
        accuracy = correct / pairs if pairs else None
        record = self.summary.setdefault("pair_accuracy", {"pairs": pairs, "ties_count_as": "wrong"})
        record[when] = {"step": step, "correct": correct, "accuracy": accuracy}
        if accuracy is not None:
            log(f"reward: held-out pair accuracy at step {step} ({when}): {correct}/{pairs} = {accuracy:.3f}")

    def on_train_begin(self, args, state, control, **kwargs):
        self._measure("start", state.global_step)

    def on_train_end(self, args, state, control, **kwargs):
        self._measure("end", state.global_step)


def load_reward_model(spec: str, key: str, dtype):
    """(model, tokenizer) of a trained reward model for TRL's reward_funcs: frozen, in eval mode, named after
    `spec` (what TRL logs: rewards/<last part of spec>/mean). A causal LM or another classifier is exit 2."""
    from transformers import AutoConfig, AutoModelForSequenceClassification, AutoTokenizer

    from posttrain.errors import UserError
    from posttrain.internals import require
    from posttrain.models.loading import adapter_base, resolve_source
    from posttrain.recipe.preflight import reward_folder_problem, reward_model_problem

    source = resolve_source(spec)
    adapter = None
    base = adapter_base(source) if Path(source).is_dir() else None
    if base is not None:
        adapter, source = source, resolve_source(base)
    if adapter is not None:
        problem = reward_folder_problem(Path(adapter))
    elif Path(source).is_dir():
        problem = reward_folder_problem(Path(source))
    else:
        try:
            problem = reward_model_problem(AutoConfig.from_pretrained(source).to_dict())
        except (OSError, ValueError) as e:
            raise UserError(f"{key}: cannot load {spec!r}: {e}") from None
    if problem:
        raise UserError(f"{key}: {spec!r} is {problem}. Train one with training.algorithm=reward on preference pairs "
                        "(recipes/reward/tiny-cpu.yaml) and give its output_dir here; a function reward goes under `name:`.")
    try:
        model = AutoModelForSequenceClassification.from_pretrained(source, num_labels=1, dtype=dtype)
        tokenizer = AutoTokenizer.from_pretrained(adapter if adapter and (Path(adapter) / "tokenizer_config.json").is_file() else source)
    except (OSError, ValueError, KeyError) as e:
        raise UserError(f"{key}: cannot load {spec!r}: {e}") from None
    if adapter is not None:
        from peft import PeftModel

        model = PeftModel.from_pretrained(model, adapter).merge_and_unload()
    if tokenizer.pad_token is None:
        tokenizer.pad_token = tokenizer.eos_token
    model.config.pad_token_id = tokenizer.pad_token_id  # the score is read at the last non-pad token
    require(model.config, "_name_or_path")  # TRL names the reward by it
    model.config._name_or_path = spec.rstrip("/")
    model.eval()
    model.requires_grad_(False)
    return model, tokenizer
