"""Answer parsing shared by GRPO training rewards and evaluation scoring.

Contract: training reward and evaluation score share ONE parser (this module).

* **Strict** scoring (``strict_correct``) is exactly what the ``answer_match`` reward optimises:
  the content of the single ``<answer>...</answer>`` block must parse as one number equal to gold.
* **Loose** scoring (``loose_correct``) is format-blind: the last number anywhere in the
  completion is compared with gold. It tells you whether the model *knows* the answer even when
  it ignores the output format.
* Numbers are compared as numbers (``Decimal``), never as raw strings: ``"$1,400.00" == "1400"``.

Number rules (``parse_number`` / ``last_number``):

* Accepted: optional sign (``-``, ``+``, unicode minus ``\u2212``), optional currency symbol
  (``$ € £ ¥ ₹``, before or after the sign), digits with optional decimal part (``0.5``, ``.5``,
  ``1400.``), and thousands separators when grouped correctly (``1,234,567.89``).
* Units and trailing words are ignored: ``"1400 dollars"``, ``"42%"`` (``%`` is a unit: 42).
* A number glued to a preceding ASCII letter/digit is not a number (``"x2"``; CJK text glued to
  digits is fine: ``"答案是1400元"`` -> 1400), and a ``-`` glued to a preceding word is not a
  sign (``"3-4"`` reads as 3 and 4, not 3 and -4).
* Malformed thousands groups (``"1,40"``, ``"12,34"``, European ``"0,5"``) are NOT numbers with
  commas. ``parse_number`` rejects them (``None``); ``last_number`` reads them as a
  comma-separated list (``"1,40"`` -> last number 40).
* ``parse_number`` returns ``None`` when the text holds no number or two *different* numbers
  (``"3 or 4"``, ``"2+3=5"``); repeating the same value is fine (``"1,400 ($1400.00)"`` -> 1400).
* LaTeX, as math models and datasets write numbers (normalised first, see ``_LATEX_RULES``):
  ``\\$`` is a dollar sign (``-\\$452`` -> -452); ``{,}``, ``\\,`` and the thin spaces U+2009 /
  U+202F between digits are thousands separators under the comma's grouping rule (``1{,}400`` ->
  1400, ``1\\,234\\,567`` -> 1234567; ``3{,}14``, a European decimal comma, is malformed like
  ``3,14``); other LaTeX spacing (``\\;``, ``\\:``, ``\\!``, ``\\ ``) is a space; ``\\text{...}``,
  ``\\mathrm{...}``, ``\\textbf{...}``, ``\\mathbf{...}``, ``\\mbox{...}`` and ``\\boxed{...}``
  are replaced by their content, ``\\left`` / ``\\right`` dropped; ``\\%`` is ``%``.
* Symbolic answers are no number to ``parse_number`` (``None``), so a gold answer ``\\frac{5}{x}``
  never trains as 5 and ``<answer>5x</answer>`` never scores as 5: a LaTeX command left after the
  rewrites above (``\\frac``, ``\\sqrt``, ``\\pi``, ``\\cdot``), a math operator or brace
  next to a numeral (``5^2``, ``5/x``, ``{5}``, ``5 < x``, ``\u221a5``, ``5\u03c0``), a one-letter
  variable glued to a numeral (``5x``, ``2n``; so is ``5m``: write units with a space or in full,
  ``5 m``, ``5kg``), or a one-letter variable next to ``+ - * /`` (``x + 1``). One assignment in
  front is allowed: ``x = 5`` and ``= 5`` state 5 (what a "solve for x" gold means, and how
  math-verify reads it), ``x = 5y`` and ``x < 5`` do not. Such answers are the ``math`` scorer's
  (:mod:`posttrain.rewards.math_answers`). ``last_number`` is format-blind and keeps reading prose.
* Not supported (parsed as separate numbers, hence ambiguous): fractions ``1/2`` and
  ``\\frac{1}{2}``, plain spaces as thousands separators. Scientific notation (``3.5e2``) is no
  number to ``parse_number`` (it would read 3.5); ``last_number`` reads the mantissa.

Tags are matched exactly and case-sensitively: ``<think>``, ``</think>``, ``<answer>``,
``</answer>`` -- the format the prompt asks for.
"""

from __future__ import annotations

import re
from decimal import Decimal

