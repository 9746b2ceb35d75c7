"""GRPO and GSPO through TRL's GRPOTrainer.

    posttrain train --recipe recipes/grpo/tiny-cpu.yaml
    posttrain train --recipe recipes/gspo/tiny-cpu.yaml

GRPO (Shao et al. 2024, DeepSeekMath): sample `num_generations` completions per prompt, score them
with the recipe's rewards, normalise within the group, and take clipped policy-gradient steps with
a KL penalty of weight `beta` towards the reference model (posttrain's default 0.04; TRL's 0.0
removes the term). GSPO (Zheng et al. 2025) is the same trainer with sequence-level importance
ratios and its own preset (see `posttrain.recipe.defaults`). With LoRA the reference model is the
base with the adapter switched off; with full training a frozen copy of the policy as loaded
(`posttrain.algorithms.reference`: TRL would reload it by name, without the recipe's revision).

With `training.tools` / `training.environment` the rollouts are multi-turn: TRL's tool loop, with
the tools run isolated and their use counted by posttrain (`posttrain.algorithms.tool_use`).
"""

from __future__ import annotations

import time
from contextlib import nullcontext

from posttrain.rewards.builtin import get_reward
from posttrain.rewards.checks import guarded

from .common import without_autocast


def reward_functions(training, dtype=None) -> tuple[list, list]:
    """The recipe's rewards as TRL's `reward_funcs` and `reward_processing_classes` (weights go to
    GRPOConfig.reward_weights): a function with None, or a reward model (`model:`) with its own tokenizer."""
    from posttrain.errors import UserError

    functions, tokenizers = [], []
    for i, spec in enumerate(training.rewards):
        if spec.model is not None:
            from .reward import load_reward_model

            model, tokenizer = load_reward_model(spec.model, f"training.rewards[{i}].model", dtype)
            functions.append(model)
            tokenizers.append(tokenizer)
            continue
        try:
            reward = get_reward(spec.name, **spec.options)
        except ValueError as e:
            raise UserError(f"training.rewards[{i}]: {e}") from None
        functions.append(guarded(reward, f"training.rewards[{i}]", locate=spec.name != "http"))  # a fault names the reward, step and completion
        tokenizers.append(None)
    return functions, tokenizers


def build_trainer(run):
    from trl import GRPOTrainer
    from trl.trainer import grpo_trainer

    return build_rl_trainer(run, GRPOTrainer, grpo_trainer)


def build_rl_trainer(run, trainer_class, trainer_module):
    """GRPO's trainer, or another of TRL's online RL trainers that shares its interface (RLOOTrainer):
    the recipe's rewards (functions and reward models), posttrain's rollouts, the time split, tools."""
    from .common import log

    if run.loaded.processor is not None:
        # Image prompts (a vision-language model): the tower frozen and LoRA aimed as in sft_vlm. TRL
        # renders each chat with its images through the processor when it generates.
        from .sft_vlm import prepare_model

        prepare_model(run, log)
    from .reference import reference_is_the_policy
    from .tool_use import attach_tool_counts, trainer_kwargs

    with reference_is_the_policy(trainer_module, run.loaded.model, run.loaded_recipe.recipe.model):
        functions, tokenizers = reward_functions(run.loaded_recipe.recipe.training, run.loaded.model.dtype)
        trainer = trainer_class(reward_funcs=functions, reward_processing_classes=tokenizers, **run.trainer_kwargs(),
                              **trainer_kwargs(run.toolbox))
    if run.loaded.processor is not None:
        from posttrain.models.vision import render_parts

        log(render_parts(trainer.model))
    if not trainer.args.use_vllm:
        timers = run.monitor.timers if run.monitor is not None else None
        log(route_generate(trainer, run.loaded_recipe.recipe.training.rollout_engine, timers))
    if run.monitor is not None and run.monitor.timers is not None:
        from .monitor import attach_timers

        attach_timers(trainer, run.monitor.timers)  # generation / scoring split and empty <think> share
    if run.toolbox is not None and run.monitor is not None:
        attach_tool_counts(trainer, run.monitor.tools, run.toolbox)  # tools/* metrics, health flags
    draws = run.loaded_recipe.recipe.training.refill_zero_variance_groups
    if draws:  # off (0) touches nothing: the run is TRL's, bit for bit
        from .refill import KEY, attach_refill

        if run.loaded.processor is not None:
            from posttrain.errors import UserError

            raise UserError(f"{KEY}: image prompts are not refilled yet (their pixel batches are not split by group); "
                            f"set {KEY}=0 for a vision-language model.")
        log(attach_refill(trainer, draws, log))
    return trainer


