"""A calculator tool: the one posttrain's tool-calling chats (posttrain.data.synthetic) teach and the
shipped tool-use example (recipes/tool-use/) trains with.

    training:
      tools: [posttrain.tools.calculator:calculator]

It parses the expression (Python's ast) and evaluates numbers, + - * / // % ** and parentheses only:
`eval` on model output would run whatever the model writes. Its schema (name, description, the
`expression` parameter) is exactly `posttrain.data.synthetic.CALCULATOR`, the one in the SFT chats,
so the model sees the same tool in SFT, GRPO and evaluation (tests/tools/test_calculator.py).

>>> calculator("142 + 271"), calculator("7 / 2"), calculator("6 / 3")
('413', '3.5', '2')
"""

from __future__ import annotations

import ast
import operator

_BINARY = {ast.Add: operator.add, ast.Sub: operator.sub, ast.Mult: operator.mul, ast.Div: operator.truediv,
           ast.FloorDiv: operator.floordiv, ast.Mod: operator.mod, ast.Pow: operator.pow}
_UNARY = {ast.UAdd: operator.pos, ast.USub: operator.neg}
MAX_EXPONENT = 64  # 10 ** 10 ** 10 would never finish


def calculator(expression: str):  # no return hint: it would add a "return" entry to the schema the model reads
    """Evaluate an arithmetic expression.

    Args:
        expression: An arithmetic expression such as '12 * 7 + 5'.
    """
    try:
        tree = ast.parse(expression.strip(), mode="eval")
    except SyntaxError:
        raise ValueError(f"not an arithmetic expression: {expression!r}") from None
    value = _evaluate(tree.body, expression)
    if isinstance(value, float) and value.is_integer():
        value = int(value)
    return str(value)


def _evaluate(node, expression: str):
    if isinstance(node, ast.Constant) and isinstance(node.value, (int, float)) and not isinstance(node.value, bool):
        return node.value
    if isinstance(node, ast.BinOp) and type(node.op) in _BINARY:
        left, right = _evaluate(node.left, expression), _evaluate(node.right, expression)
        if isinstance(node.op, ast.Pow) and abs(right) > MAX_EXPONENT:
            raise ValueError(f"exponent {right} is too large (at most {MAX_EXPONENT})")
        try:
            return _BINARY[type(node.op)](left, right)
        except ZeroDivisionError:
            raise ValueError(f"division by zero in {expression!r}") from None
    if isinstance(node, ast.UnaryOp) and type(node.op) in _UNARY:
        return _UNARY[type(node.op)](_evaluate(node.operand, expression))
    raise ValueError(f"only numbers, + - * / // % ** and parentheses are allowed, not {ast.unparse(node)!r} in {expression!r}")
