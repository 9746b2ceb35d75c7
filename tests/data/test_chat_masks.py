"""Assistant masks without `{% generation %}` markers: the same tokens the markers give, on any template,
and a clear problem (naming the turn) where a template cannot be trained this way."""

from __future__ import annotations

import pytest
from transformers import AutoTokenizer

from posttrain.data.chat_masks import TemplateProblem, align_mask, assistant_token_mask

TOOLS = [{"type": "function", "function": {"name": "get_weather", "description": "Weather in a city",
                                           "parameters": {"type": "object", "properties": {"city": {"type": "string"}}}}}]
CHATS = {
    "one turn": [{"role": "user", "content": "What is 2+3?"}, {"role": "assistant", "content": "5"}],
    "system, two turns": [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "2+3?"},
                          {"role": "assistant", "content": "<answer>5</answer>"}, {"role": "user", "content": "and 4+4?"},
                          {"role": "assistant", "content": "8"}],
    "tool call": [{"role": "user", "content": "Weather in Paris?"},
                  {"role": "assistant", "content": "", "tool_calls": [{"type": "function", "function": {"name": "get_weather", "arguments": {"city": "Paris"}}}]},
                  {"role": "tool", "content": "sunny, 21 C"}, {"role": "assistant", "content": "It is sunny, 21 C."}],
}

# ChatML, the way most real templates are written: no generation markers.
CHATML = ("{%- for m in messages -%}{{ '<|im_start|>' + m.role + '\\n' + m.content + '<|im_end|>\\n' }}{%- endfor -%}"
          "{%- if add_generation_prompt -%}{{ '<|im_start|>assistant\\n' }}{%- endif -%}")
# Qwen3-style reasoning template: earlier assistant turns lose their <think> block once a later turn exists.
DROPS_THINK = ("{%- for m in messages -%}{%- if m.role == 'assistant' and not loop.last -%}"
               "{{ '<|im_start|>assistant\\n' + m.content.split('</think>')[-1].lstrip() + '<|im_end|>\\n' }}"
               "{%- else -%}{{ '<|im_start|>' + m.role + '\\n' + m.content + '<|im_end|>\\n' }}{%- endif -%}{%- endfor -%}"
               "{%- if add_generation_prompt -%}{{ '<|im_start|>assistant\\n' }}{%- endif -%}")
# Gemma-4-style: the generation prompt opens an empty thought block that the history does not hold.
THOUGHT_PROMPT = CHATML.replace("{{ '<|im_start|>assistant\\n' }}{%- endif -%}", "{{ '<|im_start|>assistant\\n<think></think>' }}{%- endif -%}")
# Alternation enforced with raise_exception, as Mistral's and Llama 2's templates do.
STRICT = ("{%- for m in messages -%}{%- if (m.role == 'user') != (loop.index0 % 2 == 0) -%}"
          "{{ raise_exception('Conversation roles must alternate user/assistant') }}{%- endif -%}"
          "{{ '<|im_start|>' + m.role + '\\n' + m.content + '<|im_end|>\\n' }}{%- endfor -%}")


@pytest.fixture(scope="module")
def tok(tiny_dir):
    return AutoTokenizer.from_pretrained(tiny_dir)


def labelled(tok, ids, mask) -> list[str]:
    """The labelled stretches, decoded one by one."""
    out, run = [], []
    for i, m in zip(ids + [None], mask + [0]):
        if m:
            run.append(i)
        elif run:
            out.append(tok.decode(run))
            run = []
    return out


@pytest.mark.parametrize("name", sorted(CHATS))
def test_same_tokens_as_the_generation_markers(tok, name):
    """The tiny template has markers around content + <|im_end|>: posttrain's rule, which ignores
    them, must label exactly the tokens they label (ids identical to apply_chat_template's too)."""
    chat = CHATS[name]
    tools = TOOLS if name == "tool call" else None
    ids, mask = assistant_token_mask(tok, chat, tools)
    reference = tok.apply_chat_template(chat, tools=tools, tokenize=True, return_dict=True, return_assistant_tokens_mask=True)
    assert ids == reference["input_ids"]
    assert mask == reference["assistant_masks"] and sum(mask) > 0


def test_markerless_template_labels_content_and_end_of_turn_only(tok):
    ids, mask = assistant_token_mask(tok, CHATS["system, two turns"], chat_template=CHATML)
    assert labelled(tok, ids, mask) == ["<answer>5</answer><|im_end|>", "8<|im_end|>"]  # the newline after <|im_end|> is never generated


def test_first_turn_leaves_earlier_assistant_turns_unlabelled(tok):
    ids, mask = assistant_token_mask(tok, CHATS["system, two turns"], chat_template=CHATML, first_turn=4)
    assert labelled(tok, ids, mask) == ["8<|im_end|>"]


def test_a_template_that_rewrites_history_is_refused_naming_the_turn(tok):
    chat = [{"role": "user", "content": "2+3?"}, {"role": "assistant", "content": "<think>2 plus 3</think>5"},
            {"role": "user", "content": "and 4+4?"}, {"role": "assistant", "content": "<think>4 plus 4</think>8"}]
    with pytest.raises(TemplateProblem, match="not prefix-preserving") as e:
        assistant_token_mask(tok, chat, chat_template=DROPS_THINK)
    assert e.value.turn == 1
    ids, mask = assistant_token_mask(tok, chat[:2], chat_template=DROPS_THINK)  # one turn: nothing rewritten, trainable
    assert labelled(tok, ids, mask) == ["<think>2 plus 3</think>5<|im_end|>"]


def test_a_generation_prompt_the_history_lacks_starts_the_turn_where_they_agree(tok):
    ids, mask = assistant_token_mask(tok, CHATS["one turn"], chat_template=THOUGHT_PROMPT)
    assert labelled(tok, ids, mask) == ["5<|im_end|>"]


def test_a_template_that_drops_tool_calls_or_tools_is_refused(tok):
    with pytest.raises(TemplateProblem, match="does not render tool calls: assistant message 1 calls 'get_weather'") as e:
        assistant_token_mask(tok, CHATS["tool call"], TOOLS, chat_template=CHATML.replace("m.content", "(m.content or '')"))
    assert e.value.turn == 1
    plain = [{"role": "user", "content": "hi"}, {"role": "assistant", "content": "hello"}]
    with pytest.raises(TemplateProblem, match="does not render the tools offered: 'get_weather'"):
        assistant_token_mask(tok, plain, TOOLS, chat_template=CHATML)


def test_a_template_that_raises_is_a_problem_not_a_traceback(tok):
    chat = [{"role": "user", "content": "a"}, {"role": "assistant", "content": "b"}, {"role": "assistant", "content": "c"}]
    with pytest.raises(TemplateProblem, match="refused the chat up to message 2.*roles must alternate"):
        assistant_token_mask(tok, chat, chat_template=STRICT)


def test_align_mask_follows_an_expanded_image_placeholder():
    ids, mask = [10, 11, 99, 12, 20, 21, 3], [0, 0, 0, 0, 1, 1, 1]  # 99 is <image>
    expanded = [10, 11, 99, 99, 99, 99, 12, 20, 21, 3]
    assert align_mask(ids, mask, expanded) == [0] * 7 + [1, 1, 1]
    assert align_mask(ids, mask, expanded[:8], truncated=True) == [0] * 7 + [1]
    with pytest.raises(TemplateProblem, match="only 2 of the 3 assistant tokens"):
        align_mask(ids, mask, [10, 11, 99, 99, 12, 20, 21, 4])
