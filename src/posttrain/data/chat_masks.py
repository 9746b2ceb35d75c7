"""Assistant-only loss on any chat template: which tokens of a rendered chat the assistant wrote.

TRL finds the assistant's tokens through `{% generation %}` markers in the chat template; most real
models' templates have none (SmolLM2, Llama, Mistral, every VLM processor), and TRL then stops with
"The chat template is not training-compatible" unless it has a patched copy of that exact
template. posttrain uses one rule for every template, markers or not:

    render the chat up to assistant turn i with the generation prompt  -> `before`
    render the chat through turn i                                      -> `through`
    the characters turn i adds (`through` after `before`, less trailing whitespace) are its span

Trailing whitespace is left out because it is never generated: decoding stops at the end-of-turn
token, which stays inside the span (ChatML's `<|im_end|>` is labelled, the newline after it is
not) — exactly what the markers of posttrain's tiny template label (tests compare the two token for
token). A token is labelled when it overlaps a span, transformers' rule for the markers.

The rule needs a prefix-preserving template: the rendering of the first turns must be a prefix of
the rendering of the whole chat, or the tokens trained on are not the tokens the model saw.
Templates that drop earlier `<think>` blocks, or re-render history once a later turn exists, are
not; `assistant_token_mask` raises `TemplateProblem` naming the turn, and callers turn it into an
exit-2 error naming the dataset and row. A template that does not render tool calls or the offered
tools (SmolLM2's) would silently train on chats without them: that is a `TemplateProblem` too.
"""

from __future__ import annotations

import json

from posttrain.errors import UserError
from posttrain.shipped import CHATML_TOOLS, copy_hint


class TemplateProblem(ValueError):
    """The chat template cannot show where the assistant's tokens are in one chat."""

    def __init__(self, turn: int | None, message: str, drops_tools: bool = False):
        super().__init__(message)
        self.turn, self.message, self.drops_tools = turn, message, drops_tools


def _render(tokenizer, messages: list, tools, add_generation_prompt: bool, chat_template: str | None) -> str:
    try:
        return tokenizer.apply_chat_template(messages, tools=tools or None, chat_template=chat_template, tokenize=False,
                                             add_generation_prompt=add_generation_prompt)
    except Exception as e:  # noqa: BLE001 - jinja's TemplateError, raise_exception(...) in the template, TypeError on None content
        raise TemplateProblem(len(messages) - 1, f"the chat template refused the chat up to message {len(messages) - 1} "
                                                 f"({type(e).__name__}: {e})") from None


def _header_only(tokenizer, tools, chat_template: str | None) -> str:
    """What the template writes before a chat's first message, for a chat that opens with the assistant."""
    try:
        return _render(tokenizer, [], tools, True, chat_template)
    except TemplateProblem:
        return ""


def _common_prefix(a: str, b: str) -> int:
    return next((k for k, (x, y) in enumerate(zip(a, b)) if x != y), min(len(a), len(b)))


def _first_difference(a: str, b: str) -> str:
    i = _common_prefix(a, b)
    return f"at character {i}: {a[max(0, i - 30):i + 30]!r} vs {b[max(0, i - 30):i + 30]!r}"


