"""Tests for posttrain.models.tiny: the locally built tiny models every other test relies on."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest
import torch
from tokenizers import Tokenizer
from transformers import AutoModelForCausalLM, AutoTokenizer

from posttrain.models import tiny

ARCH_CLASSES = {"qwen2": "Qwen2ForCausalLM", "llama": "LlamaForCausalLM"}
# Covers where the GPT-2 and Qwen2 split regexes differ (".\n" is one piece for Qwen2 only).
TRICKY = "  12345 apples (apples) it's 3.14\n\n  5  x. Done.\n<think>42</think>\n<answer>7</answer> \t x**2"


@pytest.fixture(scope="module")
def built(tmp_path_factory):
    """Each arch's 1m model, built once for the module."""
    return {a: tiny.build_tiny_model(tmp_path_factory.mktemp(a), arch=a) for a in tiny.ARCHS}


@pytest.fixture(scope="module")
def tok(built):
    return AutoTokenizer.from_pretrained(built["qwen2"])


@pytest.mark.parametrize("arch", tiny.ARCHS)
def test_build_loads_with_auto_classes(built, arch):
    path = built[arch]
    assert (path / "model.safetensors").is_file()
    model = AutoModelForCausalLM.from_pretrained(path)
    tk = AutoTokenizer.from_pretrained(path)
    assert type(model).__name__ == ARCH_CLASSES[arch]
    assert model.config.vocab_size == len(tk) == tiny.VOCAB_SIZE
    assert model.get_input_embeddings().num_embeddings == tiny.VOCAB_SIZE
    assert 0.9e6 < model.num_parameters() < 1.1e6
    # untied: separate tensors with different values
    emb, head = model.get_input_embeddings().weight, model.get_output_embeddings().weight
    assert emb.data_ptr() != head.data_ptr() and not torch.equal(emb, head)
    eos, pad, im_end = tk.convert_tokens_to_ids(["<|endoftext|>", "<|pad|>", "<|im_end|>"])
    cfg = model.config
    assert (cfg.eos_token_id, cfg.pad_token_id, cfg.bos_token_id) == (eos, pad, eos)
    assert model.generation_config.eos_token_id == [im_end, eos]
    assert model.generation_config.pad_token_id == pad
    assert tk.padding_side == "right" and tk.model_max_length == 2048


@pytest.mark.parametrize("arch", tiny.ARCHS)
def test_tokenizer_reload_keeps_build_time_encoding(built, arch):
    """AutoTokenizer may swap in an arch-specific class (Qwen2Tokenizer for qwen2) that rebuilds the
    pipeline; encodings must still equal those of the raw tokenizer.json."""
    tk = AutoTokenizer.from_pretrained(built[arch])
    raw = Tokenizer.from_file(str(built[arch] / "tokenizer.json"))
    assert tk.encode("12345") == raw.encode("12345").ids
    assert tk.convert_ids_to_tokens(tk.encode("12345")) == list("12345")
    assert tk.convert_ids_to_tokens(tk.encode(" 2024!")) == ["Ġ", "2", "0", "2", "4", "!"]
    assert tk.encode(TRICKY) == raw.encode(TRICKY).ids
    assert tk.decode(tk.encode(TRICKY)) == TRICKY
    assert tk.encode("cafe\u0301") == raw.encode("cafe\u0301").ids == tk.encode("caf\u00e9")  # NFC in both


def test_both_archs_share_the_tokenizer(built):
    q, l = (AutoTokenizer.from_pretrained(built[a]) for a in tiny.ARCHS)
    assert type(q).__name__ == "Qwen2Tokenizer"  # documents the transformers 5.x behaviour worked around
    assert q.encode(TRICKY) == l.encode(TRICKY)
    assert q.get_vocab() == l.get_vocab()


