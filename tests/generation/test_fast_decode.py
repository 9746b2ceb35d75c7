"""posttrain's decoding loop against transformers' `generate` on the same model, batch and settings:
the same greedy tokens (float32), the same distribution for independent seeds (chi-square tests, of
the sampler alone and of whole decodes), the same seed giving the same samples, and a model left
exactly as it was.

Exact comparisons run on one thread: multi-threaded MKL may split a product differently from one
call to the next when the machine is busy (its dynamic threading), so two runs of `generate` itself
can differ in the last bits and, rarely, in a sampled token."""

from __future__ import annotations

import pytest
import torch

from posttrain.generation.decoding import decode, sample, unsupported
from posttrain.generation.inference_weights import inference_linears


@pytest.fixture(scope="module")
def tiny(tiny_dir):
    from transformers import AutoModelForCausalLM, AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(tiny_dir)
    model = AutoModelForCausalLM.from_pretrained(tiny_dir, dtype=torch.float32).eval()
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield model, tokenizer
    torch.set_num_threads(threads)


def batch(tokenizer, questions: list[str], copies: int = 1):
    """Left-padded chat prompts of different lengths, each repeated `copies` times (a GRPO group)."""
    texts = [tokenizer.apply_chat_template([{"role": "user", "content": q}], tokenize=False, add_generation_prompt=True)
             for q in questions for _ in range(copies)]
    tokenizer.padding_side = "left"
    enc = tokenizer(texts, return_tensors="pt", padding=True, add_special_tokens=False)
    return enc.input_ids, enc.attention_mask


QUESTIONS = ["What is 2 + 3?", "Add 17 and 25, then tell me the result.", "9 * 4 =", "Tom has 12 apples and eats 5. How many are left now?"]


def config(tokenizer, **kwargs):
    from transformers import GenerationConfig

    return GenerationConfig(eos_token_id=tokenizer.eos_token_id, pad_token_id=tokenizer.pad_token_id, **kwargs)


def with_lora(model):
    """The model under a LoRA adapter on every linear layer whose B is non-zero (as after training)."""
    import copy

    from peft import LoraConfig, get_peft_model

    torch.manual_seed(1)  # lora_A's init draws from the global generator: seeded, the adapter is the same whatever ran before
    peft = get_peft_model(copy.deepcopy(model), LoraConfig(r=4, lora_alpha=8, target_modules="all-linear", lora_dropout=0.0))
    for name, p in peft.named_parameters():
        if "lora_B" in name:
            p.data.normal_(0, 0.05)
    return peft.eval()


@pytest.mark.parametrize("adapter", [False, True], ids=["plain", "lora"])
def test_greedy_tokens_equal_generate(tiny, adapter):
    model, tokenizer = tiny
    model = with_lora(model) if adapter else model
    ids, mask = batch(tokenizer, QUESTIONS, copies=2)
    cfg = config(tokenizer, max_new_tokens=12, do_sample=False)
    expected = model.generate(input_ids=ids, attention_mask=mask, generation_config=cfg)
    got = decode(model, ids, mask, cfg)
    assert torch.equal(got, expected)
    # A stop token the model does emit mid-way: rows end there and are padded like generate's.
    stop = int(expected[0, ids.shape[1] + 3])
    cfg = config(tokenizer, max_new_tokens=12, do_sample=False)
    cfg.eos_token_id = [tokenizer.eos_token_id, stop]
    expected = model.generate(input_ids=ids, attention_mask=mask, generation_config=cfg)
    assert torch.equal(decode(model, ids, mask, cfg), expected)
    assert expected.shape[1] > ids.shape[1] + 4 and (expected[0, ids.shape[1] + 4:] == tokenizer.pad_token_id).all()


