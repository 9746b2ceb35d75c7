"""Helpers shared by the storage tests (importable by name: tests/storage is on sys.path)."""

from __future__ import annotations

from s3_fault_proxy import FaultProxy

__all__ = ["FAKE_ENV", "UNSET_ENV", "FaultProxy", "client_via"]

FAKE_ENV = {
    "AWS_ACCESS_KEY_ID": "AKIAFAKEFAKEFAKEFAKE",
    "AWS_SECRET_ACCESS_KEY": "fake-secret-do-not-log-1234567890",
    "AWS_SESSION_TOKEN": "fake-session-token-abcdef",
    "AWS_DEFAULT_REGION": "us-east-1",
    "AWS_EC2_METADATA_DISABLED": "true",
    "AWS_CONFIG_FILE": "/nonexistent/posttrain-test/aws-config",
    "AWS_SHARED_CREDENTIALS_FILE": "/nonexistent/posttrain-test/aws-credentials",
}
UNSET_ENV = ("AWS_PROFILE", "AWS_ENDPOINT_URL", "AWS_ENDPOINT_URL_S3", "AWS_CA_BUNDLE", "HTTP_PROXY", "HTTPS_PROXY",
             "http_proxy", "https_proxy")


def client_via(proxy: FaultProxy):
    """A client through ``proxy`` with botocore's own retries off, so our retries are what is tested."""
    from posttrain.storage.s3 import make_client

    return make_client(endpoint_url=proxy.url, max_attempts=1, connect_timeout=2, read_timeout=10)
