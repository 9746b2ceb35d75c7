"""`BackgroundUploader`: uploads off the caller's thread; deletes only what is verified; loses no failure."""

from __future__ import annotations

import shutil
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from posttrain.storage.background import STAGING_DIR, BackgroundUploader
from posttrain.storage.errors import UploadError
from posttrain.storage.s3 import MANIFEST_NAME


def make_folder(root: Path, name: str, n: int = 3) -> Path:
    folder = root / name
    (folder / "sub").mkdir(parents=True)
    for i in range(n):
        (folder / f"f{i}.bin").write_bytes(bytes([i]) * (1000 + i))
    (folder / "sub" / "state.json").write_text('{"step": 1}')
    return folder


def keys(s3, bucket: str, prefix: str) -> set[str]:
    pages = s3.get_paginator("list_objects_v2").paginate(Bucket=bucket, Prefix=prefix)
    return {o["Key"][len(prefix):] for page in pages for o in page.get("Contents", [])}


def test_submit_returns_at_once_and_wait_reports(tmp_path, s3, bucket, proxy, via_proxy):
    a, b = make_folder(tmp_path, "a"), make_folder(tmp_path, "b")
    proxy.rule = lambda r: ("delay", 0.1) if r.method == "PUT" else None
    with BackgroundUploader(via_proxy, backoff=0.01) as uploader:
        started = time.monotonic()
        uploader.submit(a, f"s3://{bucket}/run/a")
        uploader.submit(b, f"s3://{bucket}/run/b", delete_after=True)
        assert time.monotonic() - started < 0.3  # the caller did not wait for ~10 slow PUTs
        assert uploader.in_flight(a) and uploader.in_flight(b)
        reports = uploader.wait()
        assert not uploader.in_flight(a) and not uploader.in_flight(b)
    assert [Path(r.local_dir).name for r in reports] == ["a", "b"]  # in submission order
    assert [r.files for r in reports] == [4, 4]
    assert keys(s3, bucket, "run/a/") == {"f0.bin", "f1.bin", "f2.bin", "sub/state.json", MANIFEST_NAME}
    assert a.exists() and not b.exists()  # deleted only where asked, and after verification
    assert uploader.wait() == []  # results are handed out once


def test_folder_is_kept_when_its_upload_cannot_be_verified(tmp_path, s3, bucket, proxy, via_proxy):
    """The server "loses" one file's PUT every time: verification fails, so delete_after must not delete."""
    bad, good = make_folder(tmp_path, "bad"), make_folder(tmp_path, "good")
    proxy.rule = lambda r: "fake_ok" if r.method == "PUT" and "/bad/f1.bin" in r.key_path else None
    with BackgroundUploader(via_proxy, backoff=0.01) as uploader:
        uploader.submit(bad, f"s3://{bucket}/run/bad", delete_after=True)
        uploader.submit(good, f"s3://{bucket}/run/good", delete_after=True)
        with pytest.raises(UploadError) as err:
            uploader.wait()
    assert bad.exists() and (bad / "f1.bin").stat().st_size == 1001  # nothing lost
    assert not good.exists()  # the other upload went through and was cleaned up
    assert [Path(f.local_dir).name for f in err.value.failures] == ["bad"]
    assert [Path(r.local_dir).name for r in err.value.reports] == ["good"]
    failure = err.value.failures[0]
    assert "f1.bin" in failure.error and failure.kept == str(bad.resolve())
    assert "1 of 2 uploads failed" in str(err.value) and "local copy kept at" in str(err.value)
    assert MANIFEST_NAME not in keys(s3, bucket, "run/bad/")


def test_folder_deleted_mid_upload_is_reported_not_silently_lost(tmp_path, bucket, proxy, via_proxy):
    """Without a snapshot, a folder removed during its upload (what rotation would do) is a reported failure."""
    folder = make_folder(tmp_path, "checkpoint-2", n=6)
    first_put = threading.Event()

    def rule(request):
        if request.method == "PUT" and "/f" in request.key_path:
            first_put.set()
            return ("delay", 0.2)
        return None

    proxy.rule = rule
    with BackgroundUploader(via_proxy, backoff=0.01) as uploader:
        uploader.submit(folder, f"s3://{bucket}/run/checkpoint-2")
        assert first_put.wait(10)
        shutil.rmtree(folder)
        with pytest.raises(UploadError) as err:
            uploader.wait()
    assert "local file unreadable or gone" in err.value.failures[0].error
    assert "no local copy left" in str(err.value)