def test_special_and_tag_tokens(tok):
    assert tok.eos_token == "<|endoftext|>" and tok.pad_token == "<|pad|>"
    assert tok.pad_token_id != tok.eos_token_id
    assert tok.bos_token is None  # nothing is prepended: encode returns the text's tokens only
    for t in ["<|endoftext|>", "<|pad|>", "<|im_start|>", "<|im_end|>"] + tiny.TAG_TOKENS:
        assert len(tok.encode(t)) == 1, t
    text = "<|im_start|>assistant\n<think>1+1</think><answer>2</answer><|im_end|><|endoftext|>"
    # chat markers are special (dropped on skip), reasoning tags are plain tokens (kept)
    kept = "assistant\n<think>1+1</think><answer>2</answer>"
    assert tok.decode(tok.encode(text), skip_special_tokens=True) == kept


def test_chat_template_generation_prompt(tok):
    msgs = [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "What is 2+3?"}]
    text = tok.apply_chat_template(msgs, tokenize=False, add_generation_prompt=True)
    assert text == (
        "<|im_start|>system\nBe brief.<|im_end|>\n<|im_start|>user\nWhat is 2+3?<|im_end|>\n<|im_start|>assistant\n"
    )
    no_prompt = tok.apply_chat_template(msgs[1:], tokenize=False)
    assert no_prompt == "<|im_start|>user\nWhat is 2+3?<|im_end|>\n"


def get_weather(city: str) -> str:
    """Get the weather.

    Args:
        city: The city name.
    """
    return "sunny"


CALL = {"type": "function", "function": {"name": "get_weather", "arguments": {"city": "Paris"}}}
CALL_TEXT = '<tool_call>\n{"name": "get_weather", "arguments": {"city": "Paris"}}\n</tool_call>'
TOOL_CHAT = [
    {"role": "user", "content": "Weather in Paris?"},
    {"role": "assistant", "content": "", "tool_calls": [CALL]},
    {"role": "tool", "name": "get_weather", "content": "sunny"},
    {"role": "assistant", "content": "It is sunny."},
]


def test_chat_template_tools_and_tool_calls(tok):
    text = tok.apply_chat_template(TOOL_CHAT, tools=[get_weather], tokenize=False)
    assert text.startswith("<|im_start|>system\n# Tools\n")
    assert '"name": "get_weather", "description": "Get the weather."' in text.split("<|im_end|>")[0]
    assert text.endswith(
        "<|im_start|>user\nWeather in Paris?<|im_end|>\n"
        f"<|im_start|>assistant\n{CALL_TEXT}<|im_end|>\n"
        "<|im_start|>tool\nsunny<|im_end|>\n"
        "<|im_start|>assistant\nIt is sunny.<|im_end|>\n"
    )
    # arguments given as a JSON string are rendered verbatim, content before a call is kept
    msg = {"role": "assistant", "content": "Checking.",
           "tool_calls": [{"type": "function", "function": {"name": "f", "arguments": '{"x": 1}'}}]}
    assert tok.apply_chat_template([msg], tokenize=False) == (
        '<|im_start|>assistant\nChecking.\n<tool_call>\n{"name": "f", "arguments": {"x": 1}}\n'
        "</tool_call><|im_end|>\n"
    )


def test_trl_template_checks_pass(tok):
    """The checks TRL runs before assistant_only_loss SFT and multi-turn tool GRPO."""
    from trl.chat_template_utils import (
        is_chat_template_prefix_preserving,
        is_chat_template_stop_token_trained,
        supports_tool_calling,
    )

    assert supports_tool_calling(tok)
    assert is_chat_template_prefix_preserving(tok)
    assert is_chat_template_stop_token_trained(tok)


def test_assistant_mask_covers_exactly_assistant_turns(tok):
    msgs = [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Add 2 and 3."},
            {"role": "assistant", "content": "<think>2 + 3 = 5</think><answer>5</answer>"}] + TOOL_CHAT
    out = tok.apply_chat_template(msgs, return_dict=True, return_assistant_tokens_mask=True)
    ids, mask = out["input_ids"], out["assistant_masks"]
    assert len(ids) == len(mask)
    spans, cur = [], []
    for i, m in zip(ids, mask):
        if m:
            cur.append(i)
        elif cur:
            spans.append(cur)
            cur = []
    assert not cur  # the final "\n" after <|im_end|> is not trained
    expected = [
        "<think>2 + 3 = 5</think><answer>5</answer><|im_end|>",
        f"{CALL_TEXT}<|im_end|>",
        "It is sunny.<|im_end|>",
    ]
    assert [tok.decode(s) for s in spans] == expected
    assert [s == tok.encode(e) for s, e in zip(spans, expected)] == [True] * 3


