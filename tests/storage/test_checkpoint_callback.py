"""`S3CheckpointUploader` in a real `transformers.Trainer` run, with uploads slowed down on purpose.

save_steps=2 with save_total_limit=1: at step 4 the Trainer deletes checkpoint-2 (rotation runs
inside `_save_checkpoint`, before `on_save`) while checkpoint-2 is still uploading through a slow
proxy. The test checks that the race really happened and that every checkpoint still arrived
complete, then that the final model and a resume-from-S3 download are right.
"""

from __future__ import annotations

import json
import threading
from pathlib import Path
from types import SimpleNamespace

import pytest

from posttrain.storage.background import STAGING_DIR, BackgroundUploader
from posttrain.storage.callback import S3CheckpointUploader, upload_final
from posttrain.storage.location import S3Location
from posttrain.storage.s3 import MANIFEST_NAME, download_dir, latest_checkpoint, read_manifest


def tiny_trainer(model_dir: Path, output_dir: Path, callbacks: list, **overrides):
    import torch
    from transformers import AutoModelForCausalLM, Trainer, TrainingArguments

    torch.manual_seed(0)
    model = AutoModelForCausalLM.from_pretrained(model_dir)
    rows = [{"input_ids": torch.arange(i, i + 16) % 1000, "labels": torch.arange(i, i + 16) % 1000} for i in range(32)]
    args = dict(output_dir=str(output_dir), max_steps=6, save_steps=2, save_total_limit=1, save_strategy="steps",
                per_device_train_batch_size=4, learning_rate=1e-3, logging_steps=100, report_to="none",
                use_cpu=True, disable_tqdm=True, dataloader_num_workers=0, seed=0)
    args.update(overrides)
    return Trainer(model=model, args=TrainingArguments(**args), train_dataset=rows, callbacks=callbacks)


class RaceWitness:
    """Runs after the uploader's on_save: records what rotation did to the previous checkpoint, then
    lets that checkpoint's upload proceed (the proxy holds it until then, so the race is certain)."""

    def __init__(self, uploader: BackgroundUploader, gates: dict[int, threading.Event]):
        self.uploader = uploader
        self.gates = gates
        self.seen: dict[int, dict] = {}

    def __getattr__(self, name):  # every other TrainerCallback event: do nothing
        if name.startswith("on_"):
            return lambda *a, **k: None
        raise AttributeError(name)

    def on_save(self, args, state, control, **kwargs):
        step = state.global_step
        older = Path(args.output_dir) / f"checkpoint-{step - 2}"
        self.seen[step] = {"exists": older.exists(), "uploading": self.uploader.in_flight(older)}
        if step - 2 in self.gates:
            self.gates[step - 2].set()


def listing(s3, bucket: str, prefix: str) -> dict[str, int]:
    pages = s3.get_paginator("list_objects_v2").paginate(Bucket=bucket, Prefix=prefix)
    return {o["Key"][len(prefix):]: o["Size"] for page in pages for o in page.get("Contents", [])}