__all__ = [
    "parse_number",
    "is_symbolic",
    "numbers_equal",
    "last_number",
    "extract_answer",
    "extract_gsm8k_gold",
    "strict_correct",
    "text_correct",
    "loose_correct",
    "format_score",
    "FORMAT_PENALTY_SCALE",
    "FORMAT_MAX_PENALTY",
]

# Unicode minus signs models and datasets actually emit. En/em dashes are NOT minus: they mark ranges.
_MINUS_SIGNS = str.maketrans({"\u2212": "-", "\ufe63": "-", "\uff0d": "-"})

_NUMBER_RE = re.compile(
    # Not glued to an ASCII word: "x2" is no number and the "-" in "3-4" is no sign. ASCII only, so
    # CJK text glued to digits ("答案是1400元") still reads as a number.
    r"(?<![A-Za-z0-9_])"
    r"(?P<sign>[-+]?)"
    r"(?:[$€£¥₹]\s?)?"  # currency before the digits ("$5", "-$5", "$ 5") ...
    r"(?P<sign2>[-+]?)"  # ... or before the sign ("$-5")
    r"(?P<body>[0-9]+(?:,[0-9]+)*(?:\.[0-9]*)?|\.[0-9]+)"
)
_GROUPED_RE = re.compile(r"[0-9]{1,3}(?:,[0-9]{3})+")
_EXPONENT_RE = re.compile(r"[0-9.][eE][-+]?[0-9]")  # 3.5e2, 1E-3: scientific notation, which the number rules do not read

# LaTeX spellings of what the number rules above already understand, rewritten before scanning
# (order matters: separators between digits first, then the remaining spacing commands).
_LATEX_RULES = [
    (re.compile(r"\\\$"), "$"),  # escaped dollar: -\$452, \$1,400
    (re.compile(r"\\%"), "%"),
    (re.compile(r"(?<=[0-9])(?:\{,\}|\\,|[\u2009\u202f])(?=[0-9])"), ","),  # 1{,}400, 1\,400, 1 400
    (re.compile(r"\\[,;:! ]"), " "),  # other LaTeX spacing: -\$\,452
    (re.compile(r"\\(?:q?quad|displaystyle|[()\[\]])(?![A-Za-z])"), " "),  # \quad, math delimiters \( \) \[ \]
    (re.compile(r"\\(?:left|right)(?![A-Za-z])"), ""),
]
_LATEX_WRAPPER_RE = re.compile(r"\\(?:text|mathrm|textrm|textbf|mathbf|mbox|boxed)\s*\{([^{}]*)\}")


def _normalise(text: str) -> str:
    """``text`` with unicode minus signs and LaTeX number spellings rewritten (module docstring)."""
    text = text.translate(_MINUS_SIGNS)
    if "\\" not in text and "{" not in text and "\u2009" not in text and "\u202f" not in text:
        return text
    for pattern, replacement in _LATEX_RULES:
        text = pattern.sub(replacement, text)
    for _ in range(3):  # nested wrappers: \boxed{\text{...}}
        text, found = _LATEX_WRAPPER_RE.subn(r"\1", text)
        if not found:
            break
    return text


# What makes a text symbolic rather than a stated number (parse_number refuses it; module docstring).
_OPERATORS = r"\^_{}=<>|/\u00d7\u00f7\u00b7\u221a\u03c0\u221e\u2264\u2265\u2260"  # ^ _ { } = < > | / × ÷ · √ π ∞ ≤ ≥ ≠; not * (markdown bold: **5**)
_VARIABLE = r"(?<![A-Za-z\\])[A-Za-z](?![A-Za-z])"  # a one-letter word (not a command's last letter)
_SYMBOLIC_RE = re.compile(
    r"\\[A-Za-z]+"  # a LaTeX command the rewrites did not turn into a number: \frac, \sqrt, \pi
    rf"|[0-9.]\s*[{_OPERATORS}]|[{_OPERATORS}]\s*[-+]?\.?[0-9]"  # an operator next to a numeral: 5^2, 5/x, {5}
    r"|[0-9](?:[A-Za-z](?![A-Za-z]))"  # a variable glued to a numeral: 5x, 2n
    rf"|{_VARIABLE}\s*[-+*/{_OPERATORS}]|[-+*/{_OPERATORS}]\s*{_VARIABLE}"  # a variable next to an operator: x + 1
)
_TAG_RE = re.compile(r"</?[A-Za-z][^<>]*>")  # <think> inside an answer is markup, not two inequalities
_ASSIGNMENT_RE = re.compile(r"^\s*(?:[A-Za-z]\s*)?=(?!=)")  # "x = 5", "= 5": the value stated after it


