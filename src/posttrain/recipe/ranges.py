"""Ranges of TRL's numeric fields, checked at load time with the key named.

TRL and transformers check few numbers themselves, and late: `per_device_train_batch_size: 0` or a
negative learning rate is accepted by the config and fails (or trains nothing) minutes later.
Where TRL's own code or help text states a constraint it is taken from there:

- `interval_from_help` reads ranges TRL states in a field's help ("Must be in (0, 1]"), so a
  constraint TRL adds or changes in its docs reaches posttrain with the next snapshot;
- `RULES` holds the rest, each with the reason; rules are looked up by field name in whichever
  TRL config has the field, so a field that moves between configs keeps its rule, and
  `tests/recipe/test_ranges.py` fails if a rule names a field no config has any more, or if TRL
  stops rejecting a value a rule marked `trl` says it rejects.

Only the standard library is imported (`posttrain validate` stays fast).
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass


@dataclass(frozen=True)
class Range:
    low: float | None = None
    high: float | None = None
    low_open: bool = False  # low itself is not allowed
    high_open: bool = False
    allow: tuple = ()  # special values allowed outside the range (max_steps: -1)
    why: str = ""
    source: str = "posttrain"  # "trl": TRL/transformers reject it too, only later; "help": TRL's help text

    def check(self, value) -> str | None:
        """None when `value` is allowed, else the message naming value, range and reason."""
        if value is None or isinstance(value, bool) or not isinstance(value, (int, float)) or value in self.allow:
            return None
        if isinstance(value, float) and math.isnan(value):
            return f"{value} is not a number{self._reason()}"
        too_low = self.low is not None and (value < self.low or (self.low_open and value == self.low))
        too_high = self.high is not None and (value > self.high or (self.high_open and value == self.high))
        if not (too_low or too_high):
            return None
        return f"{value} is out of range: it must be {self.describe()}{self._reason()}"

    def describe(self) -> str:
        if self.low is not None and self.high is not None:
            text = f"in {'(' if self.low_open else '['}{_num(self.low)}, {_num(self.high)}{')' if self.high_open else ']'}"
        elif self.low is not None:
            text = f"{'>' if self.low_open else '>='} {_num(self.low)}"
        else:
            text = f"{'<' if self.high_open else '<='} {_num(self.high)}"
        return text + "".join(f" or {_num(a)}" for a in self.allow)

    def _reason(self) -> str:
        return f" ({self.why})" if self.why else ""


def _num(x) -> str:
    return str(int(x)) if float(x).is_integer() else str(x)


POSITIVE_INT = dict(low=1)
BATCH = Range(**POSITIVE_INT, why="a batch of 0 trains nothing")
PROBABILITY = Range(0, 1)

# field -> range. `trl` marks the ones TRL or transformers also reject, but only when the trainer starts.
RULES: dict[str, Range] = {
    "per_device_train_batch_size": BATCH,
    "per_device_eval_batch_size": BATCH,
    "precompute_ref_batch_size": BATCH,
    "generation_batch_size": BATCH,
    "gradient_accumulation_steps": Range(**POSITIVE_INT, why="1 means no accumulation"),
    "eval_accumulation_steps": Range(**POSITIVE_INT),
    "learning_rate": Range(0, why="a negative learning rate climbs the loss"),
    "weight_decay": Range(0),
    "max_grad_norm": Range(0, why="0 turns clipping off"),
    "adam_beta1": Range(0, 1, high_open=True),
    "adam_beta2": Range(0, 1, high_open=True),
    "adam_epsilon": Range(0, low_open=True),
    "num_train_epochs": Range(0, low_open=True, why="0 epochs trains nothing; use max_steps to bound a run"),
    "max_steps": Range(1, allow=(-1,), why="-1 means 'use num_train_epochs'; 0 would train nothing"),
    "warmup_steps": Range(0, why="transformers rejects it too", source="trl"),
    "logging_steps": Range(0, low_open=True, why="transformers rejects 0 too", source="trl"),
    "save_steps": Range(0, low_open=True, why="a number of steps, or a fraction of the run below 1"),
    "eval_steps": Range(0, low_open=True, why="a number of steps, or a fraction of the run below 1"),
    "save_total_limit": Range(1, why="unset keeps every checkpoint"),
    "seed": Range(0),
    "data_seed": Range(0),
    "dataloader_num_workers": Range(0),
    "dataset_num_proc": Range(1),
    "torch_empty_cache_steps": Range(1, source="trl"),
    "label_smoothing_factor": Range(0, 1, high_open=True),
    "max_length": Range(1),
    "eval_delay": Range(0),
    "neftune_noise_alpha": Range(0, low_open=True),
    # DPO
    "label_smoothing": Range(0, 0.5, why="DPO's robust/EXO label noise is a probability below one half"),
    "ref_model_mixup_alpha": PROBABILITY,
    "ref_model_sync_steps": Range(1),
    # GRPO / GSPO
    "num_generations": Range(2, why="GRPO compares completions within a group, so it needs at least 2", source="trl"),
    "num_generations_eval": Range(1),
    "num_iterations": Range(1),
    "steps_per_generation": Range(1),
    "max_completion_length": Range(1),
    "temperature": Range(0, low_open=True, why="sampling needs a positive temperature"),
    "top_k": Range(0, why="0 turns top-k off"),
    "min_p": PROBABILITY,
    "repetition_penalty": Range(0, low_open=True),
    "epsilon": Range(0, low_open=True, why="the clipping range of the importance ratio"),
    "epsilon_high": Range(0, low_open=True, why="the upper clipping range of the importance ratio"),
    "delta": Range(1, low_open=True, why="two-sided GRPO's upper clip on the ratio is above 1"),
    "vllm_gpu_memory_utilization": Range(0, 1, low_open=True),
    "vllm_tensor_parallel_size": Range(1),
    "top_entropy_quantile": Range(0, 1),
    "entropy_coef_min": Range(0),
}
# `beta` means the KL weight in GRPO (>= 0), the margin sharpness in DPO (> 0), the divergence's mixture in distillation ([0, 1]).
FAMILY_RULES: dict[str, dict[str, Range]] = {
    "grpo": {"beta": Range(0, why="the KL weight; 0 removes the KL term")},
    "dpo": {"beta": Range(0, low_open=True, why="DPO's sharpness; 0 makes every pair's loss the same constant")},
    "distillation": {"beta": Range(0, 1, why="the generalized JSD's mixture: 0 forward KL, 0.5 JSD, 1 reverse KL", source="trl")},
}

_HELP_INTERVAL = re.compile(r"[Mm]ust be (?:in|within) ([\[(])\s*(-?[\d.]+)\s*,\s*(-?[\d.]+)\s*([\])])")


def interval_from_help(help_text: str) -> Range | None:
    """A range TRL states in a field's help, e.g. top_p's "Must be in (0, 1]"."""
    m = _HELP_INTERVAL.search(help_text or "")
    if not m:
        return None
    return Range(float(m.group(2)), float(m.group(3)), low_open=m.group(1) == "(", high_open=m.group(4) == ")",
                 why="as TRL's documentation states", source="help")


def range_for(family: str, name: str, spec: dict) -> Range | None:
    """The rule for a TRL field: TRL's help text first, then posttrain's table."""
    if "int" not in spec["kinds"] and "float" not in spec["kinds"]:
        return None
    return interval_from_help(spec.get("help", "")) or FAMILY_RULES.get(family, {}).get(name) or RULES.get(name)
