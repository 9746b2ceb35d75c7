"""Answer parsing and the built-in rewards: one parser for training rewards and evaluation."""

from __future__ import annotations

import asyncio
import doctest
import inspect
from decimal import Decimal

import pytest

from posttrain.rewards import answers, builtin
from posttrain.rewards.answers import (
    extract_answer,
    extract_gsm8k_gold,
    format_score,
    last_number,
    loose_correct,
    numbers_equal,
    parse_number,
    strict_correct,
)
from posttrain.rewards.builtin import (
    REWARDS,
    answer_match,
    completion_text,
    format_reward,
    get_reward,
    loose_match,
    numeric_answer,
)

D = Decimal


def table(rows):
    """Rows of (id, *values) as pytest params, so every case shows a readable id."""
    return [pytest.param(*row[1:], id=row[0]) for row in rows]


# --------------------------------------------------------------------------- parse_number

PARSE_CASES = [
    ("int", "1400", D(1400)),
    ("commas", "1,400", D(1400)),
    ("dollars_cents", "$1400.00", D(1400)),
    ("dollars_commas", "$1,400", D(1400)),
    ("dollar_space", "$ 1,400", D(1400)),
    ("negative", "-3", D(-3)),
    ("unicode_minus", "\u22123", D(-3)),
    ("plus", "+7", D(7)),
    ("negative_currency", "-$5", D(-5)),
    ("currency_negative", "$-5", D(-5)),
    ("decimal", "0.5", D("0.5")),
    ("leading_dot", ".5", D("0.5")),
    ("trailing_dot", "1400.", D(1400)),
    ("unit_word", "1400 dollars", D(1400)),
    ("percent_is_unit", "42%", D(42)),
    ("euro", "€3", D(3)),
    ("pound", "£12.50", D("12.5")),
    ("padded", " 7 ", D(7)),
    ("millions", "1,234,567.89", D("1234567.89")),
    ("same_value_twice", "1,400 ($1400.00)", D(1400)),
    ("cjk_glued", "答案是1400元", D(1400)),
    ("sentence", "The answer is 18.", D(18)),
    ("empty", "", None),
    ("none", None, None),
    ("words_only", "fourteen hundred", None),
    ("two_numbers", "3 or 4", None),
    ("equation", "7 * 200 = 1400", None),
    ("range", "3-4", None),
    ("malformed_group", "1,40", None),
    ("malformed_group_long", "12,34", None),
    ("european_decimal", "0,5", None),
    ("bad_leading_group", "1234,567", None),
    ("fraction", "1/2", None),
    ("version", "1.2.3", None),
    ("glued_to_letter", "x2", None),
    # LaTeX spellings (math models and datasets write these)
    ("latex_negative_escaped_dollar", "-\\$452", D(-452)),
    ("latex_escaped_dollar_then_sign", "\\$-452", D(-452)),
    ("latex_escaped_dollar", "\\$1,400", D(1400)),
    ("latex_brace_comma", "1{,}400", D(1400)),
    ("latex_brace_comma_millions", "1{,}234{,}567.5", D("1234567.5")),
    ("latex_brace_comma_with_dollar", "\\$1{,}400.00", D(1400)),
    ("latex_brace_decimal_comma_is_malformed", "3{,}14", None),
    ("latex_thin_space_group", "1\\,400", D(1400)),
    ("unicode_thin_space_group", "1\u2009400", D(1400)),
    ("unicode_narrow_nbsp_group", "12\u202f345\u202f678", D(12345678)),
    ("latex_spacing_after_dollar", "-\\$\\,452", D(-452)),
    ("latex_text_unit", "452\\text{ dollars}", D(452)),
    ("latex_text_currency", "-\\text{\\$}452", D(-452)),
    ("latex_mathrm_unit", "12\\,\\mathrm{cm}", D(12)),
    ("latex_boxed", "\\boxed{1{,}400}", D(1400)),
    ("latex_boxed_text_nested", "\\boxed{\\text{-}452}", D(-452)),
    ("latex_math_mode", "$-452$", D(-452)),
    ("latex_left_right", "\\left(-3\\right)", D(-3)),
    ("latex_percent", "42\\%", D(42)),
    ("latex_frac_unsupported", "\\frac{1}{2}", None),
]


