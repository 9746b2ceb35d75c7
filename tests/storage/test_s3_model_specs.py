"""`generate` and `eval` take s3:// model specs as `train` does: downloaded once into the shared
S3 cache from a real S3-compatible server on 127.0.0.1, then used like the local folder."""

from __future__ import annotations

import json
from pathlib import Path

from posttrain.cli import main as posttrain_main
from posttrain.storage.cache import cache_entry


def test_generate_and_eval_accept_an_s3_model(moto_server, s3, bucket, tiny_dir, tmp_path, monkeypatch, capsys):
    for path in Path(tiny_dir).iterdir():
        s3.upload_file(str(path), bucket, f"models/tiny/{path.name}")
    monkeypatch.setenv("AWS_ENDPOINT_URL_S3", f"http://{moto_server[0]}:{moto_server[1]}")
    uri = f"s3://{bucket}/models/tiny"
    prompts = tmp_path / "p.txt"
    prompts.write_text("2 + 3 =\nTom has 4 apples.\n")

    out = tmp_path / "gen.jsonl"
    argv = ["generate", "--model", uri, "--model", str(tiny_dir), "--prompts", str(prompts), "--max-new-tokens", "5",
            "--no-progress", "--out", str(out)]
    assert posttrain_main(argv) == 0, capsys.readouterr().err
    rows = [json.loads(line) for line in out.read_text().splitlines()]
    assert [r["model"] for r in rows] == [uri] * 2 + [str(tiny_dir)] * 2
    assert [r["completion"] for r in rows[:2]] == [r["completion"] for r in rows[2:]]  # the same weights
    assert cache_entry(uri).is_dir()  # the cache training uses
    # storage's INFO record says where the model went (it was dropped before logging was configured)
    assert f"[storage] downloaded {uri} to {cache_entry(uri)}" in capsys.readouterr().err

    s3.delete_object(Bucket=bucket, Key="models/tiny/config.json")  # from now on only the cached copy works
    argv = ["eval", "--model", uri, "--task", "arithmetic", "--n", "2", "--max-new-tokens", "3", "--no-progress",
            "--out", str(tmp_path / "eval")]
    assert posttrain_main(argv) == 0, capsys.readouterr().err
    assert json.loads((tmp_path / "eval" / "summary.json").read_text())["arms"][0]["spec"] == uri

    # evaluation data is read by the same reader as training data: s3:// works for --data too
    rows = "".join(json.dumps({"prompt": f"What is {i} + 1?", "answer": i + 1}) + "\n" for i in range(3))
    s3.put_object(Bucket=bucket, Key="data/q.jsonl", Body=rows.encode())
    argv = ["eval", "--model", str(tiny_dir), "--task", "custom", "--data", f"s3://{bucket}/data/q.jsonl",
            "--max-new-tokens", "2", "--no-progress", "--out", str(tmp_path / "eval-s3-data")]
    assert posttrain_main(argv) == 0, capsys.readouterr().err
    assert json.loads((tmp_path / "eval-s3-data" / "summary.json").read_text())["arms"][0]["n"] == 3


def test_a_malformed_s3_spec_is_refused_before_anything_loads(tmp_path, capsys):
    for argv in (["generate", "--model", "s3://", "--prompts", str(tmp_path / "p.txt"), "--out", str(tmp_path / "g.jsonl")],
                 ["eval", "--model", "s3:my-bucket/model", "--task", "arithmetic", "--out", str(tmp_path / "e")]):
        assert posttrain_main(argv) == 2
        err = capsys.readouterr().err
        assert "expected s3://BUCKET/PATH" in err and "Traceback" not in err
    assert not list(tmp_path.iterdir())
