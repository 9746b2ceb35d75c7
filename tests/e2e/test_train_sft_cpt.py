"""The real CLI trains CPT and SFT (full and LoRA) on a tiny local model; we check what it wrote."""

import json
from pathlib import Path

import pytest
import yaml

from posttrain.models.checkpoint_report import inspect_checkpoint, read_header
from posttrain.models.loading import DeviceInfo

pytestmark = pytest.mark.e2e


def train(cli, tmp_path: Path, recipe: str, *overrides: str) -> Path:
    return train_with_log(cli, tmp_path, recipe, *overrides)[0]


def train_with_log(cli, tmp_path: Path, recipe: str, *overrides: str) -> tuple[Path, str]:
    out = tmp_path / "run"
    result = cli("train", "--recipe", recipe, f"training.output_dir={out}", *overrides)
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    assert f"done: final model in {out}" in result.stdout
    return out, result.stdout


def metrics(out: Path) -> list[dict]:
    return [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()]


def losses(out: Path) -> list[float]:
    return [float(r["loss"]) for r in metrics(out) if "loss" in r]


@pytest.fixture(scope="module")
def memorise_file(tmp_path_factory, data_dir) -> Path:
    """Eight prompt/completion pairs: a tiny model can memorise them in a few dozen steps."""
    rows = [json.loads(line) for line in (data_dir / "sft.jsonl").read_text().splitlines()[:8]]
    path = tmp_path_factory.mktemp("mem") / "memorise.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


def test_sft_full_learns_and_saves_a_loadable_model(cli, tmp_path, memorise_file, tiny_dir):
    out = train(cli, tmp_path, "recipes/sft/tiny-cpu.yaml", f"data.datasets[0].name={memorise_file}",
                "training.max_steps=40", "training.per_device_train_batch_size=8", "training.logging_steps=1",
                "training.learning_rate=1e-2")
    curve = losses(out)
    assert len(curve) == 40 and all(map(lambda x: x == x, curve))  # finite, one per step
    assert sum(curve[-5:]) / 5 < 0.5 * sum(curve[:5]) / 5, curve

    resolved = yaml.safe_load((out / "resolved_recipe.yaml").read_text())
    assert resolved["training"]["max_steps"] == 40 and resolved["data"]["datasets"][0]["name"] == str(memorise_file)
    assert "# trl: " in (out / "resolved_recipe.yaml").read_text()
    trl_config = json.loads((out / "trl_config.json").read_text())
    assert trl_config["learning_rate"] == 1e-2
    assert trl_config["bf16"] is DeviceInfo.detect().bf16  # the precision this machine computes natively

    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    model = AutoModelForCausalLM.from_pretrained(out)
    base = AutoModelForCausalLM.from_pretrained(tiny_dir)
    assert not torch.equal(model.model.embed_tokens.weight, base.model.embed_tokens.weight)
    tok = AutoTokenizer.from_pretrained(out)
    prompt = json.loads(memorise_file.read_text().splitlines()[0])
    ids = tok(prompt["prompt"], return_tensors="pt").input_ids
    text = tok.decode(model.generate(ids, max_new_tokens=20, do_sample=False)[0, ids.shape[1]:], skip_special_tokens=True)
    assert any(ch.isdigit() for ch in text), text  # it learned that answers are arithmetic


