"""The generation interface every engine implements (local transformers, vLLM, HTTP APIs).

An engine turns a list of prompts into one `Completion` per prompt, in the same order. Prompts are
either plain strings or chat messages ([{"role": ..., "content": ...}]); local engines apply the
model's chat template to chats (with the generation prompt), API engines send chats as they are.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Protocol, Union

Prompt = Union[str, list[dict]]


@dataclass(frozen=True)
class SamplingParams:
    max_new_tokens: int = 256
    temperature: float = 0.0  # 0 = greedy (deterministic): the default for evaluation
    top_p: float = 1.0
    seed: int = 0

    def to_dict(self) -> dict:
        return asdict(self)


@dataclass
class Completion:
    text: str
    prompt_tokens: int | None = None  # None where an API does not report it
    completion_tokens: int | None = None
    finish_reason: str | None = None  # "stop", "length", "error"
    error: str | None = None  # set when the request failed and the failure policy let the run continue
    extra: dict = field(default_factory=dict)


class Engine(Protocol):
    name: str  # the model as the user named it, for outputs and reports

    def generate(self, prompts: list[Prompt], params: SamplingParams) -> list[Completion]: ...
