"""The generation interface every engine implements (local transformers, vLLM, HTTP APIs).

An engine turns a list of prompts into one `Completion` per prompt, in the same order. Prompts are
either plain strings or chat messages ([{"role": ..., "content": ...}]); local engines apply the
model's chat template to chats (with the generation prompt), API engines send chats as they are.
Chats may hold tool turns: an assistant message with `tool_calls` and `tool` messages with the
results (`name`, `tool_call_id`, `content`), the form TRL trains on and OpenAI's API takes.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Protocol, Union

from posttrain.errors import UserError

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
    # with tools offered: the calls this turn makes, [{"id", "type": "function", "function": {"name", "arguments"}}]
    # (arguments a dict, or the model's text when it is not a JSON object); None when it makes none
    tool_calls: list | None = None


class Engine(Protocol):
    name: str  # the model as the user named it, for outputs and reports

    def generate(self, prompts: list[Prompt], params: SamplingParams, tools: list[dict] | None = None) -> list[Completion]:
        """One Completion per prompt; with `tools` (JSON schemas, OpenAI's form) the model may call them:
        the calls come back in Completion.tool_calls (`posttrain.generation.tool_loop` runs them)."""
        ...


def has_images(prompt: Prompt) -> bool:
    return isinstance(prompt, list) and any(
        isinstance(m.get("content"), list) and any(isinstance(p, dict) and p.get("type") == "image" for p in m["content"])
        for m in prompt if isinstance(m, dict))


def with_loaded_images(prompt: Prompt) -> Prompt:
    """The prompt with every image part that holds a reference (path, URL, s3://, data URI) holding
    the decoded PIL image instead, as engines take them. Evaluation items keep references so they
    stay JSON; they are read here, just before generation. Prompts without images come back as they are."""
    if not has_images(prompt):
        return prompt
    from posttrain.data.media import MediaError, load_images
    from posttrain.errors import UserError

    out = []
    for m in prompt:
        content = m.get("content")
        if isinstance(content, list):
            parts = []
            for p in content:
                if isinstance(p, dict) and p.get("type") == "image" and isinstance(p.get("image"), str):
                    try:
                        (image,) = load_images(p["image"])
                    except MediaError as e:
                        raise UserError(f"an image of a prompt cannot be read: {e}") from None
                    p = {**p, "image": image}
                parts.append(p)
            m = {**m, "content": parts}
        out.append(m)
    return out


def check_params(params: SamplingParams) -> None:
    """Reject sampling values no engine can honour, naming the value and the valid range."""
    if params.max_new_tokens < 1:
        raise UserError(f"max_new_tokens must be at least 1, got {params.max_new_tokens}")
    if params.temperature < 0:
        raise UserError(f"temperature must be >= 0 (0 = greedy), got {params.temperature}")
    if not 0 < params.top_p <= 1:
        raise UserError(f"top_p must be in (0, 1], got {params.top_p}")