def test_snapshot_survives_deletion_of_the_original(tmp_path, s3, bucket, proxy, via_proxy):
    folder = make_folder(tmp_path, "checkpoint-2", n=6)
    expected = {p.relative_to(folder).as_posix(): p.read_bytes() for p in folder.rglob("*") if p.is_file()}
    proxy.rule = lambda r: ("delay", 0.1) if r.method == "PUT" else None
    with BackgroundUploader(via_proxy, backoff=0.01) as uploader:
        uploader.submit(folder, f"s3://{bucket}/run/checkpoint-2", snapshot=True)
        shutil.rmtree(folder)  # rotation, right after the save
        assert uploader.in_flight(folder)
        [report] = uploader.wait()
    assert Path(report.local_dir) == folder.resolve() and report.files == len(expected)
    for rel, data in expected.items():
        assert s3.get_object(Bucket=bucket, Key=f"run/checkpoint-2/{rel}")["Body"].read() == data
    assert not (tmp_path / STAGING_DIR).exists()  # snapshot removed after its upload was verified


def test_failed_snapshot_upload_keeps_the_snapshot(tmp_path, bucket, proxy, via_proxy):
    folder = make_folder(tmp_path, "checkpoint-4")
    proxy.rule = lambda r: 503 if r.method == "PUT" else None
    with BackgroundUploader(via_proxy, retries=1, backoff=0.01) as uploader:
        uploader.submit(folder, f"s3://{bucket}/run/checkpoint-4", snapshot=True)
        shutil.rmtree(folder)
        with pytest.raises(UploadError) as err:
            uploader.wait()
    kept = Path(err.value.failures[0].kept)
    assert kept.parent == tmp_path / STAGING_DIR
    assert sorted(p.name for p in kept.rglob("*") if p.is_file()) == ["f0.bin", "f1.bin", "f2.bin", "state.json"]


def test_submit_rejects_missing_folder_and_use_after_close(tmp_path, s3):
    uploader = BackgroundUploader(s3)
    with pytest.raises(FileNotFoundError, match="no such directory"):
        uploader.submit(tmp_path / "nope", "s3://bkt/x")
    uploader.close()
    with pytest.raises(RuntimeError, match="after close"):
        uploader.submit(tmp_path, "s3://bkt/x")


CRASHING_SCRIPT = """
import logging, sys, time
logging.basicConfig(level=logging.INFO, format="%(message)s")
from posttrain.storage.background import BackgroundUploader
from posttrain.storage.s3 import make_client
folder, dest, endpoint = sys.argv[1:4]
uploader = BackgroundUploader(make_client(endpoint_url=endpoint, max_attempts=1), backoff=0.01)
uploader.submit(folder, dest)
time.sleep(0.25)  # usually mid-upload now, so the exit path must also finish an upload in progress
raise RuntimeError("training crashed")  # no wait(), no close()
"""


def test_queued_uploads_finish_when_the_program_crashes(tmp_path, s3, bucket, proxy):
    folder = make_folder(tmp_path, "checkpoint-8")
    proxy.rule = lambda r: ("delay", 0.1) if r.method == "PUT" else None
    done = subprocess.run([sys.executable, "-c", CRASHING_SCRIPT, str(folder), f"s3://{bucket}/run/checkpoint-8",
                           proxy.url], capture_output=True, text=True, timeout=60)
    assert done.returncode == 1 and "training crashed" in done.stderr
    assert "finishing 1 queued S3 uploads before exit" in done.stderr and "upload failed" not in done.stderr
    assert keys(s3, bucket, "run/checkpoint-8/") == {"f0.bin", "f1.bin", "f2.bin", "sub/state.json", MANIFEST_NAME}