def test_sampler_draws_each_token_with_its_probability():
    """`sample` against the exact probabilities: rows with removed tokens (probability 0, never drawn),
    a token of 1e-4 and a near-certain one; 200,000 draws per row, a chi-square goodness-of-fit test."""
    from draw_counts import fit_pvalue

    vocab = 1000
    probs = torch.zeros(3, vocab)
    probs[0, [3, 500, 999]] = torch.tensor([0.5, 0.3, 0.2])  # a top-k row, the last token kept
    probs[1] = torch.softmax(torch.linspace(-4, 4, vocab), -1)  # every token possible
    probs[2, [0, 1, 2]] = torch.tensor([1e-4, 0.9999 - 0.3, 0.3])  # a rare first token
    torch.manual_seed(0)
    draws = torch.stack([sample(probs) for _ in range(200_000)])
    for row in range(3):
        pvalue, _ = fit_pvalue(torch.bincount(draws[:, row], minlength=vocab), probs[row])  # removed tokens never drawn
        assert pvalue > 0.001
    assert 5 <= (draws[:, 2] == 0).sum() <= 45  # the 1e-4 token: 20 expected


def test_same_seed_same_samples_and_top_k_1_is_greedy(tiny):
    """Seeded alike, two decodes sample the same tokens (a run can be repeated); at top_k=1 the
    samples are `generate`'s greedy tokens (the warpers reach the sampler, which draws the policy)."""
    model, tokenizer = tiny
    ids, mask = batch(tokenizer, QUESTIONS, copies=4)
    cfg = config(tokenizer, max_new_tokens=10, do_sample=True, temperature=0.8, top_p=0.9, top_k=0)

    def seeded(seed):
        torch.manual_seed(seed)
        return decode(model, ids, mask, cfg)

    assert torch.equal(seeded(7), seeded(7))
    assert not torch.equal(seeded(7), seeded(8))
    greedy = model.generate(input_ids=ids, attention_mask=mask, generation_config=config(tokenizer, max_new_tokens=10, do_sample=False))
    assert torch.equal(decode(model, ids, mask, config(tokenizer, max_new_tokens=10, do_sample=True, temperature=0.8, top_k=1)), greedy)


def test_a_rows_samples_do_not_depend_on_when_the_others_finish(tiny):
    """Finished rows leave the batch, yet each row draws the uniforms it drew when every row ran to the
    cap: seeded alike, the rows that do not stop sample the same tokens with or without the stop token."""
    model, tokenizer = tiny
    ids, mask = batch(tokenizer, QUESTIONS, copies=2)
    width = ids.shape[1]

    def seeded(cfg):
        torch.manual_seed(3)
        return decode(model, ids, mask, cfg)[:, width:]

    cfg = config(tokenizer, max_new_tokens=12, do_sample=True, temperature=1.0, top_k=0)
    free = seeded(cfg)
    stop = int(free[0, 2])  # row 0 stops at its third token
    cfg.eos_token_id = [tokenizer.eos_token_id, stop]
    stopped = seeded(cfg)
    ended = [k for k, row in enumerate(free.tolist()) if stop in row[:-1] or tokenizer.eos_token_id in row[:-1]]
    running = [k for k in range(len(free)) if k not in ended]
    assert 0 in ended and running, "some rows finish early while others run on"
    assert torch.equal(stopped[running], free[running])
    assert (stopped[0, 3:] == tokenizer.pad_token_id).all()


def test_sampling_distribution_matches_generate(tiny):
    """Independent draws (different seeds) from both: the joint distribution of the first two sampled
    tokens (top_k=3, so 9 cells) must agree; a chi-square test of homogeneity, 1,200 draws each."""
    from scipy.stats import chi2_contingency

    model, tokenizer = tiny
    ids, mask = batch(tokenizer, QUESTIONS[:1], copies=400)
    cfg = config(tokenizer, max_new_tokens=2, do_sample=True, temperature=1.0, top_k=3)
    counts = {}
    for source, seeds in (("generate", (11, 12, 13)), ("posttrain", (21, 22, 23))):
        draws = []
        for seed in seeds:
            torch.manual_seed(seed)
            out = model.generate(input_ids=ids, attention_mask=mask, generation_config=cfg) if source == "generate" \
                else decode(model, ids, mask, cfg)
            draws += [tuple(row) for row in out[:, ids.shape[1]:].tolist()]
        counts[source] = draws
    cells = sorted(set(counts["generate"]) | set(counts["posttrain"]))
    table = [[draws.count(c) for c in cells] for draws in counts.values()]
    assert len(cells) >= 4  # the test has something to compare
    assert chi2_contingency(table).pvalue > 0.001


