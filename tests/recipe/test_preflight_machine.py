"""Preflight: what a valid recipe needs from this machine and its files (no torch imported)."""

import json

import pytest

from posttrain.cli import main


@pytest.fixture
def data(tmp_path):
    path = tmp_path / "d.jsonl"
    path.write_text(json.dumps({"prompt": "1+1", "completion": "2"}) + "\n")
    return path


@pytest.mark.parametrize("overrides, key", [
    (["data.datasets[0].split=test[:100]"], "data.datasets[0].split: 'test[:100]': a local file has a single split"),
    (["data.datasets[0].split=validation"], "data.datasets[0].split"),
    (["data.datasets[0].subset=main"], "data.datasets[0].subset: 'main': a local file has no subsets"),
])
def test_local_file_split_and_subset(repo, monkeypatch, data, overrides, key, capsys):
    monkeypatch.chdir(repo)
    assert main(["validate", "recipes/sft/tiny-cpu.yaml", f"data.datasets[0].name={data}", *overrides]) == 2
    assert key in capsys.readouterr().err


def test_local_file_slices_of_train_are_fine(repo, monkeypatch, data):
    monkeypatch.chdir(repo)
    assert main(["validate", "recipes/sft/tiny-cpu.yaml", f"data.datasets[0].name={data}", "data.datasets[0].split=train[:1]"]) == 0


def test_the_loader_refuses_a_test_split_of_a_local_file_too(data):
    """Before: load_split replaced 'test[:100]' by 'train' and trained on the whole file."""
    from posttrain.data.sources import load_split
    from posttrain.errors import UserError
    from posttrain.recipe.schema import DatasetSpec

    with pytest.raises(UserError, match=r"data.datasets\[0\].split: 'test\[:100\]'"):
        load_split(DatasetSpec(name=str(data), split="test[:100]"), "data.datasets[0]")
    assert len(load_split(DatasetSpec(name=str(data), split="train[:1]"), "data.datasets[0]")) == 1


def test_bf16_without_a_bf16_gpu_or_cpu_is_caught_by_validate(repo, monkeypatch, capsys):
    """(The malformed-input sweep cannot hold this case: its subprocess would see this machine's CPU.)"""
    import posttrain.models.loading as loading

    monkeypatch.chdir(repo)
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "")  # no GPU, whatever this machine has
    monkeypatch.setattr(loading, "cpu_bf16_flag", lambda: None)  # nor a CPU with bf16 instructions
    assert main(["validate", "recipes/sft/tiny-cpu.yaml", "training.bf16=true"]) == 2
    err = capsys.readouterr().err
    assert "training.bf16: bf16 needs a CUDA GPU" in err and "avx512_bf16" in err and "6x slower" in err
    assert main(["validate", "recipes/sft/tiny-cpu.yaml", "training.bf16=true", "training.use_cpu=true"]) == 0
    assert main(["validate", "--schema-only", "recipes/sft/tiny-cpu.yaml", "training.bf16=true"]) == 0  # for another machine
    monkeypatch.setattr(loading, "cpu_bf16_flag", lambda: "amx_bf16")  # a CPU that computes bf16 natively
    assert main(["validate", "recipes/sft/tiny-cpu.yaml", "training.bf16=true"]) == 0


def test_schema_and_file_problems_in_one_pass(repo, monkeypatch, capsys):
    """The shipped GSPO recipe pointed at a missing file with a bad batch: before, the schema error came
    first and the missing data file and model folder only in a second run."""
    monkeypatch.chdir(repo)
    code = main(["validate", "recipes/gspo/qwen2.5-3b-openmath-lora.yaml", "data.datasets[0].name=missing.jsonl",
                 "training.per_device_train_batch_size=0", "model.base_model_name=./no-model/"])
    err = capsys.readouterr().err
    assert code == 2 and "4 problems" in err
    for key in ("training.per_device_train_batch_size", "model.base_model_name", "data.datasets[0].name", "data.datasets[0].split"):
        assert key in err, err
    # --schema-only leaves the machine out, also when the schema fails
    assert main(["validate", "--schema-only", "recipes/gspo/qwen2.5-3b-openmath-lora.yaml", "data.datasets[0].name=missing.jsonl",
                 "training.per_device_train_batch_size=0"]) == 2
    assert "missing.jsonl" not in capsys.readouterr().err