@pytest.mark.parametrize("text, expected", table(PARSE_CASES))
def test_parse_number(text, expected):
    assert parse_number(text) == expected


# Symbolic answers are refused: a gold "\frac{5}{x}" must not train as 5, nor "<answer>5x</answer>" score as 5.
SYMBOLIC_CASES = [
    ("latex_frac_with_variable", "\\frac{5}{x}"),
    ("latex_dfrac", "\\dfrac{1}{2}"),
    ("latex_boxed_frac", "\\boxed{\\frac{5}{x}}"),
    ("latex_sqrt", "\\sqrt{2}"),
    ("latex_pi", "2\\pi"),
    ("latex_cdot", "5\\cdot x"),
    ("latex_infinity", "\\infty"),
    ("unicode_pi", "5\u03c0"),
    ("unicode_root", "\u221a5"),
    ("power", "5^x"),
    ("power_braced", "10^{3}"),
    ("over_variable", "5/x"),
    ("braced", "{5}"),
    ("subscript", "x_5"),
    ("inequality", "x < 5"),
    ("unicode_inequality", "5 \u2264 x"),
    ("glued_variable", "5x"),
    ("glued_variable_n", "2n"),
    ("variable_plus", "x + 1"),
    ("plus_variable", "5 + x"),
    ("times_variable", "5*x"),
    ("assignment_of_an_expression", "x = 5y"),
    ("double_equals", "x == 5"),
    ("glued_one_letter_unit_is_a_variable", "5m"),
]


@pytest.mark.parametrize("text", table(SYMBOLIC_CASES))
def test_parse_number_refuses_symbolic_answers(text):
    assert answers.is_symbolic(text)
    assert parse_number(text) is None


# What must still parse beside those rules: prose, currency, units, and one leading assignment ("x = 5" states 5).
STILL_NUMBERS = [
    ("sentence", "The answer is 5.", D(5)),
    ("dollars", "$1,400", D(1400)),
    ("negative_decimal", "-3.5", D("-3.5")),
    ("unit_word", "5 apples", D(5)),
    ("glued_unit_word", "5kg", D(5)),
    ("spaced_one_letter_unit", "5 m", D(5)),
    ("article_before", "a 5-day week", D(5)),
    ("markdown_bold", "**5**", D(5)),
    ("parentheses", "(5)", D(5)),
    ("exclamation", "5!", D(5)),
    ("labelled", "Answer: 5", D(5)),
    ("assignment", "x = 5", D(5)),
    ("assignment_tight", "x=5", D(5)),
    ("bare_equals", "= 1,400", D(1400)),
    ("latex_inline_delimiters", "\\(5\\)", D(5)),
    ("latex_display_delimiters", "\\[ -3 \\]", D(-3)),
    ("latex_quad", "5 \\quad", D(5)),
    ("latex_boxed", "\\boxed{5}", D(5)),
]


@pytest.mark.parametrize("text, expected", table(STILL_NUMBERS))
def test_parse_number_still_reads_stated_numbers(text, expected):
    assert not answers.is_symbolic(text)
    assert parse_number(text) == expected


def test_symbolic_gold_is_refused_and_loose_scoring_keeps_reading_prose():
    assert not answers.gold_is_comparable("\\frac{5}{x}")  # GRPO drops and counts such rows, eval scores them as text
    assert not strict_correct("<answer>5x</answer>", 5) and strict_correct("<answer>x = 5</answer>", 5)
    # loose is format-blind: the last number of ordinary prose, untouched by the symbolic rules
    assert loose_correct("First 2x + 3 = 13, so 2x = 10 and x is 5.", 5)
    assert last_number("the area is 5^2 = 25 square metres") == D(25)


LAST_NUMBER_CASES = [
    ("after_reasoning", "7 * 200 = 1,400 so she pays $1,400.", D(1400)),
    ("negative_last", "from 5 down to -3", D(-3)),
    ("range_dash_is_no_sign", "pages 3-4", D(4)),
    ("malformed_group_is_list", "values 1,40", D(40)),
    ("decimal_last", "about 2 or 2.75", D("2.75")),
    ("ignores_tags", "<answer>12</answer>", D(12)),
    ("latex_group_last", "so the total is 1{,}400", D(1400)),
    ("latex_negative_last", "she owes -\\$452", D(-452)),
    ("no_number", "no digits here", None),
    ("none", None, None),
]


