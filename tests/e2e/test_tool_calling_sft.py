"""Tool-calling SFT: the loss covers assistant turns (text and tool calls) and nothing else."""

import pytest

from posttrain.algorithms.run import build_run
from posttrain.recipe.load import load_recipe

pytestmark = pytest.mark.e2e


def test_only_assistant_turns_carry_labels(tmp_path, data_dir, monkeypatch, repo):
    monkeypatch.chdir(repo)
    loaded = load_recipe("recipes/sft/tiny-tools-cpu.yaml", [f"data.datasets[0].name={data_dir / 'tool_calls.jsonl'}", f"training.output_dir={tmp_path}"])
    run, trainer = build_run(loaded)
    tok = run.loaded.tokenizer
    example = trainer.train_dataset[0]
    labels = trainer.data_collator([example])["labels"][0].tolist()
    ids = example["input_ids"]
    learned = tok.decode([i for i, label in zip(ids, labels) if label != -100])
    context = tok.decode([i for i, label in zip(ids, labels) if label == -100])

    chat = run.train_dataset[0]["messages"]
    call = chat[1]["tool_calls"][0]["function"]
    # Learned: the tool call and the final answer, each closed by the end-of-turn token.
    assert '"name": "calculator"' in learned and call["arguments"]["expression"] in learned
    assert chat[3]["content"] in learned and learned.count("<|im_end|>") == 2
    # Context only: the user's question, the tool's result, the tool schema in the system turn, role headers.
    assert chat[0]["content"] in context and chat[0]["content"] not in learned
    assert f"<|im_start|>tool\n{chat[2]['content']}<|im_end|>" in context
    assert '"description": "Evaluate an arithmetic expression."' in context
    assert "<|im_start|>assistant" not in learned
