"""On-policy distillation through the real CLI: 2 steps on tiny models (the tiny recipe's learning is measured in its comment).

The teacher is tiny:llama-1m: another architecture and other weights on the same tokenizer, so the divergence is not 0."""

import json
import math
import shutil

import pytest

pytestmark = pytest.mark.e2e


def test_distill_trains_the_student_towards_the_teacher(cli, repo, tmp_path):
    out = tmp_path / "distill"
    result = cli("train", "--recipe", "recipes/distill/tiny-cpu.yaml", f"training.output_dir={out}",
                 "training.teacher_model_name_or_path=tiny:llama-1m", "training.max_steps=2", "training.eval_steps=2",
                 "training.save_steps=2", "training.per_device_train_batch_size=4", "training.max_completion_length=8",
                 "data.datasets[0].max_samples=24", "training.eval_on_start=false",
                 f"data.datasets[0].name={repo / 'examples/data/problems.jsonl'}")
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    assert "teacher: " in result.stdout and "LlamaForCausalLM" not in result.stdout  # the log names the folder, not a class
    assert "tokenizer checked against the student's: same ids, vocab_size 1,152" in result.stdout
    records = [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()]
    losses = [r["loss"] for r in records if "loss" in r]
    assert len(losses) == 2 and all(math.isfinite(x) and x > 0 for x in losses)  # a real divergence: the teacher differs
    assert any("eval_loss" in r for r in records) and any("completions/mean_length" in r for r in records)
    config = json.loads((out / "trl_config.json").read_text())
    assert config["beta"] == 1.0 and config["teacher_model_name_or_path"] == "tiny:llama-1m"  # TRL's reverse KL, kept
    summary = json.loads((out / "run_summary.json").read_text())
    assert summary["algorithm"] == "distill" and summary["global_step"] == 2 and summary["rl"] is False
    assert (out / "model.safetensors").is_file()


def test_a_teacher_with_another_tokenizer_of_the_same_size_is_exit_2(cli, repo, tmp_path, tiny_dir):
    """tiny:qwen2-1m's tokenizer built with another seed: same vocab_size (TRL would accept it), other ids."""
    from posttrain.models.tiny_parts import build_tokenizer

    teacher = tmp_path / "teacher"
    teacher.mkdir()
    shutil.copy(tiny_dir / "config.json", teacher / "config.json")  # the check runs before any weight loads
    build_tokenizer(1).save_pretrained(teacher)
    out = tmp_path / "distill"
    result = cli("train", "--recipe", "recipes/distill/tiny-cpu.yaml", f"training.output_dir={out}",
                 f"training.teacher_model_name_or_path={teacher}", f"data.datasets[0].name={repo / 'examples/data/problems.jsonl'}")
    assert result.returncode == 2, result.stdout[-3000:] + result.stderr[-3000:]
    message = result.stdout + result.stderr
    assert f"training.teacher_model_name_or_path: the teacher '{teacher}' does not share the student's tokenizer" in message
    assert "tokens for the student and" in message and "have another id in the teacher" in message
    assert "Traceback" not in message and not out.exists()  # nothing left behind
