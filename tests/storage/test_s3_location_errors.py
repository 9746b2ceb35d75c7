"""Pure parts of the storage layer: URI parsing, which errors are retried, secret-free messages."""

from __future__ import annotations

import subprocess
import sys

import pytest

from posttrain.errors import UserError
from posttrain.storage.errors import describe, is_transient, redact
from posttrain.storage.location import S3Location, S3URIError


@pytest.mark.parametrize("uri, bucket, prefix", [
    ("s3://my-bucket", "my-bucket", ""),
    ("s3://my-bucket/", "my-bucket", ""),
    ("s3://my.bucket-1/a/b/c.jsonl", "my.bucket-1", "a/b/c.jsonl"),
    ("s3://bkt/runs/sft/", "bkt", "runs/sft"),
])
def test_parse_valid(uri, bucket, prefix):
    loc = S3Location.parse(uri)
    assert (loc.bucket, loc.prefix) == (bucket, prefix)
    assert S3Location.parse(loc.uri) == loc  # the normalised form round-trips


@pytest.mark.parametrize("uri, fragment", [
    ("my-bucket/path", "not an S3 URI"),
    ("https://my-bucket/path", "not an S3 URI"),
    ("s3://", "no bucket"),
    ("s3:///path", "no bucket"),
    ("s3://My_Bucket/x", "bucket name 'My_Bucket' is not valid"),
    ("s3://ab/x", "bucket name 'ab' is not valid"),
    ("s3://bkt/a//b", "empty, '.' or '..'"),
    ("s3://bkt/a/../b", "empty, '.' or '..'"),
])
def test_parse_invalid_says_what_is_wrong(uri, fragment):
    with pytest.raises(S3URIError) as err:
        S3Location.parse(uri)
    assert fragment in str(err.value)
    assert isinstance(err.value, ValueError) and isinstance(err.value, UserError)


def test_child_key_and_dir_prefix():
    loc = S3Location.parse("s3://bkt/runs/a")
    assert loc.child("checkpoint-4").uri == "s3://bkt/runs/a/checkpoint-4"
    assert loc.child("final/").key("model.safetensors") == "runs/a/final/model.safetensors"
    assert loc.dir_prefix() == "runs/a/"  # not "runs/a": that would also match runs/ab/...
    assert S3Location("bkt").dir_prefix() == "" and S3Location("bkt").name == "bkt"


def _client_error(code: str, status: int, message: str = "boom"):
    from botocore.exceptions import ClientError

    return ClientError({"Error": {"Code": code, "Message": message},
                        "ResponseMetadata": {"HTTPStatusCode": status}}, "PutObject")


def test_transient_classification():
    from boto3.exceptions import S3UploadFailedError
    from botocore.exceptions import ConnectionClosedError, EndpointConnectionError, NoCredentialsError

    assert is_transient(_client_error("SlowDown", 503))
    assert is_transient(_client_error("InternalError", 500))
    assert is_transient(EndpointConnectionError(endpoint_url="http://127.0.0.1:1"))
    assert is_transient(ConnectionClosedError(endpoint_url="http://127.0.0.1:1"))
    assert not is_transient(_client_error("NoSuchBucket", 404))
    assert not is_transient(_client_error("AccessDenied", 403))
    assert not is_transient(NoCredentialsError())
    assert not is_transient(FileNotFoundError("gone"))
    # boto3 wraps the ClientError of a failed upload; the wrapped code decides.
    for code, status, expected in (("NoSuchBucket", 404, False), ("ServiceUnavailable", 503, True)):
        try:
            try:
                raise _client_error(code, status)
            except Exception as inner:
                raise S3UploadFailedError(f"Failed to upload: {inner}")
        except S3UploadFailedError as wrapped:
            assert is_transient(wrapped) is expected


def test_describe_gives_code_status_and_a_hint():
    text = describe(_client_error("NoSuchBucket", 404, "The specified bucket does not exist"))
    assert text.startswith("NoSuchBucket (HTTP 404): The specified bucket does not exist")
    assert "create it or fix the URI" in text


def test_secrets_are_redacted(monkeypatch):
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "s3cr3t-value-xyz")
    monkeypatch.setenv("AWS_SESSION_TOKEN", "tok-123456")
    text = ("secret s3cr3t-value-xyz token tok-123456 key AKIAABCDEFGHIJKLMNOP "
            "url ?X-Amz-Credential=AKIA%2F2026&X-Amz-Signature=deadbeef&x=1")
    out = redact(text)
    for secret in ("s3cr3t-value-xyz", "tok-123456", "AKIAABCDEFGHIJKLMNOP", "deadbeef", "AKIA%2F2026"):
        assert secret not in out
    assert "X-Amz-Signature=***" in out and "&x=1" in out
    assert "s3cr3t-value-xyz" not in describe(_client_error("Oops", 500, "echo s3cr3t-value-xyz"))


def test_importing_storage_loads_neither_boto3_nor_torch():
    code = ("import sys, posttrain.storage, posttrain.storage.s3, posttrain.storage.cache, "
            "posttrain.storage.background; print(sorted(m for m in ('boto3', 'botocore', 'torch', 'transformers') "
            "if m in sys.modules))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "[]"
