"""`download_dir` and `latest_checkpoint` against a real S3 server: safe keys, atomic, complete only."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from posttrain.storage.errors import StorageError, UnsafeKeyError
from posttrain.storage.location import S3Location
from posttrain.storage.s3 import MANIFEST_NAME, download_dir, latest_checkpoint, upload_dir


def put(s3, bucket: str, key: str, data: bytes = b"x") -> None:
    s3.put_object(Bucket=bucket, Key=key, Body=data)


def test_round_trip_through_upload_and_download(tmp_path, s3, bucket, via_proxy):
    src = tmp_path / "src"
    (src / "a" / "b").mkdir(parents=True)
    files = {"model.safetensors": os.urandom(5000), "a/b/c.txt": b"hello", "empty": b""}
    for rel, data in files.items():
        (src / rel).write_bytes(data)
    upload_dir(s3, src, bucket, "m/tiny")

    out = download_dir(via_proxy, bucket, "m/tiny", tmp_path / "dl" / "tiny", backoff=0.01)
    assert out == tmp_path / "dl" / "tiny"
    got = {p.relative_to(out).as_posix(): p.read_bytes() for p in out.rglob("*") if p.is_file()}
    assert got == files  # the manifest is bookkeeping, not content: it is not downloaded
    assert os.listdir(tmp_path / "dl") == ["tiny"]  # no temporary folder left behind


@pytest.mark.parametrize("bad_key", ["m/../../escape.txt", "m/a/../../../escape.txt", "m//etc/passwd",
                                     "m/./x", "m/a\\..\\..\\x"])
def test_refuses_keys_that_escape_and_writes_nothing(bad_key, tmp_path, s3, bucket):
    put(s3, bucket, "m/config.json", b"{}")
    put(s3, bucket, "m/weights.bin", b"w" * 100)
    put(s3, bucket, bad_key, b"evil")
    dest = tmp_path / "dl" / "m"

    with pytest.raises(UnsafeKeyError) as err:
        download_dir(s3, bucket, "m", dest)
    assert repr(bad_key) in str(err.value) and "Nothing was downloaded" in str(err.value)
    assert not dest.exists()
    assert not (tmp_path / "escape.txt").exists() and not (tmp_path / "dl" / "escape.txt").exists()
    assert not (tmp_path / "dl").exists() or os.listdir(tmp_path / "dl") == []


def test_existing_destination_is_never_overwritten(tmp_path, s3, bucket):
    put(s3, bucket, "m/config.json", b"{}")
    dest = tmp_path / "m"
    dest.mkdir()
    (dest / "mine.txt").write_text("keep")
    with pytest.raises(StorageError, match="already exists"):
        download_dir(s3, bucket, "m", dest)
    assert os.listdir(dest) == ["mine.txt"]


def test_empty_prefix_is_a_clear_error(tmp_path, s3, bucket):
    put(s3, bucket, "models/other/config.json")
    with pytest.raises(StorageError, match=r"no objects under s3://.*/models/oth/"):
        download_dir(s3, bucket, "models/oth", tmp_path / "x")  # a prefix of a name is not a folder


def test_interrupted_download_leaves_no_destination(tmp_path, s3, bucket, proxy, via_proxy):
    put(s3, bucket, "m/a.bin", b"a" * 10)
    put(s3, bucket, "m/b.bin", b"b" * 10)
    proxy.rule = lambda r: "drop" if r.method in ("GET", "HEAD") and r.key_path.endswith("/b.bin") else None
    with pytest.raises(Exception):
        download_dir(via_proxy, bucket, "m", tmp_path / "m", retries=1, backoff=0.01)
    assert os.listdir(tmp_path) == []  # a.bin had arrived, but only inside the removed temporary folder


def test_manifest_decides_what_is_downloaded_and_refuses_an_incomplete_folder(tmp_path, s3, bucket):
    src = tmp_path / "src"
    src.mkdir()
    (src / "a.txt").write_text("a")
    (src / "b.txt").write_text("bb")
    upload_dir(s3, src, bucket, "ck")
    put(s3, bucket, "ck/stale-from-an-older-upload.txt")
    out = download_dir(s3, bucket, "ck", tmp_path / "one")
    assert sorted(os.listdir(out)) == ["a.txt", "b.txt"]

    s3.delete_object(Bucket=bucket, Key="ck/b.txt")
    with pytest.raises(StorageError, match=r"incomplete: 1 files .*\(b\.txt\)"):
        download_dir(s3, bucket, "ck", tmp_path / "two")
    assert not (tmp_path / "two").exists()


def test_latest_checkpoint_skips_uploads_that_did_not_finish(tmp_path, s3, bucket):
    run = S3Location.parse(f"s3://{bucket}/runs/sft")
    assert latest_checkpoint(s3, run) is None
    ck = tmp_path / "ck"
    ck.mkdir()
    (ck / "trainer_state.json").write_text(json.dumps({"global_step": 1}))
    for step in (2, 10):  # 10 > 4 > 2 numerically, though "10" < "2" < "4" as text
        upload_dir(s3, ck, bucket, f"runs/sft/checkpoint-{step}")
    put(s3, bucket, "runs/sft/checkpoint-4/model.safetensors")  # no manifest: cut off by a crash
    put(s3, bucket, "runs/sft/checkpoint-12/model.safetensors")  # likewise
    put(s3, bucket, "runs/sft/final/x")  # not a checkpoint

    assert latest_checkpoint(s3, run) == run.child("checkpoint-10")
    s3.delete_object(Bucket=bucket, Key=f"runs/sft/checkpoint-10/{MANIFEST_NAME}")
    assert latest_checkpoint(s3, run) == run.child("checkpoint-2")


def test_download_of_a_dir_uses_listing_when_there_is_no_manifest(tmp_path, s3, bucket):
    put(s3, bucket, "plain/x/1.txt", b"1")
    put(s3, bucket, "plain/x/", b"")  # a console's zero-byte "folder" marker
    put(s3, bucket, "plain/2.txt", b"22")
    out = download_dir(s3, bucket, "plain", Path(tmp_path) / "p")
    assert sorted(p.relative_to(out).as_posix() for p in out.rglob("*") if p.is_file()) == ["2.txt", "x/1.txt"]
