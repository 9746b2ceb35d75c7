"""`posttrain convert` on a corpus of FAI-RL-shaped recipes (tests/migrate/fairl_corpus, written for these tests).

For every recipe: the conversion table and the converted recipe equal a golden file, and either the
converted recipe passes the schema (as `posttrain validate --schema-only` would check it) or the
conversion names every key it cannot map. Regenerate the golden files after an intended change with
    UPDATE_GOLDEN=1 python -m pytest tests/migrate/test_fairl_convert.py
and read the diff.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest
import yaml

from posttrain.migrate import convert
from posttrain.recipe.load import load_recipe, read_yaml, to_yaml
from posttrain.recipe.tasks import load_task_recipe

HERE = Path(__file__).parent
CORPUS = sorted((HERE / "fairl_corpus").rglob("*.yaml"))
GOLDEN = HERE / "golden"
# Recipes whose conversion must stop: exactly the keys it must name.
BLOCKED = {
    "training/ppo_lora.yaml": ["training.algorithm"],
}


def _name(path: Path) -> str:
    return str(path.relative_to(HERE / "fairl_corpus"))


def golden_text(path: Path) -> str:
    conv = convert(read_yaml(path), str(path))
    lines = [f"# {conv.kind}: FAI-RL key | posttrain key | change of meaning (why)"]
    lines += [" | ".join(row.cells()) for row in conv.rows]
    lines.append("--- cannot convert ---" if conv.blocking else "--- converted recipe ---")
    lines.append(", ".join(r.key for r in conv.blocking) if conv.blocking else to_yaml(conv.recipe).rstrip())
    return "\n".join(lines) + "\n"


def test_the_corpus_covers_every_algorithm_and_both_task_kinds():
    algorithms = {read_yaml(p).get("training", {}).get("algorithm") for p in CORPUS}
    assert {"sft", "cpt", "dpo", "grpo", "gspo", "ppo", "sft_vlm"} <= algorithms
    assert any("inference" in read_yaml(p) for p in CORPUS) and any("evaluation" in read_yaml(p) for p in CORPUS)


def _with_distributed(monkeypatch, present: bool) -> None:
    """Pretend the build has (or lacks) `training.distributed`, which changes how DeepSpeed configs convert."""
    from posttrain.migrate import fairl_training

    real = fairl_training.schema_has
    monkeypatch.setattr(fairl_training, "schema_has", lambda p: present if p == "training.distributed" else real(p))


@pytest.mark.parametrize("path", CORPUS, ids=_name)
def test_conversion_table_matches_golden(path, monkeypatch):
    """One golden file per recipe; a `.distributed` variant where a build with training.distributed converts it
    differently (the variant is the expectation on such a build, so the test follows the build it runs on)."""
    from posttrain.migrate.fairl_training import schema_has

    stem = _name(path).replace("/", "__").removesuffix(".yaml")
    build_has = schema_has("training.distributed")
    if os.environ.get("UPDATE_GOLDEN"):
        texts = {}
        for present in (False, True):
            _with_distributed(monkeypatch, present)
            texts[present] = golden_text(path)
        monkeypatch.undo()
        (GOLDEN / f"{stem}.txt").write_text(texts[False])
        variant = GOLDEN / f"{stem}.distributed.txt"
        if texts[True] != texts[False]:
            variant.write_text(texts[True])
        elif variant.exists():
            variant.unlink()
    golden = GOLDEN / f"{stem}.distributed.txt"
    if not (build_has and golden.is_file()):
        golden = GOLDEN / f"{stem}.txt"
    assert golden.is_file(), f"no golden file {golden}; run with UPDATE_GOLDEN=1 and review it"
    assert golden_text(path) == golden.read_text()


@pytest.mark.parametrize("path", CORPUS, ids=_name)
def test_converted_recipe_validates_or_every_unmappable_key_is_named(path):
    conv = convert(read_yaml(path), str(path))
    name = _name(path)
    if name in BLOCKED:
        assert sorted(r.key for r in conv.blocking) == sorted(BLOCKED[name])
        assert all(r.note for r in conv.blocking)
        return
    assert not conv.blocking, [r.key for r in conv.blocking]
    raw = yaml.safe_load(to_yaml(conv.recipe))  # what the written file holds
    if conv.kind == "training":
        load_recipe(None, raw=raw)
    else:
        load_task_recipe(None, raw=raw)


def test_no_key_is_dropped_silently():
    """Every key of every corpus recipe appears in its table (as itself or as its section)."""
    for path in CORPUS:
        conv = convert(read_yaml(path), str(path))
        keys = {r.key.split(" ")[0] for r in conv.rows}

        def walk(node, prefix):
            for key, value in node.items():
                here = f"{prefix}.{key}" if prefix else key
                if isinstance(value, dict) and here not in keys and here not in ("wandb", "s3", "reward_api", "local_reward_function"):
                    yield from walk(value, here)
                elif here == "data.datasets":
                    for i, item in enumerate(value):
                        yield from walk(item, f"data.datasets[{i}]")
                else:
                    yield here

        raw = read_yaml(path)
        for key in walk(raw, ""):
            section = key.split(".")[0]
            assert key in keys or section in keys or any(k.startswith(section + ".") for k in keys if section in ("wandb", "s3", "reward_api")), f"{path.name}: {key} not in the table"


def test_fairl_defects_are_flagged_with_what_each_side_runs():
    dpo = convert(read_yaml(HERE / "fairl_corpus/training/dpo_lora_two_sets.yaml"))
    beta = next(r for r in dpo.rows if r.key == "training.beta")
    assert "FAI-RL DEFECT" in beta.note and "0.1" in beta.note and "0.3" in beta.note
    assert dpo.recipe["training"]["beta"] == 0.3

    gspo = convert(read_yaml(HERE / "fairl_corpus/training/gspo_full.yaml"))
    spg = next(r for r in gspo.rows if r.key.startswith("training.steps_per_generation"))
    assert "TRL rejects it" in spg.note and "generation batch 1 x 4 = 4" in spg.note
    assert gspo.recipe["training"]["steps_per_generation"] == 64  # 4 x gradient_accumulation_steps 16
    assert gspo.recipe["training"]["loss_type"] == "dapo"  # what FAI-RL left TRL to use

    grpo = convert(read_yaml(HERE / "fairl_corpus/training/grpo_lora_reward_api.yaml"))
    assert grpo.recipe["training"]["beta"] == 0.0  # FAI-RL ran TRL's 0.0; posttrain's default would be 0.04
    assert grpo.recipe["training"]["max_completion_length"] == 768 - 256
    prompt = next(r for r in grpo.rows if r.key == "data.max_prompt_length")
    assert "never limited prompts" in prompt.note


def test_disabled_sections_are_dropped_and_secrets_are_not_copied():
    sft = convert(read_yaml(HERE / "fairl_corpus/training/sft_lora_moderation.yaml"))
    assert "tracking" not in sft.recipe and "s3" not in sft.recipe  # wandb.enabled: false
    dpo = convert(read_yaml(HERE / "fairl_corpus/training/dpo_lora_two_sets.yaml"))
    assert dpo.recipe["tracking"] == {"provider": "wandb", "project": "prefs", "run_name": "llama-dpo", "tags": ["DPO"]}
    assert "SECRET" not in to_yaml(dpo.recipe) + "".join(map(str, dpo.rows))
    grpo = convert(read_yaml(HERE / "fairl_corpus/training/grpo_lora_reward_api.yaml"))
    assert grpo.recipe["training"]["rewards"][0]["api_key_env"] == "REWARD_API_KEY"
    assert "SECRET" not in to_yaml(grpo.recipe) + "".join(map(str, grpo.rows))
    api = convert(read_yaml(HERE / "fairl_corpus/inference/api_split_chat.yaml"))
    assert "SECRET" not in to_yaml(api.recipe) + "".join(map(str, api.rows))


def test_templates_become_per_dataset_templates():
    flat = convert(read_yaml(HERE / "fairl_corpus/training/sft_lora_moderation.yaml"))
    assert "{user_turn}" in flat.recipe["data"]["datasets"][0]["text_template"]
    split = convert(read_yaml(HERE / "fairl_corpus/training/sft_split_chat.yaml"))
    spec = split.recipe["data"]["datasets"][0]
    assert (spec["prompt_template"], spec["completion_template"]) == ("Ticket: {ticket}", "{reply}")
    assert spec["system_template"] == "You answer support tickets politely."


def test_cli_writes_the_recipe_prints_the_table_and_refuses_what_it_cannot_convert(cli, tmp_path, repo):
    out = tmp_path / "sft.yaml"
    ok = cli("convert", HERE / "fairl_corpus/training/sft_lora_moderation.yaml", "-o", out)
    assert ok.returncode == 0, ok.stderr
    assert "FAI-RL key" in ok.stderr and "data.datasets[0].text_template" in ok.stderr
    assert out.read_text().startswith("# Converted from the FAI-RL recipe") and cli("validate", out, "--schema-only").returncode == 0
    # quiet: no table printed, and the written recipe still holds it (nothing says a table was printed)
    quiet = cli("convert", HERE / "fairl_corpus/training/sft_lora_moderation.yaml", "-q", "-o", tmp_path / "quiet.yaml")
    assert quiet.returncode == 0 and "FAI-RL key" not in quiet.stderr
    written = (tmp_path / "quiet.yaml").read_text()
    assert written == out.read_text() and "printed" not in written
    comment = "".join(line for line in written.splitlines(keepends=True) if line.startswith("#"))
    assert "#   FAI-RL key" in comment and "data.datasets[0].text_template" in comment
    blocked = cli("convert", HERE / "fairl_corpus/training/ppo_lora.yaml", "-o", tmp_path / "ppo.yaml")
    assert blocked.returncode == 2 and "training.algorithm: posttrain has no PPO" in blocked.stderr
    assert "training.algorithm=rloo (or grpo) with training.rewards: [{model: <the reward model's folder>}]" in blocked.stderr
    assert not (tmp_path / "ppo.yaml").exists() and "Traceback" not in blocked.stderr
    already = cli("convert", repo / "recipes/sft/tiny-cpu.yaml")
    assert already.returncode == 2 and "already a posttrain recipe" in already.stderr


def test_grpo_without_reward_api_gets_fairl_builtin_rewards_and_templates():
    """FAI-RL's GRPO/GSPO without a reward_api trains on its four built-in functions and its math templates:
    posttrain's equivalents, each change stated; the constant-0 placeholder is not carried over."""
    grpo = convert(read_yaml(HERE / "fairl_corpus/training/grpo_builtin_rewards.yaml"))
    assert not grpo.blocking
    assert grpo.recipe["training"]["rewards"] == [{"name": "text_match", "weight": 2.0}, {"name": "format", "weight": 0.5},
                                                  {"name": "numeric_answer", "weight": 0.5}]
    notes = {r.key: r.note for r in grpo.rows}
    assert "raw string" in notes["(built in) exact_match_reward_func"]
    assert "unbounded below" in notes["(built in) structured_xml_reward_func (count_xml)"]
    assert "isdigit" in notes["(built in) digit_reward_func"]
    assert "returns 0.0 for every completion" in notes["(built in) custom_reward_func"]
    data = grpo.recipe["data"]
    assert data["datasets"][0]["template"] == "gsm8k" and "template" not in data["datasets"][1]
    assert "is not supported" in notes["data.datasets[1].name (template)"]  # FAI-RL refused that dataset
    assert data["few_shot"] is True and "<answer>" in data["system_prompt"] and "use_chat_template" not in data
    gspo = convert(read_yaml(HERE / "fairl_corpus/training/gspo_builtin_openmath.yaml"))
    assert gspo.recipe["data"]["datasets"][0]["template"] == "openmathinstruct2"
    assert [r["name"] for r in gspo.recipe["training"]["rewards"]] == ["text_match", "format", "numeric_answer"]
    # a recipe with a reward keeps only it
    assert [r["name"] for r in convert(read_yaml(HERE / "fairl_corpus/training/grpo_lora_reward_api.yaml")).recipe["training"]["rewards"]] == ["http"]


