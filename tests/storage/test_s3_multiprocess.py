"""Two ranks resuming from a checkpoint that only exists in S3: one download per node, not one per rank."""

import json

import pytest

pytestmark = [pytest.mark.e2e, pytest.mark.slow]


def test_two_ranks_resume_from_s3_with_one_download(cli, moto_server, s3, bucket, tmp_path, data_dir):
    out = tmp_path / "run"
    args = ["train", "--recipe", "recipes/sft/tiny-cpu.yaml", "--nproc", "2", f"training.output_dir={out}",
            f"data.datasets[0].name={data_dir / 'sft.jsonl'}", "training.per_device_train_batch_size=8", "training.save_steps=2",
            "training.logging_steps=1", "training.max_length=64", f"s3.bucket={bucket}", "s3.prefix=runs/mp",
            f"s3.endpoint_url=http://{moto_server[0]}:{moto_server[1]}", "s3.region=us-east-1", "s3.delete_local_after_upload=true"]
    env = {"OMP_NUM_THREADS": "1"}
    first = cli(*args, "training.max_steps=2", env=env)
    assert first.returncode == 0, first.stderr[-3000:]
    assert not (out / "checkpoint-2").exists()  # uploaded, verified, deleted locally: only S3 has it

    second = cli(*args, "training.max_steps=3", env=env)
    assert second.returncode == 0, second.stderr[-3000:]
    downloads = [line for line in second.stdout.splitlines() if "downloaded checkpoint-2 from S3" in line]
    assert len(downloads) == 1, downloads  # the node's other rank waited and found it in output_dir
    assert "resuming from" in second.stdout
    assert json.loads((out / "run_summary.json").read_text())["global_step"] == 3
