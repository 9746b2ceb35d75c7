"""The algorithms posttrain runs: one row each, every fact about an algorithm in one place.

A row says which TRL config the algorithm's training section mirrors, which module builds its
trainer, what data it reads, whether it is RL (rollouts, rewards, RL health checks), posttrain's
stated defaults where they depart from TRL's, and the TRL fields that do nothing for it. The
schema (`recipe/schema.py`), the defaults (`recipe/defaults.py`), the data readers, the run
(`algorithms/run.py`) and the health checks all read these rows; none keeps its own list.

Adding an algorithm (docs/development.md): a row here, a `build_trainer(run)` in
`posttrain/algorithms/<builder>.py`, and, when it has keys of its own or cross-field rules, a
training section class (`section`, a subclass of `recipe.training_section.TrainingBase`).

Standard library only, importing no other posttrain module: the schema, the TRL field snapshot
and the run all import it. Modules are named by string (`builder`, `section`) and imported by
their one reader (`algorithms/run.py`, `recipe/schema.py`), so this table never imports up.
"""

from __future__ import annotations

from dataclasses import dataclass, field

_NO_METRICS = ("shapes what a compute_metrics function receives, and posttrain's trainers have none: evaluation during "
               "training reports the loss and TRL's own metrics.")
_VISION_UNPREPARED = ("TRL 1.16 skips dataset preparation for vision datasets (the processor renders each batch in the "
                      "collator), which is where this key acts.")
_OWN_LOSS = ("counts label tokens across processes for transformers' loss, which this trainer replaces with its own "
             "(TRL 1.16's %s computes and normalises its loss itself).")
# TRL fields that exist in every config but do nothing in posttrain's runs.
EVERY_ALGORITHM_DEAD = {
    "local_rank": "a field transformers keeps for old launchers' command lines and never reads (the rank comes from the "
                  "LOCAL_RANK environment variable torchrun sets).",
    "prediction_loss_only": _NO_METRICS, "include_for_metrics": _NO_METRICS, "batch_eval_metrics": _NO_METRICS,
}
_GRPO_SAMPLER = {
    "train_sampling_strategy": "GRPOTrainer draws its batches with its own sampler (each prompt repeated num_generations "
                               "times), so transformers' sampling strategies never apply.",
    "length_column_name": "GRPOTrainer draws its batches with its own sampler, so transformers' length-grouped sampling, the "
                          "only reader of this column, never runs.",
}

_RFT_SCHEDULE = {key: "an RFT run's schedule is training.rounds: each round is one epoch of training.rows_per_round rows "
                      "(default: one per prompt the round samples), so the run is rounds x that epoch's steps long."
                 for key in ("num_train_epochs", "max_steps")}
_RFT_FIXED_ROWS = ("each RFT round trains a fixed number of rows (training.rows_per_round), swapped in at the epoch's start; "
                   "packing or length-grouped batches would need the rows before the round has sampled them.")

# What each data shape reads: the `format` values a dataset may give (the first is always 'auto';
# with exactly one other, that one is the shape's only format) and the per-dataset column keys.
DATA_SHAPES: dict[str, tuple[tuple[str, ...], tuple[str, ...]]] = {
    "text": (("auto", "text"), ("text_column",)),
    "sft": (("auto", "text", "prompt_completion", "messages", "preference"),
            ("text_column", "prompt_column", "completion_column", "messages_column", "tools_column")),
    "sft_vlm": (("auto", "prompt_completion", "messages"), ("prompt_column", "completion_column", "messages_column")),
    "preference": (("auto", "preference"), ("prompt_column", "chosen_column", "rejected_column")),
    "prompt": (("auto",), ("prompt_column", "answer_column", "template")),
    "unpaired": (("auto", "unpaired"), ("prompt_column", "completion_column", "label_column")),
}


@dataclass(frozen=True)
class Algorithm:
    name: str
    family: str  # the TRL config family: its fields in recipe/trl_fields.json
    config: str  # TRL's config class of that family
    builder: str  # posttrain.algorithms.<builder>.build_trainer(run) builds the TRL trainer
    data: str  # the rows it reads: a key of DATA_SHAPES
    section: str = "posttrain.recipe.training_section:TrainingBase"  # 'module:Class', base of its training section
    rl: bool = False  # rollouts scored by training.rewards; RL health checks, RL telemetry
    vision: bool = False  # reads image/video columns when the data has them
    token_loss: bool = False  # trains with transformers' token loss (average_tokens_across_devices acts)
    prompt_length: bool = False  # reads data.max_prompt_length / prompt_truncation (besides RL)
    padding_note: bool = False  # padded batches: the start-up note on padding share applies
    reward_head: bool = False  # the model loads as a sequence classifier with one output (a reward model), not a causal LM
    defaults: dict = field(default_factory=dict)  # posttrain's stated defaults (each departs from TRL's; say why)
    dead: dict = field(default_factory=dict)  # TRL fields that do nothing here -> why (rejected when set)

    @property
    def formats(self) -> tuple[str, ...]:
        return DATA_SHAPES[self.data][0]

    @property
    def columns(self) -> tuple[str, ...]:
        return DATA_SHAPES[self.data][1]

    @property
    def fixed_format(self) -> str | None:
        """The one format this algorithm's datasets are read as, or None when it is detected per dataset."""
        return self.formats[1] if len(self.formats) == 2 else None