def assistant_spans(tokenizer, messages: list, tools=None, chat_template: str | None = None,
                    first_turn: int = 0) -> tuple[str, list[tuple[int, int]]]:
    """The rendered chat and the character span of every assistant turn from message `first_turn` on
    (see the module docstring)."""
    if isinstance(tools, str):
        tools = json.loads(tools)
    full = _render(tokenizer, messages, tools, False, chat_template)
    spans = []
    for i, message in enumerate(messages):
        if message.get("role") != "assistant" or i < first_turn:
            continue
        before = _render(tokenizer, messages[:i], tools, True, chat_template) if i else _header_only(tokenizer, tools, chat_template)
        through = _render(tokenizer, messages[: i + 1], tools, False, chat_template)
        if not full.startswith(through):
            raise TemplateProblem(i, f"the template is not prefix-preserving: the chat rendered through message {i} "
                                     f"(assistant) is not the start of the whole chat rendered ({_first_difference(through, full)}); "
                                     "it rewrites earlier turns once later ones exist (e.g. drops an earlier <think> block)")
        # The generation prompt may differ from what the history holds before the turn (Gemma's empty
        # thought block, Qwen3's): the turn starts where the two stop agreeing, as in TRL's prompt/completion rule.
        start = _common_prefix(before, through)
        end = len(through.rstrip())
        if end <= start:
            raise TemplateProblem(i, f"the template renders nothing for assistant message {i}")
        for call in message.get("tool_calls") or []:
            name = (call.get("function") or call).get("name") if isinstance(call, dict) else None
            if name and name not in through[start:end]:
                raise TemplateProblem(i, f"the chat template does not render tool calls: assistant message {i} calls "
                                         f"{name!r}, and its rendered turn does not mention it", drops_tools=True)
        spans.append((start, end))
    for tool in tools or []:
        name = (tool.get("function") or tool).get("name") if isinstance(tool, dict) else None
        if name and name not in full:
            raise TemplateProblem(None, f"the chat template does not render the tools offered: {name!r} is not in the rendered chat",
                                  drops_tools=True)
    return full, spans


def assistant_token_mask(renderer, messages: list, tools=None, chat_template: str | None = None,
                         first_turn: int = 0) -> tuple[list[int], list[int]]:
    """(input_ids, mask) of a chat: mask[t] = 1 where token t belongs to an assistant turn.

    `renderer` is a tokenizer, or a VLM processor (its template renders, its tokenizer tokenizes;
    image placeholders stay unexpanded: see `align_mask`). The ids are those
    `apply_chat_template(tokenize=True)` gives (the rendered text, no special tokens added).
    Raises `TemplateProblem`.
    """
    full, spans = assistant_spans(renderer, messages, tools, chat_template, first_turn)
    tokenizer = getattr(renderer, "tokenizer", renderer)
    encoded = tokenizer(full, add_special_tokens=False, return_offsets_mapping=True)
    mask, k = [0] * len(encoded["input_ids"]), 0
    for t, (token_start, token_end) in enumerate(encoded["offset_mapping"]):
        while k < len(spans) and token_start >= spans[k][1]:
            k += 1
        if k == len(spans):
            break
        if token_end > spans[k][0]:
            mask[t] = 1
    return list(encoded["input_ids"]), mask


def align_mask(ids: list[int], mask: list[int], expanded: list[int], truncated: bool = False) -> list[int]:
    """Carry `mask` over `ids` onto `expanded`: the same tokens with image placeholders expanded by a
    VLM processor (LLaVA repeats `<image>` once per patch; others insert grid tokens). Expansion
    only touches the user turns' media, so every assistant token lies in a block the two share.
    Raises `TemplateProblem` if some assistant token cannot be placed (unless `expanded` was cut short)."""
    from difflib import SequenceMatcher

    out = [0] * len(expanded)
    for a, b, n in SequenceMatcher(None, ids, expanded, autojunk=False).get_matching_blocks():
        out[b:b + n] = mask[a:a + n]
    if not truncated and sum(out) != sum(mask):
        raise TemplateProblem(None, f"only {sum(out)} of the {sum(mask)} assistant tokens could be found in the processor's "
                                    "tokens (the processor changes text outside the image placeholders)")
    return out


def template_error(problem: TemplateProblem, where: str, row: int, model: str) -> UserError:
    """The exit-2 error for a chat the template cannot mask, naming the dataset, row, turn and the fix."""
    turn = f", message {problem.turn}" if problem.turn is not None else ""
    if problem.drops_tools:  # training on every token would still train on chats without their tool calls
        return UserError(
            f"{where}, row {row}{turn}: {problem.message}. The chat template of {model} would train on these chats without "
            "their tools. Fix: give a template that renders tools and tool calls (training.chat_template_path=<file.jinja>; "
            f"for ChatML models such as SmolLM2: {copy_hint(CHATML_TOOLS)}).")
    return UserError(
        f"{where}, row {row}{turn}: {problem.message}. The chat template of {model} cannot be trained with loss on the "
        "assistant's turns. Fix: give a template that renders these chats as they are (training.chat_template_path="
        "<file.jinja>), or train on every token (training.assistant_only_loss=false).")
