"""The training section of RL algorithms (GRPO, GSPO): rewards, tools, environments and their
cross-field rules; GSPO's own rules."""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import BaseModel, BeforeValidator, ConfigDict, Field, StrictInt, model_validator

from .section import Section
from .training_section import TrainingBase, _spec_shape


# Keys of GRPO/GSPO's training section that another algorithm's user may reach for; the unknown-key
# error says why they do not apply there.
RL_ONLY_HINTS = {
    "tools": "tools are called while GRPO/GSPO generate rollouts (training.algorithm=grpo or gspo); to teach tool calls "
             "with {algorithm}, put them in the data: chats whose assistant turns have tool_calls, tool turns with the "
             "results, and a `tools` column with the schemas (posttrain.data.synthetic writes such chats).",
    "environment": "environments are acted in while GRPO/GSPO generate rollouts (training.algorithm=grpo or gspo); "
                   "{algorithm} trains on recorded data.",
    "rewards": "rewards score rollouts in GRPO/GSPO (training.algorithm=grpo or gspo); {algorithm} has no rewards.",
}


TOOL_KEYS = ("tools", "environment", "environment_kwargs", "tool_timeout", "tool_result_max_chars", "max_tool_calling_iterations")


class RewardSpec(BaseModel):
    """One reward: a function (a built-in name, `http`, or `package.module:function`) with its options, or a
    trained reward model (`model:`), and its weight."""

    model_config = ConfigDict(extra="allow")  # a function's options: checked against its parameters
    name: str | None = Field(None, min_length=1, description="Built-in (answer_match, text_match, format, numeric_answer, loose_match, math_match, http) or 'package.module:function'.")
    model: str | None = Field(
        None, min_length=1,
        description="A trained reward model instead of a function: a posttrain `algorithm: reward` output_dir (full or "
        "LoRA), a hub id, s3:// or any model spec of a one-output sequence classifier. It scores prompt + completion "
        "re-tokenized with its own tokenizer (so it need not share the policy's), the whole generation batch in one "
        "forward pass on the policy's device, and is logged as rewards/<last part of the spec>/mean.",
    )
    weight: float = Field(1.0, description="Weight of this reward in the sum TRL normalises per group.")

    @property
    def options(self) -> dict[str, Any]:
        return dict(self.model_extra or {})

    @model_validator(mode="after")
    def _known_reward(self):
        if (self.name is None) == (self.model is None):
            raise ValueError("give a reward either `name:` (a function) or `model:` (a trained reward model), one of the two: "
                             "{name: answer_match, weight: 1.0} or {model: runs/rm, weight: 1.0}")
        if self.model is not None:
            if self.options:
                raise ValueError(f"a reward model takes no options (got {sorted(self.options)}); only model and weight")
            return self  # a folder is checked by preflight, a hub id when the run loads it
        if ":" not in self.name:  # built-ins are checked now; import paths when the run starts
            from posttrain.rewards.builtin import get_reward

            get_reward(self.name, **self.options)  # raises ValueError naming the problem
        return self


def _expand_preset(value):
    from posttrain.rewards.builtin import expand_reward_preset

    return expand_reward_preset(value)


# `training.rewards`: a list of RewardSpecs, or a preset's name (posttrain.rewards.builtin.REWARD_PRESETS), expanded
# on loading so the resolved recipe shows the list. GRPO, GSPO, RLOO and RFT share it.
RewardList = Annotated[list[RewardSpec], BeforeValidator(_expand_preset)]
REWARDS_DESCRIPTION = (
    "Rewards summed (with weights) into each completion's score. Dataset columns reach each reward as keyword lists; "
    "the gold answer arrives as `answer`. Or a preset's name, for a policy that already writes the format: "
    "correct_strict ([answer_match]), correct_loose ([loose_match]) or correct_math ([math_match]): correctness only, "
    "no format bonus (`posttrain docs grpo`, Rewards).")


