"""A real S3-compatible HTTP server (moto) on 127.0.0.1, fake credentials, a fault-injecting proxy.

Nothing here reaches the network or reads real credentials: the AWS config and credential files
point to files that do not exist and every credential is a fake value.
"""

from __future__ import annotations

import logging
import uuid

import pytest

# tests/storage is on sys.path (pytest's default "prepend" import mode); helpers live in a module of
# their own because `from conftest import ...` could pick up tests/conftest.py instead.
from s3_testing import FAKE_ENV, UNSET_ENV, FaultProxy, client_via


@pytest.fixture(scope="session")
def aws_env():
    """Fake credentials for the whole storage session (subprocesses inherit them)."""
    with pytest.MonkeyPatch.context() as mp:
        for name in UNSET_ENV:
            mp.delenv(name, raising=False)
        for name, value in FAKE_ENV.items():
            mp.setenv(name, value)
        mp.setenv("NO_PROXY", "127.0.0.1,localhost")
        yield FAKE_ENV


@pytest.fixture(scope="session")
def moto_server(aws_env):
    """``(host, port)`` of a moto S3 server running in this process for the whole session."""
    from moto.server import ThreadedMotoServer

    logging.getLogger("werkzeug").setLevel(logging.WARNING)  # one log line per request drowns failures
    server = ThreadedMotoServer(ip_address="127.0.0.1", port=0, verbose=False)
    server.start()
    yield server.get_host_and_port()
    server.stop()


@pytest.fixture
def s3(moto_server):
    """A client straight to the server (no proxy), for arranging and checking test state."""
    from posttrain.storage.s3 import make_client

    return make_client(endpoint_url=f"http://{moto_server[0]}:{moto_server[1]}", max_attempts=1)


@pytest.fixture
def bucket(s3) -> str:
    """A fresh bucket per test, so tests never see each other's objects."""
    name = f"pt-{uuid.uuid4().hex[:16]}"
    s3.create_bucket(Bucket=name)
    return name


@pytest.fixture
def proxy(moto_server):
    """A started `FaultProxy` in front of the server; no faults until a test sets ``proxy.rule``."""
    p = FaultProxy(moto_server)
    yield p
    p.stop()


@pytest.fixture
def via_proxy(proxy):
    return client_via(proxy)