@pytest.mark.parametrize("text, expected", table(LAST_NUMBER_CASES))
def test_last_number(text, expected):
    assert last_number(text) == expected


@pytest.mark.parametrize(
    "a, b, expected",
    [(D(1400), D("1400.00"), True), (D("-0"), D(0), True), (D("0.5"), D(".50"), True),
     (D(3), D(-3), False), (None, D(1), False), (None, None, False), (1400, D(1400), True)],
    ids=["trailing_zeros", "negative_zero", "leading_dot", "sign", "none_left", "both_none", "int"],
)
def test_numbers_equal(a, b, expected):
    assert numbers_equal(a, b) is expected


EXTRACT_CASES = [
    ("simple", "<think>x</think><answer>42</answer>", "42"),
    ("stripped", "<answer>\n  42 \n</answer>", "42"),
    ("empty_block", "<answer></answer>", ""),
    ("no_tag", "The answer is 42.", None),
    ("unclosed", "<answer>42", None),
    ("close_only", "42</answer>", None),
    ("reversed", "</answer>42<answer>", None),
    ("two_blocks", "<answer>41</answer><answer>42</answer>", None),
    ("nested", "<answer><answer>42</answer></answer>", None),
    ("uppercase_is_not_the_tag", "<ANSWER>42</ANSWER>", None),
]


@pytest.mark.parametrize("completion, expected", table(EXTRACT_CASES))
def test_extract_answer(completion, expected):
    assert extract_answer(completion) == expected


@pytest.mark.parametrize(
    "field, expected",
    [("Janet pays <<7*200=1400>>1400.\n#### 1,400", "1,400"), ("#### -3 ", "-3"),
     ("  72  ", "72"), ("a #### b #### 5", "5")],
    ids=["gsm8k", "negative", "bare", "last_marker"],
)
def test_extract_gsm8k_gold(field, expected):
    assert extract_gsm8k_gold(field) == expected


def test_latex_signs_and_separators_decide_strict_and_loose_scores():
    # the false strict credit: "-\\$452" is minus 452, not a correct 452
    assert not strict_correct("<answer>-\\$452</answer>", "452")
    assert strict_correct("<answer>-\\$452</answer>", "-452")
    assert strict_correct("<answer>1{,}400</answer>", "1400") and not strict_correct("<answer>1{,}400</answer>", "400")
    assert loose_correct("7 * 200 = 1{,}400", 1400) and not loose_correct("7 * 200 = 1{,}400", 400)
    assert strict_correct("<answer>1400</answer>", "#### 1{,}400")  # LaTeX in the gold answer too


def test_unparseable_gold_is_a_data_error_not_a_wrong_answer():
    with pytest.raises(ValueError, match="not a single number"):
        strict_correct("<answer>3</answer>", "three")
    with pytest.raises(ValueError, match="not a single number"):
        loose_correct("3", "#### 3 or 4")


# --------------------------------------------------------------------------- rewards table


def wrap(answer: str, think: str = "work it out") -> str:
    return f"<think>{think}</think>\n<answer>{answer}</answer>"


def chat(content) -> list[dict]:
    return [{"role": "assistant", "content": content}]


GSM8K_GOLD = "Janet pays 7 * 200 = <<7*200=1400>>1400 dollars.\n#### 1400"

