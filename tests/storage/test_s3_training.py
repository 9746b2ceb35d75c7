"""posttrain train with an s3 section, against a real S3-compatible server on 127.0.0.1:
checkpoints and the final model uploaded byte-identical, s3:// model and data sources, no secrets."""

import json
from pathlib import Path

import pytest

pytestmark = pytest.mark.e2e


def keys(s3, bucket, prefix=""):
    pages = s3.get_paginator("list_objects_v2").paginate(Bucket=bucket, Prefix=prefix)
    return {obj["Key"] for page in pages for obj in page.get("Contents", [])}


def test_training_uploads_checkpoints_and_final_model(cli, moto_server, s3, bucket, tmp_path, data_dir):
    endpoint = f"http://{moto_server[0]}:{moto_server[1]}"
    out = tmp_path / "run"
    result = cli("train", "--recipe", "recipes/sft/tiny-cpu.yaml", f"training.output_dir={out}",
                 f"data.datasets[0].name={data_dir / 'sft.jsonl'}", "model.use_lora=true", "training.max_steps=4",
                 "training.save_steps=2", "training.save_total_limit=1",
                 f"s3.bucket={bucket}", "s3.prefix=runs/tiny", f"s3.endpoint_url={endpoint}", "s3.region=us-east-1")
    assert result.returncode == 0, result.stderr[-3000:]
    assert "uploaded" in result.stdout and "to S3" in result.stdout

    stored = keys(s3, bucket, "runs/tiny/")
    for folder in ("checkpoint-2", "checkpoint-4", "final"):
        assert f"runs/tiny/{folder}/adapter_model.safetensors" in stored, folder
    assert not (out / "checkpoint-2").exists()  # rotated away locally, still complete in S3
    local = (out / "adapter_model.safetensors").read_bytes()
    remote = s3.get_object(Bucket=bucket, Key="runs/tiny/final/adapter_model.safetensors")["Body"].read()
    assert remote == local
    assert not any("/final/checkpoint-" in k for k in stored)  # checkpoints are not duplicated under final/


def test_s3_model_and_data_sources_download_once(cli, moto_server, s3, bucket, tmp_path, data_dir, tiny_dir, monkeypatch):
    for path in Path(tiny_dir).iterdir():
        s3.upload_file(str(path), bucket, f"models/tiny/{path.name}")
    s3.upload_file(str(data_dir / "sft.jsonl"), bucket, "data/train.jsonl")
    monkeypatch.setenv("AWS_ENDPOINT_URL_S3", f"http://{moto_server[0]}:{moto_server[1]}")
    args = ["train", "--recipe", "recipes/sft/tiny-cpu.yaml", f"model.base_model_name=s3://{bucket}/models/tiny",
            f"data.datasets[0].name=s3://{bucket}/data/train.jsonl", "training.max_steps=1"]
    first = cli(*args, f"training.output_dir={tmp_path / 'a'}")
    assert first.returncode == 0, first.stderr[-3000:]
    assert "kept 64 of 64 rows" in first.stdout
    assert f"[storage] downloaded s3://{bucket}/models/tiny to " in first.stderr  # the cache path reaches the user
    s3.delete_object(Bucket=bucket, Key="data/train.jsonl")  # a second run must not need the server's copy
    second = cli(*args, f"training.output_dir={tmp_path / 'b'}")
    assert second.returncode == 0, second.stderr[-3000:]


def test_secrets_never_reach_files_logs_or_uploads(cli, moto_server, s3, bucket, tmp_path, data_dir, aws_env):
    secret = "wk_secret_9f8e7d6c5b4a39281706f5e4d3c2b1a0"
    out = tmp_path / "run"
    result = cli("train", "--recipe", "recipes/sft/tiny-cpu.yaml", f"training.output_dir={out}",
                 f"data.datasets[0].name={data_dir / 'sft.jsonl'}", "training.max_steps=2", "training.save_steps=1",
                 "tracking.provider=wandb", "tracking.mode=offline", f"tracking.api_key={secret}",
                 f"s3.bucket={bucket}", f"s3.endpoint_url=http://{moto_server[0]}:{moto_server[1]}",
                 env={"WANDB_API_KEY": secret})
    assert result.returncode == 0, result.stderr[-3000:]
    texts = [result.stdout, result.stderr] + [p.read_bytes().decode("latin-1") for p in out.rglob("*") if p.is_file()]
    for key in keys(s3, bucket):
        texts.append(s3.get_object(Bucket=bucket, Key=key)["Body"].read().decode("latin-1"))
    assert len(keys(s3, bucket)) > 5
    assert not [t for t in texts if secret in t]
    assert aws_env["AWS_SECRET_ACCESS_KEY"] not in "".join(texts)


def test_bad_s3_uri_is_a_recipe_error(cli):
    result = cli("validate", "recipes/sft/tiny-cpu.yaml", "data.datasets[0].name=s3:///nobucket.jsonl")
    assert result.returncode == 2 and "data.datasets[0].name" in result.stderr


def test_resume_downloads_the_newest_uploaded_checkpoint(cli, moto_server, s3, bucket, tmp_path, data_dir):
    """Local checkpoints deleted after upload (or a fresh machine): auto-resume fetches the uploaded one."""
    out = tmp_path / "run"
    base = ["train", "--recipe", "recipes/sft/tiny-cpu.yaml", f"training.output_dir={out}", f"data.datasets[0].name={data_dir / 'sft.jsonl'}",
            "training.save_steps=2", f"s3.bucket={bucket}", "s3.prefix=r", f"s3.endpoint_url=http://{moto_server[0]}:{moto_server[1]}",
            "s3.delete_local_after_upload=true", "training.logging_steps=1"]
    first = cli(*base, "training.max_steps=4")
    assert first.returncode == 0, first.stderr[-3000:]
    assert not list(out.glob("checkpoint-*"))  # deleted locally once verified in S3
    second = cli(*base, "training.max_steps=6")
    assert second.returncode == 0, second.stderr[-3000:]
    assert "downloaded checkpoint-4 from S3" in second.stdout and "resuming from" in second.stdout
    assert json.loads((out / "run_summary.json").read_text())["global_step"] == 6
    steps = [json.loads(l)["step"] for l in (out / "metrics.jsonl").read_text().splitlines() if "loss" in json.loads(l)]
    assert steps[-2:] == [5, 6] and 1 in steps  # continued after step 4, the first run's records kept
