"""`cached_download`: once per machine, no network on a hit, processes wait, partial never used."""

from __future__ import annotations

import fcntl
import os
import select
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from posttrain.storage.cache import cache_entry, cached_download
from posttrain.storage.errors import StorageError
from posttrain.storage.s3 import make_client, upload_dir

CHILD = """
import logging, sys
log = logging.getLogger("posttrain.storage")
log.addHandler(logging.StreamHandler(sys.stderr))
log.setLevel(logging.INFO)
from posttrain.storage.cache import cached_download
from posttrain.storage.s3 import make_client
uri, root, endpoint = sys.argv[1:4]
print(cached_download(uri, cache_root=root, client=make_client(endpoint_url=endpoint, max_attempts=1), backoff=0.01))
"""


def child(uri: str, root: Path, endpoint: str) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, "-c", CHILD, uri, str(root), endpoint], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)


def read_line(p: subprocess.Popen, timeout: float) -> str:
    """The next line ``p`` writes to stderr, or a failure after ``timeout`` seconds (never a hang)."""
    ready, _, _ = select.select([p.stderr], [], [], timeout)
    assert ready, f"no output from the child within {timeout} s"
    return p.stderr.readline()


def dead_endpoint_client():
    """A client whose endpoint refuses every connection: any network use fails loudly."""
    import socket

    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    return make_client(endpoint_url=f"http://127.0.0.1:{port}", max_attempts=1, connect_timeout=1)


def test_model_dir_downloads_once_then_hits_the_cache(tiny_dir, tmp_path, s3, bucket, proxy, via_proxy):
    upload_dir(s3, tiny_dir, bucket, "models/tiny-sft")
    uri = f"s3://{bucket}/models/tiny-sft/"

    path = cached_download(uri, cache_root=tmp_path, client=via_proxy, backoff=0.01)
    assert path.name == "tiny-sft" and path.parent == cache_entry(uri, tmp_path)
    assert path.parent.parent == tmp_path / "s3"
    for f in tiny_dir.iterdir():
        if f.is_file():
            assert (path / f.name).read_bytes() == f.read_bytes(), f.name
    from transformers import AutoConfig

    assert AutoConfig.from_pretrained(path).hidden_size == AutoConfig.from_pretrained(tiny_dir).hidden_size

    requests = len(proxy.requests)
    again = cached_download(f"s3://{bucket}/models/tiny-sft", cache_root=tmp_path, client=via_proxy)
    assert again == path and len(proxy.requests) == requests  # a hit: not one request
    assert cached_download(uri, cache_root=tmp_path, client=dead_endpoint_client()) == path


def test_single_jsonl_object_returns_the_file(tmp_path, s3, bucket, proxy, via_proxy, monkeypatch):
    rows = b'{"prompt": "1+1", "completion": "2"}\n{"prompt": "2+2", "completion": "4"}\n'
    s3.put_object(Bucket=bucket, Key="data/train.jsonl", Body=rows)
    monkeypatch.setenv("POSTTRAIN_CACHE", str(tmp_path / "env-cache"))  # the default cache root
    uri = f"s3://{bucket}/data/train.jsonl"

    path = cached_download(uri, client=via_proxy)
    assert path.is_file() and path.name == "train.jsonl" and path.read_bytes() == rows
    assert path.is_relative_to(tmp_path / "env-cache" / "s3")
    before = len(proxy.requests)
    proxy.stop()  # the server is gone: a second call must not need it
    assert cached_download(uri) == path  # client=None: none is even created on a hit
    assert len(proxy.requests) == before


def test_missing_uri_is_a_clear_error_and_caches_nothing(tmp_path, s3, bucket):
    with pytest.raises(StorageError, match=r"nothing at s3://.*/data/nope\.jsonl"):
        cached_download(f"s3://{bucket}/data/nope.jsonl", cache_root=tmp_path, client=s3)
    assert [p.name for p in (tmp_path / "s3").iterdir() if not p.name.endswith(".lock")] == []


def test_two_processes_racing_download_once(tmp_path, s3, bucket, proxy):
    s3.put_object(Bucket=bucket, Key="data/big.jsonl", Body=b'{"text": "x"}\n' * 5000)
    uri = f"s3://{bucket}/data/big.jsonl"
    entry = cache_entry(uri, tmp_path)
    entry.parent.mkdir(parents=True)
    # Hold the entry's lock while both children start, so both must queue on it: the race is certain.
    with open(entry.parent / f"{entry.name}.lock", "a+") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        procs = [child(uri, tmp_path, proxy.url) for _ in range(2)]
        for p in procs:
            assert "waiting for another process" in read_line(p, timeout=30)
        fcntl.flock(lock, fcntl.LOCK_UN)
    outs = [p.communicate(timeout=60) for p in procs]
    assert [p.returncode for p in procs] == [0, 0], outs
    paths = {Path(out.strip()) for out, _ in outs}
    assert paths == {entry / "big.jsonl"}
    assert proxy.count("GET", "/data/big.jsonl") == 1  # one download; the second process found it done
    assert proxy.count("HEAD", "/data/big.jsonl") >= 1
    assert [p.name for p in tmp_path.joinpath("s3").iterdir() if ".partial-" in p.name] == []


def test_a_killed_download_is_never_used_and_is_cleaned_up(tmp_path, s3, bucket, proxy):
    rows = b'{"text": "hello"}\n' * 100
    s3.put_object(Bucket=bucket, Key="data/train.jsonl", Body=rows)
    uri = f"s3://{bucket}/data/train.jsonl"
    proxy.rule = lambda r: ("delay", 30) if r.method == "GET" and r.key_path.endswith("train.jsonl") else None

    p = child(uri, tmp_path, proxy.url)
    deadline = time.monotonic() + 30
    while proxy.count("GET", "train.jsonl") == 0:
        assert time.monotonic() < deadline and p.poll() is None, p.communicate()
        time.sleep(0.05)
    os.kill(p.pid, signal.SIGKILL)  # a crash mid-download
    p.wait()
    entry = cache_entry(uri, tmp_path)
    assert not entry.exists()
    assert [q.name for q in entry.parent.iterdir() if ".partial-" in q.name]  # the debris of the crash

    proxy.rule = lambda r: None
    path = cached_download(uri, cache_root=tmp_path, client=make_client(endpoint_url=proxy.url, max_attempts=1))
    assert path.read_bytes() == rows  # the kernel released the dead process's lock: no hang
    assert [q.name for q in entry.parent.iterdir() if ".partial-" in q.name] == []