# id, completion, gold, answer_match, format, numeric_answer, loose_match
REWARD_CASES = [
    ("plain_int", wrap("1400"), "1400", 1, 1, 1, 1),
    ("commas_in_answer", wrap("1,400"), "1400", 1, 1, 1, 1),
    ("commas_in_gold", wrap("1400"), "#### 1,400", 1, 1, 1, 1),
    ("dollar_cents", wrap("$1,400.00"), "1400", 1, 1, 1, 1),
    ("euro", wrap("€3"), "3", 1, 1, 1, 1),
    ("pound_decimal", wrap("£12.50"), "12.5", 1, 1, 1, 1),
    ("trailing_zero_decimal", wrap("1400.00"), "1400", 1, 1, 1, 1),
    ("decimal_vs_leading_dot", wrap("0.5"), ".5", 1, 1, 1, 1),
    ("leading_dot_answer", wrap(".5"), "0.5", 1, 1, 1, 1),
    ("negative", wrap("-3"), "-3", 1, 1, 1, 1),
    ("unicode_minus", wrap("\u22123"), "-3", 1, 1, 1, 1),
    ("negative_currency", wrap("-$5"), "-5", 1, 1, 1, 1),
    ("plus_sign", wrap("+7"), "7", 1, 1, 1, 1),
    ("sign_mismatch", wrap("3"), "-3", 0, 1, 1, 0),
    ("wrong_number", wrap("1300"), "1400", 0, 1, 1, 0),
    ("unit_words", wrap("1400 dollars"), "1400", 1, 1, 1, 1),
    ("percent", wrap("42%"), "42", 1, 1, 1, 1),
    ("padded_answer", wrap("   7  \n"), "7", 1, 1, 1, 1),
    ("nbsp_padding", wrap("\u00a01400\u00a0"), "1400", 1, 1, 1, 1),
    ("sentence_period", wrap("1400."), "1400", 1, 1, 1, 1),
    ("large_number", wrap("1,234,567.89"), "1234567.89", 1, 1, 1, 1),
    ("gsm8k_full_gold", wrap("1400"), GSM8K_GOLD, 1, 1, 1, 1),
    ("int_gold", wrap("1,400"), 1400, 1, 1, 1, 1),
    ("same_number_twice", wrap("1,400 ($1400.00)"), "1400", 1, 1, 1, 1),
    ("ambiguous_two_numbers", wrap("3 or 4"), "4", 0, 1, 0, 1),
    ("equation_in_answer", wrap("7 * 200 = 1400"), "1400", 0, 1, 0, 1),
    ("range_in_answer", wrap("3-4"), "-4", 0, 1, 0, 0),
    ("malformed_commas", wrap("1,40"), "140", 0, 1, 0, 0),
    ("word_answer", wrap("fourteen hundred"), "1400", 0, 1, 0, 0),
    ("unicode_cjk_glued", wrap("答案是1400元", think="计算"), "1400", 1, 1, 1, 1),
    ("missing_tags", "The answer is 1400.", "1400", 0, 0, 0, 1),
    ("think_only", "<think>so 1400</think>", "1400", 0, 0, 0, 1),
    ("answer_without_think", "<answer>1400</answer>", "1400", 1, 0, 1, 1),
    ("unclosed_answer", "<think>x</think><answer>1400", "1400", 0, 0, 0, 1),
    ("close_before_open", "<think>x</think></answer>1400<answer>", "1400", 0, 0, 0, 1),
    ("uppercase_tags", "<think>x</think><ANSWER>1400</ANSWER>", "1400", 0, 0, 0, 1),
    ("duplicate_answer_same", wrap("1400") + "<answer>1400</answer>", "1400", 0, 0, 0, 1),
    ("duplicate_answer_hedge", wrap("1300") + "<answer>1400</answer>", "1400", 0, 0, 0, 1),
    ("nested_answer", wrap("<answer>1400</answer>"), "1400", 0, 0, 0, 1),
    ("duplicate_think", "<think>a</think>" + wrap("1400"), "1400", 1, 0, 1, 1),
    ("answer_inside_think", "<think>try <answer>1400</answer></think>", "1400", 1, 0, 1, 1),
    ("think_inside_answer", wrap("<think>b</think>1400"), "1400", 1, 0, 1, 1),
    ("blocks_reversed", "<answer>1400</answer><think>x</think>", "1400", 1, 0, 1, 1),
    ("empty_answer", wrap(""), "1400", 0, 0, 0, 0),
    ("whitespace_answer", wrap("  \n "), "1400", 0, 0, 0, 0),
    ("empty_think_earns_no_format", wrap("1400", think=""), "1400", 1, 0, 1, 1),  # the seed's shortcut: right, but no reasoning
    ("surrounding_whitespace", "\n  " + wrap("1400") + "\n\n", "1400", 1, 1, 1, 1),
    ("trailer_10_chars", wrap("1400") + "<|im_end|>", "1400", 1, 0.99, 1, 1),
    ("leading_text_100", "a" * 100 + wrap("1400"), "1400", 1, 0.9, 1, 1),
    ("text_between_blocks", "<think>x</think> So: <answer>1400</answer>", "1400", 1, 0.997, 1, 1),
    ("trailing_number_changes_loose", wrap("1400") + " Actually 1300", "1400", 1, 0.987, 1, 0),
    ("trailer_5000_chars", wrap("1400") + "x" * 5000, "1400", 1, 0.5, 1, 1),
    ("trailer_100000_chars_capped", wrap("1400") + "x" * 100_000, "1400", 1, 0.5, 1, 1),
    ("chat_format", chat(wrap("1400")), "1400", 1, 1, 1, 1),
    ("chat_format_wrong", chat(wrap("1300")), "1400", 0, 1, 1, 0),
    ("chat_last_message_wins",
     [{"role": "user", "content": "<answer>1</answer>"}, {"role": "assistant", "content": wrap("1400")}],
     "1400", 1, 1, 1, 1),
    ("chat_content_parts", chat([{"type": "text", "text": wrap("1400")}]), "1400", 1, 1, 1, 1),
    ("chat_missing_tags", chat("it is 1400"), "1400", 0, 0, 0, 1),
]
assert len(REWARD_CASES) >= 40
CASES = [case[1:] for case in REWARD_CASES]


