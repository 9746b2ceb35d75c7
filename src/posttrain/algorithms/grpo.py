"""GRPO and GSPO through TRL's GRPOTrainer.

    posttrain train --recipe recipes/grpo/tiny-cpu.yaml
    posttrain train --recipe recipes/gspo/tiny-cpu.yaml

GRPO (Shao et al. 2024, DeepSeekMath): sample `num_generations` completions per prompt, score them
with the recipe's rewards, normalise within the group, and take clipped policy-gradient steps with
a KL penalty of weight `beta` towards the reference model (posttrain's default 0.04; TRL's 0.0
removes the term). GSPO (Zheng et al. 2025) is the same trainer with sequence-level importance
ratios and its own preset (see `posttrain.recipe.defaults`). With LoRA the reference model is the
base with the adapter switched off; with full training TRL loads a frozen copy.

With `training.tools` / `training.environment` the rollouts are multi-turn: TRL's tool loop, with
the tools run isolated and their use counted by posttrain (`posttrain.algorithms.tool_use`).
"""

from __future__ import annotations

from posttrain.rewards.builtin import get_reward


def reward_functions(training) -> list:
    """The recipe's rewards as TRL reward functions (weights go to GRPOConfig.reward_weights)."""
    from posttrain.errors import UserError

    functions = []
    for i, spec in enumerate(training.rewards):
        try:
            functions.append(get_reward(spec.name, **spec.options))
        except ValueError as e:
            raise UserError(f"training.rewards[{i}]: {e}") from None
    return functions


def build_trainer(run):
    from trl import GRPOTrainer

    if run.loaded.processor is not None:
        # Image prompts (a vision-language model): the tower frozen and LoRA aimed as in sft_vlm. TRL
        # renders each chat with its images through the processor when it generates.
        from .run import log
        from .sft_vlm import prepare_model

        prepare_model(run, log)
    from .tool_use import attach_tool_counts, trainer_kwargs

    trainer = GRPOTrainer(reward_funcs=reward_functions(run.loaded_recipe.recipe.training), **run.trainer_kwargs(),
                          **trainer_kwargs(run.toolbox))
    if run.loaded.processor is not None:
        from posttrain.models.vision import render_parts

        log(render_parts(trainer.model))
    if trainer.args.bf16 and trainer.args.use_cpu and not trainer.args.use_vllm:
        generate_without_autocast(trainer)
    if run.monitor is not None and run.monitor.timers is not None:
        from .monitor import attach_timers

        attach_timers(trainer, run.monitor.timers)  # generation / scoring split and empty <think> share
    if run.toolbox is not None and run.monitor is not None:
        attach_tool_counts(trainer, run.monitor.tools, run.toolbox)  # tools/* metrics, health flags
    return trainer


def generate_without_autocast(trainer) -> None:
    """CPU bf16 runs generate in float32: the autocast accelerate wraps around the model's forward
    casts every weight to bf16 again for each decoded token, which made generation 1.46x slower
    than float32 (tiny:qwen2-6m, 512-token completions: 30.9 s against 21.2 s of a run), while
    the log-prob and training passes stay in bf16 (1.6-1.8x faster). The old-policy log-probs
    the loss uses come from those passes, not from generation, so the loss is unchanged.

    accelerate keeps the unwrapped forward as `_original_forward` when it adds autocast (at
    `prepare`, so at the first step); a LoRA model generates through its base model's own forward,
    which was never wrapped, and needs nothing.
    """
    generate = trainer._generate

    def float32_generate(*args, **kwargs):
        model = trainer.accelerator.unwrap_model(trainer.model_wrapped)
        original = model.__dict__.get("_original_forward")
        if original is None:
            return generate(*args, **kwargs)
        autocast_forward = model.forward
        model.forward = original
        try:
            return generate(*args, **kwargs)
        finally:
            model.forward = autocast_forward

    trainer._generate = float32_generate
