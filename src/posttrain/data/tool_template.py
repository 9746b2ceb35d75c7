"""Can this chat template carry a multi-turn tool conversation the way TRL trains on it? Checked at start-up.

    notes = check_tool_template(tokenizer, "SmolLM2-135M-Instruct", tool_schemas)   # UserError (exit 2) if not

TRL 1.16's GRPO builds a multi-turn rollout by concatenating token ids: the prompt, what the model
generated, then the tokens of the tool results, then the next generation, and trains on exactly
those tokens (tool results masked out). It never re-renders the history; but it finds the tokens
of a tool result by rendering a short conversation with and without it and cutting one from the
other (`_get_tool_suffix_ids`), which is right only if rendering more turns leaves the earlier
turns' tokens as they were: the template must be *prefix-preserving*. Reasoning templates that
drop earlier `<think>` blocks once a later turn exists are not; with them the cut lands in the
wrong place and the model trains on tokens that do not match what it saw. TRL swaps in its own
patched copy for templates it knows and raises an opaque ValueError for the rest.

So before the first step posttrain renders a conversation of two tool rounds with reasoning in
every assistant turn and checks, turn by turn, that each rendered prefix is the start of the whole
(text, then tokens, as TRL compares). It also checks that the template renders the tools offered,
the tool calls and the tool results (SmolLM2's renders none of them), and that TRL can read a tool
call back from the model's output (transformers' response parsing: TRL knows the formats of some
published models; ChatML templates with Qwen's `<tool_call>{json}</tool_call>` form, like
posttrain's tiny models and recipes/templates/chatml-tools.jinja, get posttrain's parser). Each
failure is an exit-2 error naming the model, the turn and the fix.
"""

from __future__ import annotations

import json

from posttrain.data.chat_masks import TemplateProblem, _common_prefix, assistant_spans
from posttrain.errors import UserError
from posttrain.shipped import CHATML_TOOLS, copy_hint


def _call(name: str, arguments: dict) -> dict:
    return {"type": "function", "function": {"name": name, "arguments": arguments}}


def probe_conversation(schemas: list[dict], reasoning: bool = True) -> list[dict]:
    """Two rounds of tool calls calling the first tool offered, with reasoning in every assistant turn
    (templates that drop earlier <think> blocks) or with none (pure tool-call turns, TRL's own probe)."""
    function = schemas[0]["function"] if schemas else {"name": "calculator", "parameters": {"properties": {"expression": {}}}}
    params = list((function.get("parameters") or {}).get("properties") or {}) or ["x"]
    name = function["name"]
    think = (lambda text: f"<think>{text}</think>") if reasoning else (lambda text: "")
    return [
        {"role": "user", "content": "What is 12 * 7 + 5?"},
        {"role": "assistant", "content": think("First 12 * 7."), "tool_calls": [_call(name, {params[0]: "12 * 7"})]},
        {"role": "tool", "name": name, "content": "result: 84"},
        {"role": "assistant", "content": think("Now add 5."), "tool_calls": [_call(name, {params[0]: "84 + 5"})]},
        {"role": "tool", "name": name, "content": "result: 89"},
        {"role": "assistant", "content": think("Done.") + "The answer is 89."},
    ]


def _render(tokenizer, messages, schemas, template, generation_prompt=False) -> str:
    return tokenizer.apply_chat_template(messages, tools=schemas or None, chat_template=template, tokenize=False,
                                         add_generation_prompt=generation_prompt)


def history_problem(tokenizer, schemas: list[dict], template: str | None = None) -> tuple[int, str, str] | None:
    """(message index, its role, what changed) for the first turn whose rendering is rewritten once
    later turns exist, or None if the template is prefix-preserving on both probe conversations."""
    for reasoning in (False, True):
        messages = probe_conversation(schemas, reasoning)
        try:
            full = _render(tokenizer, messages, schemas, template)
        except Exception as e:  # noqa: BLE001 - a template that refuses the conversation
            return len(messages) - 1, "assistant", f"the template refuses a tool conversation ({type(e).__name__}: {e})"
        full_ids = tokenizer(full, add_special_tokens=False)["input_ids"]
        kind = "with <think> blocks" if reasoning else "without reasoning"
        for k in range(2, len(messages)):
            # what the model had seen when message k came: the history rendered, with the generation prompt
            # before an assistant turn (TRL's prompt), without it once a turn is complete (TRL's tool-result probe)
            part = _render(tokenizer, messages[:k], schemas, template, generation_prompt=messages[k]["role"] == "assistant")
            turn, role = k - 1, messages[k - 1]["role"]
            if not full.startswith(part):
                i = _common_prefix(part, full)
                return turn, role, (f"{kind}: rendered as the last turn it reads {part[max(0, i - 40):i + 40]!r}, with "
                                    f"later turns {full[max(0, i - 40):i + 40]!r}")
            ids = tokenizer(part, add_special_tokens=False)["input_ids"]
            if full_ids[: len(ids)] != ids:
                return turn, role, f"{kind}: its text is kept, but its tokens change once the next turn follows (a token spans the boundary)"
    return None