def test_response_template_parses_tool_calls(tok):
    prefix = tok.apply_chat_template(TOOL_CHAT[:1], add_generation_prompt=True, return_dict=False)  # ids (a dict from 5.25 on)
    completion = tok.encode(f"Let me check.\n{CALL_TEXT}<|im_end|>")
    parsed = tok.parse_response(completion, prefix=prefix)
    assert parsed["content"] == "Let me check."
    assert parsed["tool_calls"] == [CALL]
    plain = tok.parse_response(tok.encode("<think>x</think><answer>5</answer><|im_end|>"), prefix=prefix)
    assert plain == {"role": "assistant", "content": "<think>x</think><answer>5</answer>"}


def test_same_seed_same_bytes_and_rng_untouched(tmp_path, built):
    rng_before = torch.get_rng_state()
    a = tiny.build_tiny_model(tmp_path / "a", seed=0)
    b = tiny.build_tiny_model(tmp_path / "b", seed=1)
    assert torch.equal(torch.get_rng_state(), rng_before)
    for name in ["model.safetensors", "tokenizer.json", "config.json", "chat_template.jinja"]:
        assert (a / name).read_bytes() == (built["qwen2"] / name).read_bytes(), name
    sa = AutoModelForCausalLM.from_pretrained(a).state_dict()
    sb = AutoModelForCausalLM.from_pretrained(b).state_dict()
    s0 = AutoModelForCausalLM.from_pretrained(built["qwen2"]).state_dict()
    assert all(torch.equal(sa[k], s0[k]) for k in s0)
    assert not torch.equal(sa["model.embed_tokens.weight"], sb["model.embed_tokens.weight"])


def test_resolve_tiny_builds_once_into_cache(tmp_path, monkeypatch):
    monkeypatch.setenv("POSTTRAIN_CACHE", str(tmp_path))
    calls = []
    real_build = tiny.build_tiny_model
    monkeypatch.setattr(tiny, "build_tiny_model", lambda *a, **k: calls.append(k) or real_build(*a, **k))
    path = tiny.resolve_tiny("tiny:llama-2m")
    assert path == tmp_path / "tiny" / f"llama-2m-v{tiny.BUILDER_VERSION}"
    assert calls == [{"arch": "llama", "size": "2m", "seed": 0}]
    assert type(AutoModelForCausalLM.from_pretrained(path)).__name__ == "LlamaForCausalLM"
    assert tiny.resolve_tiny("tiny:llama-2m") == path
    assert len(calls) == 1
    assert [p.name for p in (tmp_path / "tiny").iterdir() if p.suffix != ".lock"] == [path.name]  # no temp dirs left


def test_resolve_tiny_lost_race_uses_winner(tmp_path, monkeypatch):
    """Another process finishing first must not fail us nor leave our temp copy behind."""
    monkeypatch.setenv("POSTTRAIN_CACHE", str(tmp_path))
    final = tmp_path / "tiny" / f"qwen2-1m-v{tiny.BUILDER_VERSION}"
    real_build = tiny.build_tiny_model

    def racing_build(out_dir, **kw):
        real_build(final, **kw)  # the "other process" completes its rename first
        (final / "winner").touch()
        return real_build(out_dir, **kw)

    monkeypatch.setattr(tiny, "build_tiny_model", racing_build)
    assert tiny.resolve_tiny("tiny:") == final
    assert (final / "winner").exists()
    assert sorted(p.name for p in final.parent.iterdir() if p.suffix != ".lock") == [final.name]