def test_sft_lora_checkpoint_holds_only_the_adapter(cli, tmp_path, data_dir, tiny_dir):
    out = train(cli, tmp_path, "recipes/sft/tiny-cpu.yaml", f"data.datasets[0].name={data_dir / 'sft.jsonl'}",
                "model.use_lora=true", "model.lora_r=4", "training.max_steps=4", "training.save_steps=2")
    from peft import LoraConfig, PeftModel, get_peft_model
    from transformers import AutoModelForCausalLM

    # The LoRA parameters' own bytes, computed independently of the run.
    fresh = get_peft_model(AutoModelForCausalLM.from_pretrained(tiny_dir), LoraConfig(r=4, target_modules="all-linear", task_type="CAUSAL_LM"))
    lora_bytes = sum(p.numel() * p.element_size() for n, p in fresh.named_parameters() if "lora_" in n)

    for folder in (out, out / "checkpoint-2", out / "checkpoint-4"):
        header = read_header(folder / "adapter_model.safetensors")
        assert all("lora_" in name for name in header), [n for n in header if "lora_" not in n]
        report = inspect_checkpoint(folder)
        assert report.total_bytes == lora_bytes and not report.warnings
    assert (out / "adapter_model.safetensors").stat().st_size < lora_bytes + 20_000  # + header only

    model = PeftModel.from_pretrained(AutoModelForCausalLM.from_pretrained(tiny_dir), out)
    assert model.generate(input_ids=__import__("torch").tensor([[5, 6, 7]]), max_new_tokens=3).shape[1] >= 4
    assert cli("inspect", out, "--strict").returncode == 0


@pytest.mark.parametrize("lora", [False, True], ids=["full", "lora"])
def test_cpt_trains_on_fixed_length_blocks(cli, tmp_path, data_dir, lora):
    out = train(cli, tmp_path, "recipes/cpt/tiny-cpu.yaml", f"data.datasets[0].name={data_dir / 'text.jsonl'}",
                f"model.use_lora={str(lora).lower()}", "training.max_steps=6", "training.max_length=32",
                "training.per_device_train_batch_size=4", "training.logging_steps=1")
    records = [r for r in metrics(out) if "num_tokens" in r]
    # 'wrapped' packing: every step sees exactly batch x block tokens, no padding.
    assert [r["num_tokens"] for r in records] == [4 * 32 * (i + 1) for i in range(6)]
    assert (out / ("adapter_model.safetensors" if lora else "model.safetensors")).is_file()


def test_sft_on_chats_trains_assistant_turns_only(cli, tmp_path, data_dir):
    out = train(cli, tmp_path, "recipes/sft/tiny-chat-cpu.yaml", f"data.datasets[0].name={data_dir / 'messages.jsonl'}",
                "training.max_steps=3")
    assert json.loads((out / "trl_config.json").read_text())["assistant_only_loss"] is True
    summary = json.loads((out / "run_summary.json").read_text())
    assert summary["global_step"] == 3 and "messages" in summary["data"][0]


def first_losses(out: Path, n: int = 2) -> list[float]:
    return losses(out)[:n]


def test_one_seed_gives_the_same_run_and_another_seed_does_not(cli, tmp_path, data_dir):
    args = ["recipes/sft/tiny-cpu.yaml", f"data.datasets[0].name={data_dir / 'sft.jsonl'}", "model.use_lora=true",
            "training.max_steps=2", "training.logging_steps=1"]
    a = train(cli, tmp_path / "a", *args, "training.seed=7")
    b = train(cli, tmp_path / "b", *args, "training.seed=7")
    c = train(cli, tmp_path / "c", *args, "training.seed=8")
    assert first_losses(a) == first_losses(b)
    assert first_losses(a)[0] != first_losses(c)[0]  # another data order


def test_weighted_mixture_draws_in_proportion(data_dir, tmp_path):
    from posttrain.data.formats import prepare_training_data
    from posttrain.recipe.schema import DataSection

    small = tmp_path / "small.jsonl"
    small.write_text("".join(line + "\n" for line in (data_dir / "sft.jsonl").read_text().splitlines()[:8]))
    data = DataSection(datasets=[{"name": str(data_dir / "sft.jsonl"), "weight": 1.0}, {"name": str(small), "weight": 3.0}])
    train, fmt, reports, _ = prepare_training_data(data, None, seed=0)
    small_prompts = {__import__("json").loads(l)["prompt"] for l in small.read_text().splitlines()}
    share = sum(p in small_prompts for p in train["prompt"]) / len(train)
    assert 0.6 < share < 0.9  # ~3/4 of draws come from the weight-3 dataset, repeating its 8 rows