@pytest.mark.parametrize("completion, gold, match, fmt, numeric, loose", table(REWARD_CASES))
def test_builtin_rewards(completion, gold, match, fmt, numeric, loose):
    assert answer_match([completion], answer=[gold]) == [match]
    assert format_reward([completion]) == [pytest.approx(fmt)]
    assert numeric_answer([completion]) == [numeric]
    assert loose_match([completion], answer=[gold]) == [loose]


@pytest.mark.parametrize("completion, gold, match, fmt, numeric, loose", table(REWARD_CASES))
def test_one_parser_for_reward_and_evaluation(completion, gold, match, fmt, numeric, loose):
    # Strict evaluation is exactly what the training reward pays; loose is the format-blind score.
    text = completion_text(completion)
    assert strict_correct(text, gold) == (answer_match([completion], answer=[gold])[0] == 1.0)
    assert loose_correct(text, gold) == (loose_match([completion], answer=[gold])[0] == 1.0)
    assert format_score(text) == format_reward([completion])[0]


def test_rewards_score_batches_in_order():
    completions = [c[0] for c in CASES]
    golds = [c[1] for c in CASES]
    assert answer_match(completions, answer=golds) == [float(c[2]) for c in CASES]
    assert numeric_answer(completions) == [float(c[4]) for c in CASES]


def test_format_score_bounds():
    assert format_score(wrap("1400") + "x" * 5000) == 0.5  # exactly the cap
    assert format_score(wrap("1400") + "x" * 499) > 0.5
    for extra in (0, 1, 10, 999, 1000, 10_000):
        assert 0.5 <= format_score(wrap("1") + "y" * extra) <= 1.0


def test_rewards_ignore_trl_keywords():
    # TRL passes prompts, completion ids and non-JSON objects next to the dataset columns.
    extras = {"prompts": ["q"], "completion_ids": [[1, 2]], "trainer_state": object(), "log_extra": print}
    for name, fn in LOCAL_REWARDS.items():
        assert fn([wrap("5")], answer=["5"], **extras) == [1.0], name


def test_missing_answer_column_names_the_column():
    with pytest.raises(ValueError, match="'answer'.*\\['prompts'\\]"):
        answer_match([wrap("5")], prompts=["q"])


def test_column_length_mismatch():
    with pytest.raises(ValueError, match="2 completions but 1"):
        answer_match([wrap("5"), wrap("6")], answer=["5"])


def test_completion_text_rejects_unknown_types():
    with pytest.raises(TypeError, match="int"):
        completion_text(5)
    with pytest.raises(TypeError, match="list"):
        completion_text(["not", "messages"])
    assert completion_text([]) == ""
    assert completion_text(chat(None)) == ""


