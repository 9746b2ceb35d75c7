"""TransformersEngine on a real tiny model: batching is exact, order kept, counts right, templates
applied, sampling seeded, adapters with a resized vocabulary loaded; vLLM fails cleanly here."""

from __future__ import annotations

import dataclasses

import pytest
import torch
from safetensors.torch import load_file
from transformers import AutoModelForCausalLM, AutoTokenizer

from posttrain.errors import UserError
from posttrain.generation.base import SamplingParams
from posttrain.generation.local import TransformersEngine, adapter_vocab_rows, encode_prompt
from posttrain.models.tiny import resolve_tiny

GREEDY = SamplingParams(max_new_tokens=12)
# Lengths from 1 word to ~60 tokens, strings and chats mixed, so batches need real left padding.
PROMPTS = [
    "Hi",
    "Tom has 5 apples and buys 7 more. How many apples does he have?",
    [{"role": "user", "content": "What is 2 + 3?"}],
    "apples " * 20,
    [{"role": "system", "content": "You are a helpful assistant."}, {"role": "user", "content": "Summarize the text in one sentence."}],
    "12345",
    "There are 4 boxes with 6 red cards in each box. How many cards are there in total? " * 2,
    [{"role": "user", "content": "Hello!"}, {"role": "assistant", "content": "Hello! How can I help you today?"}, {"role": "user", "content": "Count to 3."}],
    "The quick kite was near the park.",
    "a",
    "Anna had 42 shells and gave 17 to a friend at the beach. How many shells are left?",
    "<think>",
]


@pytest.fixture(scope="module")
def engine():
    return TransformersEngine("tiny:qwen2-1m", batch_size=5, progress=False)


def generate_with_batch_size(engine, batch_size, prompts=PROMPTS, params=GREEDY):
    engine.batch_size, before = batch_size, engine.batch_size
    try:
        return engine.generate(prompts, params)
    finally:
        engine.batch_size = before


def test_batched_greedy_equals_one_at_a_time_in_the_original_order(engine):
    batched = generate_with_batch_size(engine, 5)  # 12 prompts: batches of 5, 5, 2 after sorting by length
    single = generate_with_batch_size(engine, 1)
    assert len(batched) == len(PROMPTS)
    assert [c.text for c in batched] == [c.text for c in single]
    assert [(c.prompt_tokens, c.completion_tokens, c.finish_reason) for c in batched] == [
        (c.prompt_tokens, c.completion_tokens, c.finish_reason) for c in single
    ]
    assert len({c.text for c in batched}) > len(PROMPTS) // 2, "distinct prompts should mostly give distinct outputs"