class DifficultyFilter(Section):
    """`training.difficulty_filter`: score each training prompt with the starting policy before training and keep the
    prompts whose pass rate lies in a band (algorithms/difficulty.py)."""

    samples: StrictInt = Field(
        8, ge=2, le=256,
        description="Completions sampled per prompt (k), at the training section's temperature, top_p and "
        "max_completion_length, besides one greedy completion; the pass rate is passes / k.")
    min_pass_rate: float = Field(
        0.01, ge=0.0, le=1.0,
        description="Lowest pass rate kept (inclusive). 0.01 drops the prompts no sample solves: every group of theirs "
        "would have rewards all equal (nothing to learn).")
    max_pass_rate: float = Field(
        0.99, ge=0.0, le=1.0,
        description="Highest pass rate kept (inclusive). 0.99 drops the prompts every sample solves (nothing left to learn).")
    pass_threshold: float = Field(
        1.0,
        description="A completion passes when its weighted reward sum is at least this (1.0: the right answers of a 0/1 "
        "correctness reward; with a format bonus beside it, the sum a right, well-formed answer earns).")

    @model_validator(mode="after")
    def _band(self):
        if self.max_pass_rate < self.min_pass_rate:
            raise ValueError(f"max_pass_rate={self.max_pass_rate} is below min_pass_rate={self.min_pass_rate}, so no prompt could "
                             "be kept; set max_pass_rate >= min_pass_rate (the defaults 0.01 and 0.99 keep every prompt the "
                             "policy solves sometimes but not always).")
        return self


