"""`upload_dir` against a real S3 server on 127.0.0.1: layout, bytes, retries, verification."""

from __future__ import annotations

import json
import logging
import os
import threading
import time
from pathlib import Path

import pytest
from s3_testing import FAKE_ENV, FaultProxy, client_via

from posttrain.storage.errors import UploadError
from posttrain.storage.s3 import MANIFEST_NAME, upload_dir

MIB = 1024 * 1024
BIG = 9 * MIB  # above the 8 MiB multipart threshold: two parts


@pytest.fixture(scope="module")
def tree(tmp_path_factory) -> Path:
    """A folder like a checkpoint: nested files, an empty file, and one file large enough for multipart."""
    root = tmp_path_factory.mktemp("tree")
    (root / "sub" / "deeper").mkdir(parents=True)
    (root / "config.json").write_text('{"hidden_size": 128}')
    (root / "empty.txt").write_bytes(b"")
    (root / "sub" / "deeper" / "weights.bin").write_bytes(os.urandom(3000))
    (root / "big.bin").write_bytes(os.urandom(BIG))
    return root


def local_files(root: Path) -> dict[str, bytes]:
    return {p.relative_to(root).as_posix(): p.read_bytes() for p in root.rglob("*") if p.is_file()}


def remote_objects(s3, bucket: str, prefix: str) -> dict[str, int]:
    pages = s3.get_paginator("list_objects_v2").paginate(Bucket=bucket, Prefix=prefix)
    return {o["Key"]: o["Size"] for page in pages for o in page.get("Contents", [])}


def test_round_trip_layout_bytes_and_multipart(tree, s3, bucket, via_proxy):
    report = upload_dir(via_proxy, tree, bucket, "runs/a", backoff=0.01)

    expected = local_files(tree)
    assert set(remote_objects(s3, bucket, "runs/a/")) == {f"runs/a/{rel}" for rel in expected} | {
        f"runs/a/{MANIFEST_NAME}"}
    for rel, data in expected.items():
        assert s3.get_object(Bucket=bucket, Key=f"runs/a/{rel}")["Body"].read() == data, rel
    assert s3.head_object(Bucket=bucket, Key="runs/a/big.bin")["ETag"].endswith('-2"')  # really multipart
    assert (report.files, report.bytes) == (len(expected), sum(map(len, expected.values())))
    assert report.uri == f"s3://{bucket}/runs/a" and report.seconds > 0
    manifest = json.loads(s3.get_object(Bucket=bucket, Key=f"runs/a/{MANIFEST_NAME}")["Body"].read())
    assert manifest["files"] == {rel: len(data) for rel, data in expected.items()}


@pytest.mark.parametrize("action", [503, 500, "drop"])
def test_failed_requests_are_retried_until_everything_is_verified(action, tree, s3, bucket, proxy, via_proxy):
    proxy.fail_first(4, action, method="PUT")  # hits the single PUTs and the multipart part uploads
    report = upload_dir(via_proxy, tree, bucket, "r", backoff=0.01)

    assert report.files == len(local_files(tree))
    assert proxy.count("PUT") > 4  # the injected failures happened and were followed by retries
    for rel, data in local_files(tree).items():
        assert s3.get_object(Bucket=bucket, Key=f"r/{rel}")["Body"].read() == data


def test_endpoint_unreachable_at_first_then_up(tree, s3, bucket, moto_server):
    proxy = FaultProxy(moto_server, listen=False)  # the port is bound but refuses connections
    try:
        client = client_via(proxy)
        timer = threading.Timer(0.4, proxy.start)
        started = time.monotonic()
        timer.start()
        report = upload_dir(client, tree, bucket, "late", retries=8, backoff=0.05)
        assert time.monotonic() - started >= 0.4  # nothing could have succeeded before the endpoint came up
        assert report.files == len(local_files(tree))
        assert set(remote_objects(s3, bucket, "late/")) >= {f"late/{rel}" for rel in local_files(tree)}
    finally:
        timer.join()
        proxy.stop()


def test_lost_put_is_caught_by_verification_and_sent_again(tree, s3, bucket, proxy, via_proxy):
    """The server answers 200 to one PUT but keeps nothing: only the listing shows it; it is re-sent."""
    lost = []

    def rule(request):
        if request.method == "PUT" and request.key_path.endswith("/config.json") and not lost:
            lost.append(request)
            return "fake_ok"
        return None

    proxy.rule = rule
    upload_dir(via_proxy, tree, bucket, "v", backoff=0.01)
    assert lost and proxy.count("PUT", "/config.json") == 2
    assert s3.get_object(Bucket=bucket, Key="v/config.json")["Body"].read() == (tree / "config.json").read_bytes()


def test_file_that_never_arrives_raises_and_names_it(tree, s3, bucket, proxy, via_proxy):
    proxy.rule = lambda r: "fake_ok" if r.method == "PUT" and r.key_path.endswith("/weights.bin") else None
    with pytest.raises(UploadError) as err:
        upload_dir(via_proxy, tree, bucket, "never", backoff=0.01)
    assert err.value.missing == ["sub/deeper/weights.bin"]
    assert "sub/deeper/weights.bin" in str(err.value) and "Nothing local was deleted" in str(err.value)
    # Without a manifest, readers know this folder is not complete.
    assert f"never/{MANIFEST_NAME}" not in remote_objects(s3, bucket, "never/")


def test_permanent_error_fails_at_once_with_a_hint(tree, proxy, via_proxy, caplog):
    caplog.set_level(logging.INFO)
    with pytest.raises(UploadError) as err:
        upload_dir(via_proxy, tree, "no-such-bucket-here", "x", retries=5, backoff=1.0)
    assert "NoSuchBucket" in str(err.value) and "create it or fix the URI" in str(err.value)
    assert len(proxy.requests) == 1  # not retried: retrying cannot create the bucket
    for secret in (FAKE_ENV["AWS_SECRET_ACCESS_KEY"], FAKE_ENV["AWS_ACCESS_KEY_ID"], FAKE_ENV["AWS_SESSION_TOKEN"]):
        assert secret not in str(err.value) and secret not in caplog.text


def test_retries_exhausted_reports_every_unverified_file(tree, bucket, proxy, via_proxy, caplog):
    proxy.rule = lambda r: 503 if r.method == "PUT" else None
    with pytest.raises(UploadError) as err:
        upload_dir(via_proxy, tree, bucket, "down", retries=2, backoff=0.01)
    assert sorted(err.value.missing) == sorted(local_files(tree))
    assert "still failing after 2 retries" in str(err.value) and "Injected503" in str(err.value)
    assert "retry 2 of 2" in caplog.text