def default_rollout_engine(device_kind: str) -> str:
    """posttrain's decoding loop on a CPU, where it was measured (docs/guides/rollouts.md);
    transformers' generate elsewhere until benchmarks/gpu_check.sh has measured the loop on a GPU (it
    keeps merged copies of the adapted weights through the rollouts: about 13 GB more on a 7B model)."""
    return "posttrain" if device_kind == "cpu" else "transformers"


def route_generate(trainer, engine: str | None, timers=None) -> str:
    """Give the policy a `generate` that TRL's rollouts call: posttrain's decoding loop (engine
    'posttrain') or transformers' own (unset: `default_rollout_engine`), and say which at start-up.

    TRL 1.16 generates with `unwrap_model_for_generation(...).generate(input_ids, attention_mask,
    generation_config)`; the unwrapped model is `trainer.model` (DDP only wraps it), so an instance
    attribute there is what TRL calls, on every rank. With ZeRO-3 or FSDP the weights are gathered for
    generation by TRL and posttrain keeps transformers' generate (its packed or merged copies would
    add to the gathered memory; untested there).

    Either way, on a CPU with bf16 autocast the generation runs the float32 forward: the autocast
    accelerate wraps around the forward casts every weight to bf16 again for each decoded token,
    which made generation 1.46x slower than float32 (tiny:qwen2-6m, 512-token completions: 30.9 s
    against 21.2 s of a run), while the log-prob and training passes stay in bf16 (1.6-1.8x faster).
    The old-policy log-probs the loss uses come from those passes, not from generation.
    """
    import torch

    from posttrain.generation.decoding import decode, unsupported
    from posttrain.generation.inference_weights import forget_trained

    model = trainer.model
    chosen = engine is not None
    engine = engine or default_rollout_engine(trainer.accelerator.device.type)
    original = model.generate
    packed_at_step = [None]
    sharded = trainer.is_fsdp_enabled or (trainer.is_deepspeed_enabled and trainer.accelerator.state.deepspeed_plugin.zero_stage == 3)
    fast = engine == "posttrain" and not sharded
    float32 = bool(trainer.args.bf16 and trainer.args.use_cpu)
    said = set()

    def generate(input_ids=None, attention_mask=None, generation_config=None, **kwargs):
        reason = "no generation_config" if generation_config is None or input_ids is None or attention_mask is None \
            else unsupported(generation_config, kwargs)
        if fast and reason and reason not in said:
            said.add(reason)
            print(f"rollouts: transformers' generate for this call ({reason} is not implemented by posttrain's loop)", flush=True)
        started = time.perf_counter()
        with without_autocast(model, wrapped=trainer.accelerator.native_amp) if float32 else nullcontext():
            if fast and reason is None:
                if packed_at_step[0] != trainer.state.global_step:  # the weights trained since the last rollout
                    forget_trained(model)
                    packed_at_step[0] = trainer.state.global_step
                out = decode(model, input_ids, attention_mask, generation_config)
            else:
                out = original(input_ids=input_ids, attention_mask=attention_mask, generation_config=generation_config, **kwargs)
        if timers is not None and input_ids is not None:
            timers.add_decoded(new_tokens(out[:, input_ids.shape[1]:], generation_config), time.perf_counter() - started)
        return out

    def drop_before_training(module, args, kwargs):
        # The trained weights' packed and merged copies (one copy of every adapted layer: 425 MB on
        # SmolLM2 with LoRA, the whole model in a full fine-tune) would otherwise sit beside the
        # training pass's activations; the next rollout makes them again anyway, the weights having
        # changed. Log-prob passes run without gradients and keep them; so do a step's tool turns.
        if packed_at_step[0] is not None and torch.is_grad_enabled():
            forget_trained(model)
            packed_at_step[0] = None

    model.generate = generate
    if fast:
        model.register_forward_pre_hook(drop_before_training, with_kwargs=True)
    setting = f"training.rollout_engine={engine}" if chosen else f"{trainer.accelerator.device.type}'s default: training.rollout_engine={engine}"
    which = f"posttrain's decoding loop ({setting})" if fast else \
        "transformers' generate" + (" (ZeRO-3/FSDP)" if sharded and engine == "posttrain" else f" ({setting})")
    return f"rollouts: {which}" + ("; float32 forward for generation (bf16 autocast on a CPU is slower there)" if float32 else "")


def new_tokens(completions, generation_config) -> int:
    """Tokens the model generated: each row up to and including its first stop token."""
    import torch

    stop = generation_config.eos_token_id if generation_config is not None else None
    stop = [] if stop is None else [stop] if isinstance(stop, int) else list(stop)
    if not stop or completions.shape[1] == 0:
        return int(completions.numel())
    is_stop = torch.isin(completions, torch.tensor(stop, device=completions.device))
    first = torch.where(is_stop.any(1), is_stop.int().argmax(1) + 1, torch.full_like(is_stop[:, 0], completions.shape[1], dtype=torch.long))
    return int(first.sum())