def test_stop_tokens_end_rows_early_and_batched_rows_still_match(engine):
    """Make a token the model really generates for prompt 1 an extra stop token: rows stop at
    different steps, finished rows are padded inside their batch, and all must match single runs."""
    ids = torch.tensor([encode_prompt(engine.tokenizer, PROMPTS[1], True)])
    with torch.inference_mode():
        generated = engine.model.generate(ids, max_new_tokens=GREEDY.max_new_tokens, do_sample=False)[0, ids.shape[1]:].tolist()
    stop_id = generated[len(generated) // 2]
    free = generate_with_batch_size(engine, 1)
    engine.stop_token_ids.append(stop_id)
    try:
        batched = generate_with_batch_size(engine, 5)
        single = generate_with_batch_size(engine, 1)
    finally:
        engine.stop_token_ids.remove(stop_id)
    assert [c.text for c in batched] == [c.text for c in single]
    assert [c.completion_tokens for c in batched] == [c.completion_tokens for c in single]
    assert batched[1].finish_reason == "stop"
    assert batched[1].completion_tokens == generated.index(stop_id) + 1  # the stop token counts, ...
    assert batched[1].text == engine.tokenizer.decode(generated[: generated.index(stop_id)], skip_special_tokens=True)  # ... but is not in the text
    for c, f in zip(batched, free):
        assert f.text.startswith(c.text)
    assert any(c.finish_reason == "length" for c in batched), "some rows should run to max_new_tokens"


def test_token_counts_are_exact(engine):
    tok = engine.tokenizer
    chat = PROMPTS[4]
    out = engine.generate(["2 + 3 =", chat], GREEDY)
    expected_chat = tok.apply_chat_template(chat, add_generation_prompt=True, tokenize=True, return_dict=True)["input_ids"]
    expected_str = tok.apply_chat_template([{"role": "user", "content": "2 + 3 ="}], add_generation_prompt=True, tokenize=True, return_dict=True)["input_ids"]
    assert out[1].prompt_tokens == len(expected_chat)
    assert out[0].prompt_tokens == len(expected_str)
    for c in out:
        assert c.finish_reason == "length" and c.completion_tokens == GREEDY.max_new_tokens


def test_stop_tokens_come_from_the_generation_config_and_the_tokenizer(engine):
    im_end, eos = engine.tokenizer.convert_tokens_to_ids(["<|im_end|>", "<|endoftext|>"])
    assert engine.stop_token_ids == [im_end, eos]


def test_plain_strings_use_the_chat_template_unless_switched_off(engine):
    as_string = engine.generate(["What is 2 + 3?"], GREEDY)[0]
    as_chat = engine.generate([[{"role": "user", "content": "What is 2 + 3?"}]], GREEDY)[0]
    assert as_string == as_chat
    engine.use_chat_template = False
    try:
        raw = engine.generate(["What is 2 + 3?"], GREEDY)[0]
    finally:
        engine.use_chat_template = True
    assert raw.prompt_tokens == len(engine.tokenizer("What is 2 + 3?")["input_ids"]) < as_chat.prompt_tokens
    assert raw.text != as_chat.text


def test_without_a_chat_template_a_chat_goes_as_a_plain_transcript(engine):
    """A base model has no chat template: a task's chat (system prompt, question) is sent as the
    transcript the system prompt describes, and the completion says so."""
    from posttrain.generation.plain_prompts import plain_text

    chat = [{"role": "system", "content": "Answer in <answer> tags."}, {"role": "user", "content": "What is 2 + 3?"}]
    assert plain_text(chat) == "Answer in <answer> tags.\n\nUser: What is 2 + 3?\nAssistant:"
    templated = engine.generate([chat], GREEDY)[0]
    assert "prompt_form" not in templated.extra
    template, engine.tokenizer.chat_template = engine.tokenizer.chat_template, None
    try:
        plain = engine.generate([chat, "hi"], GREEDY)
        assert plain[0].prompt_tokens == len(engine.tokenizer(plain_text(chat))["input_ids"])
        assert plain[0].extra["prompt_form"] == "plain" and "prompt_form" not in plain[1].extra  # a raw string was never a chat
        assert engine.generate(["hi"], GREEDY)[0].prompt_tokens == len(engine.tokenizer("hi")["input_ids"])
        with pytest.raises(UserError, match="a 'tool' turn with str content cannot be sent as plain text"):
            engine.generate([[{"role": "tool", "content": "5"}]], GREEDY)
        with pytest.raises(UserError, match=r"prompt\(s\) \[1\] are empty"):
            engine.generate(["hi", ""], GREEDY)
    finally:
        engine.tokenizer.chat_template = template


def test_seeded_sampling_is_reproducible_and_leaves_the_global_rng_alone(engine):
    sampled = SamplingParams(max_new_tokens=12, temperature=1.0, top_p=0.95, seed=7)
    state = torch.random.get_rng_state()
    first = engine.generate(PROMPTS, sampled)
    assert torch.equal(torch.random.get_rng_state(), state)
    assert engine.generate(PROMPTS, sampled) == first
    other_seed = engine.generate(PROMPTS, dataclasses.replace(sampled, seed=8))
    greedy = engine.generate(PROMPTS, dataclasses.replace(sampled, temperature=0.0))
    assert [c.text for c in other_seed] != [c.text for c in first]
    assert [c.text for c in greedy] != [c.text for c in first]


@pytest.mark.parametrize("bad, message", [
    (dict(max_new_tokens=0), "max_new_tokens"), (dict(temperature=-1.0), "temperature"), (dict(top_p=0.0), "top_p"),
])
def test_bad_sampling_params_are_user_errors(engine, bad, message):
    with pytest.raises(UserError, match=message):
        engine.generate(["hi"], SamplingParams(**bad))


NEW_TOKENS = ["<x1>", "<x2>", "<x3>"]


@pytest.fixture(scope="module")
def resized_adapter(tmp_path_factory):
    """An adapter as other tools save it after adding tokens: a LoRA plus full embed_tokens and
    lm_head matrices with 3 more rows than the base. The new rows are set to 0.5 so the test can
    tell the adapter's values from a fresh resize."""
    from peft import LoraConfig, get_peft_model

    base = str(resolve_tiny("tiny:qwen2-1m"))
    out = tmp_path_factory.mktemp("resized-adapter")
    tok = AutoTokenizer.from_pretrained(base)
    model = AutoModelForCausalLM.from_pretrained(base)
    tok.add_tokens(NEW_TOKENS)
    model.resize_token_embeddings(len(tok), mean_resizing=False)
    with torch.no_grad():
        model.get_input_embeddings().weight[-3:] = 0.5
        model.get_output_embeddings().weight[-3:] = 0.5
    config = LoraConfig(r=4, target_modules=["q_proj", "v_proj"], modules_to_save=["embed_tokens", "lm_head"], task_type="CAUSAL_LM")
    get_peft_model(model, config).save_pretrained(out)
    tok.save_pretrained(out)
    return base, out


def test_adapter_with_resized_embeddings_needs_the_resize(resized_adapter):
    from peft import PeftModel

    base, adapter = resized_adapter
    assert adapter_vocab_rows(str(adapter)) == 1152 + 3
    with pytest.raises(RuntimeError, match="size mismatch"):
        PeftModel.from_pretrained(AutoModelForCausalLM.from_pretrained(base), adapter)


def test_engine_loads_adapter_with_resized_embeddings(resized_adapter):
    _, adapter = resized_adapter
    engine = TransformersEngine(str(adapter), progress=False)
    embed = engine.model.get_input_embeddings().weight
    assert embed.shape[0] == 1155 and engine.model.get_output_embeddings().weight.shape[0] == 1155
    assert torch.all(embed[-3:] == 0.5), "the new rows must come from the adapter, not from the resize"
    saved = load_file(adapter / "adapter_model.safetensors")
    saved_embed = next(v for k, v in saved.items() if "embed_tokens" in k and "modules_to_save" in k)
    assert torch.equal(embed, saved_embed)
    assert any("resized from 1152 to 1155" in note for note in engine.notes)
    out = engine.generate(["Say <x1> <x2>", [{"role": "user", "content": "<x3>"}]], GREEDY)
    assert all(c.completion_tokens > 0 for c in out)
    assert out[0].prompt_tokens == len(engine.tokenizer(engine.tokenizer.apply_chat_template(
        [{"role": "user", "content": "Say <x1> <x2>"}], tokenize=False, add_generation_prompt=True), add_special_tokens=False)["input_ids"])
    assert engine.tokenizer.convert_tokens_to_ids("<x1>") == 1152  # the adapter's own tokenizer is used


def test_plain_lora_adapter_has_no_vocabulary_rows(tmp_path):
    from peft import LoraConfig, get_peft_model

    base = str(resolve_tiny("tiny:qwen2-1m"))
    model = AutoModelForCausalLM.from_pretrained(base)
    get_peft_model(model, LoraConfig(r=2, target_modules=["q_proj"], task_type="CAUSAL_LM")).save_pretrained(tmp_path)
    assert adapter_vocab_rows(str(tmp_path)) is None
    engine = TransformersEngine(str(tmp_path), progress=False)
    assert engine.model.get_input_embeddings().weight.shape[0] == 1152
    assert engine.generate(["hi"], GREEDY)[0].completion_tokens == GREEDY.max_new_tokens


def test_vllm_engine_says_why_it_cannot_run_here():
    from posttrain.generation.engines import make_engine
    from posttrain.generation.vllm_engine import VLLMEngine, vllm_unavailable_reason

    reason = vllm_unavailable_reason()
    if reason is None:
        pytest.skip("vLLM and a CUDA GPU are available here; the clean-error path cannot be exercised")
    with pytest.raises(UserError) as error:
        VLLMEngine("tiny:qwen2-1m")
    assert reason in str(error.value) and "tiny:qwen2-1m" in str(error.value)
    with pytest.raises(UserError, match="cannot use the vLLM engine"):
        make_engine("vllm:tiny:qwen2-1m")


def test_vllm_reasons_name_the_missing_piece(monkeypatch):
    import importlib.util

    from posttrain.generation.vllm_engine import vllm_unavailable_reason

    real_find_spec = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: None if name == "vllm" else real_find_spec(name, *a))
    assert "vllm is not installed" in vllm_unavailable_reason()
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: object() if name == "vllm" else real_find_spec(name, *a))
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    assert "no CUDA GPU" in vllm_unavailable_reason()