def is_symbolic(text: str) -> bool:
    """Whether ``text`` is a symbolic answer (an expression, not a stated number): see the module docstring.

    >>> is_symbolic("\\frac{5}{x}"), is_symbolic("5x"), is_symbolic("x = 5"), is_symbolic("5 apples")
    (True, True, False, False)
    """
    return bool(_SYMBOLIC_RE.search(_TAG_RE.sub(" ", _normalise(_unassigned(text)))))


def _unassigned(text: str) -> str:
    """``text`` without one leading assignment: "x = 5" -> " 5"."""
    return _ASSIGNMENT_RE.sub(" ", text, count=1)


def _scan(text: str) -> list[tuple[list[Decimal], bool]]:
    """Every number token in ``text`` as (values, well_formed).

    A well-formed token has one value. A malformed thousands run ("1,40") is split at its commas
    into several values and flagged, so ``parse_number`` can reject it and ``last_number`` can
    still read it as a list.
    """
    tokens = []
    for match in _NUMBER_RE.finditer(_normalise(text)):
        negative = "-" in match["sign"] + match["sign2"]
        body = match["body"]
        integer_part = body.partition(".")[0]
        well_formed = "," not in integer_part or bool(_GROUPED_RE.fullmatch(integer_part))
        pieces = [body.replace(",", "")] if well_formed else body.split(",")
        values = [Decimal(piece) for piece in pieces]
        if negative:  # the sign belongs to the first piece only
            values[0] = -values[0]
        tokens.append((values, well_formed))
    return tokens


def parse_number(text: str | None) -> Decimal | None:
    """The single number ``text`` states, or ``None`` (no number, two different numbers, bad commas, a symbolic answer).

    >>> parse_number("$1,400.00")
    Decimal('1400.00')
    >>> parse_number("3 or 4") is None, parse_number("3.5e2") is None, parse_number("\\frac{5}{x}") is None
    (True, True, True)
    """
    if text is None or _EXPONENT_RE.search(text) or is_symbolic(text):
        return None
    tokens = _scan(_unassigned(text))
    if not tokens or not all(well_formed for _, well_formed in tokens):
        return None
    values = [value for token_values, _ in tokens for value in token_values]
    # Decimal hashes numerically, so 1400 and 1400.00 collapse into one element.
    return values[0] if len(set(values)) == 1 else None


def last_number(text: str | None) -> Decimal | None:
    """Format-blind: the last number anywhere in ``text`` (``None`` if there is none)."""
    if text is None:
        return None
    tokens = _scan(text)
    return tokens[-1][0][-1] if tokens else None


def numbers_equal(a: Decimal | int | None, b: Decimal | int | None) -> bool:
    """Numeric equality (``1400 == 1400.00``); ``None`` never equals anything."""
    if a is None or b is None:
        return False
    return Decimal(a) == Decimal(b)


_ANSWER_OPEN, _ANSWER_CLOSE = "<answer>", "</answer>"
_THINK_OPEN, _THINK_CLOSE = "<think>", "</think>"


def extract_answer(completion: str) -> str | None:
    """Stripped content of the single ``<answer>...</answer>`` block.

    ``None`` -- never the whole completion -- when there is no answer tag, when it is unclosed,
    when the tags are out of order, or when there is more than one block (a model must not be able
    to hedge with several answers). An empty block gives ``""``.
    """
    if completion.count(_ANSWER_OPEN) != 1 or completion.count(_ANSWER_CLOSE) != 1:
        return None
    start = completion.index(_ANSWER_OPEN) + len(_ANSWER_OPEN)
    end = completion.index(_ANSWER_CLOSE)
    return completion[start:end].strip() if start <= end else None


def extract_gsm8k_gold(answer_field: str) -> str:
    """GSM8K gold: the text after the (last) ``####``, stripped; the whole string if there is none."""
    return answer_field.rsplit("####", 1)[-1].strip()


