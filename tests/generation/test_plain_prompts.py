"""Chats as plain transcripts for models without a chat template, and answers cut at the model's own next turn."""

import pytest

from posttrain.errors import UserError
from posttrain.generation.plain_prompts import own_turn, plain_text


def test_a_chat_becomes_the_transcript_its_system_prompt_describes():
    chat = [{"role": "system", "content": "A conversation between User and Assistant."},
            {"role": "user", "content": "What is 2 + 3?"}, {"role": "assistant", "content": "<answer> 5 </answer>"},
            {"role": "user", "content": "And 4 + 4?"}]
    assert plain_text(chat) == ("A conversation between User and Assistant.\n\nUser: What is 2 + 3?\n"
                                "Assistant: <answer> 5 </answer>\nUser: And 4 + 4?\nAssistant:")
    assert plain_text([{"role": "user", "content": "hi"}]) == "User: hi\nAssistant:"
    with pytest.raises(UserError, match="a 'user' turn with list content cannot be sent as plain text"):
        plain_text([{"role": "user", "content": [{"type": "image"}]}])


def test_a_base_models_next_turn_is_not_its_answer():
    # the loose scorer reads the last number: 7 from the invented turn would be taken for the answer
    assert own_turn(" <think> 2 + 3 = 5 </think> <answer> 5 </answer>\nUser: What is 3 + 4?\nAssistant: 7") == (
        " <think> 2 + 3 = 5 </think> <answer> 5 </answer>", True)
    assert own_turn(" 5\n\nThe user asked") == (" 5\n\nThe user asked", False)
