"""The recipe's `held_out` section: score a held-out task while the model trains.

    held_out:
      task: custom                         # arithmetic | gsm8k | mmlu | math | custom, as `posttrain eval --task`
      data: recipes/demo/data/eval.jsonl
      every: 10                            # and at step 0 and the last step

The keys that `posttrain eval` also has mean what its flags mean (`--n` is `n`, `--max-new-tokens`
is `max_new_tokens`): the items, prompts and scorer are the ones `posttrain eval` would use, so a
score logged at the last step is the score `posttrain eval` gives the saved model on those items.
Standard library and pydantic only (no torch).
"""

from __future__ import annotations

from typing import Literal

from pydantic import Field, StrictInt, model_validator

from .section import Section

HELD_OUT_TASKS = ("arithmetic", "gsm8k", "mmlu", "custom")  # posttrain.evaluation.tasks.TASKS (a test keeps them equal)


class HeldOutSection(Section):
    task: Literal[HELD_OUT_TASKS] = Field(description="The task, as `posttrain eval --task`: arithmetic (generated offline), gsm8k, mmlu or custom (your --data file).")
    data: str | None = Field(None, description="A local .jsonl/.json/.csv/.parquet file (custom: required; gsm8k/mmlu: instead of the hub), as eval's --data.")
    prompt_column: str = Field("prompt", description="custom task: the column with the question text or chat messages (--prompt-column).")
    answer_column: str = Field("answer", description="custom task: the column with the gold answer (--answer-column).")
    data_seed: StrictInt | None = Field(None, description="arithmetic task: the generator's seed (--data-seed; default 1234).")
    n: StrictInt | None = Field(
        100, ge=1,
        description="Score the first N items after a shuffle seeded by `seed` (--n); null: every item. The same items at every "
        "evaluation, so each is paired with step 0's answer to the same item. Each evaluation costs one greedy answer per item.")
    seed: StrictInt = Field(0, description="Seed of the item shuffle (--seed) and of pass@k sampling.")
    every: StrictInt = Field(10, ge=1, description="Score every this many optimizer steps, besides step 0 (before any update) and the last step.")
    max_new_tokens: StrictInt | None = Field(
        None, ge=1, description="Tokens per answer at most (--max-new-tokens); null (default): the task's own budget, as "
        "`posttrain eval` uses it (arithmetic 128, mmlu 256, gsm8k, math and custom 512).")
    batch_size: StrictInt | None = Field(None, ge=1, description="Prompts per generation batch (--batch-size; default 64 on a CPU, 16 on a GPU).")
    pass_k: StrictInt = Field(
        0, ge=0,
        description="Also sample k answers per item at `temperature` and log pass@k (an item counts when any of its k answers "
        "is right), strict and loose: whether the right answer is within the policy's reach. 0 (default): off; it costs k "
        "sampled answers per item and evaluation.")
    temperature: float = Field(1.0, gt=0.0, description="Sampling temperature of the pass@k answers (greedy answers score the accuracy).")
    keep_best: Literal["strict", "loose", "none"] = Field(
        "strict",
        description="Save the model of the evaluation with the highest accuracy of this kind (strict: the format the reward "
        "asks for; loose: format-blind) in output_dir/best, with best/held_out.json naming its step and scores; step 0 counts, "
        "so best/ holds the starting model when no later step beat it. 'none': keep nothing.")
    patience: StrictInt | None = Field(
        None, ge=1,
        description="Stop training when this many evaluations in a row have not beaten the best one (by keep_best's accuracy): "
        "the plateau rule of a start trained 'until it stops improving'. best/ then holds the plateau's model, and "
        "run_summary.json's held_out.stopped says at which step and why. null (default): train every max_steps step.")

    @model_validator(mode="after")
    def _task_inputs(self):
        if self.task == "custom" and not self.data:
            raise ValueError("held_out.task=custom needs held_out.data, a file with a prompt and an answer column.")
        if self.task == "arithmetic" and self.data:
            raise ValueError("held_out.task=arithmetic is generated and reads no file; remove held_out.data, or use task custom.")
        if self.task != "arithmetic" and self.data_seed is not None:
            raise ValueError(f"held_out.data_seed seeds the arithmetic generator; task {self.task} would ignore it. Remove it.")
        if self.task != "custom":
            unused = [k for k in ("prompt_column", "answer_column") if k in self.model_fields_set]
            if unused:
                raise ValueError(f"held_out.{unused[0]} applies to task custom only; task {self.task} would ignore it. Remove it.")
        if self.patience is not None and self.keep_best == "none":
            raise ValueError("held_out.patience stops at a plateau and keeps its best model in output_dir/best; it needs "
                             "held_out.keep_best strict or loose, not none.")
        if self.pass_k == 1:
            raise ValueError("held_out.pass_k=1 is one sampled answer per item; use 2 or more, or 0 for none.")
        if "temperature" in self.model_fields_set and not self.pass_k:
            raise ValueError("held_out.temperature samples the pass@k answers, and held_out.pass_k is 0; set pass_k or remove temperature.")
        return self