def test_builtin_rewards_score_fairl_cases_as_the_table_says():
    """The table's claims, checked on posttrain's rewards: numbers compare as numbers, the format reward is bounded."""
    from posttrain.rewards.builtin import get_reward

    text_match, fmt, numeric = get_reward("text_match"), get_reward("format"), get_reward("numeric_answer")
    assert text_match(["<think>x</think><answer>1,400</answer>"], answer=["1400"]) == [1.0]  # FAI-RL's raw string: 0
    assert min(fmt(["<think>x</think><answer>4</answer>" + "z" * 2000])) >= 0.5  # FAI-RL's count_xml: 0.5 - 2.0 = -1.5
    assert numeric(["<answer>-3</answer>", "<answer>2.5</answer>"]) == [1.0, 1.0]  # FAI-RL's isdigit: 0, 0


def test_sft_vlm_text_templates_convert_with_completion_only_loss_and_fairl_whole_text_by_a_key():
    flat = convert(read_yaml(HERE / "fairl_corpus/training/sft_vlm_flat_video.yaml"))
    assert not flat.blocking
    spec = flat.recipe["data"]["datasets"][0]
    assert spec["prompt_template"] == ("You are a helpful multimodal assistant. Answer the user's question based on the video.\n"
                                       "Question: {question}\nResponse:")
    assert spec["completion_template"] == "{response}" and spec["video_columns"] == ["clip"]
    row = next(r for r in flat.rows if r.key == "data.datasets[0].dataset_columns")
    assert "MEANING CHANGE" in row.note and "text_template" in row.note  # how to train on the whole text, as FAI-RL did
    assert flat.recipe["data"]["media_timeout"] == 45 and flat.recipe["data"]["media_retries"] == 4
    split = convert(read_yaml(HERE / "fairl_corpus/training/sft_vlm_split_system.yaml"))
    spec = split.recipe["data"]["datasets"][0]
    assert (spec["system_template"], spec["prompt_template"], spec["completion_template"]) == (
        "You are a helpful multimodal assistant. Answer from the image.", "{question}", "{answer}")
    # a flat template that does not end with the response column stays one text, trained whole (FAI-RL's behaviour)
    raw = read_yaml(HERE / "fairl_corpus/training/sft_vlm_flat_video.yaml")
    raw["data"]["system_prompt"] = "Response: {response}\nQuestion: {question}"
    assert convert(raw).recipe["data"]["datasets"][0] == {"name": "data/vlm/clips.csv", "video_columns": ["clip"],
                                                          "text_template": "Response: {response}\nQuestion: {question}"}