def test_checkpoints_survive_rotation_while_uploading(tiny_dir, tmp_path, s3, bucket, proxy, via_proxy):
    run = S3Location.parse(f"s3://{bucket}/runs/sft-1")
    out = tmp_path / "out"
    # The upload of checkpoint-N is held at the proxy until the Trainer has saved checkpoint-N+2
    # (and so rotated checkpoint-N away): the slowest possible link, without sleeping.
    gates = {2: threading.Event(), 4: threading.Event()}

    def rule(request):
        for step, gate in gates.items():
            if request.method == "PUT" and f"/checkpoint-{step}/" in request.key_path:
                return ("gate", gate)
        return None

    proxy.rule = rule
    uploader = BackgroundUploader(via_proxy, backoff=0.01)
    witness = RaceWitness(uploader, gates)
    trainer = tiny_trainer(tiny_dir, out, [S3CheckpointUploader(uploader, run), witness])
    trainer.train()
    trainer.save_model(str(out))
    summary = upload_final(uploader, out, run)
    uploader.close()

    # The race was real: at steps 4 and 6, rotation had already deleted the previous checkpoint
    # while its upload was still running (held at the proxy).
    assert witness.seen[4] == {"exists": False, "uploading": True}
    assert witness.seen[6] == {"exists": False, "uploading": True}
    assert sorted(p.name for p in out.glob("checkpoint-*")) == ["checkpoint-6"]

    # ... and yet every checkpoint arrived complete: same files as the one kept locally, sizes as
    # in its manifest, and its own step in trainer_state.json.
    local_names = {p.relative_to(out / "checkpoint-6").as_posix() for p in (out / "checkpoint-6").rglob("*")
                   if p.is_file()}
    assert {"model.safetensors", "optimizer.pt", "trainer_state.json", "config.json"} <= local_names
    for step in (2, 4, 6):
        remote = listing(s3, bucket, f"runs/sft-1/checkpoint-{step}/")
        manifest = read_manifest(s3, run.child(f"checkpoint-{step}"))
        assert set(manifest["files"]) == local_names
        assert {k: v for k, v in remote.items() if k != MANIFEST_NAME} == manifest["files"]
        state = json.loads(s3.get_object(Bucket=bucket, Key=f"runs/sft-1/checkpoint-{step}/trainer_state.json")
                           ["Body"].read())
        assert state["global_step"] == step

    final = listing(s3, bucket, "runs/sft-1/final/")
    assert {"model.safetensors", "config.json", MANIFEST_NAME} <= set(final)
    assert not any(k.startswith(("checkpoint-", STAGING_DIR)) for k in final)
    assert final["model.safetensors"] == (out / "model.safetensors").stat().st_size
    assert [Path(r.uri).name for r in summary.reports] == ["checkpoint-2", "checkpoint-4", "checkpoint-6", "final"]
    assert summary.files == sum(r.files for r in summary.reports) and summary.bytes > 3 * 1_000_000
    assert "4 folders" in summary.render()
    assert not (out / STAGING_DIR).exists()  # every snapshot cleaned up after its verified upload

    # Resume after a crash on another machine: the newest complete checkpoint, byte-identical.
    latest = latest_checkpoint(s3, run)
    assert latest == run.child("checkpoint-6")
    restored = download_dir(s3, latest.bucket, latest.prefix, tmp_path / "restored" / "checkpoint-6")
    for name in local_names:
        assert (restored / name).read_bytes() == (out / "checkpoint-6" / name).read_bytes(), name


def test_delete_local_after_upload(tiny_dir, tmp_path, s3, bucket, via_proxy):
    run = S3Location.parse(f"s3://{bucket}/runs/lean")
    out = tmp_path / "out"
    with BackgroundUploader(via_proxy, backoff=0.01) as uploader:
        trainer = tiny_trainer(tiny_dir, out, [S3CheckpointUploader(uploader, run, delete_local_after_upload=True)],
                               max_steps=4, save_total_limit=None)
        trainer.train()
        reports = uploader.wait()
    assert [Path(r.uri).name for r in reports] == ["checkpoint-2", "checkpoint-4"]
    assert list(out.glob("checkpoint-*")) == []  # deleted, each only after its verified upload
    assert latest_checkpoint(s3, run) == run.child("checkpoint-4")


def test_callback_options(tmp_path, s3):
    uploader = BackgroundUploader(s3)
    off = S3CheckpointUploader(uploader, "s3://bkt/run", upload_checkpoints=False)
    (tmp_path / "checkpoint-2").mkdir()
    args = SimpleNamespace(output_dir=str(tmp_path), load_best_model_at_end=True)
    off.on_save(args, SimpleNamespace(global_step=2, is_world_process_zero=True), None)
    assert not uploader.in_flight(tmp_path / "checkpoint-2")

    other_rank = S3CheckpointUploader(uploader, "s3://bkt/run")
    other_rank.on_save(args, SimpleNamespace(global_step=2, is_world_process_zero=False), None)
    assert not uploader.in_flight(tmp_path / "checkpoint-2")

    lean = S3CheckpointUploader(uploader, "s3://bkt/run", delete_local_after_upload=True)
    with pytest.raises(ValueError, match="load_best_model_at_end"):
        lean.on_train_begin(args, None, None)
    uploader.close()
