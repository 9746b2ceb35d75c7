"""`eval` and `compare` take generate's engine flags (one shared definition) and reach a real
OpenAI-compatible server on 127.0.0.1 with them; the generation cache tells two endpoints apart."""

from __future__ import annotations

import json
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from posttrain.cli import build_parser
from posttrain.cli import main as posttrain_main
from posttrain.commands.engine_flags import FLAG_OPTIONS

KEY = "sk-eval-flags-7Hq2SECRET"


class Server:
    """Answers /v1/chat/completions with "<answer>{label}</answer>", or 400 for prompts holding
    `fail_word`; records the requests (auth header, max concurrency)."""

    def __init__(self, label: str, fail_word: str | None = None):
        self.label, self.fail_word = label, fail_word
        self.requests: list[dict] = []
        self.lock = threading.Lock()
        server = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self):
                body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
                with server.lock:
                    server.requests.append({"path": self.path, "auth": self.headers.get("Authorization"), "body": body})
                text = json.dumps(body["messages"])
                if server.fail_word and server.fail_word in text:
                    status, answer = 400, {"error": {"message": "bad request"}}
                else:
                    status, answer = 200, {"choices": [{"message": {"content": f"<answer>{server.label}</answer>"}, "finish_reason": "stop"}],
                                           "usage": {"prompt_tokens": 3, "completion_tokens": 2}}
                data = json.dumps(answer).encode()
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def log_message(self, *args):
                pass

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.httpd.daemon_threads = True
        self.base_url = f"http://127.0.0.1:{self.httpd.server_address[1]}/v1"
        threading.Thread(target=self.httpd.serve_forever, kwargs={"poll_interval": 0.02}, daemon=True).start()

    def close(self):
        self.httpd.shutdown()
        self.httpd.server_close()


@pytest.fixture
def servers():
    made = [Server("7"), Server("8", fail_word="item 2")]
    yield made
    for s in made:
        s.close()


@pytest.fixture
def data(tmp_path):
    path = tmp_path / "q.jsonl"
    path.write_text("".join(json.dumps({"prompt": f"item {i}: what is 3 + 4?", "answer": 7}) + "\n" for i in range(4)))
    return path


def test_generate_eval_and_compare_share_one_definition_of_the_engine_flags():
    parser = build_parser()
    sub = next(a for a in parser._actions if a.dest == "command").choices
    flags = {name: {a.dest: a.option_strings for a in sub[name]._actions} for name in ("generate", "eval", "compare")}
    for dest in FLAG_OPTIONS:
        assert flags["generate"][dest] == flags["eval"][dest] == flags["compare"][dest], dest
    for flag in ("--base-url", "--api-key-env", "--concurrency", "--timeout", "--on-error"):
        assert any(flag in opts for opts in flags["compare"].values()), flag


def test_eval_reaches_the_endpoint_with_the_flags_and_caches_per_endpoint(servers, data, tmp_path, monkeypatch):
    a, b = servers
    monkeypatch.setenv("MY_EVAL_KEY", KEY)
    common = ["eval", "--model", "openai:fake", "--task", "custom", "--data", str(data), "--api-key-env", "MY_EVAL_KEY",
              "--concurrency", "2", "--timeout", "5", "--retries", "0", "--no-progress", "--cache-dir", str(tmp_path / "cache")]
    assert posttrain_main([*common, "--base-url", a.base_url, "--out", str(tmp_path / "a")]) == 0
    assert len(a.requests) == 4 and {r["auth"] for r in a.requests} == {f"Bearer {KEY}"}
    assert {r["path"] for r in a.requests} == {"/v1/chat/completions"}
    summary = json.loads((tmp_path / "a" / "summary.json").read_text())["arms"][0]
    assert summary["strict_correct"] == 4  # server a answers 7, the gold answer

    # Same model name, same cache, another server: regenerated, not served from a's cache.
    out_b = tmp_path / "b"
    assert posttrain_main([*common, "--base-url", b.base_url, "--on-error", "continue", "--out", str(out_b)]) == 0
    assert len(b.requests) == 4
    samples = [json.loads(line) for line in (out_b / "samples.jsonl").read_text().splitlines()]
    assert sorted(s["completion"] for s in samples) == ["", "<answer>8</answer>", "<answer>8</answer>", "<answer>8</answer>"]
    assert json.loads((out_b / "summary.json").read_text())["arms"][0]["errors"] == 1

    # Back to a: everything from the cache, no request sent.
    assert posttrain_main([*common, "--base-url", a.base_url, "--out", str(tmp_path / "a2")]) == 0
    assert len(a.requests) == 4
    # credentials in --base-url never reach report files
    url = a.base_url.replace("http://", "http://bob:pw-SECRET@") + "?api_key=SECRET2"
    assert posttrain_main([*common, "--base-url", url, "--out", str(tmp_path / "a3")]) == 0
    written = "".join(p.read_text() for p in (tmp_path / "a3").glob("summary.*"))
    assert "bob:***@" in written and "SECRET" not in written
    # --on-error fail (the default) stops at b's failing item with exit 2.
    assert posttrain_main([*common, "--base-url", b.base_url, "--no-cache", "--out", str(tmp_path / "b2")]) == 2


def test_compare_passes_the_flags_to_api_arms_only(servers, data, tmp_path, monkeypatch, capsys):
    a, _ = servers
    monkeypatch.setenv("MY_EVAL_KEY", KEY)
    argv = ["compare", "--arm", "api=openai:fake", "--arm", "local=tiny:qwen2-1m", "--task", "custom", "--data", str(data),
            "--base-url", a.base_url, "--api-key-env", "MY_EVAL_KEY", "--concurrency", "1", "--timeout", "5",
            "--on-error", "fail", "--batch-size", "2", "--max-new-tokens", "3", "--no-progress", "--out", str(tmp_path / "c")]
    assert posttrain_main(argv) == 0
    assert len(a.requests) == 4
    report = json.loads((tmp_path / "c" / "report.json").read_text())
    assert [(r["arm"], r["strict_correct"]) for r in report["arms"]][0] == ("api", 4)


def test_an_engine_flag_that_fits_no_arm_is_an_error(tmp_path, capsys):
    argv = ["compare", "--arm", "a=tiny:qwen2-1m", "--task", "arithmetic", "--n", "2", "--concurrency", "4",
            "--out", str(tmp_path / "c")]
    assert posttrain_main(argv) == 2
    assert "--concurrency applies to api models only" in capsys.readouterr().err
    assert not (tmp_path / "c").exists()
