"""Dataset templates for prompt-based training (GRPO/GSPO): columns, gold answers, system prompts.

The math system prompt is the one evaluation sends (`posttrain.data.task_prompts`), so the format
a model is rewarded for in training is the format it is scored on. Standard library only: the
recipe schema reads TEMPLATE_COLUMNS at validation time.
"""

from __future__ import annotations

from posttrain.rewards.answers import extract_gsm8k_gold

# template -> DatasetSpec keys it presets (a key the recipe sets explicitly wins)
TEMPLATE_COLUMNS: dict[str, dict[str, str]] = {
    "gsm8k": {"prompt_column": "question", "answer_column": "answer"},
    "openmathinstruct2": {"prompt_column": "problem", "answer_column": "expected_answer"},
}

FEW_SHOT_EXAMPLE = [
    {"role": "user", "content": "Mia has 14 shells and finds 9 more. How many shells does she have now?"},
    {"role": "assistant", "content": "<think> 14 + 9 = 23 </think>\n<answer> 23 </answer>"},
]


def math_system_prompt() -> str:
    from posttrain.data.task_prompts import MATH_SYSTEM_PROMPT

    return MATH_SYSTEM_PROMPT


def gold_answer(template: str, value) -> str:
    """The gold answer rewards compare against: GSM8K's text after '####', else the value as text."""
    text = "" if value is None else str(value)
    return extract_gsm8k_gold(text) if template == "gsm8k" else text.strip()


def build_prompt(question, *, template: str, system_prompt: str | None, few_shot: bool, use_chat_template: bool):
    """A GRPO prompt: chat messages (system, optional example, user) or the plain text when
    `use_chat_template` is off. A prompt that already is a chat is used as it is."""
    if isinstance(question, list):
        return question
    system = system_prompt if system_prompt is not None else (math_system_prompt() if template != "none" else None)
    if not use_chat_template:
        return question if system is None else f"{system}\n\n{question}"
    messages = [{"role": "system", "content": system}] if system else []
    if few_shot and template != "none":
        messages += FEW_SHOT_EXAMPLE
    return messages + [{"role": "user", "content": question}]