def test_resolve_tiny_waits_for_the_process_building_it(tmp_path):
    """Two processes of one machine (the suite's parallel workers) build a tiny model once: while
    another holds the model's lock, resolve_tiny waits instead of starting a second build."""
    import time

    from posttrain.locks import exclusive

    final = tmp_path / "tiny" / f"llama-1m-v{tiny.BUILDER_VERSION}"
    code = "from posttrain.models.tiny import resolve_tiny; print(resolve_tiny('tiny:llama-1m'))"
    env = {**os.environ, "POSTTRAIN_CACHE": str(tmp_path)}
    with exclusive(final.parent / f".{final.name}.lock"):
        waiter = subprocess.Popen([sys.executable, "-c", code], env=env, stdout=subprocess.PIPE, text=True)
        time.sleep(3)
        assert waiter.poll() is None  # still waiting for the lock
        assert [p.name for p in final.parent.iterdir()] == [f".{final.name}.lock"]  # and not building
        tiny.build_tiny_model(final, arch="llama", size="1m", seed=0)  # "the other process" builds it
        (final / "built-by-holder").touch()
    out, _ = waiter.communicate(timeout=120)
    assert waiter.returncode == 0 and out.strip() == str(final)
    assert (final / "built-by-holder").exists()  # found the holder's model, did not rebuild over it
    assert [p.name for p in final.parent.iterdir() if p.suffix != ".lock"] == [final.name]


def test_parse_tiny_spec():
    assert tiny.parse_tiny_spec("tiny:") == ("qwen2", "1m")
    assert tiny.parse_tiny_spec("tiny:qwen2") == ("qwen2", "1m")
    assert tiny.parse_tiny_spec("tiny:llama") == ("llama", "1m")
    assert tiny.parse_tiny_spec("tiny:qwen2-6m") == ("qwen2", "6m")
    assert tiny.parse_tiny_spec("tiny:llama-2m") == ("llama", "2m")
    for bad in ["tiny", "tiny:gpt2", "tiny:qwen2-3m", "tiny:qwen2-", "tiny:6m", "Qwen/Qwen2-0.5B", "tiny:llama_2m"]:
        with pytest.raises(ValueError) as e:
            tiny.parse_tiny_spec(bad)
        assert repr(bad) in str(e.value)
        assert "tiny:qwen2-6m" in str(e.value) and "tiny:llama-2m" in str(e.value)
    with pytest.raises(ValueError, match="valid forms"):
        tiny.resolve_tiny("tiny:mistral")


def test_import_is_cheap():
    code = (
        "import sys, posttrain.models.tiny as t; t.parse_tiny_spec('tiny:');"
        "print(sorted({'torch', 'transformers', 'tokenizers'} & set(sys.modules)))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"


@pytest.mark.parametrize("arch", tiny.ARCHS)
def test_forward_and_generate(built, arch):
    model = AutoModelForCausalLM.from_pretrained(built[arch]).eval()
    tk = AutoTokenizer.from_pretrained(built[arch])
    msgs = [{"role": "user", "content": "Tom has 3 apples."}]
    prompt = tk.apply_chat_template(msgs, add_generation_prompt=True, return_tensors="pt", return_dict=True)
    ids = prompt["input_ids"]
    with torch.no_grad():
        out = model(**prompt, labels=ids)
    assert out.logits.shape == (1, ids.shape[1], len(tk))
    # random init: loss near log(vocab), i.e. the model is untrained but numerically sane
    assert abs(out.loss.item() - torch.log(torch.tensor(float(len(tk)))).item()) < 1.0
    gen = model.generate(**prompt, max_new_tokens=6, do_sample=False)
    assert torch.equal(gen[0, : ids.shape[1]], ids[0])
    assert 1 <= gen.shape[1] - ids.shape[1] <= 6
    assert gen[0, ids.shape[1]].item() == out.logits[0, -1].argmax().item()
    # the saved generation config stops at <|im_end|>, not only at the tokenizer's eos
    im_end = tk.convert_tokens_to_ids("<|im_end|>")
    stop = model.generate(**prompt, max_new_tokens=6, do_sample=False, sequence_bias={(im_end,): 100.0})
    assert stop[0, ids.shape[1]:].tolist() == [im_end]
