"""Chats sent as plain text, to a model without a chat template (a pretrained base model) or with
`--no-chat-template`.

Evaluation tasks ask in chat messages: a system prompt, then the question. Without a template they
are sent as the transcript that system prompt describes ("A conversation between User and
Assistant..."), zero-shot, as DeepSeek-R1-Zero prompted its base model:

    {system}

    User: {question}
    Assistant:

A base model does not stop after its answer: it writes the next "User:" turn too, and a number in
that turn would be read as its answer. So the completion is cut where it begins one (`own_turn`).
"""

from __future__ import annotations

from posttrain.errors import UserError

SPEAKERS = {"user": "User", "assistant": "Assistant"}
NEXT_TURN = "\nUser:"


def plain_text(messages: list[dict]) -> str:
    """The chat as a transcript ending with "Assistant:", the system prompt first."""
    for m in messages:
        if not isinstance(m.get("content"), str) or m.get("role") not in ("system", *SPEAKERS):
            raise UserError(f"a {m.get('role')!r} turn with {type(m.get('content')).__name__} content cannot be sent as plain "
                            "text: only system, user and assistant turns of text can; use a model with a chat template")
    system = [m["content"] for m in messages if m["role"] == "system"]
    turns = [f"{SPEAKERS[m['role']]}: {m['content']}" for m in messages if m["role"] != "system"]
    return "\n\n".join(system + ["\n".join(turns + ["Assistant:"])])


def own_turn(text: str) -> tuple[str, bool]:
    """(the completion up to the turn the model began for the user, whether it began one)."""
    cut = text.find(NEXT_TURN)
    return (text, False) if cut < 0 else (text[:cut], True)