def _gold_number(gold: str | int | Decimal) -> Decimal:
    """Gold as a Decimal. Raises instead of scoring 0: a bad gold row is a data bug, not a wrong answer."""
    if isinstance(gold, (int, Decimal)) and not isinstance(gold, bool):
        return Decimal(gold)
    if isinstance(gold, float):
        return Decimal(str(gold))  # str() first: Decimal(0.1) would be the binary approximation
    number = parse_number(extract_gsm8k_gold(str(gold)))
    if number is None:
        raise ValueError(f"gold answer {gold!r} is not a single number")
    return number


def gold_is_comparable(gold) -> bool:
    """Whether the numeric rewards can compare against this gold answer (else they raise mid-run).

    >>> gold_is_comparable("#### 1,400"), gold_is_comparable("\\frac{1}{2}")
    (True, False)
    """
    try:
        _gold_number(gold)
    except (ValueError, ArithmeticError):
        return False
    return True


def strict_correct(completion: str, gold: str | int | Decimal) -> bool:
    """The ``<answer>`` block parses as one number equal to gold (what ``answer_match`` rewards).

    ``gold`` may be a bare number or a raw GSM8K answer field ("... #### 1,400").
    """
    return numbers_equal(parse_number(extract_answer(completion)), _gold_number(gold))


def text_correct(completion: str, gold: str | int) -> bool:
    """The ``<answer>`` block holds just the gold: as a number when gold is one (``strict_correct``),
    else as text, case-insensitively, surrounding whitespace and punctuation stripped (what
    ``text_match`` rewards and the strict score of free-text answers).

    >>> text_correct("<answer> Red. </answer>", "red"), text_correct("<answer>dark red</answer>", "red")
    (True, False)
    """
    if parse_number(str(gold)) is not None:
        return strict_correct(completion, str(gold))
    answer = extract_answer(completion)
    strip = " \t\n\r.,;:!?\"'()[]{}"
    return answer is not None and answer.strip(strip).lower() == str(gold).strip(strip).lower()


def loose_correct(completion: str, gold: str | int | Decimal) -> bool:
    """Format-blind: the last number anywhere in the completion equals gold."""
    return numbers_equal(last_number(completion), _gold_number(gold))


# format_score = 1 - min(FORMAT_MAX_PENALTY, extra_chars / FORMAT_PENALTY_SCALE)
FORMAT_PENALTY_SCALE = 1000
FORMAT_MAX_PENALTY = 0.5


def format_score(completion: str) -> float:
    """How well ``completion`` follows ``<think>...</think><answer>...</answer>``, in [0, 1].

    0.0 unless each of the four tags appears exactly once, in the order think, /think, answer,
    /answer, with non-empty reasoning and a non-empty answer -- so duplicated or nested tags cannot
    farm the reward, and neither can an empty ``<think></think>`` (a policy that drops its reasoning
    and keeps the tags earns nothing for the format). Otherwise::

        score = 1 - min(0.5, extra_chars / 1000)

    where ``extra_chars`` counts the non-whitespace-stripped text before ``<think>``, between
    ``</think>`` and ``<answer>``, and after ``</answer>``. Surrounding whitespace is free; a
    5,000-character trailer costs exactly the 0.5 cap, so the score is never below 0.5 once the
    structure is right.

    >>> format_score("<think>2+2</think>\\n<answer>4</answer>")
    1.0
    >>> format_score("<think>2+2</think><answer>4</answer><answer>5</answer>")
    0.0
    >>> format_score("<think> </think><answer>4</answer>")
    0.0
    """
    tags = (_THINK_OPEN, _THINK_CLOSE, _ANSWER_OPEN, _ANSWER_CLOSE)
    if any(completion.count(tag) != 1 for tag in tags):
        return 0.0
    think_open, think_close, answer_open, answer_close = (completion.index(tag) for tag in tags)
    if not think_open < think_close < answer_open < answer_close:
        return 0.0
    if not completion[answer_open + len(_ANSWER_OPEN) : answer_close].strip():
        return 0.0
    if not completion[think_open + len(_THINK_OPEN) : think_close].strip():
        return 0.0
    outside = (
        completion[:think_open],
        completion[think_close + len(_THINK_CLOSE) : answer_open],
        completion[answer_close + len(_ANSWER_CLOSE) :],
    )
    extra_chars = sum(len(segment.strip()) for segment in outside)
    return 1.0 - min(FORMAT_MAX_PENALTY, extra_chars / FORMAT_PENALTY_SCALE)
