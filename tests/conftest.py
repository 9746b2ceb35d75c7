"""Shared fixtures: an isolated model cache, generated data, and a way to run the real CLI."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="session", autouse=True)
def isolated_cache(tmp_path_factory):
    """Tiny models build once per test session into a private cache (subprocesses inherit it)."""
    cache = tmp_path_factory.mktemp("posttrain-cache")
    old = os.environ.get("POSTTRAIN_CACHE")
    os.environ["POSTTRAIN_CACHE"] = str(cache)
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    os.environ.setdefault("HF_DATASETS_OFFLINE", "1")
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
    yield cache
    if old is None:
        os.environ.pop("POSTTRAIN_CACHE", None)
    else:
        os.environ["POSTTRAIN_CACHE"] = old


@pytest.fixture(scope="session")
def tiny_dir(isolated_cache) -> Path:
    from posttrain.models.tiny import resolve_tiny

    return resolve_tiny("tiny:qwen2-1m")


@pytest.fixture(scope="session")
def data_dir(tmp_path_factory) -> Path:
    """Generated arithmetic data in every format (sft.jsonl, messages.jsonl, text.jsonl, problems.jsonl)."""
    from posttrain.data.synthetic import write_all

    out = tmp_path_factory.mktemp("data")
    write_all(out, n=64, seed=0)
    return out


def run_cli(*args: str, cwd: Path = REPO, timeout: int = 300, env: dict | None = None) -> subprocess.CompletedProcess:
    """Run `python -m posttrain ARGS` as a user would; returns the completed process (text output)."""
    return subprocess.run([sys.executable, "-m", "posttrain", *map(str, args)], cwd=cwd, capture_output=True, text=True,
                          timeout=timeout, env={**os.environ, **(env or {})})


@pytest.fixture(scope="session")
def cli():
    """The real CLI in a subprocess: cli("train", "--recipe", ...) -> CompletedProcess."""
    return run_cli


@pytest.fixture(scope="session")
def repo() -> Path:
    return REPO


@pytest.fixture(scope="session")
def tiny_vlm_dir(isolated_cache) -> Path:
    """The tiny LLaVA-style vision-language model (2m), built once per session."""
    from posttrain.models.tiny import resolve_tiny

    return resolve_tiny("tiny:llava-2m")


@pytest.fixture
def http_server():
    """Start `ScriptedServer`s (tests/scripted_http.py) on 127.0.0.1; all are closed after the test."""
    from scripted_http import ScriptedServer

    servers = []

    def start(files: dict[str, bytes] | None = None, **kwargs) -> ScriptedServer:
        servers.append(ScriptedServer(files, **kwargs))
        return servers[-1]

    yield start
    for server in servers:
        server.close()