# --------------------------------------------------------------------------- registry


def length_penalty(completions, *, limit: int = 10, **kwargs):
    """A user reward referenced by import path in the registry tests."""
    return [0.0 if len(completion_text(c)) > limit else 1.0 for c in completions]


# Rewards computed in-process; `http` needs a server and is tested in tests/rewards/test_http_reward.py.
LOCAL_REWARDS = {name: fn for name, fn in REWARDS.items() if name != "http"}


@pytest.mark.parametrize("name", sorted(LOCAL_REWARDS))
def test_builtin_names_resolve_with_their_registered_name(name):
    reward = get_reward(name)
    assert reward.__name__ == name  # TRL logs rewards/<__name__>
    assert reward([wrap("5")], answer=["5"]) == [1.0]


def test_unknown_name_lists_valid_names_and_suggests():
    with pytest.raises(ValueError) as info:
        get_reward("answer_mach")
    message = str(info.value)
    assert "Did you mean 'answer_match'?" in message
    for name in REWARDS:
        assert name in message
    assert "package.module:function" in message


def test_unknown_name_without_close_match():
    with pytest.raises(ValueError, match="unknown reward 'zzz'") as info:
        get_reward("zzz")
    assert "Did you mean" not in str(info.value)


def test_import_path_builtin_module():
    reward = get_reward("posttrain.rewards.builtin:format_reward")
    assert reward.__name__ == "format_reward"
    assert reward([wrap("5")]) == [1.0]


def test_import_path_user_function_with_options():
    reward = get_reward(f"{__name__}:length_penalty", limit=100)
    assert reward.__name__ == "length_penalty"
    assert reward(["short", "x" * 101]) == [1.0, 0.0]
    assert get_reward(f"{__name__}:length_penalty")(["x" * 11]) == [0.0]


async def async_reward(completions, *, bonus: float = 0.0, **kwargs):
    """An async user reward: TRL awaits coroutine rewards, so the bound wrapper must stay async."""
    return [1.0 + bonus for _ in completions]


def test_import_path_async_reward_stays_async():
    reward = get_reward(f"{__name__}:async_reward", bonus=0.5)
    assert inspect.iscoroutinefunction(reward)
    assert reward.__name__ == "async_reward"
    assert asyncio.run(reward(["a", "b"])) == [1.5, 1.5]


@pytest.mark.parametrize(
    "path, message",
    [
        ("posttrain.no_such_module:fn", "cannot import module 'posttrain.no_such_module'"),
        ("posttrain.rewards.builtin:no_such_fn", "has no attribute 'no_such_fn'"),
        ("posttrain.rewards.builtin:REWARDS", "'REWARDS' is not callable"),
        (":answer_match", "must look like 'package.module:function'"),
        ("posttrain.rewards.builtin:", "must look like 'package.module:function'"),
    ],
    ids=["bad_module", "bad_attribute", "not_callable", "no_module", "no_function"],
)
def test_bad_import_paths_say_which_part_failed(path, message):
    with pytest.raises(ValueError, match=message):
        get_reward(path)


def test_options_are_bound_and_name_kept():
    reward = get_reward("answer_match", answer_column="gold")
    assert reward.__name__ == "answer_match"
    assert reward([wrap("7"), wrap("8")], gold=["7", "7"], answer=["8", "8"]) == [1.0, 0.0]
    assert get_reward("loose_match", answer_column="gold")(["it is 7"], gold=[7]) == [1.0]


@pytest.mark.parametrize(
    "name, options, message",
    [
        pytest.param("answer_match", {"answer_colum": "gold"}, "answer_column", id="misspelt_option"),
        pytest.param("format", {"scale": 2}, "options are none", id="reward_without_options"),
    ],
)
def test_unknown_options_raise(name, options, message):
    with pytest.raises(ValueError, match=message):
        get_reward(name, **options)


@pytest.mark.parametrize("module", [answers, builtin], ids=lambda m: m.__name__)
def test_docstring_examples(module):
    result = doctest.testmod(module)
    assert result.attempted > 0 and result.failed == 0
