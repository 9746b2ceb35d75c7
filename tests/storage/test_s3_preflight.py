"""Bad S3 settings fail `validate` / `train` start-up quickly, naming the key and the reason (real moto server)."""

import socket
import time

import pytest

from posttrain.cli import main


@pytest.fixture
def closed_port() -> int:
    """A port on 127.0.0.1 where nothing listens."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def validate(repo, monkeypatch, *overrides):
    monkeypatch.chdir(repo)
    return main(["validate", "recipes/sft/tiny-cpu.yaml", *overrides])


def test_good_settings_pass(repo, monkeypatch, moto_server, bucket, capsys):
    endpoint = f"http://{moto_server[0]}:{moto_server[1]}"
    assert validate(repo, monkeypatch, f"s3.bucket={bucket}", f"s3.endpoint_url={endpoint}") == 0


def test_missing_bucket_names_s3_bucket(repo, monkeypatch, moto_server, capsys):
    endpoint = f"http://{moto_server[0]}:{moto_server[1]}"
    assert validate(repo, monkeypatch, "s3.bucket=no-such-bucket-here", f"s3.endpoint_url={endpoint}") == 2
    err = capsys.readouterr().err
    assert "s3.bucket: bucket 'no-such-bucket-here'" in err and "does not exist" in err and "Traceback" not in err


def test_endpoint_that_does_not_answer(repo, monkeypatch, aws_env, closed_port, capsys):
    started = time.monotonic()
    assert validate(repo, monkeypatch, "s3.bucket=b", f"s3.endpoint_url=http://127.0.0.1:{closed_port}") == 2
    assert time.monotonic() - started < 15
    err = capsys.readouterr().err
    assert f"s3.endpoint_url: http://127.0.0.1:{closed_port} does not answer" in err and "Traceback" not in err


def test_missing_credentials(repo, monkeypatch, moto_server, capsys):
    for name in ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_SESSION_TOKEN"):
        monkeypatch.delenv(name, raising=False)
    endpoint = f"http://{moto_server[0]}:{moto_server[1]}"
    assert validate(repo, monkeypatch, "s3.bucket=b", f"s3.endpoint_url={endpoint}") == 2
    assert "s3.endpoint_url: no AWS credentials found" in capsys.readouterr().err


def test_s3_model_source_bucket_checked_without_an_s3_section(repo, monkeypatch, moto_server, capsys):
    monkeypatch.setenv("AWS_ENDPOINT_URL_S3", f"http://{moto_server[0]}:{moto_server[1]}")
    assert validate(repo, monkeypatch, "model.base_model_name=s3://absent-bucket-x/models/m/") == 2
    assert "model.base_model_name: bucket 'absent-bucket-x'" in capsys.readouterr().err


def test_schema_only_skips_the_network(repo, monkeypatch, closed_port):
    assert validate(repo, monkeypatch, "--schema-only", "s3.bucket=b", f"s3.endpoint_url=http://127.0.0.1:{closed_port}") == 0
