"""On-policy distillation: its recipe rules, the teacher's checks (preflight) and the tokenizer comparison; in-process, no training."""

from __future__ import annotations

import json

import pytest

from posttrain.recipe.errors import RecipeError
from posttrain.recipe.load import load_recipe

RECIPE = "recipes/distill/tiny-cpu.yaml"



def test_distill_reads_prompts_and_forwards_the_teacher(repo):
    training = load_recipe(repo / RECIPE, ["training.beta=0.5"]).recipe.training
    kwargs = training.trl_kwargs()
    assert kwargs["teacher_model_name_or_path"] == "runs/sft-tiny" and kwargs["beta"] == 0.5
    assert "temperature" not in kwargs  # TRL's defaults kept: the row states none


@pytest.mark.parametrize("override,key,needle", [
    ("training.teacher_model_name_or_path=null", "training.teacher_model_name_or_path", "distillation needs a teacher"),
    ("training.beta=1.5", "training.beta", "in [0, 1]"),
    ("training.teacher_model_init_kwargs={dtype: float32}", "training.teacher_model_init_kwargs", "loads the teacher itself"),
    ("training.max_tool_calling_iterations=3", "training.max_tool_calling_iterations", "no tools"),
    ("training.train_sampling_strategy=group_by_length", "training.train_sampling_strategy", "DistillationTrainer"),
    ("training.rewards=[{name: format}]", "training.rewards", "no rewards"),
    ("training.vllm_mode=server", "training.vllm_mode", "use_vllm"),
    ("data.datasets[0].chosen_column=x", "data.datasets[0].chosen_column", "never reads"),
])
def test_distill_rules(recipe_problems, override, key, needle):
    message = recipe_problems(RECIPE, override)
    assert key in message and needle in message, message


def test_prompt_keys_are_live_for_distill_and_still_refused_for_sft(repo):
    load_recipe(repo / RECIPE, ["data.prompt_truncation=left", "data.system_prompt=Be brief."])
    with pytest.raises(RecipeError, match=r"data.max_prompt_length only apply to grpo/gspo/rloo/distill"):
        load_recipe(repo / "recipes/sft/tiny-cpu.yaml", ["data.max_prompt_length=64"])


def test_preflight_checks_the_teacher_like_a_model_spec(repo, tmp_path, monkeypatch):
    from posttrain.recipe.preflight import teacher_problems

    monkeypatch.chdir(tmp_path)
    (tmp_path / "runs").mkdir()
    rm = tmp_path / "rm"
    rm.mkdir()
    (rm / "config.json").write_text(json.dumps({"model_type": "qwen2", "architectures": ["Qwen2ForSequenceClassification"],
                                                "id2label": {"0": "LABEL_0"}}))
    (tmp_path / "empty").mkdir()
    training = load_recipe(repo / RECIPE).recipe.training
    cases = {"runs/nope": "does not exist", "tiny:qwen2-3m": "invalid tiny model spec", str(rm): "is a reward model",
             str(tmp_path / "empty"): "holds neither a model", "tiny:qwen2-6m": None, "Qwen/Qwen2.5-1.5B-Instruct": None}
    for spec, needle in cases.items():
        found = teacher_problems(training.model_copy(update={"teacher_model_name_or_path": spec}))
        if needle is None:
            assert found == [], (spec, found)
        else:
            assert [p.path for p in found] == ["training.teacher_model_name_or_path"] and needle in found[0].message, (spec, found)


def test_tokenizers_that_number_tokens_differently_are_told_apart(tiny_dir):
    from transformers import AutoTokenizer

    from posttrain.algorithms.distill import SAMPLE, mismatch_message, sample_texts, tokenizer_mismatch
    from posttrain.models.tiny_parts import build_tokenizer

    student = AutoTokenizer.from_pretrained(tiny_dir)
    assert tokenizer_mismatch(student, AutoTokenizer.from_pretrained(tiny_dir), [SAMPLE]) is None
    other = build_tokenizer(1)  # tiny:qwen2-1m's recipe, another seed
    assert len(other) == len(student)  # the same size: TRL's vocab_size check passes
    texts = sample_texts(student, [[{"role": "user", "content": "What is 2 + 3?"}], "plain prompt"])
    assert len(texts) == 3 and "What is 2 + 3?" in texts[1] and texts[1] != "What is 2 + 3?"  # rendered by the chat template
    what = tokenizer_mismatch(student, other, texts)
    assert what is not None and "for the student and" in what and "have another id in the teacher" in what
    message = mismatch_message("tiny:qwen2-1m", "runs/other", what)
    assert message.startswith("training.teacher_model_name_or_path: the teacher 'runs/other' does not share the student's tokenizer")
    assert "Use a teacher of the student's family" in message
