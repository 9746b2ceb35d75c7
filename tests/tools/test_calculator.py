"""The shipped calculator tool: safe arithmetic only, and exactly the tool the SFT chats offer."""

from __future__ import annotations

import pytest

from posttrain.data.synthetic import CALCULATOR, problems, tool_chat
from posttrain.tools.calculator import calculator


def test_its_schema_is_the_one_the_tool_calling_chats_offer():
    from transformers.utils import get_json_schema

    assert get_json_schema(calculator) == CALCULATOR
    assert tool_chat(problems(1, 0)[0])["tools"] == [CALCULATOR]


def test_it_answers_every_synthetic_problem_from_its_expression():
    for p in problems(200, 3):
        assert calculator(p["expression"]) == str(p["answer"])


@pytest.mark.parametrize("expression, says", [
    ("__import__('os').system('true')", "only numbers"),
    ("2 ** 10 ** 10", "exponent"),
    ("1 / 0", "division by zero"),
    ("2 +", "not an arithmetic expression"),
])
def test_anything_but_arithmetic_is_refused(expression, says):
    with pytest.raises(ValueError, match=says):
        calculator(expression)
