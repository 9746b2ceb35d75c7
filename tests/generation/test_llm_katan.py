"""The API engines against a server posttrain did not write: llm-katan (PyPI), which speaks the OpenAI,
Anthropic and Vertex/Gemini APIs with an echo backend and injects faults (--error-rate, --rate-limit-after,
--timeout-after, --latency-ms, --max-inflight). The fakes in test_api_engines.py check posttrain's side
of each protocol; this checks that side against someone else's reading of the same protocols.

Each server is a real `llm-katan` process on 127.0.0.1, on a port the kernel picked free (safe under
pytest-xdist: every worker starts its own). The echo backend answers with the request's last user
message, so a prompt that holds its own gold answer (`<answer>N</answer>`) is answered right: what
is being tested is the transport, the retries and the scoring of failures.
"""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import time
from pathlib import Path

import llm_katan  # noqa: F401  (the test extra installs it; a missing one fails here, it is not skipped)
import pytest

from posttrain.generation.base import SamplingParams
from posttrain.generation.engines import make_engine

KEYS = {"openai": "katan-openai-key", "anthropic": "katan-anthropic-key", "vertexai": "katan-vertex-token"}
PARAMS = SamplingParams(max_new_tokens=32, temperature=0.0)
FAST_RETRIES = {"backoff_base": 0.01, "backoff_max": 0.05, "progress": False}


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Katan:
    """One llm-katan process; `root` is http://127.0.0.1:PORT."""

    def __init__(self, tmp: Path, *faults: str):
        for _ in range(3):  # a port taken between picking and binding: pick another
            self.port = free_port()
            self.log = tmp / f"katan-{self.port}.log"
            cmd = [sys.executable, "-c", "from llm_katan.cli import main; main()", "--model", "katan-echo", "--backend", "echo",
                   "--providers", "openai,anthropic,vertexai", "--host", "127.0.0.1", "--port", str(self.port),
                   "--validate-keys", "--api-keys", ",".join(f"{k}={v}" for k, v in KEYS.items()),
                   "--stats-file", str(tmp / f"stats-{self.port}.json"), "--log-level", "warning", *faults]
            with self.log.open("wb") as out:
                self.process = subprocess.Popen(cmd, stdout=out, stderr=subprocess.STDOUT, env={**os.environ, "HOME": str(tmp)})
            if self._wait_ready():
                return
            if self.process.poll() is None:  # still starting after a minute: not a port clash
                self.close()
                break
        raise RuntimeError(f"llm-katan did not start: {self.log.read_text()[-2000:]}")

    @property
    def root(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def _wait_ready(self, seconds: float = 60.0) -> bool:
        import httpx

        deadline = time.monotonic() + seconds
        while time.monotonic() < deadline and self.process.poll() is None:
            try:
                if httpx.get(f"{self.root}/health", timeout=1.0).status_code == 200:
                    return True
            except httpx.HTTPError:
                pass
            time.sleep(0.1)
        return False

    def close(self) -> None:
        if self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(10)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()


@pytest.fixture(scope="module")
def katan(tmp_path_factory):
    """katan(*faults) -> a running server with those fault flags; all are stopped at the end of the module."""
    servers: dict[tuple, Katan] = {}

    def start(*faults: str) -> Katan:
        if faults not in servers:
            servers[faults] = Katan(tmp_path_factory.mktemp("katan"), *faults)
        return servers[faults]

    yield start
    for server in servers.values():
        server.close()


def engine(provider: str, server: Katan, **options):
    """An engine of each provider posttrain has for these APIs, pointed at the server as its users would."""
    roots = {"openai": f"{server.root}/v1", "anthropic": server.root, "vertex": f"{server.root}/v1beta"}
    key = KEYS["vertexai" if provider == "vertex" else provider]
    return make_engine(f"{provider}:katan-echo", base_url=roots[provider], api_key=key, **{**FAST_RETRIES, **options})


PROVIDERS = ("openai", "anthropic", "vertex")


def prompts(n: int) -> list[str]:
    return [f"Repeat this: <answer>{i}</answer>" for i in range(n)]


@pytest.mark.parametrize("provider", PROVIDERS)
def test_each_engine_talks_to_katan_with_the_key_where_it_expects_it(katan, provider):
    """--validate-keys: a key in the wrong header (Gemini's x-goog-api-key on Vertex) would be a 401."""
    server = katan()
    out = engine(provider, server).generate(prompts(3) + [[{"role": "system", "content": "Be brief."},
                                                           {"role": "user", "content": "<answer>9</answer>"}]], PARAMS)
    assert [c.error for c in out] == [None] * 4
    assert all(f"<answer>{i}</answer>" in c.text for i, c in enumerate(out[:3])) and "<answer>9</answer>" in out[3].text
    assert all(c.prompt_tokens and c.completion_tokens for c in out)
    assert all(c.extra["attempts"] == 1 for c in out)


def test_anthropic_base_url_with_or_without_v1(katan):
    """The Anthropic SDK's base_url has no /v1 (it adds /v1/messages); posttrain's examples have it. Both work."""
    server = katan()
    for root in (server.root, f"{server.root}/", f"{server.root}/v1"):
        out = make_engine("anthropic:katan-echo", base_url=root, api_key=KEYS["anthropic"], **FAST_RETRIES).generate(prompts(1), PARAMS)
        assert out[0].error is None and "<answer>0</answer>" in out[0].text, root


def test_a_wrong_key_stops_at_once(katan):
    server = katan()
    with pytest.raises(Exception) as e:
        make_engine("openai:katan-echo", base_url=f"{server.root}/v1", api_key="wrong-key", **FAST_RETRIES).generate(prompts(2), PARAMS)
    assert "HTTP 401" in str(e.value) and "check the API key" in str(e.value) and "wrong-key" not in str(e.value)


@pytest.mark.parametrize("provider", PROVIDERS)
def test_error_rate_is_survived_by_retries(katan, provider):
    """--error-rate 0.3: HTTP 500 on ~30% of requests; with retries every item is answered."""
    server = katan("--error-rate", "0.3")
    out = engine(provider, server, max_retries=8, max_workers=4).generate(prompts(30), PARAMS)
    assert [c.error for c in out] == [None] * 30
    assert all(f"<answer>{i}</answer>" in c.text for i, c in enumerate(out))
    assert sum(c.extra["attempts"] - 1 for c in out) >= 1  # P(no 500 in 30 tries) = 0.7^30 ~ 2e-5


@pytest.mark.parametrize("fault, status", [("--rate-limit-after", "HTTP 429"), ("--timeout-after", "HTTP 504")])
def test_a_server_that_stops_answering_gives_error_rows_not_answers(katan, fault, status):
    """After 4 requests every answer is 429 (rate limited) / 504 (gateway timeout): retried, then an error row."""
    server = katan(fault, "4")
    out = engine("openai", server, max_retries=2, max_workers=1, on_error="continue").generate(prompts(7), PARAMS)
    assert [c.error is None for c in out] == [True] * 4 + [False] * 3
    assert all(status in c.error and "(3 attempts)" in c.error and c.finish_reason == "error" and c.text == "" for c in out[4:])


def test_latency_beyond_the_timeout_is_an_error_and_within_it_an_answer(katan):
    server = katan("--latency-ms", "400")
    slow = engine("anthropic", server, timeout=0.1, max_retries=1, on_error="continue").generate(prompts(2), PARAMS)
    assert all("no answer within the timeout of 0.1 s" in c.error for c in slow)
    fine = engine("anthropic", server, timeout=5).generate(prompts(2), PARAMS)
    assert [c.error for c in fine] == [None, None]


def test_max_inflight_overload_is_retried_until_everything_is_answered(katan):
    """--max-inflight 2 with 8 requests in flight: the excess get 503 and are retried."""
    server = katan("--max-inflight", "2", "--latency-ms", "50")
    # backoff up to 1 s: the 16 requests need ~0.4 s of the server's 2 slots; with the other tests' 0.05 s cap,
    # 11 attempts span ~0.3 s and a loaded machine starved one request through all of them (seen in CI)
    out = engine("vertex", server, max_workers=8, max_retries=10, backoff_base=0.05, backoff_max=1.0).generate(prompts(16), PARAMS)
    assert [c.error for c in out] == [None] * 16
    assert sum(c.extra["attempts"] > 1 for c in out) >= 1


def test_compare_across_an_outage_reports_no_verdict(katan, tmp_path, monkeypatch):
    """The review's case: the second arm is rate-limited throughout. Its failures are not wrong answers: it has
    0 items scored, and the pair gets no verdict (before: 0.0% (0/12) and a 'significant regression')."""
    from posttrain.cli import main

    server = katan("--rate-limit-after", "12")
    data = tmp_path / "items.jsonl"
    data.write_text("".join(json.dumps({"prompt": p, "answer": str(i)}) + "\n" for i, p in enumerate(prompts(12))))
    monkeypatch.setenv("KATAN_KEY", KEYS["openai"])
    out = tmp_path / "cmp"
    # arm a answers the first 12 requests; arm b, evaluated second, meets the rate limit (one counter per server)
    assert main(["compare", "--arm", "a=openai:katan-echo", "--arm", "b=openai:katan-echo-2", "--task", "custom",
                 "--data", str(data), "--base-url", f"{server.root}/v1", "--api-key-env", "KATAN_KEY", "--retries", "0",
                 "--on-error", "continue", "--no-progress", "--out", str(out), "--max-new-tokens", "16"]) == 0
    report = json.loads((out / "report.json").read_text())
    a, b = report["arms"]
    assert (a["n"], a["errors"], a["strict_correct"]) == (12, 0, 12)
    assert (b["n"], b["errors"]) == (0, 12)
    assert {c["verdict"] for c in report["comparisons"]} == {"no verdict: every one of the 12 items failed in A or B"}
