"""Generation and evaluation with images: the local engine batches image prompts exactly, eval
reads image columns, text answers are scored, and the shapes proof runs end to end (toy size)."""

from __future__ import annotations

import json

import pytest
from PIL import Image

from posttrain.errors import UserError
from posttrain.evaluation.scoring import text_loose, text_strict
from posttrain.generation.base import SamplingParams
from posttrain.generation.local import TransformersEngine
from posttrain.models.tiny_vlm import TOKENS_PER_IMAGE


def test_batched_image_prompts_equal_one_at_a_time(tiny_vlm_dir):
    engine = TransformersEngine(str(tiny_vlm_dir), batch_size=4, progress=False)
    red, blue = Image.new("RGB", (64, 64), "red"), Image.new("RGB", (30, 70), "blue")
    prompts = [
        [{"role": "user", "content": [{"type": "image", "image": red}, {"type": "text", "text": "What colour?"}]}],
        [{"role": "user", "content": [{"type": "image", "image": blue}, {"type": "text", "text": "What colour is the big square here?"}]}],
        "no image at all",
        [{"role": "user", "content": [{"type": "image", "image": red}, {"type": "image", "image": blue}, {"type": "text", "text": "two"}]}],
    ]
    params = SamplingParams(max_new_tokens=6)
    batched = engine.generate(prompts, params)
    alone = [engine.generate([p], params)[0] for p in prompts]
    assert [c.text for c in batched] == [c.text for c in alone]
    assert batched[3].prompt_tokens - batched[0].prompt_tokens >= TOKENS_PER_IMAGE - 3  # the second image's tokens
    assert engine.generate(prompts[1:2], params)[0].text != engine.generate(
        [[{"role": "user", "content": [{"type": "image", "image": red}, prompts[1][0]["content"][1]]}]], params)[0].text


def test_text_only_engine_refuses_image_prompts(tiny_dir):
    engine = TransformersEngine(str(tiny_dir), progress=False)
    image_prompt = [{"role": "user", "content": [{"type": "image", "image": Image.new("RGB", (8, 8))}, {"type": "text", "text": "hi"}]}]
    with pytest.raises(UserError, match=r"text-only model"):
        engine.generate(["fine", image_prompt], SamplingParams(max_new_tokens=2))


def test_text_scoring():
    assert text_strict("<answer> Red </answer>", "red") and not text_strict("red", "red")
    assert text_loose("It is red.", "red") and text_loose("<answer>red</answer>", "red") and not text_loose("red, no: blue", "red")


def test_eval_custom_task_with_image_column(cli, tmp_path, repo, tiny_vlm_dir):
    out = tmp_path / "eval"
    result = cli("eval", "--model", tiny_vlm_dir, "--task", "custom", "--data", repo / "examples/data/shapes/test.jsonl",
                 "--image-column", "image", "--n", "6", "--max-new-tokens", "4", "--out", out)
    assert result.returncode == 0, result.stderr[-2000:]
    samples = [json.loads(line) for line in (out / "samples.jsonl").read_text().splitlines()]
    assert len(samples) == 6
    first = samples[0]["prompt"][0]["content"]
    assert first[0]["type"] == "image" and first[0]["image"].endswith(".png") and first[1]["type"] == "text"
    missing = cli("eval", "--model", tiny_vlm_dir, "--task", "custom", "--data", repo / "examples/data/shapes/test.jsonl",
                  "--image-column", "picture", "--n", "2", "--out", tmp_path / "e2")
    assert missing.returncode == 2 and "has no 'picture' column" in missing.stderr


def test_shapes_proof_pipeline_toy(tmp_path):
    """The benchmark end to end at toy size: data, two trained arms, compare, the table. (The real
    numbers, where the images arm must win, are in the README; this checks the machinery.)"""
    import importlib.util

    spec = importlib.util.spec_from_file_location("vlm_shapes", __import__("pathlib").Path(__file__).parents[2] / "benchmarks/vlm_shapes.py")
    bench = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(bench)
    result = bench.main(["--steps", "2", "--batch", "4", "--n-train", "16", "--n-test", "12", "--out", str(tmp_path)])
    assert [r["arm"] for r in result["rows"]] == ["untrained", "images", "blank"]
    assert all(r["n"] == 12 for r in result["rows"]) and 0.25 <= result["chance"] <= 1 / 3
    blank_image = Image.open(tmp_path / "data-blank" / "images" / "train-00000.png")
    assert len(set(blank_image.getdata())) == 1  # every pixel the same
    assert (tmp_path / "result.md").read_text().startswith("| arm |")
