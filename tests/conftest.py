"""Shared fixtures: an isolated model cache, generated data, and a way to run the real CLI."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]


def _share_cores_between_workers() -> None:
    """Under pytest-xdist (`make test` runs `-n 2`), each worker gets its share of the cores for torch's
    intra-op threads, and so do the CLI runs it starts (they inherit OMP_NUM_THREADS). Two workers of
    2 threads each on 2 cores oversubscribe them: torch's OpenMP threads spin-wait for each other.
    Set before torch is imported, which reads it once; a value the caller set is kept."""
    workers = int(os.environ.get("PYTEST_XDIST_WORKER_COUNT") or 0)
    if workers > 1:
        cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)
        threads = str(max(1, cores // workers))
        for name in ("OMP_NUM_THREADS", "MKL_NUM_THREADS"):
            os.environ.setdefault(name, threads)


_share_cores_between_workers()


def pytest_collection_modifyitems(config, items):
    """The long files first. `make test` hands whole files to 2 workers as they free up (pytest-xdist,
    --dist loadfile --no-loadscope-reorder); a file of minutes that starts last ends last while the
    other worker idles. So: files marked `slow`, then `e2e`, then the rest, each group in collection
    order (a stable sort: every worker collects the same order, as xdist requires)."""
    def rank(item) -> int:
        return 0 if item.get_closest_marker("slow") else 1 if item.get_closest_marker("e2e") else 2

    items.sort(key=rank)


@pytest.fixture(scope="session", autouse=True)
def isolated_cache(tmp_path_factory):
    """Tiny models build once per test session into a private cache (subprocesses inherit it).

    Under pytest-xdist the workers share one cache (in the session's common temporary folder), so a
    tiny model or the SmolLM2 GGUF conversion is built once, not once per worker: `resolve_tiny` and
    the GGUF converter take turns on a flock per entry (posttrain.locks), the others wait and reuse it."""
    if os.environ.get("PYTEST_XDIST_WORKER"):
        cache = tmp_path_factory.getbasetemp().parent / "posttrain-cache"
        cache.mkdir(exist_ok=True)
    else:
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
    """Run `python -m posttrain ARGS` as a user would; returns the completed process (text output).
    A new process each time, forked from one that has done the imports (tests/cli_zygote.py)."""
    from cli_zygote import run_posttrain

    return run_posttrain([str(a) for a in args], cwd=cwd, env={**os.environ, **(env or {})}, timeout=timeout)


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
