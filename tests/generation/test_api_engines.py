"""API engines against real HTTP servers on 127.0.0.1 that speak each provider's wire format and
check what arrives (path, auth headers, body shape): retries, Retry-After, timeouts, failure
policy, concurrency limit, and that the key never leaks (including through the real CLI)."""

from __future__ import annotations

import base64
import io
import json
import os
import subprocess
import sys
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from posttrain.errors import UserError
from posttrain.generation.api import AnthropicEngine, GeminiEngine, OpenAIEngine, Secret, parse_retry_after
from posttrain.generation.base import SamplingParams

KEY = "sk-test-Zq81hT0pSECRETvalue"
MODEL = "fake-model"
PARAMS = SamplingParams(max_new_tokens=16)
FAST = dict(backoff_base=0.001, backoff_max=0.01, progress=False)  # keep retry delays tiny


class FakeProvider:
    """A ThreadingHTTPServer speaking one provider's API. `script` lists what to do for the 1st,
    2nd, ... request ("ok", ("status", code, headers), "hang", "truncate"); requests beyond it are answered
    "ok". A request with a wrong path, header or body gets 400/401 (echoing the key it received,
    as some providers do), so an engine that sends the wrong thing fails the test."""

    def __init__(self, provider: str, key: str | None = KEY, script=(), delay: float = 0.0):
        self.provider, self.key, self.script, self.delay = provider, key, list(script), delay
        self.requests: list[dict] = []
        self.lock = threading.Lock()
        self.in_flight = self.max_in_flight = 0
        self.release = threading.Event()
        fake = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self):
                fake.handle(self)

            def log_message(self, *args):
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        self.base_url = self.url + ("/v1beta" if provider == "gemini" else "/v1")
        threading.Thread(target=self.server.serve_forever, kwargs={"poll_interval": 0.02}, daemon=True).start()

    def close(self):
        self.release.set()
        self.server.shutdown()
        self.server.server_close()

    def handle(self, h: BaseHTTPRequestHandler):
        body = json.loads(h.rfile.read(int(h.headers["Content-Length"])))
        with self.lock:
            self.requests.append({"path": h.path, "headers": {k.lower(): v for k, v in h.headers.items()}, "body": body})
            action = self.script.pop(0) if self.script else "ok"
            self.in_flight += 1
            self.max_in_flight = max(self.max_in_flight, self.in_flight)
        try:
            time.sleep(self.delay)
            if action == "hang":
                self.release.wait(30)
                return
            if action == "truncate":  # promise a whole answer, send half of it, close
                data = json.dumps(self.answer(body)).encode()
                h.send_response(200)
                h.send_header("Content-Length", str(len(data)))
                h.end_headers()
                h.wfile.write(data[: len(data) // 2])
                return
            problem = self.check_auth(h) or self.check_request(h.path, body)
            if problem:
                return self.send(h, *problem)
            if action != "ok":
                _, code, headers = action
                return self.send(h, code, {"error": {"message": f"scripted {code}"}}, headers)
            answer = self.answer(body)
            with self.lock:  # no longer in flight once answered: the client's next request may arrive before this thread resumes
                self.in_flight, action = self.in_flight - 1, "answered"
            self.send(h, 200, answer)
        finally:
            if action != "answered":
                with self.lock:
                    self.in_flight -= 1

    @staticmethod
    def send(h, code: int, payload: dict, headers: dict | None = None):
        data = json.dumps(payload).encode()
        h.send_response(code)
        h.send_header("Content-Type", "application/json")
        h.send_header("Content-Length", str(len(data)))
        for name, value in (headers or {}).items():
            h.send_header(name, value)
        h.end_headers()
        h.wfile.write(data)

    def check_auth(self, h):
        header = {"openai": "Authorization", "anthropic": "x-api-key", "gemini": "x-goog-api-key"}[self.provider]
        given = h.headers.get(header)
        expected = None if self.key is None else f"Bearer {self.key}" if self.provider == "openai" else self.key
        if given != expected:
            return 401, {"error": {"message": f"Incorrect API key provided: {given}", "type": "invalid_request_error"}}
        if self.provider == "anthropic" and h.headers.get("anthropic-version") != "2023-06-01":
            return 400, {"error": {"message": "anthropic-version header missing"}}
        return None

    def check_request(self, path: str, body: dict):
        """The request shape each provider documents; None when it is right."""
        p = self.provider
        expected_path = {"openai": "/v1/chat/completions", "anthropic": "/v1/messages", "gemini": f"/v1beta/models/{MODEL}:generateContent"}[p]
        if path != expected_path:
            return 404, {"error": {"message": f"no route {path}"}}
        if p == "openai":
            ok = body.get("model") == MODEL and "max_tokens" in body and all({"role", "content"} <= set(m) for m in body["messages"])
            ok = ok and self.tool_turns_are_openais(body)
        elif p == "anthropic":
            ok = body.get("model") == MODEL and isinstance(body.get("max_tokens"), int) and all(m["role"] in ("user", "assistant") for m in body["messages"])
        else:
            ok = "model" not in body and all(c["role"] in ("user", "model") and c["parts"] for c in body["contents"]) and "maxOutputTokens" in body["generationConfig"]
        try:
            for turn in body.get("contents") or body["messages"]:
                self.read_content(turn)
        except (KeyError, TypeError, ValueError, AssertionError) as e:
            ok, body = False, f"{body} ({type(e).__name__}: {e})"
        return None if ok else (400, {"error": {"message": f"bad request body {body}"}})

    @staticmethod
    def tool_turns_are_openais(body: dict) -> bool:
        """OpenAI's tool-call format: tools as {"type": "function", "function": {...}}; an assistant's calls
        with ids and JSON-text arguments; each tool result answering the id of a call made before it."""
        if any(t.get("type") != "function" or "name" not in t.get("function", {}) for t in body.get("tools", [])):
            return False
        ids = set()
        for m in body["messages"]:
            for call in m.get("tool_calls") or []:
                if not (call.get("id") and call.get("type") == "function" and isinstance(call["function"].get("arguments"), str)):
                    return False
                json.loads(call["function"]["arguments"])
                ids.add(call["id"])
            if m["role"] == "tool" and m.get("tool_call_id") not in ids:
                return False
        return True

    def read_content(self, turn: dict) -> tuple[str, list]:
        """(text, images) of one turn, accepting only this provider's documented part shapes:
        OpenAI text / image_url with a base64 data URI, Anthropic text / image with a base64 source,
        Gemini text / inline_data. Images are decoded, so a test sees the pixels that arrived."""
        from PIL import Image

        def image(mime: str, data: str):
            assert mime in ("image/png", "image/jpeg"), mime
            return Image.open(io.BytesIO(base64.b64decode(data, validate=True))).convert("RGB")

        p = self.provider
        if p != "gemini" and isinstance(turn["content"], str):
            return turn["content"], []
        if p == "openai" and turn["content"] is None and turn.get("tool_calls"):  # a turn of calls only
            return "", []
        texts, images = [], []
        for part in turn["parts"] if p == "gemini" else turn["content"]:
            if p == "gemini" and set(part) == {"text"}:
                texts.append(part["text"])
            elif p == "gemini":
                assert set(part) == {"inline_data"}, part
                images.append(image(part["inline_data"]["mime_type"], part["inline_data"]["data"]))
            elif part["type"] == "text":
                texts.append(part["text"])
            elif p == "openai":
                assert part["type"] == "image_url", part
                header, data = part["image_url"]["url"].split(",", 1)
                assert header.startswith("data:") and header.endswith(";base64"), header
                images.append(image(header[5:-7], data))
            else:
                assert part["type"] == "image" and part["source"]["type"] == "base64", part
                images.append(image(part["source"]["media_type"], part["source"]["data"]))
        return "".join(texts), images

    def answer(self, body: dict) -> dict:
        """Echo the last user text, with usage: prompt tokens = words sent, completion tokens = 7.
        OpenAI with tools offered: a question "What is X?" gets a call of the first tool with
        {"expression": "X"}; a tool result R gets the answer "The answer is R."."""
        p = self.provider
        if p == "openai" and body.get("tools"):
            last = body["messages"][-1]
            usage = {"prompt_tokens": 5, "completion_tokens": 7}
            if last["role"] == "tool":
                return {"choices": [{"message": {"role": "assistant", "content": f"The answer is {last['content']}."},
                                     "finish_reason": "stop"}], "usage": usage}
            expression = last["content"].removeprefix("What is ").rstrip("?")
            call = {"id": f"call_{len(self.requests)}", "type": "function",
                    "function": {"name": body["tools"][0]["function"]["name"], "arguments": json.dumps({"expression": expression})}}
            return {"choices": [{"message": {"role": "assistant", "content": None, "tool_calls": [call]}, "finish_reason": "tool_calls"}],
                    "usage": usage}
        turns = body["contents"] if p == "gemini" else body["messages"]
        last, images = self.read_content(turns[-1])
        system = {"openai": None, "anthropic": body.get("system"), "gemini": (body.get("systemInstruction") or {"parts": [{}]})["parts"][0].get("text")}[p]
        text = f"echo: {last}" + "".join(f" [image {im.width}x{im.height} {im.getpixel((0, 0))}]" for im in images)
        text += f" [system: {system}]" if system else ""
        words = sum(len(self.read_content(t)[0].split()) for t in turns)
        limit = body.get("max_tokens") or body.get("max_completion_tokens") or body.get("generationConfig", {}).get("maxOutputTokens")
        truncated = limit == 1
        if p == "openai":
            return {"choices": [{"message": {"role": "assistant", "content": text}, "finish_reason": "length" if truncated else "stop"}],
                    "usage": {"prompt_tokens": words, "completion_tokens": 7}}
        if p == "anthropic":
            return {"content": [{"type": "text", "text": text}], "stop_reason": "max_tokens" if truncated else "end_turn",
                    "usage": {"input_tokens": words, "output_tokens": 7}}
        return {"candidates": [{"content": {"role": "model", "parts": [{"text": text}]}, "finishReason": "MAX_TOKENS" if truncated else "STOP"}],
                "usageMetadata": {"promptTokenCount": words, "candidatesTokenCount": 7}}


ENGINES = {"openai": OpenAIEngine, "anthropic": AnthropicEngine, "gemini": GeminiEngine}


@pytest.fixture
def serve():
    servers = []

    def start(provider, **kwargs):
        servers.append(FakeProvider(provider, **kwargs))
        return servers[-1]

    yield start
    for server in servers:
        server.close()


def make(server, **options):
    return ENGINES[server.provider](MODEL, base_url=server.base_url, api_key=KEY, **{**FAST, **options})


@pytest.mark.parametrize("provider", ENGINES)
def test_round_trip_in_order_with_usage(serve, provider):
    server = serve(provider)
    chat = [{"role": "system", "content": "be brief"}, {"role": "user", "content": "hi"},
            {"role": "assistant", "content": "hello"}, {"role": "user", "content": "and now?"}]
    prompts = [f"prompt number {i}" for i in range(6)] + [chat]
    out = make(server, max_workers=4).generate(prompts, PARAMS)
    assert [c.text for c in out[:6]] == [f"echo: prompt number {i}" for i in range(6)]
    assert all(c.prompt_tokens == 3 and c.completion_tokens == 7 and c.finish_reason == "stop" for c in out[:6])
    if provider == "openai":  # system stays a message
        assert out[6].text == "echo: and now?"
    else:  # system moved to the provider's own field
        assert out[6].text == "echo: and now? [system: be brief]"
    assert len(server.requests) == 7
    assert all(KEY not in r["path"] for r in server.requests)
    truncated = make(server).generate(["x"], SamplingParams(max_new_tokens=1))[0]
    assert truncated.finish_reason == "length"


@pytest.mark.parametrize("provider", ENGINES)
def test_image_parts_reach_each_api_in_its_own_format(serve, provider, tmp_path, monkeypatch):
    from PIL import Image

    server = serve(provider)
    red, blue = Image.new("RGB", (8, 6), (200, 30, 40)), Image.new("RGB", (3, 5), (0, 0, 255))
    (tmp_path / "blue.png").write_bytes(b"")
    blue.save(tmp_path / "blue.png")
    chat = [{"role": "system", "content": "look closely"},
            {"role": "user", "content": [{"type": "image", "image": red}, {"type": "text", "text": "what colour?"}]},
            {"role": "assistant", "content": "red"},
            {"role": "user", "content": [{"type": "text", "text": "and these?"}, {"type": "image", "image": blue},
                                         {"type": "image", "path": str(tmp_path / "blue.png")}]}]  # transformers' spelling
    first, second = make(server).generate([chat[:2], chat], PARAMS)
    system = "" if provider == "openai" else " [system: look closely]"
    assert first.text == f"echo: what colour? [image 8x6 (200, 30, 40)]{system}"
    assert second.text == f"echo: and these? [image 3x5 (0, 0, 255)] [image 3x5 (0, 0, 255)]{system}"
    assert second.prompt_tokens == (7 if provider == "openai" else 5)  # text words only (OpenAI keeps the system turn)
    import posttrain.generation.api as api

    monkeypatch.setattr(api, "IMAGE_BYTES_LIMIT", 5000)  # a PNG over the limit goes as JPEG
    big = Image.effect_noise((64, 64), 100).convert("RGB")  # noise does not compress: PNG > 5000 bytes
    out = make(server).generate([[{"role": "user", "content": [{"type": "image", "image": big}]}]], PARAMS)[0]
    assert out.text.startswith("echo:  [image 64x64") and out.error is None
    sent = json.dumps(server.requests[-1]["body"])
    assert "image/jpeg" in sent and "image/png" not in sent


def test_a_bad_image_part_is_a_user_error(serve):
    server = serve("openai")
    with pytest.raises(UserError, match="an image part cannot be read: missing_file"):
        make(server).generate([[{"role": "user", "content": [{"type": "image", "image": "/nonexistent.png"}]}]], PARAMS)
    with pytest.raises(UserError, match="unsupported message part"):
        make(server).generate([[{"role": "user", "content": [{"type": "image", "image": Image_stub()},
                                                             {"type": "audio", "audio": b""}]}]], PARAMS)
    assert server.requests == []


def Image_stub():
    from PIL import Image

    return Image.new("RGB", (2, 2))


def test_openai_sends_sampling_params_and_picks_the_token_field_by_url(serve):
    server = serve("openai")
    make(server).generate(["hi"], SamplingParams(max_new_tokens=5, temperature=0.7, top_p=0.9, seed=3))
    body = server.requests[0]["body"]
    assert (body["max_tokens"], body["temperature"], body["top_p"], body["seed"]) == (5, 0.7, 0.9, 3)
    assert body["messages"] == [{"role": "user", "content": "hi"}]
    official = OpenAIEngine(MODEL, api_key=KEY)
    assert official.max_tokens_field == "max_completion_tokens"


def test_openai_compatible_server_without_a_key_gets_no_auth_header(serve, monkeypatch):
    monkeypatch.delenv("OPENAI_API_KEY", raising=False)
    server = serve("openai", key=None)
    engine = OpenAIEngine(MODEL, base_url=server.base_url, **FAST)
    assert engine.generate(["hi"], PARAMS)[0].text == "echo: hi"
    assert "authorization" not in server.requests[0]["headers"]


@pytest.mark.parametrize("provider", ENGINES)
def test_429_then_500_then_success_is_retried(serve, provider):
    server = serve(provider, script=[("status", 429, {}), ("status", 500, {}), "ok"])
    out = make(server, max_retries=3).generate(["hi"], PARAMS)[0]
    assert out.text == "echo: hi" and out.extra["attempts"] == 3
    assert len(server.requests) == 3


def test_retry_after_is_honoured(serve):
    server = serve("openai", script=[("status", 429, {"Retry-After": "0.4"}), "ok"])
    start = time.perf_counter()
    out = make(server).generate(["hi"], PARAMS)[0]
    assert time.perf_counter() - start >= 0.4
    assert out.text == "echo: hi" and len(server.requests) == 2


def test_a_huge_retry_after_is_capped(serve):
    server = serve("gemini", script=[("status", 503, {"Retry-After": "86400"}), "ok"])
    start = time.perf_counter()
    out = make(server, retry_after_max=0.3).generate(["hi"], PARAMS)[0]
    assert 0.3 <= time.perf_counter() - start < 3
    assert out.text == "echo: hi" and out.extra["attempts"] == 2


@pytest.mark.parametrize("provider", ENGINES)
def test_an_answer_cut_short_is_retried_then_obeys_on_error(serve, provider):
    server = serve(provider, script=["truncate", "ok", "truncate", "truncate"])
    engine = make(server, max_retries=1, max_workers=1, on_error="continue")
    first, second = engine.generate(["one", "two"], PARAMS)
    assert first.text == "echo: one" and first.extra["attempts"] == 2
    assert second.finish_reason == "error" and "answer broke off" in second.error and "(2 attempts)" in second.error
    server.script = ["truncate"]
    with pytest.raises(UserError, match="answer broke off"):
        make(server, max_retries=0).generate(["three"], PARAMS)


def test_retries_run_out_with_a_message_that_says_so(serve):
    server = serve("anthropic", script=[("status", 503, {})] * 3)
    with pytest.raises(UserError, match=r"HTTP 503: scripted 503 \(3 attempts\)"):
        make(server, max_retries=2).generate(["hi"], PARAMS)
    assert len(server.requests) == 3


def test_client_errors_are_not_retried(serve):
    server = serve("gemini", script=[("status", 400, {})])
    with pytest.raises(UserError, match=r"HTTP 400: scripted 400 \(1 attempt\)"):
        make(server, max_retries=5).generate(["hi"], PARAMS)
    assert len(server.requests) == 1


def test_a_server_that_never_answers_times_out(serve):
    server = serve("openai", script=["hang", "hang"])
    engine = make(server, timeout=0.3, max_retries=1, max_workers=1, on_error="continue")
    start = time.perf_counter()
    out = engine.generate(["first", "second"], PARAMS)
    assert time.perf_counter() - start < 5
    assert out[0].finish_reason == "error" and out[0].text == ""
    assert "timeout of 0.3 s" in out[0].error and "(2 attempts)" in out[0].error
    assert out[1].text == "echo: second" and out[1].error is None

    server.script = ["hang"]
    with pytest.raises(UserError, match="timeout of 0.3 s"):
        make(server, timeout=0.3, max_retries=0, on_error="fail").generate(["again"], PARAMS)


def test_on_error_continue_keeps_going_after_failed_requests(serve):
    server = serve("openai", script=[("status", 404, {}), "ok", ("status", 400, {})])
    out = make(server, max_workers=1, on_error="continue").generate(["a", "b", "c", "d"], PARAMS)
    assert [c.finish_reason for c in out] == ["error", "stop", "error", "stop"]
    assert "HTTP 404" in out[0].error and "HTTP 400" in out[2].error


def test_concurrency_limit_is_respected(serve):
    server = serve("openai", delay=0.1)
    out = make(server, max_workers=3).generate([f"p{i}" for i in range(12)], PARAMS)
    assert [c.text for c in out] == [f"echo: p{i}" for i in range(12)]
    assert server.max_in_flight == 3


@pytest.mark.parametrize("provider", ENGINES)
def test_bad_key_stops_the_run_and_the_message_hides_the_key(serve, provider):
    server = serve(provider, key="the-right-key")
    engine = make(server, on_error="continue")  # even under "continue": every request would fail
    with pytest.raises(UserError) as error:
        engine.generate(["a", "b"], PARAMS)
    message = str(error.value)
    assert "HTTP 401" in message and "check the API key" in message
    assert "Incorrect API key provided: " in message and "***" in message  # the server echoed the key; it was scrubbed
    assert KEY not in message and KEY not in repr(engine) and KEY not in str(engine.__dict__)


def test_keys_come_from_the_environment(monkeypatch, serve):
    server = serve("anthropic")
    monkeypatch.delenv("ANTHROPIC_API_KEY", raising=False)
    with pytest.raises(UserError, match="ANTHROPIC_API_KEY is not set"):
        AnthropicEngine(MODEL, base_url=server.base_url)
    monkeypatch.setenv("ANTHROPIC_API_KEY", KEY + "\n")  # a trailing newline from $(cat keyfile) is dropped
    assert AnthropicEngine(MODEL, base_url=server.base_url, **FAST).generate(["hi"], PARAMS)[0].text == "echo: hi"
    monkeypatch.setenv("MY_CLAUDE_KEY", KEY)
    monkeypatch.delenv("ANTHROPIC_API_KEY")
    assert AnthropicEngine(MODEL, base_url=server.base_url, api_key_env="MY_CLAUDE_KEY", **FAST).generate(["hi"], PARAMS)[0].error is None
    with pytest.raises(UserError, match="MISSING_VAR is not set"):
        OpenAIEngine(MODEL, base_url=server.base_url, api_key_env="MISSING_VAR")
    monkeypatch.setenv("MY_CLAUDE_KEY", "sk-two\nlines")
    with pytest.raises(UserError, match="MY_CLAUDE_KEY contains spaces or non-ASCII") as error:
        AnthropicEngine(MODEL, base_url=server.base_url, api_key_env="MY_CLAUDE_KEY")
    assert "sk-two" not in str(error.value)
    with pytest.raises(UserError, match="is not an http"):
        AnthropicEngine(MODEL, base_url="localhost:8000", api_key=KEY)


def test_secret_never_shows_itself():
    secret = Secret(KEY)
    assert KEY not in repr(secret) and KEY not in str(secret) and KEY not in f"{secret}"
    assert secret.scrub(f"key {KEY} echoed") == "key *** echoed"


def test_parse_retry_after():
    assert parse_retry_after("2") == 2.0 and parse_retry_after("0.25") == 0.25
    assert parse_retry_after(None) is None and parse_retry_after("soon") is None
    future = time.strftime("%a, %d %b %Y %H:%M:%S GMT", time.gmtime(time.time() + 30))
    assert 25 < parse_retry_after(future) <= 30


def run_cli(tmp_path, server, key, *extra):
    prompts = tmp_path / "prompts.jsonl"
    prompts.write_text("".join(json.dumps({"prompt": f"question {i}"}) + "\n" for i in range(3)))
    env = {**os.environ, "OPENAI_API_KEY": key}
    cmd = [sys.executable, "-m", "posttrain", "generate", "--model", f"openai:{MODEL}", "--base-url", server.base_url,
           "--prompts", str(prompts), "--out", str(tmp_path / "out" / "generations.jsonl"), "--csv", "--retries", "1", *extra]
    return subprocess.run(cmd, env=env, cwd=tmp_path, capture_output=True, text=True, timeout=60)


def test_cli_never_writes_the_key(serve, tmp_path):
    server = serve("openai", script=[("status", 500, {}), ("status", 500, {})])  # first prompt fails for good
    result = run_cli(tmp_path, server, KEY, "--on-error", "continue", "--timeout", "5", "--concurrency", "1")
    assert result.returncode == 0, result.stderr
    rows = [json.loads(line) for line in (tmp_path / "out" / "generations.jsonl").read_text().splitlines()]
    assert [r["finish_reason"] for r in rows] == ["error", "stop", "stop"]
    assert rows[1]["completion"] == "echo: question 1" and rows[1]["prompt_tokens"] == 2 and rows[1]["completion_tokens"] == 7
    assert (tmp_path / "out" / "generations.csv").is_file()
    written = [p.read_text(errors="replace") for p in tmp_path.rglob("*") if p.is_file()]
    assert len(written) >= 3
    for text in [*written, result.stdout, result.stderr]:
        assert KEY not in text
    assert server.requests[0]["headers"]["authorization"] == f"Bearer {KEY}"  # the key was really used


def test_cli_401_message_hides_the_key(serve, tmp_path):
    server = serve("openai", key="the-right-key")
    result = run_cli(tmp_path, server, KEY)
    assert result.returncode == 2
    assert "HTTP 401" in result.stderr and "Traceback" not in result.stderr
    assert KEY not in result.stderr + result.stdout
    assert all(KEY not in p.read_text(errors="replace") for p in tmp_path.rglob("*") if p.is_file())


@pytest.mark.parametrize("provider", ENGINES)
def test_a_redirect_is_not_followed_with_the_key(http_server, provider):
    elsewhere = http_server()
    redirecting = http_server(handler=lambda m, p, h, b: (307, {"Location": elsewhere.url + p}, b""))
    engine = ENGINES[provider](MODEL, base_url=redirecting.url + "/v1", api_key=KEY, **FAST)
    with pytest.raises(UserError, match="HTTP 307: redirected to .* not followed"):
        engine.generate(["hi"], PARAMS)
    assert elsewhere.requests == []  # the key never left for the other host


def test_anthropic_root_with_or_without_v1_and_vertex_needs_its_root():
    from posttrain.commands.engine_flags import endpoint
    from posttrain.generation.api import VertexEngine

    for url in ("http://h:1", "http://h:1/", "http://h:1/v1", "http://h:1/v1/"):
        assert AnthropicEngine("m", base_url=url, api_key="k").base_url == "http://h:1/v1"
    assert AnthropicEngine("m", base_url="https://gw/anthropic", api_key="k").base_url == "https://gw/anthropic/v1"  # the SDK's rule
    assert endpoint("anthropic:m", {"base_url": "http://h:1"}) == endpoint("anthropic:m", {"base_url": "http://h:1/v1"})  # one cache
    with pytest.raises(UserError, match="vertex:m: needs --base-url .*projects/PROJECT/locations"):
        VertexEngine("m", api_key="token")
    vertex = VertexEngine("m", base_url="http://h:1/v1beta", api_key="token")
    url, headers, _ = vertex.request([{"role": "user", "content": "hi"}], SamplingParams(max_new_tokens=4))
    assert url == "http://h:1/v1beta/models/m:generateContent" and headers == {"authorization": "Bearer token"}
    assert GeminiEngine("m", api_key="k").request([{"role": "user", "content": "hi"}], SamplingParams(max_new_tokens=4))[1] == {"x-goog-api-key": "k"}
