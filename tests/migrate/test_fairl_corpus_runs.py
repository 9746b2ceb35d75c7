"""Converted FAI-RL recipes run for real: model swapped to `tiny:`, data to local files, 2 training steps.

The recipes where conversion has the most to get right: SFT from split-mode chat templates (with
FAI-RL's held-out evaluation and early stopping), GRPO with a local reward function, and sft_vlm in
split mode on the tiny vision-language model; the converted inference recipe then generates from
the SFT run's model and the converted evaluation recipe scores it on a local GSM8K-shaped file.
DPO's beta is checked at conversion level (posttrain's own DPO tests check that beta reaches TRL).
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

pytestmark = [pytest.mark.e2e, pytest.mark.slow]
HERE = Path(__file__).parent
CORPUS = HERE / "fairl_corpus"


@pytest.fixture(scope="module")
def work(tmp_path_factory, data_dir):
    root = tmp_path_factory.mktemp("fairl-runs")
    problems = [json.loads(line) for line in (data_dir / "problems.jsonl").read_text().splitlines()]
    prefs = [json.loads(line) for line in (data_dir / "preferences.jsonl").read_text().splitlines()]

    def write(name, rows):
        (root / name).write_text("".join(json.dumps(r) + "\n" for r in rows))
        return root / name

    write("tickets.jsonl", [{"ticket": p["question"], "reply": p["answer"].split("####")[0].strip()} for p in problems])
    write("pairs.jsonl", [{"question": r["prompt"], "better": r["chosen"], "worse": r["rejected"]} for r in prefs])
    write("refusals.jsonl", prefs)
    write("local_prompts.jsonl", [{"prompt": p["question"], "target": p["answer"].split("####")[-1].strip()} for p in problems])
    write("persona.jsonl", [{"persona": "teacher", "prompt": p["question"]} for p in problems[:4]])
    write("gsm8k_test.jsonl", problems[:6])
    (root / "my_rewards").mkdir()
    (root / "my_rewards" / "__init__.py").write_text("")
    (root / "my_rewards" / "scoring.py").write_text(
        "def exact_match(completions, answer, strict=True, **kwargs):\n"
        "    texts = [c if isinstance(c, str) else c[-1]['content'] for c in completions]\n"
        "    return [float(sum(ch.isdigit() for ch in t) > 0) + 0.01 * len(t) for t in texts]\n")
    return root


def main(*args) -> int:
    """generate/eval in this process (each subprocess would pay seconds of imports)."""
    from posttrain.cli import main as posttrain_main

    return posttrain_main([str(a) for a in args])


def convert(cli, recipe: str, out: Path) -> Path:
    result = cli("convert", CORPUS / recipe, "-o", out)
    assert result.returncode == 0, result.stderr
    return out


def train(cli, recipe: Path, work: Path, *overrides: str) -> Path:
    out = work / f"run-{recipe.stem}"
    common = ["model.base_model_name=tiny:qwen2-1m", f"training.output_dir={out}", "training.max_steps=2",
              "training.save_steps=2", "training.activation_checkpointing=false", "training.warmup_steps=0"]
    env = {"PYTHONPATH": f"{work}:{__import__('os').environ.get('PYTHONPATH', '')}"}
    result = cli("train", "--recipe", recipe, *common, *overrides, cwd=work, env=env, timeout=600)
    assert result.returncode == 0, result.stderr[-3000:]
    assert (out / "run_summary.json").is_file()
    return out


def test_sft_split_chat_trains_and_its_model_generates_and_evaluates(cli, work):
    recipe = convert(cli, "training/sft_split_chat.yaml", work / "sft.yaml")
    run = train(cli, recipe, work, f"data.datasets[0].name={work / 'tickets.jsonl'}", "data.datasets[0].split=train",
                "training.deepspeed=null", "training.gradient_accumulation_steps=1", "training.per_device_train_batch_size=4",
                "training.eval_steps=2", "data.eval_fraction=0.1", "tracking.provider=none", "s3=null")
    metrics = [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]
    assert any("eval_loss" in m for m in metrics)  # FAI-RL's held-out evaluation survived conversion
    resolved = (run / "resolved_recipe.yaml").read_text()
    assert "prompt_template: 'Ticket: {ticket}'" in resolved and "early_stopping_patience: 2" in resolved

    gen = convert(cli, "inference/checkpoints_persona.yaml", work / "gen.yaml")
    out = work / "gen.jsonl"
    assert main("generate", "--recipe", gen, f"inference.models=[{run}]", f"inference.dataset={work / 'persona.jsonl'}",
                "inference.split=train", f"inference.out={out}", "--max-new-tokens", "4") == 0
    rows = [json.loads(line) for line in out.read_text().splitlines()]
    assert len(rows) == 4 and out.with_suffix(".csv").is_file()
    assert rows[0]["prompt"].startswith("You are helpful and safe.\nPersona: teacher\nUser: ")
    assert rows[0]["params"]["temperature"] == 0.7 and rows[0]["params"]["max_new_tokens"] == 4  # recipe, then the flag

    ev = convert(cli, "evaluation/gsm8k_single.yaml", work / "ev.yaml")
    assert main("eval", "--recipe", ev, f"evaluation.model={run}", f"evaluation.data={work / 'gsm8k_test.jsonl'}",
                f"evaluation.out={work / 'ev'}", "evaluation.max_new_tokens=8") == 0
    summary = json.loads((work / "ev" / "summary.json").read_text())
    assert summary["arms"][0]["n"] == 6 if "arms" in summary else (work / "ev" / "samples.jsonl").read_text().count("\n") == 6


def test_grpo_trains_with_the_local_reward_function_and_no_kl(cli, work):
    from posttrain.migrate.fairl_training import schema_has

    recipe = convert(cli, "training/grpo_full_local_reward.yaml", work / "grpo.yaml")
    # its ZeRO-3 config becomes training.distributed=zero3 on builds that have the key: one CPU process here
    no_sharding = "training.distributed=null" if schema_has("training.distributed") else "training.deepspeed=null"
    run = train(cli, recipe, work, f"data.datasets[0].name={work / 'local_prompts.jsonl'}", no_sharding,
                "training.per_device_train_batch_size=4", "training.gradient_accumulation_steps=1", "training.num_generations=4",
                "training.max_completion_length=8", "training.beta=0.0", "tracking.provider=none")
    config = json.loads((run / "trl_config.json").read_text())
    assert config["max_completion_length"] == 8 and config["beta"] == 0.0
    metrics = [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]
    assert any(m.get("rewards/exact_match/mean") is not None or "reward" in m for m in metrics)


@pytest.fixture(scope="module")
def shapes(work) -> Path:
    """16 coloured-shape images with their questions (posttrain.data.shapes), and FAI-RL-shaped CSVs over them:
    pets.csv (photo, question, answer) and clips.csv (poster image, clip video, question)."""
    import csv
    import subprocess
    import sys

    folder = work / "shapes"
    subprocess.run([sys.executable, "-m", "posttrain.data.shapes", str(folder), "--n", "16", "--n-test", "4"],
                   check=True, capture_output=True)
    rows = [json.loads(line) for line in (folder / "train.jsonl").read_text().splitlines()]
    with (folder / "pets.csv").open("w", newline="") as f:
        writer = csv.writer(f)
        writer.writerow(["photo", "question", "answer"])
        writer.writerows([r["image"], r["prompt"], r["completion"]] for r in rows)
    return folder


def test_sft_vlm_split_mode_trains_on_images(cli, work, shapes):
    recipe = convert(cli, "training/sft_vlm_split.yaml", work / "vlm.yaml")
    run = train(cli, recipe, work, "model.base_model_name=tiny:llava-2m", f"data.datasets[0].name={shapes / 'train.jsonl'}",
                "data.datasets[0].image_columns=[image]", "data.datasets[0].prompt_column=prompt",
                "data.datasets[0].completion_column=completion", "training.gradient_accumulation_steps=1",
                "training.per_device_train_batch_size=4")
    resolved = (run / "resolved_recipe.yaml").read_text()
    assert "freeze_vision_tower: true" in resolved and "video_max_frames: null" in resolved  # no video columns: nothing to sample
    assert (run / "adapter_model.safetensors").is_file()


def test_sft_vlm_flat_template_trains_on_the_response_and_its_model_generates_from_images_and_video(cli, work, shapes):
    """FAI-RL's flat sft_vlm template (one .format() text over dataset_columns) trains with the loss on the response;
    FAI-RL's VLM inference recipe (image and video columns, fetch settings) generates from that model."""
    pytest.importorskip("av")
    import av
    import numpy as np

    recipe = convert(cli, "training/sft_vlm_lora.yaml", work / "vlm-flat.yaml")
    run = train(cli, recipe, work, "model.base_model_name=tiny:llava-2m", f"data.datasets[0].name={shapes / 'pets.csv'}",
                "training.gradient_accumulation_steps=1", "training.per_device_train_batch_size=4", "tracking.provider=none")
    audit = json.loads((run / "run_summary.json").read_text())["token_audit"][0]
    # the answers ('<answer>bottom right</answer>' and the end of turn) carry the labels, not the instructions and the question
    assert audit["rows"] == 16 and audit["no_label_rows"] == 0 and audit["label_tokens"]["max"] < 40
    with av.open(str(shapes / "clip.mp4"), mode="w") as container:
        stream = container.add_stream("mpeg4", rate=10)
        stream.width, stream.height, stream.pix_fmt = 32, 32, "yuv420p"
        for i in range(12):
            for packet in stream.encode(av.VideoFrame.from_ndarray(np.full((32, 32, 3), 20 * i, np.uint8), format="rgb24")):
                container.mux(packet)
        for packet in stream.encode():
            container.mux(packet)
    (shapes / "clips.csv").write_text("poster,clip,question\nimages/train-00000.png,clip.mp4,What changes?\n"
                                      "images/train-00001.png,clip.mp4,Is it getting lighter?\n")
    gen = convert(cli, "inference/vlm_video.yaml", work / "gen-vlm.yaml")
    out = work / "gen-vlm.jsonl"
    assert main("generate", "--recipe", gen, f"inference.models=[{run}]", f"inference.dataset={shapes / 'clips.csv'}",
                f"inference.out={out}", "--max-new-tokens", "4") == 0
    rows = [json.loads(line) for line in out.read_text().splitlines()]
    assert len(rows) == 2 and all(r["error"] is None and r["completion_tokens"] > 0 for r in rows)
    parts = [p["type"] for p in rows[0]["prompt"][0]["content"]]
    assert parts[:5] == ["image"] * 5 and parts[5:] == ["text"]  # the poster, then video_num_frames=4 frames, then the text
    assert rows[0]["prompt"][0]["content"][5]["text"].startswith("Answer the user's question based on the video.\nQuestion: What changes?")
