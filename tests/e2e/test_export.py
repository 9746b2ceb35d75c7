"""posttrain export: a 2-step LoRA run merged into a standalone folder that transformers loads alone, its parity
table, the dtype, and the refusals (unfinished run, no model, a non-empty --out)."""

import json
import shutil

import pytest

from posttrain.cli import main

pytestmark = pytest.mark.e2e


@pytest.fixture(scope="module")
def lora_run(cli, repo, tmp_path_factory):
    out = tmp_path_factory.mktemp("export") / "sft-lora"
    result = cli("train", "--recipe", "recipes/sft/tiny-cpu.yaml", f"training.output_dir={out}", "model.use_lora=true",
                 "training.max_steps=2", "training.save_steps=2", "training.learning_rate=0.05",
                 f"data.datasets[0].name={repo / 'examples/data/sft.jsonl'}")
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    return out


def test_a_lora_run_exports_merged_and_matches_the_adapter_on_its_base(cli, lora_run, tmp_path):
    import torch
    from peft import PeftModel
    from transformers import AutoModelForCausalLM, AutoTokenizer

    out = tmp_path / "exported"
    result = cli("export", str(lora_run), "--out", str(out))
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    assert "| prompt | greedy tokens | max abs diff (next-token log-prob) |" in result.stdout and "parity PASS" in result.stdout
    names = {p.name for p in out.iterdir()}
    assert {"model.safetensors", "config.json", "generation_config.json", "tokenizer.json", "chat_template.jinja"} <= names
    assert "adapter_config.json" not in names and [p.name for p in out.parent.iterdir()] == ["exported"]  # no temporary folder left
    assert (out / "model.safetensors").stat().st_mode & 0o777 != 0o600  # readable like the other files
    report = json.loads((out / "export.json").read_text())
    assert report["kind"] == "adapter" and report["parity"]["ok"] and report["parity"]["max_abs_diff"] <= 1e-4

    # checked again here, independently: transformers alone vs PEFT's adapter on the base, and the merge changed the base
    exported = AutoModelForCausalLM.from_pretrained(out)
    base = AutoModelForCausalLM.from_pretrained(report["base"])
    trained = PeftModel.from_pretrained(AutoModelForCausalLM.from_pretrained(report["base"]), str(lora_run))
    tokenizer = AutoTokenizer.from_pretrained(out)
    ids = tokenizer("Ken has 142 cards and gets 271 more.", return_tensors="pt").input_ids
    with torch.no_grad():
        a, b, c = exported(ids).logits, trained(ids).logits, base(ids).logits
    assert (a - b).abs().max() < 1e-4 and (a - c).abs().max() > 1e-2  # the adapter's model, not the base's
    assert tokenizer.chat_template == AutoTokenizer.from_pretrained(lora_run).chat_template


def test_a_checkpoint_in_bf16_over_a_forced_out_and_a_failed_parity_exit_1_keeping_the_folder(cli, lora_run, tmp_path):
    out = tmp_path / "bf16"
    out.mkdir()
    (out / "old.txt").write_text("replaced")
    result = cli("export", str(lora_run / "checkpoint-2"), "--out", str(out), "--dtype", "bf16", "--tolerance", "0", "--force",
                 "--max-new-tokens", "4")
    assert result.returncode == 1, result.stdout[-3000:] + result.stderr[-3000:]
    assert "parity FAIL" in result.stdout and "(tolerance 0 for bf16)" in result.stdout and "kept for inspection" in result.stdout
    assert json.loads((out / "config.json").read_text())["dtype"] == "bfloat16" and not (out / "old.txt").exists()
    assert (out / "model.safetensors").stat().st_size < 2_500_000  # about half the float32 4 MB


def test_refusals_leave_nothing_behind(lora_run, tmp_path, capsys):
    unfinished = tmp_path / "unfinished"
    shutil.copytree(lora_run, unfinished)
    (unfinished / "run_summary.json").unlink()
    taken = tmp_path / "taken"
    taken.mkdir()
    (taken / "keep.txt").write_text("mine")
    (tmp_path / "empty").mkdir()
    cases = [
        ([str(unfinished)], "has not finished (interrupted, resumable from checkpoint-2)", f"posttrain export {unfinished / 'checkpoint-2'} --out DIR"),
        ([str(tmp_path / "empty")], "holds neither a model (config.json) nor an adapter", "checkpoint-N"),
        ([str(tmp_path / "nope")], "is not a folder", "output_dir"),
        ([str(lora_run), "--out", str(taken)], "is not empty", "--force"),
        ([str(lora_run), "--out", str(lora_run / "sub")], "is inside the run being exported", "outside"),
    ]
    for argv, what, fix in cases:
        if "--out" not in argv:
            argv = [*argv, "--out", str(tmp_path / "out")]
        assert main(["export", *argv]) == 2, argv
        err = capsys.readouterr().err
        assert what in err and fix in err, err
    assert not (tmp_path / "out").exists() and (taken / "keep.txt").read_text() == "mine" and [p.name for p in taken.iterdir()] == ["keep.txt"]