def test_settings_it_does_not_implement_name_themselves(tiny):
    _, tokenizer = tiny
    assert unsupported(config(tokenizer, max_new_tokens=4, do_sample=True, temperature=0.7, top_p=0.9), {}) is None
    assert "repetition_penalty=1.2" in unsupported(config(tokenizer, max_new_tokens=4, repetition_penalty=1.2), {})
    assert "num_beams=2" in unsupported(config(tokenizer, max_new_tokens=4, num_beams=2), {})
    assert "min_new_tokens=2" in unsupported(config(tokenizer, max_new_tokens=4, min_new_tokens=2), {})
    assert "pixel_values" in unsupported(config(tokenizer, max_new_tokens=4), {"pixel_values": None})
    assert unsupported(config(tokenizer), {}) == "no max_new_tokens"


def test_inference_weights_leave_the_model_as_it_was(tiny):
    """Packed copies only: no parameter is written, every forward comes back, inside the block the
    model computes the same logits (to float32 rounding), and a weight changed in place (an optimizer
    step) is packed again while an unchanged one is not."""
    model, tokenizer = tiny
    peft = with_lora(model)
    before = {name: p.detach().clone() for name, p in peft.named_parameters()}
    ids, mask = batch(tokenizer, QUESTIONS)
    with torch.inference_mode():
        reference = peft(input_ids=ids, attention_mask=mask).logits
        with inference_linears(peft, rows=len(ids)) as note:
            inside = peft(input_ids=ids, attention_mask=mask).logits
    layers = sum(1 for m in model.modules() if type(m) is torch.nn.Linear)
    assert note == f"{layers} linear layers ({layers - 1} with LoRA, {layers} pre-packed for the CPU)"  # all but lm_head have LoRA
    torch.testing.assert_close(inside, reference, rtol=1e-4, atol=1e-4)
    assert all(torch.equal(p, before[name]) for name, p in peft.named_parameters())
    assert not any("forward" in m.__dict__ for m in peft.modules())

    from posttrain.generation.inference_weights import packed_weight

    frozen, trained = peft.get_output_embeddings().weight, peft.base_model.model.model.layers[0].mlp.up_proj.lora_B["default"].weight
    first = packed_weight(frozen, 4)
    assert packed_weight(frozen, 4) is first  # kept between rollouts
    # After an optimizer step the trainer forgets what depends on trainable weights (a fused optimizer
    # writes them without bumping their version); the frozen lm_head keeps its packed copy.
    from posttrain.generation.inference_weights import forget_trained

    lora_layers = sum(1 for m in peft.modules() if "_posttrain_packed" in m.__dict__)
    assert lora_layers == layers - 1 and forget_trained(peft) == lora_layers
    assert packed_weight(frozen, 4) is first
    # A LoRA factor trained in place (the next rollout of a GRPO run): the merged copy is made again.
    with torch.no_grad():
        trained.add_(0.1)
        changed = peft(input_ids=ids, attention_mask=mask).logits
        with inference_linears(peft, rows=len(ids)):
            inside = peft(input_ids=ids, attention_mask=mask).logits
        trained.sub_(0.1)
    assert not torch.allclose(changed, reference, atol=1e-3)
    torch.testing.assert_close(inside, changed, rtol=1e-4, atol=1e-4)