_ROWS = [
    # Continued pre-training: raw text cut into fixed-length blocks, loss on every token.
    Algorithm("cpt", "sft", "SFTConfig", "sft", "text", token_loss=True,
              defaults={"packing": True, "packing_strategy": "wrapped", "completion_only_loss": False},
              dead=dict(EVERY_ALGORITHM_DEAD)),
    Algorithm("sft", "sft", "SFTConfig", "sft", "sft", token_loss=True, padding_note=True, dead=dict(EVERY_ALGORITHM_DEAD)),
    # Vision-language SFT: TRL truncates at max_length (1024) after the processor has expanded each
    # image into its tokens, and a cut through an image's tokens is an error ("Image features and
    # image tokens do not match"). Unbounded by default; bound image tokens with data.max_image_pixels.
    Algorithm("sft_vlm", "sft", "SFTConfig", "sft_vlm", "sft_vlm", vision=True, token_loss=True, defaults={"max_length": None},
              dead={**EVERY_ALGORITHM_DEAD,
                    "padding_free": "TRL 1.16 refuses padding-free batches for vision datasets (images are expanded into tokens "
                    "by the processor per batch); vision-language batches are always padded.",
                    "packing": "TRL 1.16 refuses packing for vision datasets; vision-language batches are always padded.",
                    "packing_strategy": "TRL 1.16 refuses packing for vision datasets; vision-language batches are always padded.",
                    "eval_packing": "TRL 1.16 refuses packing for vision datasets; vision-language batches are always padded.",
                    "dataset_num_proc": _VISION_UNPREPARED, "shuffle_dataset": _VISION_UNPREPARED,
                    "truncation_mode": "vision batches are cut at max_length by the collator, keeping the start (TRL refuses keep_end).",
                    "pad_token": "the processor's own pad token pads vision batches (posttrain's collator is the processor's)."}),
    Algorithm("dpo", "dpo", "DPOConfig", "dpo", "preference", prompt_length=True, padding_note=True,
              dead={**EVERY_ALGORITHM_DEAD,
                    "padding_free": "TRL 1.16's DPOTrainer has padding-free batches 'temporarily unavailable' (dpo_trainer.py): "
                    "it warns and pads every batch whatever this key says. posttrain's DPO pads each batch to its longest pair only.",
                    "average_tokens_across_devices": _OWN_LOSS % "DPOTrainer"}),
    # TRL's beta=0.0 silently removes the KL term and the reference model; with it, policies drift
    # into reward hacks (empty reasoning + bare answers). 0.04 is the DeepSeekMath GRPO value.
    Algorithm("grpo", "grpo", "GRPOConfig", "grpo", "prompt", section="posttrain.recipe.rl_section:GRPOTrainingBase",
              rl=True, vision=True, defaults={"beta": 0.04},
              dead={**EVERY_ALGORITHM_DEAD, "average_tokens_across_devices": _OWN_LOSS % "GRPOTrainer", **_GRPO_SAMPLER}),
    # GSPO (Zheng et al. 2025, arXiv:2507.18071 v2, section 5.1), as TRL's reproduction sets it:
    # sequence-level importance ratios, clipping 3e-4 / 4e-4, the 'grpo' loss, no KL term, and an
    # off-policy schedule (4 mini-batches per rollout; see `defaults.derived`) without which the
    # sequence ratio is 1 and GSPO changes nothing.
    Algorithm("gspo", "grpo", "GRPOConfig", "grpo", "prompt", section="posttrain.recipe.rl_section:GSPOTrainingBase",
              rl=True, vision=True,
              defaults={"importance_sampling_level": "sequence", "loss_type": "grpo", "epsilon": 3e-4, "epsilon_high": 4e-4, "beta": 0.0},
              dead={**EVERY_ALGORITHM_DEAD, "average_tokens_across_devices": _OWN_LOSS % "GRPOTrainer", **_GRPO_SAMPLER}),
    # RLOO (Ahmadian et al. 2024): GRPO's rewards, data, rollouts and health checks through TRL's RLOOTrainer.
    # TRL's defaults kept: beta 0.05 (non-zero already, unlike GRPO's 0.0), num_generations 2, no advantage scaling.
    Algorithm("rloo", "rloo", "RLOOConfig", "rloo", "prompt", section="posttrain.recipe.rloo_section:RLOOTrainingBase",
              rl=True, dead={**EVERY_ALGORITHM_DEAD, "average_tokens_across_devices": _OWN_LOSS % "RLOOTrainer",
                             **{k: v.replace("GRPOTrainer", "RLOOTrainer") for k, v in _GRPO_SAMPLER.items()}}),
    # KTO (Ethayarajh et al. 2024): unpaired desirable/undesirable completions; TRL's defaults kept
    # (beta 0.1, weights 1.0, lr 1e-6, sequential batches: the KL estimate needs them).
    Algorithm("kto", "kto", "KTOConfig", "kto", "unpaired", section="posttrain.recipe.kto_section:KTOTrainingBase",
              dead={**EVERY_ALGORITHM_DEAD, "average_tokens_across_devices": _OWN_LOSS % "KTOTrainer",
                    "length_column_name": "read only by transformers' length-grouped samplers, which TRL 1.16's KTO rows cannot use "
                    "(kto_section refuses them)."}),
    # Reward model (Bradley-Terry on DPO's prompt/chosen/rejected pairs): the policy's architecture with a
    # one-output score head. TRL's defaults kept (lr 1e-4, max_length 1024, no centering); posttrain counts
    # the pairs TRL drops for length and measures held-out pair accuracy (algorithms/reward.py).
    Algorithm("reward", "reward", "RewardConfig", "reward", "preference", section="posttrain.recipe.reward_section:RewardTrainingBase",
              reward_head=True,
              dead={**EVERY_ALGORITHM_DEAD, "average_tokens_across_devices": _OWN_LOSS % "RewardTrainer",
                    "length_column_name": "read only by transformers' length-grouped samplers, which TRL 1.16's reward pairs cannot "
                    "use (reward_section refuses them)."}),
    # On-policy distillation (Agarwal et al. 2024, GKD): the student samples completions of the recipe's prompts and
    # matches the teacher's next-token distribution on them (generalized JSD; TRL's beta 1.0 = reverse KL). TRL's
    # defaults kept. The teacher is any model spec (training.teacher_model_name_or_path), loaded by posttrain like the
    # student; its tokenizer must give the student's ids (algorithms/distill.py checks, TRL only compares vocab_size).
    Algorithm("distill", "distillation", "DistillationConfig", "distill", "prompt",
              section="posttrain.recipe.distill_section:DistillTrainingBase",
              dead={**EVERY_ALGORITHM_DEAD, "average_tokens_across_devices": _OWN_LOSS % "DistillationTrainer",
                    **{k: v.replace("GRPOTrainer", "DistillationTrainer") for k, v in _GRPO_SAMPLER.items()},
                    "teacher_model_init_kwargs": "posttrain loads the teacher itself, like the student (the model section's torch_dtype, "
                    "attn_implementation and trust_remote_code apply to both; training.teacher_model_revision pins its revision), and "
                    "TRL refuses these kwargs with a loaded teacher.",
                    "max_tool_calling_iterations": "posttrain's distillation runs give TRL no tools, so there is no tool-calling loop to "
                    "bound."}),
    # Rejection-sampling fine-tuning (expert iteration; STaR, Zelikman et al. 2022; RFT, Yuan et al. 2023): each round
    # samples k completions per prompt with the current policy, keeps those the recipe's rewards pass (a threshold),
    # deduplicated, and trains on them as SFT trains prompt/completion pairs (SFTConfig; algorithms/rft.py). Its own
    # keys (rounds, num_generations, reward_threshold, ...) and their defaults: recipe/rft_section.py.
    Algorithm("rft", "sft", "SFTConfig", "rft", "prompt", section="posttrain.recipe.rft_section:RFTTrainingBase", token_loss=True,
              dead={**EVERY_ALGORITHM_DEAD, **_RFT_SCHEDULE,
                    "packing": _RFT_FIXED_ROWS, "packing_strategy": _RFT_FIXED_ROWS, "eval_packing": _RFT_FIXED_ROWS,
                    "train_sampling_strategy": _RFT_FIXED_ROWS, "length_column_name": _RFT_FIXED_ROWS,
                    "assistant_only_loss": "RFT trains prompt/completion pairs (the prompt as the data give it, the sampled "
                    "completion as the assistant's turn): the loss is on the completion (completion_only_loss, TRL's default).",
                    "eval_strategy": "RFT's data are prompts, with no completions to compute an eval loss on. Score a task while "
                    "training with a held_out section (posttrain eval's items and scorer, every held_out.every steps).",
                    "load_best_model_at_end": "reloads the checkpoint with the best eval metric, and RFT has no eval loss; "
                    "held_out.keep_best saves the model of the best held-out score.",
                    **{key: "shapes TRL's evaluation loop, which an RFT run never enters (its data are prompts, with no "
                       "completions to compute an eval loss on); held_out scores a task while it trains."
                       for key in ("per_device_eval_batch_size", "eval_accumulation_steps", "eval_delay", "eval_do_concat_batches",
                                   "metric_for_best_model", "greater_is_better")}}),
]

ALGORITHMS: dict[str, Algorithm] = {row.name: row for row in _ROWS}
# TRL config family -> its config class (CPT and SFT share SFTConfig; GSPO is GRPO with a preset).
CONFIG_CLASSES: dict[str, str] = {row.family: row.config for row in _ROWS}
RL_ALGORITHMS: tuple[str, ...] = tuple(a.name for a in _ROWS if a.rl)
VISION_ALGORITHMS: tuple[str, ...] = tuple(a.name for a in _ROWS if a.vision)
RL_FAMILIES: tuple[str, ...] = tuple(dict.fromkeys(a.family for a in _ROWS if a.rl))
