"""`posttrain generate` end to end on the tiny model, its input checks, and the model-spec rule of
`make_engine`."""

from __future__ import annotations

import csv
import json
import re
import subprocess
import sys

import pytest
from transformers import AutoTokenizer

from posttrain.cli import main
from posttrain.commands.generate import OUTPUT_FIELDS
from posttrain.errors import UserError
from posttrain.generation.api import AnthropicEngine, GeminiEngine, OpenAIEngine
from posttrain.generation.engines import engine_kind, make_engine
from posttrain.models.tiny import resolve_tiny

TINY = "tiny:qwen2-1m"


@pytest.fixture
def prompts_jsonl(tmp_path):
    path = tmp_path / "prompts.jsonl"
    rows = [{"prompt": "Tom has 5 apples. How many?", "id": 1},
            {"prompt": [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Hi"}]},
            {"prompt": "2 + 3 ="}]
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


def generate(tmp_path, *args) -> list[dict]:
    out = tmp_path / "gen.jsonl"
    assert main(["generate", "--out", str(out), "--max-new-tokens", "6", "--no-progress", *args]) == 0
    return [json.loads(line) for line in out.read_text().splitlines()]


def test_generate_writes_documented_rows_for_each_model(tmp_path, prompts_jsonl, capsys):
    tiny_dir = str(resolve_tiny(TINY))
    rows = generate(tmp_path, "--model", TINY, "--model", tiny_dir, "--prompts", str(prompts_jsonl), "--csv", "--batch-size", "2")
    assert len(rows) == 6 and all(list(r) == OUTPUT_FIELDS for r in rows)
    assert [r["model"] for r in rows] == [TINY] * 3 + [tiny_dir] * 3
    assert [r["index"] for r in rows] == [0, 1, 2, 0, 1, 2]
    assert rows[1]["prompt"][1] == {"role": "user", "content": "Hi"}
    for r in rows:
        assert r["params"] == {"max_new_tokens": 6, "temperature": 0.0, "top_p": 1.0, "seed": 0}
        assert r["finish_reason"] in ("stop", "length") and r["error"] is None
        assert r["prompt_tokens"] > 5 and 1 <= r["completion_tokens"] <= 6 and isinstance(r["completion"], str)
    # the same weights under two names give the same greedy completions
    assert [r["completion"] for r in rows[:3]] == [r["completion"] for r in rows[3:]]
    with (tmp_path / "gen.csv").open(newline="") as f:
        table = list(csv.DictReader(f))
    assert [list(r) for r in table] == [OUTPUT_FIELDS] * 6
    assert [r["completion"] for r in table] == [r["completion"] for r in rows]
    assert json.loads(table[1]["prompt"]) == rows[1]["prompt"] and json.loads(table[0]["params"]) == rows[0]["params"]
    assert "wrote 6 rows" in capsys.readouterr().out


def test_txt_prompts_messages_column_and_n(tmp_path):
    txt = tmp_path / "p.txt"
    txt.write_text("first prompt\n\nsecond prompt\nthird prompt\n")
    rows = generate(tmp_path, "--model", TINY, "--prompts", str(txt), "--n", "2", "--no-chat-template")
    assert [r["prompt"] for r in rows] == ["first prompt", "second prompt"]
    tokenizer = AutoTokenizer.from_pretrained(resolve_tiny(TINY))
    assert rows[0]["prompt_tokens"] == len(tokenizer("first prompt")["input_ids"])  # raw: no chat template around it
    chats = tmp_path / "chats.jsonl"
    chats.write_text(json.dumps({"messages": [{"role": "user", "content": "Hello"}]}) + "\n")
    assert generate(tmp_path, "--model", TINY, "--prompts", str(chats))[0]["prompt"] == [{"role": "user", "content": "Hello"}]


def test_dataset_file_with_a_prompt_column(tmp_path):
    data = tmp_path / "eval.jsonl"
    data.write_text("".join(json.dumps({"question": f"What is {i} + 1?", "answer": str(i + 1)}) + "\n" for i in range(5)))
    rows = generate(tmp_path, "--model", TINY, "--dataset", str(data), "--prompt-column", "question", "--n", "3")
    assert [r["prompt"] for r in rows] == [f"What is {i} + 1?" for i in range(3)]


def test_missing_prompts_file_exits_2_naming_it(tmp_path):
    result = subprocess.run([sys.executable, "-m", "posttrain", "generate", "--model", TINY, "--prompts", "no-such-prompts.jsonl"],
                            cwd=tmp_path, capture_output=True, text=True, timeout=60)
    assert result.returncode == 2
    assert "no-such-prompts.jsonl" in result.stderr and "does not exist" in result.stderr
    assert "Traceback" not in result.stderr


@pytest.mark.parametrize("content, args, message", [
    ('{"prompt": "ok"}\n{"prompt": "broken"\n', [], r"prompts.jsonl:2: not valid JSON"),
    ('{"question": "hi"}\n', [], r"row 0 has no a 'prompt' or 'messages' column; its columns are \['question'\]"),
    ('{"prompt": "hi"}\n', ["--prompt-column", "text"], r"row 0 has no column 'text'"),
    ('{"prompt": 42}\n', [], r"prompt 0 is neither a non-empty string"),
    ('{"prompt": "hi"}\n', ["--concurrency", "4"], r"--concurrency applies to api models only"),
    ('{"prompt": "hi"}\n', ["--temperature", "-1"], r"argument --temperature: -1 is out of range: give a number >= 0"),
    ('{"prompt": "hi"}\n', ["--n", "0"], r"argument --n: 0 is out of range: give a whole number >= 1"),
    ('{"prompt": "hi"}\n', ["--media-timeout", "5"], r"--media-timeout apply to images and videos: give --image-column"),
    ('{"prompt": "hi"}\n', ["--image-column", "x", "--video-fps", "2"], r"--video-fps/--video-max-frames sample videos"),
    ('{"prompt": "hi"}\n', ["--image-column", "photo"], r"row 0 has no column 'photo' \(--image-column\)"),
    ('{"prompt": "hi", "photo": "nope.png"}\n', ["--image-column", "photo"], r"row 0: its media cannot be used \(missing_file"),
])
def test_bad_input_is_a_user_error(tmp_path, capsys, content, args, message):
    path = tmp_path / "prompts.jsonl"
    path.write_text(content)
    try:
        code = main(["generate", "--model", TINY, "--prompts", str(path), "--out", str(tmp_path / "o.jsonl"), *args])
    except SystemExit as e:  # argparse: a flag's value out of range
        code = e.code
    assert code == 2
    assert not (tmp_path / "o.jsonl").exists()  # checked before any model loads or file is written
    assert re.search(message, capsys.readouterr().err)


def test_importing_the_generation_front_end_does_not_import_torch():
    code = ("import sys, posttrain.commands.generate, posttrain.generation.engines, posttrain.generation.api, "
            "posttrain.generation.local, posttrain.generation.vllm_engine; assert 'torch' not in sys.modules, 'torch imported'")
    subprocess.run([sys.executable, "-c", code], check=True, timeout=60)


@pytest.mark.parametrize("spec, kind", [
    ("openai:gpt-4o-mini", "api"), ("anthropic:claude-x", "api"), ("gemini:gemini-2.5-flash", "api"),
    ("vllm:Qwen/Qwen2.5-0.5B", "vllm"), ("vllm:tiny:qwen2-1m", "vllm"), ("tiny:qwen2-1m", "local"),
    ("Qwen/Qwen2.5-0.5B", "local"), ("./runs/out:v2/final", "local"), ("runs/sft:best", "local"),
])
def test_engine_kind_rule(spec, kind):
    assert engine_kind(spec) == kind


def test_existing_local_path_with_a_colon_is_local(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "ckpt:3").mkdir()
    assert engine_kind("ckpt:3") == "local"
    with pytest.raises(UserError, match=r"unknown provider 'ckpt4'.*\./ckpt4:x"):
        engine_kind("ckpt4:x")


def test_make_engine_builds_api_engines_and_checks_options():
    engines = [make_engine(f"{p}:m", api_key="k", max_workers=2, timeout=None) for p in ("openai", "anthropic", "gemini")]
    assert [type(e) for e in engines] == [OpenAIEngine, AnthropicEngine, GeminiEngine]
    assert [e.name for e in engines] == ["openai:m", "anthropic:m", "gemini:m"]
    assert engines[0].max_workers == 2 and engines[0].timeout == 60.0  # None = the engine's default
    with pytest.raises(UserError, match=r"batch_size: not an option of OpenAIEngine.*it takes max_tokens_field, base_url"):
        make_engine("openai:m", api_key="k", batch_size=4)
    with pytest.raises(UserError, match="names no model after 'gemini:'"):
        make_engine("gemini:")
    with pytest.raises(UserError, match="max_workers: not an option of TransformersEngine"):
        make_engine(TINY, max_workers=2)
