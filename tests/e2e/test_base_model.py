"""A pretrained base model (no chat template) through the real CLI: evaluated on a built-in task with
plain prompts (and the report says so), chat SFT with posttrain's plain transcript training the end of
turn, and stopped at start-up with exit 2 and the fix where RL data are chats, never with a traceback
from inside TRL."""

import json
import shutil

import pytest

pytestmark = pytest.mark.e2e


@pytest.fixture(scope="module")
def base_model(tmp_path_factory, isolated_cache):
    """tiny:qwen2-1m saved without its chat template, as a pretrained base model comes."""
    from posttrain.models.tiny import resolve_tiny

    folder = tmp_path_factory.mktemp("base") / "model"
    shutil.copytree(resolve_tiny("tiny:qwen2-1m"), folder)
    (folder / "chat_template.jinja").unlink()
    config = json.loads((folder / "tokenizer_config.json").read_text())
    config.pop("chat_template", None)
    (folder / "tokenizer_config.json").write_text(json.dumps(config))
    return folder


def test_a_base_model_is_evaluated_on_a_built_in_task_with_plain_prompts(cli, tmp_path, base_model):
    result = cli("eval", "--model", str(base_model), "--task", "arithmetic", "--n", "8", "--max-new-tokens", "16",
                 "--out", str(tmp_path / "eval"), "--no-progress")
    assert result.returncode == 0, result.stderr[-2000:]
    records = [json.loads(line) for line in (tmp_path / "eval" / "samples.jsonl").read_text().splitlines()]
    assert len(records) == 8 and all(r["prompt_form"] == "plain" for r in records)
    assert all("\nUser:" not in r["completion"] for r in records)  # its own next turn is not its answer
    report = (tmp_path / "eval" / "summary.md").read_text()
    assert "asked in plain text, without a chat template" in report

    # a chat model asked with --no-chat-template: plain prompts too, and not the chat answers from the cache
    chat = cli("eval", "--model", "tiny:qwen2-1m", "--task", "arithmetic", "--n", "8", "--max-new-tokens", "16",
               "--out", str(tmp_path / "chat"), "--no-progress")
    plain = cli("eval", "--model", "tiny:qwen2-1m", "--task", "arithmetic", "--n", "8", "--max-new-tokens", "16",
                "--no-chat-template", "--out", str(tmp_path / "plain"), "--no-progress")
    assert chat.returncode == plain.returncode == 0, (chat.stderr + plain.stderr)[-2000:]
    as_chat, as_plain = ([json.loads(line) for line in (tmp_path / arm / "samples.jsonl").read_text().splitlines()] for arm in ("chat", "plain"))
    assert all("prompt_form" not in r for r in as_chat) and all(r["prompt_form"] == "plain" and not r["cached"] for r in as_plain)


def test_chat_data_on_a_base_model_stop_at_start_up_with_the_fix(cli, tmp_path, base_model):
    grpo = cli("train", "--recipe", "recipes/grpo/tiny-cpu.yaml", f"model.base_model_name={base_model}",
               f"training.output_dir={tmp_path / 'grpo'}", "training.max_steps=1")
    assert grpo.returncode == 2, grpo.stdout[-2000:] + grpo.stderr[-2000:]
    assert "Traceback" not in grpo.stderr
    assert f"{base_model} has no chat template, and this run's data are chats" in grpo.stderr
    assert "data.use_chat_template=false (the prompts are sent as plain text" in grpo.stderr
    # the fix it names runs; plain-text preference data need no template at all
    fixed = cli("train", "--recipe", "recipes/grpo/tiny-cpu.yaml", f"model.base_model_name={base_model}", "data.use_chat_template=false",
                f"training.output_dir={tmp_path / 'grpo-plain'}", "training.max_steps=1", "training.save_strategy=no", "training.save_steps=null")
    assert fixed.returncode == 0, fixed.stdout[-2000:] + fixed.stderr[-2000:]
    dpo = cli("train", "--recipe", "recipes/dpo/tiny-cpu.yaml", f"model.base_model_name={base_model}",
              f"training.output_dir={tmp_path / 'dpo'}", "training.max_steps=1",
              "training.save_strategy=no", "training.save_steps=null")
    assert dpo.returncode == 0, dpo.stdout[-2000:] + dpo.stderr[-2000:]


def test_chat_sft_on_a_base_model_trains_its_end_of_turn(cli, tmp_path, base_model):
    """No template of its own: the chats are rendered as the plain transcript eval asks a base model in,
    each answer ended by the model's eos, which is labelled in every row; the template is saved with the
    model, so the trained model is asked the way it was taught."""
    from transformers import AutoTokenizer

    out = tmp_path / "sft"
    sft = cli("train", "--recipe", "recipes/sft/tiny-cpu.yaml", f"model.base_model_name={base_model}",
              "data.datasets[0].name=examples/data/messages.jsonl", f"training.output_dir={out}", "training.max_steps=1")
    assert sft.returncode == 0, sft.stdout[-2000:] + sft.stderr[-2000:]
    tokenizer = AutoTokenizer.from_pretrained(base_model)
    assert f"chats are rendered as a plain transcript (User: / Assistant:, each answer ended by the model's eos {tokenizer.eos_token}" in sft.stdout
    audit = json.loads((out / "run_summary.json").read_text())["token_audit"][0]
    assert audit["rows"] > 0 and audit["end_of_turn_labelled"] == audit["rows"]
    saved = AutoTokenizer.from_pretrained(out)
    chat = [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "2 + 2?"}, {"role": "assistant", "content": "4"}]
    assert saved.apply_chat_template(chat, tokenize=False) == f"{saved.bos_token or ''}Be brief.\n\nUser: 2 + 2?\nAssistant: 4{saved.eos_token}\n"
    assert saved.apply_chat_template(chat[:2], tokenize=False, add_generation_prompt=True).endswith("User: 2 + 2?\nAssistant:")

    evaluated = cli("eval", "--model", str(out), "--task", "arithmetic", "--n", "4", "--max-new-tokens", "8",
                    "--out", str(tmp_path / "eval"), "--no-progress")
    assert evaluated.returncode == 0, evaluated.stderr[-2000:]
    records = [json.loads(line) for line in (tmp_path / "eval" / "samples.jsonl").read_text().splitlines()]
    assert all("prompt_form" not in r for r in records)  # asked through the saved template