def check_tool_template(tokenizer, model: str, schemas: list[dict]) -> list[str]:
    """Raise UserError (exit 2) if TRL cannot run multi-turn tool rollouts on this template; return
    notes for the start-up log (the parser or template posttrain or TRL chose)."""
    from trl.chat_template_utils import get_training_chat_template, is_chat_template_prefix_preserving

    notes: list[str] = []
    if not getattr(tokenizer, "chat_template", None):
        raise UserError(f"training.tools: {model} has no chat template, so tools cannot be offered to it. Fix: "
                        f"training.chat_template_path=<file.jinja> (for ChatML models: {copy_hint(CHATML_TOOLS)}).")
    _check_renders_tools(tokenizer, model, schemas)
    problem = history_problem(tokenizer, schemas)
    if problem is not None or not is_chat_template_prefix_preserving(tokenizer):
        replacement = _trl_training_template(tokenizer, get_training_chat_template)
        if replacement is not None and history_problem(tokenizer, schemas, replacement) is None:
            notes.append(f"tools: the chat template of {model} rewrites earlier turns; TRL renders rollouts with its "
                         "prefix-preserving training copy of it instead")
        else:
            turn, role, how = problem if problem is not None else (1, "assistant", "its tokens change once a tool result "
                                                                                    "follows (TRL's own check)")
            raise UserError(
                f"training.tools: the chat template of {model} is not prefix-preserving: message {turn} ({role}) of a "
                f"two-round tool conversation is rendered differently once later turns exist ({how}). TRL trains on the "
                "tokens as generated and cuts each tool result out of a re-rendered conversation, so with this template "
                "the tokens trained on would not be the tokens the model saw. Fix: a template that renders every earlier "
                "turn exactly as it was generated (keeps earlier <think> blocks, adds nothing that depends on later "
                f"turns): training.chat_template_path=<file.jinja> (for ChatML models: {copy_hint(CHATML_TOOLS)}).")
    notes += _ensure_tool_call_parser(tokenizer, model, schemas)
    return notes


def _check_renders_tools(tokenizer, model: str, schemas: list[dict]) -> None:
    messages = probe_conversation(schemas)
    fix = (f"Fix: a template that renders tools, tool calls and tool results: training.chat_template_path=<file.jinja> "
           f"(for ChatML models such as SmolLM2: {copy_hint(CHATML_TOOLS)}).")
    try:
        full, _ = assistant_spans(tokenizer, messages, schemas)
    except TemplateProblem as e:
        if e.drops_tools:
            raise UserError(f"training.tools: the chat template of {model} has no tool support: {e.message}. {fix}") from None
        if e.turn is not None and "refused" in e.message:
            raise UserError(f"training.tools: the chat template of {model} cannot render a tool conversation: {e.message}. {fix}") from None
        return  # a prefix problem: history_problem names it with the turn
    if "result: 84" not in full or "result: 89" not in full:
        raise UserError(f"training.tools: the chat template of {model} has no tool support: it does not render the tool "
                        f"results (role 'tool'), so the model would never see what its calls returned. {fix}")


def _trl_training_template(tokenizer, get_training_chat_template) -> str | None:
    try:
        return get_training_chat_template(tokenizer)
    except ValueError:
        return None  # TRL has no patched copy of this template


def _ensure_tool_call_parser(tokenizer, model: str, schemas: list[dict]) -> list[str]:
    """TRL reads tool calls from generated tokens with the tokenizer's response parser: make sure one is
    set and reads back a rendered tool call (name and arguments) exactly."""
    from trl.chat_template_utils import add_response_schema

    from posttrain.models.tiny import RESPONSE_TEMPLATE

    notes = []
    if getattr(tokenizer, "response_template", None) is None and getattr(tokenizer, "response_schema", None) is None:
        try:
            add_response_schema(tokenizer)
            notes.append(f"tools: tool calls are read with TRL's parser for this template ({model})")
        except ValueError:
            tokenizer.response_template = RESPONSE_TEMPLATE
            notes.append(f"tools: tool calls are read as ChatML <tool_call>{{json}}</tool_call> blocks (posttrain's parser; {model}'s "
                         "tokenizer has none)")
    problem = _round_trip_problem(tokenizer, schemas)
    if problem:
        raise UserError(f"training.tools: TRL cannot read tool calls back from {model}'s output: {problem}. Fix: a template "
                        f"whose tool calls are <tool_call>{{\"name\": ..., \"arguments\": ...}}</tool_call> blocks after "
                        f"'<|im_start|>assistant\\n' ({CHATML_TOOLS}), or set a response_template on the tokenizer "
                        "(transformers' response parsing) that matches yours.")
    return notes


def _round_trip_problem(tokenizer, schemas: list[dict]) -> str | None:
    from trl.chat_template_utils import parse_response

    messages = probe_conversation(schemas)[:2]
    prompt = tokenizer.apply_chat_template(messages[:1], tools=schemas or None, add_generation_prompt=True, tokenize=False)
    full = tokenizer.apply_chat_template(messages, tools=schemas or None, tokenize=False)
    if not full.startswith(prompt):
        return "the rendered tool call does not follow the generation prompt"
    prompt_ids = tokenizer(prompt, add_special_tokens=False)["input_ids"]
    ids = tokenizer(full[len(prompt):].rstrip(), add_special_tokens=False)["input_ids"]
    parsed = parse_response(tokenizer, ids, prefix=prompt_ids, tools=schemas or None)
    wanted = messages[1]["tool_calls"][0]["function"]
    calls = parsed.get("tool_calls") or []
    got = calls[0].get("function", calls[0]) if calls else None
    if not got or got.get("name") != wanted["name"] or _arguments(got.get("arguments")) != wanted["arguments"]:
        return f"the rendered call {full[len(prompt):].strip()!r} parses as {parsed!r}"
    return None


def _arguments(value):
    if isinstance(value, str):
        try:
            return json.loads(value)
        except ValueError:
            return value
    return value