class RLTrainingBase(TrainingBase):
    @model_validator(mode="after")
    def _vllm_keys_need_vllm(self):
        """vllm_mode is TRL's free text, checked here."""
        if self.use_vllm and self.vllm_mode is not None and self.vllm_mode not in ("colocate", "server"):
            raise ValueError(f"training.vllm_mode={self.vllm_mode!r}: TRL knows 'colocate' (vLLM inside each training "
                             "process) and 'server' (a separate `posttrain vllm-serve`).")
        if self.use_vllm and "rollout_engine" in self.model_fields_set:
            raise ValueError("training.rollout_engine chooses between posttrain's and transformers' generation; with "
                             "training.use_vllm=true vLLM generates and it would do nothing. Remove one of them.")
        return self  # vllm_* keys without use_vllm: recipe.liveness

    rollout_engine: Literal["posttrain", "transformers"] | None = Field(
        None,
        description="What generates the completions when use_vllm is off; unset: 'posttrain' on a CPU, 'transformers' on "
        "a GPU (posttrain's loop has not been measured on one). 'posttrain': posttrain's decoding loop "
        "(generation/decoding.py: CPU weights pre-packed and kept while unchanged, LoRA without dropout, each prompt "
        "prefilled once for its group, no cache copies, one uniform draw per row on a CPU; greedy tokens as transformers' "
        "generate's up to float32 rounding, samples from the same distribution (not the same draws), without LoRA "
        "dropout), falling back to generate for settings it does not implement (said at start-up). 'transformers': "
        "TRL's own model.generate. `posttrain docs rollouts` has the measurements.",
    )
    rewards: RewardList = Field(min_length=1, description=REWARDS_DESCRIPTION)
    # Agentic RL: tools and environments the policy acts through while it generates (TRL's GRPOTrainer
    # tools= / environment_factory=), run isolated by posttrain.tools.
    tools: list[Annotated[str, _spec_shape("tool")]] = Field(
        default_factory=list,
        description="Functions the policy may call while it generates, as 'package.module:function' (imported like "
        "custom rewards). Each needs type hints and a Google-style docstring: the model reads a schema built from "
        "them. Calls run in a worker process (a tool that hangs, crashes or exits costs that call only); a failure "
        "reaches the model as the tool's error message and is counted (tools/errors, tools/timeouts). The chat "
        "template must render tools and tool calls; multi-turn rollouts stop after max_tool_calling_iterations "
        "turns of calls (posttrain's default 5; TRL's is unbounded).",
    )
    environment: Annotated[str, _spec_shape("environment")] | None = Field(
        None,
        description="'package.module:Class' whose public methods are tools with state per rollout. One instance per "
        "rollout, each in its own worker process, built with environment_kwargs: reset(**row) starts a rollout (a "
        "returned string is appended to the prompt), get_reward() (optional) scores it as its own reward channel "
        "named after the class, weight 1. Rewards receive the instances as `environments` and may read their "
        "attributes. A timed-out or crashed instance is rebuilt for the next rollout.",
    )
    environment_kwargs: dict[str, Any] = Field(default_factory=dict, description="Keyword arguments for the environment's constructor.")
    tool_timeout: float = Field(
        10.0, gt=0,
        description="Seconds one tool call (or environment method) may run; past that its worker is stopped and the "
        "model reads a timeout error (counted in tools/timeouts; the tool_timeouts health flag fires).",
    )
    tool_result_max_chars: StrictInt = Field(
        4000, ge=1,
        description="Longest tool result the model reads, in characters; a longer one is cut, with a note giving its "
        "length (counted in tools/truncated). Results count toward max_completion_length: TRL drops a tool turn "
        "that would overflow it.",
    )
    refill_zero_variance_groups: StrictInt = Field(
        0, ge=0, le=64,
        description="Extra generation batches a step may draw to replace groups whose rewards are all equal (advantage 0: "
        "they teach nothing and dilute the loss). 0 (the default): off, and the run is TRL's. N > 0: such groups are "
        "dropped and fresh prompts (a seeded shuffle of the training prompts) are generated and scored, up to N more "
        "generation batches, until every process's batch is full of groups with reward variance; if the draws run out "
        "the batch is topped up with dropped groups (trained as TRL would) and refill/groups_short says how many. "
        "Logged: refill/draws, refill/groups_drawn, refill/groups_kept (metrics.jsonl). DAPO's dynamic sampling (Yu et "
        "al. 2025). Off by default until measured: each draw costs a full generation, the dominant cost of a step on "
        "a CPU. With several processes each process's generation batch must hold whole groups.",
    )
    difficulty_filter: DifficultyFilter | None = Field(
        None,
        description="Prompts at the right difficulty: before training, score every training prompt `samples` times (and once "
        "greedily) with the starting policy through posttrain's decoding loop and the recipe's rewards, and train only on "
        "the prompts whose pass rate lies in [min_pass_rate, max_pass_rate]. Null (the default): off, every prompt trains. "
        "`{}` takes the defaults (samples 8, band [0.01, 0.99], pass_threshold 1.0). Cached in output_dir/difficulty (a "
        "resumed run does not score again); reported by pass-rate bucket, with pass@k against greedy (the headroom RL can "
        "reach); the dropped prompts count under data.max_drop_fraction; a prompt set where sampling solves nothing greedy "
        "misses stops at start-up. Text prompts without tools only.",
    )
    chat_template_path: str | None = Field(
        None,
        description="A Jinja chat template file to use instead of the tokenizer's; it is saved with the trained model. "
        "For tools on a ChatML model whose template ignores them (SmolLM2): recipes/templates/chatml-tools.jinja, "
        "which `posttrain recipes copy recipes/templates/chatml-tools.jinja` puts here.",
    )

    def trl_kwargs(self) -> dict[str, Any]:
        return {**super().trl_kwargs(), "reward_weights": [r.weight for r in self.rewards]}

    @property
    def uses_tools(self) -> bool:
        return bool(self.tools or self.environment)

    def cross_checks(self, world_size: int = 1) -> list[tuple[str, str]]:
        """TRL's own checks, at load time and with the numbers: a generation batch holds whole groups."""
        out = super().cross_checks(world_size)
        if not self.uses_tools:
            dead = [k for k in TOOL_KEYS[2:] if k in self.model_fields_set]
            if dead:
                out.append((f"training.{dead[0]}", f"{', '.join('training.' + k for k in dead)} only act(s) with training.tools "
                            "or training.environment, and this recipe has neither; add them or remove the key(s)."))
        if self.difficulty_filter is not None:
            for key in ("tools", "environment"):
                if getattr(self, key):
                    out.append(("training.difficulty_filter", f"scoring prompts with training.{key} (multi-turn rollouts) is not "
                                "supported yet; remove training.difficulty_filter or the tools."))
            for i, spec in enumerate(self.rewards):
                if spec.model is not None:
                    out.append(("training.difficulty_filter", f"training.rewards[{i}] is a reward model, whose scores have no "
                                "fixed scale for pass_threshold; use reward functions (name: ...) with the filter, or remove it."))
        twice = sorted({t for t in self.tools if self.tools.count(t) > 1})
        if twice:
            out.append(("training.tools", f"{twice[0]} is listed twice; list each tool once."))
        value = self.value
        num_generations = value("num_generations")
        if num_generations is not None and num_generations < 2:
            return out  # the range check names it
        world = world_size
        batch = value("per_device_train_batch_size") * world
        if value("generation_batch_size") is not None and value("steps_per_generation") is not None:
            out.append(("training.generation_batch_size", "training.generation_batch_size and training.steps_per_generation are both set; set one (the other follows)."))
            return out
        gen_batch = value("generation_batch_size") or batch * (value("steps_per_generation") or value("gradient_accumulation_steps"))
        if gen_batch % batch:
            out.append(("training.generation_batch_size", f"training.generation_batch_size={gen_batch} must be a multiple of per_device_train_batch_size x processes = {batch}."))
        elif num_generations and gen_batch % num_generations:
            out.append(("training.num_generations",
                f"the generation batch ({gen_batch} = per_device_train_batch_size {value('per_device_train_batch_size')} x "
                f"{world} process(es) x steps_per_generation {gen_batch // batch}) must hold whole groups of "
                f"num_generations={num_generations}; make one a multiple of the other."
            ))
        elif num_generations and self.refill_zero_variance_groups and (gen_batch // world) % num_generations:
            out.append(("training.refill_zero_variance_groups",
                f"each process refills its own groups, so its share of the generation batch ({gen_batch // world} = "
                f"per_device_train_batch_size {value('per_device_train_batch_size')} x steps_per_generation "
                f"{gen_batch // batch}) must hold whole groups of num_generations={num_generations}, and with {world} "
                "processes it does not; make it a multiple of num_generations, or set training.refill_zero_variance_groups=0."
            ))
        return out


class GRPOTrainingBase(RLTrainingBase):
    def cross_checks(self, world_size: int = 1) -> list[tuple[str, str]]:
        out = super().cross_checks(world_size)
        level = self.importance_sampling_level or "token"
        if level == "token" and self.epsilon is not None and self.epsilon < 0.01:
            out.append(("training.epsilon",
                f"training.epsilon={self.epsilon} is GSPO's sequence-level clipping; with importance_sampling_level=token "
                "it clips almost every token. Set training.algorithm=gspo, or use a token-level epsilon such as 0.2."
            ))
        return out


class GSPOTrainingBase(RLTrainingBase):
    def cross_checks(self, world_size: int = 1) -> list[tuple[str, str]]:
        out = super().cross_checks(world_size)
        if self.importance_sampling_level != "sequence":
            out.append(("training.importance_sampling_level", 
                f"training.importance_sampling_level={self.importance_sampling_level!r}: GSPO is defined by sequence-level "
                "importance ratios. Remove the key (GSPO's preset sets 'sequence') or use training.algorithm=grpo."
            ))
        gas = self.gradient_accumulation_steps or 1
        steps = self.steps_per_generation or gas
        iterations = self.num_iterations or 1
        if steps <= gas and iterations <= 1 and self.generation_batch_size is None:
            out.append(("training.steps_per_generation",
                f"this GSPO run is on-policy (steps_per_generation={steps} <= gradient_accumulation_steps={gas}, "
                f"num_iterations={iterations}): the sequence-level ratio is exactly 1 and GSPO equals GRPO without "
                "clipping. Set steps_per_generation to a multiple of gradient_accumulation_steps (the preset uses 4x) "
                "or num_iterations > 1."
            ))
        return out


# algorithm -> (its TRL config family, the base of its training section); an algorithm joins here
