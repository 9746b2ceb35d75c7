"""Generation through HTTP APIs: OpenAI (and any OpenAI-compatible server), Anthropic, Gemini, Vertex AI.

One request per prompt through posttrain's shared HTTP client (`posttrain.net.http`: one
connection pool per process, reused across requests) from a thread pool, at most `max_workers` in
flight. What every provider shares lives in `HTTPEngine`:

- retries: 429, 408, 5xx, connection errors, timeouts and answers that break off before their
  Content-Length are retried up to `max_retries` times through `posttrain.net.retry` (exponential
  backoff from `backoff_base` up to `backoff_max` seconds, with jitter). A Retry-After header
  (seconds or an HTTP date) is honoured as a lower bound on the wait (the server knows when it
  will take requests again) but capped at `retry_after_max` seconds (default 120): a server that
  says "come back tomorrow" must not park a run. Other 4xx answers (bad request, unknown model)
  are not retried: they would fail the same way again.
- failures: `on_error="fail"` raises UserError on the first request that still fails after its
  retries (outstanding requests are cancelled); `"continue"` records it as
  Completion(text="", finish_reason="error", error=message) and goes on. 401/403 (a bad key) stop
  the run under either policy: every other request would fail the same way.
- timeout: seconds a request may wait for the server (connect, or between bytes of the answer).
- keys: passed explicitly, or read from the environment (the provider's usual variable, or the one
  named by `api_key_env`). A key is kept in a `Secret` whose repr is masked, sent only in a header
  (never in a URL, so it cannot reach logged URLs), and scrubbed from every error message, including
  provider answers that echo it back.

Plain-string prompts become one user message; chats are sent as they are (system messages go to
the provider's system field where it has one). Image parts in posttrain's shared chat format,
``{"type": "image", "image": PIL.Image}`` beside ``{"type": "text", "text": ...}`` parts, are sent
base64-encoded in each API's own format: OpenAI ``image_url`` parts with a data URI, Anthropic
``image`` blocks with a base64 ``source``, Gemini ``inline_data`` parts (see `encoded_image` for
PNG vs JPEG). Token counts come from the provider's usage fields;
Completion.extra["attempts"] says how many tries a request took. top_p is sent only when it is not
1, so a provider's own default applies otherwise (several reject it for some models).
"""

from __future__ import annotations

import json
import os
import threading
from concurrent.futures import FIRST_EXCEPTION, ThreadPoolExecutor, wait

from posttrain.errors import UserError
from posttrain.generation.base import Completion, Prompt, SamplingParams, check_params
from posttrain.net.http import HTTPStatusError, TransportError, is_retryable, retry_after_of, send
from posttrain.net.retry import RetryPolicy, call_with_retries, parse_retry_after  # noqa: F401  (parse_retry_after: re-exported)

ON_ERROR_CHOICES = ("fail", "continue")
AUTH_STATUS = {401, 403}


class Secret:
    """An API key that never shows itself in repr/str/format; `reveal()` is for the header only."""

    def __init__(self, value: str):
        self._value = value

    def reveal(self) -> str:
        return self._value

    def scrub(self, text: str) -> str:
        """`text` with every occurrence of the key replaced by ***."""
        return text.replace(self._value, "***") if self._value else text

    def __repr__(self) -> str:
        return "Secret('***')"

    __str__ = __repr__


class RequestFailed(Exception):
    """One request failed for good; `fatal` means no other request can succeed either."""

    def __init__(self, message: str, fatal: bool = False):
        super().__init__(message)
        self.fatal = fatal


class HTTPEngine:
    """Shared machinery of the API engines; a provider defines the URL, headers, body and parsing.

    model: the provider's model name. base_url: the API root (default: the provider's).
    api_key: the key itself; api_key_env: the environment variable that holds it (default: the
    provider's usual one). max_workers: requests in flight at once. timeout: seconds per request
    (see the module docstring). max_retries: retries after the first attempt. backoff_base /
    backoff_max / retry_after_max: seconds, see the module docstring. on_error: "fail" or "continue".
    """

    provider = ""  # the spec prefix: openai, anthropic, gemini, vertex
    default_base_url = ""
    default_key_env = ""
    key_required_for_custom_url = True
    base_url_hint = ""

    @classmethod
    def api_root(cls, base_url: str) -> str:
        """The root request paths are appended to, from a --base-url as the user wrote it."""
        return base_url.rstrip("/")

    def __init__(self, model: str, *, base_url: str | None = None, api_key: str | None = None,
                 api_key_env: str | None = None, max_workers: int = 8, timeout: float = 60.0,
                 max_retries: int = 5, backoff_base: float = 1.0, backoff_max: float = 60.0,
                 retry_after_max: float = 120.0, on_error: str = "fail", progress: bool = True):
        if on_error not in ON_ERROR_CHOICES:
            raise UserError(f"on_error must be one of {ON_ERROR_CHOICES}, got {on_error!r}")
        if max_workers < 1 or max_retries < 0 or timeout <= 0:
            raise UserError(f"{self.provider}: need max_workers >= 1, max_retries >= 0 and timeout > 0; got {max_workers}, {max_retries}, {timeout}")
        self.model = model
        self.name = f"{self.provider}:{model}"
        given = (base_url or self.default_base_url).rstrip("/")
        if not given:
            raise UserError(f"{self.name}: needs --base-url (base_url): {self.base_url_hint}")
        if not given.startswith(("http://", "https://")) or any(ch.isspace() for ch in given):
            raise UserError(f"{self.name}: base_url {given!r} is not an http(s) URL; e.g. http://localhost:8000/v1")
        self.base_url = self.api_root(given)
        self.key = Secret(self._find_key(api_key, api_key_env))
        self.max_workers = max_workers
        self.timeout = timeout
        self.max_retries = max_retries
        self.policy = RetryPolicy(retries=max_retries, backoff=backoff_base, max_delay=backoff_max,
                                  retry_after_max=retry_after_max)
        self.on_error = on_error
        self.progress = progress

    def _find_key(self, api_key: str | None, api_key_env: str | None) -> str:
        """The key (surrounding whitespace stripped: a newline from `$(cat keyfile)` would make an
        invalid header), or "" where a custom server may need none."""
        env = api_key_env or self.default_key_env
        value = (api_key or os.environ.get(env, "")).strip()
        if any(not 33 <= ord(ch) < 127 for ch in value):
            source = "the api_key given" if api_key else f"the environment variable {env}"
            raise UserError(f"{self.name}: the API key in {source} contains spaces or non-ASCII characters; check how it was set")
        if value or (not api_key_env and self.base_url != self.default_base_url and not self.key_required_for_custom_url):
            return value
        hint = "" if api_key_env else " (or name another variable with --api-key-env)"
        raise UserError(f"{self.name}: no API key: the environment variable {env} is not set or empty{hint}")

    def __repr__(self) -> str:
        return f"{type(self).__name__}(model={self.model!r}, base_url={self.base_url!r}, key={self.key!r})"

    # -- provider hooks ---------------------------------------------------------------------------
    def request(self, messages: list[dict], params: SamplingParams) -> tuple[str, dict, dict]:
        """(url, headers without content-type, JSON body) for one chat."""
        raise NotImplementedError

    def parse(self, answer: dict) -> Completion:
        """A Completion from the provider's JSON answer."""
        raise NotImplementedError

    def error_message(self, answer_text: str) -> str:
        """The human part of an error answer (providers nest it under error.message)."""
        try:
            error = json.loads(answer_text).get("error")
            return error.get("message", str(error)) if isinstance(error, dict) else str(error or answer_text)
        except (ValueError, AttributeError):
            return answer_text[:500]

    # -- shared machinery -------------------------------------------------------------------------
    supports_tools = False  # OpenAI's tool-call format only, for now

    def generate(self, prompts: list[Prompt], params: SamplingParams, tools: list[dict] | None = None) -> list[Completion]:
        from tqdm.auto import tqdm

        check_params(params)
        if tools and not self.supports_tools:
            raise UserError(f"{self.name}: tools are offered through OpenAI's tool-call format only (openai:MODEL, also for any "
                            f"OpenAI-compatible server with --base-url); {self.provider} tool calls are not supported yet")
        results: list[Completion | None] = [None] * len(prompts)
        bar = tqdm(total=len(prompts), desc=f"generate {self.name}", unit="req", disable=not self.progress)
        lock = threading.Lock()

        def one(i: int) -> None:
            results[i] = self._complete(prompts[i], params, tools)
            with lock:
                bar.update(1)

        pool = ThreadPoolExecutor(max_workers=self.max_workers)
        try:
            futures = [pool.submit(one, i) for i in range(len(prompts))]
            done, _ = wait(futures, return_when=FIRST_EXCEPTION)
            for future in done:
                if future.exception() is not None:
                    raise future.exception()
        finally:
            pool.shutdown(wait=True, cancel_futures=True)
            bar.close()
        return results

    def _complete(self, prompt: Prompt, params: SamplingParams, tools: list[dict] | None = None) -> Completion:
        messages = [{"role": "user", "content": prompt}] if isinstance(prompt, str) else prompt
        try:
            return self._send_with_retries(messages, params, tools)
        except RequestFailed as e:
            if self.on_error == "fail" or e.fatal:
                raise UserError(str(e)) from None
            return Completion(text="", finish_reason="error", error=str(e))

    def _send_with_retries(self, messages: list[dict], params: SamplingParams, tools: list[dict] | None = None) -> Completion:
        url, headers, body = self.request(messages, params, tools) if tools else self.request(messages, params)
        attempts = [0]

        def note(n: int) -> None:
            attempts[0] = n

        try:
            response = call_with_retries(
                lambda: send("POST", url, json=body, headers=headers, timeout=self.timeout, follow_redirects=False), policy=self.policy,
                retryable=is_retryable, retry_after=retry_after_of, on_attempt=note, what=self.name,
                describe=lambda e: self.key.scrub(str(e)))
        except HTTPStatusError as e:
            problem = f"HTTP {e.status}: {self.error_message(e.text)}"
            if e.status in AUTH_STATUS:
                raise self._failed(f"{problem}; check the API key", attempts[0] - 1, fatal=True) from None
            raise self._failed(problem, attempts[0] - 1) from None
        except TransportError as e:
            if e.kind == "timeout":
                problem = f"no answer within the timeout of {self.timeout} s (raise --timeout if the model is slow)"
            elif e.kind == "invalid_request":  # httpx rejects a header or URL; its message may quote the header
                raise self._failed(f"invalid request ({e.detail})", attempts[0] - 1, fatal=True) from None
            else:
                problem = f"connection failed: {e.detail}"
            raise self._failed(problem, attempts[0] - 1) from None
        return self._parsed(response.content, attempts[0] - 1)

    def _parsed(self, raw: bytes, attempt: int) -> Completion:
        try:
            completion = self.parse(json.loads(raw))
        except (ValueError, KeyError, IndexError, TypeError, AttributeError) as e:
            raise self._failed(f"unexpected answer ({type(e).__name__}: {e}): {raw[:300]!r}", attempt) from None
        completion.extra["attempts"] = attempt + 1
        return completion

    def _failed(self, problem: str, attempt: int, fatal: bool = False) -> RequestFailed:
        tries = f"{attempt + 1} attempt{'s' if attempt else ''}"
        return RequestFailed(self.key.scrub(f"{self.name} at {self.base_url}: {problem} ({tries})"), fatal)


def text_of(content) -> str:
    """The text of a message content: a string, or a list of parts of which the text ones count."""
    if isinstance(content, str):
        return content
    return "".join(part.get("text", "") for part in content or [] if isinstance(part, dict) and part.get("type", "text") == "text")


IMAGE_BYTES_LIMIT = 3_500_000  # PNG above this is sent as JPEG: base64 of 3.5 MB stays under Anthropic's 5 MB per image


IMAGE_KEYS = ("image", "url", "path", "base64")  # the keys transformers' chat templates accept for an image


def is_image_part(part) -> bool:
    """True for an image part: ``{"type": "image", "image": PIL.Image}`` (posttrain's shared format),
    or transformers' other spellings ``"url"`` / ``"path"`` / ``"base64"`` instead of ``"image"``."""
    return isinstance(part, dict) and part.get("type") == "image" and any(k in part for k in IMAGE_KEYS)


def image_of(part: dict):
    return next(part[k] for k in IMAGE_KEYS if k in part)


def encoded_image(image) -> tuple[str, str]:
    """(MIME type, base64 text) of an image part's image: a PIL image, or anything
    `posttrain.data.media.load_images` reads (path, bytes, URL, ...).

    PNG (lossless: the model sees exactly the pixels it was given) unless that exceeds
    IMAGE_BYTES_LIMIT; then JPEG at quality 90, which every provider accepts and keeps photos
    under the per-image size limits."""
    import base64
    import io

    from PIL import Image

    if not isinstance(image, Image.Image):
        from posttrain.data.media import MediaError, load_images

        try:
            (image,) = load_images(image)
        except (MediaError, ValueError) as e:
            raise UserError(f"an image part cannot be read: {e}") from None
    if image.mode not in ("RGB", "RGBA", "L", "LA"):
        image = image.convert("RGBA" if "transparency" in image.info or image.mode in ("PA",) else "RGB")
    buffer = io.BytesIO()
    image.save(buffer, format="PNG")
    mime = "image/png"
    if buffer.tell() > IMAGE_BYTES_LIMIT:
        buffer = io.BytesIO()
        image.convert("RGB").save(buffer, format="JPEG", quality=90)
        mime = "image/jpeg"
    return mime, base64.b64encode(buffer.getvalue()).decode("ascii")


def content_parts(content, text_part, image_part) -> list:
    """A message content (a string or a list of parts) as a list of provider parts: text parts
    through ``text_part(text)``, image parts through ``image_part(mime, base64)``."""
    if isinstance(content, str):
        return [text_part(content)]
    out = []
    for part in content or []:
        if is_image_part(part):
            out.append(image_part(*encoded_image(image_of(part))))
        elif isinstance(part, dict) and part.get("type", "text") == "text":
            out.append(text_part(part.get("text", "")))
        else:
            raise UserError(f"unsupported message part {str(part)[:200]}: expected {{'type': 'text', 'text': ...}} "
                            f"or {{'type': 'image', 'image': PIL.Image}}")
    return out


def has_images(messages: list[dict]) -> bool:
    return any(not isinstance(m.get("content"), str) and any(is_image_part(p) for p in m.get("content") or [])
               for m in messages)


def split_system(messages: list[dict]) -> tuple[str | None, list[dict]]:
    """(the system text or None, the other messages), for APIs with a separate system field."""
    system = [text_of(m["content"]) for m in messages if m.get("role") == "system"]
    return ("\n\n".join(system) if system else None), [m for m in messages if m.get("role") != "system"]


def normalized_finish(raw: str | None, length_values: set[str], stop_values: set[str]) -> str | None:
    """Map a provider's stop reason onto "stop" / "length"; anything else is kept lower-cased."""
    if raw is None:
        return None
    return "length" if raw in length_values else "stop" if raw in stop_values else raw.lower()


class OpenAIEngine(HTTPEngine):
    """Chat Completions (POST {base_url}/chat/completions, `Authorization: Bearer KEY`).

    Works with any OpenAI-compatible server (vLLM, SGLang, llama.cpp, TGI) through base_url; such a
    server may need no key, so a missing key is an error only for the official URL.
    max_tokens_field: OpenAI's reasoning models accept only "max_completion_tokens", while many
    compatible servers know only "max_tokens"; None picks the first for api.openai.com, the second
    elsewhere.
    """

    provider = "openai"
    default_base_url = "https://api.openai.com/v1"
    default_key_env = "OPENAI_API_KEY"
    key_required_for_custom_url = False

    def __init__(self, model: str, *, max_tokens_field: str | None = None, **options):
        super().__init__(model, **options)
        official = self.base_url == self.default_base_url
        self.max_tokens_field = max_tokens_field or ("max_completion_tokens" if official else "max_tokens")

    supports_tools = True

    def request(self, messages, params, tools=None):
        headers = {"authorization": f"Bearer {self.key.reveal()}"} if self.key.reveal() else {}
        if has_images(messages):  # image parts become data-URI image_url parts; text parts stay as they are
            messages = [{**m, "content": content_parts(m["content"], lambda t: {"type": "text", "text": t}, lambda mime, data: {
                "type": "image_url", "image_url": {"url": f"data:{mime};base64,{data}"}})} for m in messages]
        body = {"model": self.model, "messages": openai_tool_turns(messages), self.max_tokens_field: params.max_new_tokens,
                "temperature": params.temperature, "seed": params.seed, "n": 1}
        if tools:
            body["tools"] = tools  # posttrain's schemas are already OpenAI's {"type": "function", "function": {...}}
        if params.top_p != 1.0:
            body["top_p"] = params.top_p
        return f"{self.base_url}/chat/completions", headers, body

    def parse(self, answer):
        choice = answer["choices"][0]
        usage = answer.get("usage") or {}
        calls = choice["message"].get("tool_calls") or None
        return Completion(
            text=choice["message"].get("content") or "",
            prompt_tokens=usage.get("prompt_tokens"),
            completion_tokens=usage.get("completion_tokens"),
            finish_reason=normalized_finish(choice.get("finish_reason"), {"length"}, {"stop", "tool_calls"}),
            tool_calls=[{"id": c.get("id"), "type": "function", "function": {"name": c["function"]["name"],
                                                                             "arguments": json_arguments(c["function"].get("arguments"))}}
                        for c in calls] if calls else None,
        )


def json_arguments(text):
    """OpenAI sends a call's arguments as JSON text: a dict when it is a JSON object, else the text as
    written (the tool loop then answers that the arguments are not valid)."""
    if not isinstance(text, str):
        return text if text is not None else {}
    try:
        value = json.loads(text)
    except ValueError:
        return text
    return value if isinstance(value, dict) else text


def openai_tool_turns(messages: list[dict]) -> list[dict]:
    """posttrain's tool turns in OpenAI's form: an assistant's calls with ids and JSON-text arguments,
    tool results answering a `tool_call_id` (the loop keeps the ids the API gave)."""
    out = []
    for m in messages:
        if m.get("role") == "assistant" and m.get("tool_calls"):
            calls = [{"id": c.get("id") or f"call_{k}", "type": "function",
                      "function": {"name": c["function"]["name"], "arguments": a if isinstance(a := c["function"].get("arguments"), str)
                                   else json.dumps(a if a is not None else {})}} for k, c in enumerate(m["tool_calls"])]
            out.append({"role": "assistant", "content": m.get("content") or None, "tool_calls": calls})
        elif m.get("role") == "tool":
            out.append({"role": "tool", "tool_call_id": m.get("tool_call_id"), "content": m.get("content", "")})
        else:
            out.append(m)
    return out


class AnthropicEngine(HTTPEngine):
    """Messages API (POST {base_url}/messages, `x-api-key`, `anthropic-version`).

    System messages go to the top-level `system` field (recent Claude models reject temperature and
    top_p together, one more reason top_p is only sent when it is not 1). A base URL is accepted
    both ways it is written: with `/v1` (posttrain's and OpenAI's convention) or without it (the
    Anthropic SDK's `base_url`, e.g. `http://host:port`, to which the SDK adds `/v1/messages`).
    """

    provider = "anthropic"
    default_base_url = "https://api.anthropic.com/v1"
    default_key_env = "ANTHROPIC_API_KEY"
    api_version = "2023-06-01"

    @classmethod
    def api_root(cls, base_url: str) -> str:
        from urllib.parse import urlsplit

        root = base_url.rstrip("/")
        return root if urlsplit(root).path.endswith("/v1") else f"{root}/v1"

    def request(self, messages, params):
        system, turns = split_system(messages)
        if has_images(turns):  # image parts become base64 image blocks
            turns = [{**m, "content": content_parts(m["content"], lambda t: {"type": "text", "text": t}, lambda mime, data: {
                "type": "image", "source": {"type": "base64", "media_type": mime, "data": data}})} for m in turns]
        body = {"model": self.model, "messages": turns, "max_tokens": params.max_new_tokens, "temperature": params.temperature}
        if system is not None:
            body["system"] = system
        if params.top_p != 1.0:
            body["top_p"] = params.top_p
        headers = {"x-api-key": self.key.reveal(), "anthropic-version": self.api_version}
        return f"{self.base_url}/messages", headers, body

    def parse(self, answer):
        usage = answer.get("usage") or {}
        return Completion(
            text="".join(block.get("text", "") for block in answer.get("content", []) if block.get("type") == "text"),
            prompt_tokens=usage.get("input_tokens"),
            completion_tokens=usage.get("output_tokens"),
            finish_reason=normalized_finish(answer.get("stop_reason"), {"max_tokens"}, {"end_turn", "stop_sequence"}),
        )


class GeminiEngine(HTTPEngine):
    """generateContent (POST {base_url}/models/MODEL:generateContent), the Gemini API.

    The Gemini API documents two places for its API key: the `x-goog-api-key` header (its REST
    examples use it) and a `?key=` query parameter. posttrain sends the header, so the key never
    appears in a URL that something might log. Vertex AI serves the same request and answer at
    another root and authenticates with an OAuth access token instead (`vertex:`, VertexEngine).
    Assistant turns take Gemini's role name "model". Thinking tokens (Gemini 2.5) are reported in
    extra["thoughts_tokens"], not in completion_tokens.
    """

    provider = "gemini"
    default_base_url = "https://generativelanguage.googleapis.com/v1beta"
    default_key_env = "GEMINI_API_KEY"

    def auth_headers(self) -> dict:
        return {"x-goog-api-key": self.key.reveal()}

    def request(self, messages, params):
        system, turns = split_system(messages)
        body = {
            "contents": [{"role": "model" if m["role"] == "assistant" else "user",
                          "parts": content_parts(m["content"], lambda t: {"text": t},
                                                 lambda mime, data: {"inline_data": {"mime_type": mime, "data": data}})}
                         for m in turns],
            "generationConfig": {"maxOutputTokens": params.max_new_tokens, "temperature": params.temperature, "seed": params.seed},
        }
        if params.top_p != 1.0:
            body["generationConfig"]["topP"] = params.top_p
        if system is not None:
            body["systemInstruction"] = {"parts": [{"text": system}]}
        model = self.model.removeprefix("models/")  # the API lists models as "models/NAME"
        return f"{self.base_url}/models/{model}:generateContent", self.auth_headers(), body

    def parse(self, answer):
        candidates = answer.get("candidates") or []
        if not candidates:  # the prompt itself was blocked
            reason = (answer.get("promptFeedback") or {}).get("blockReason", "no candidates")
            return Completion(text="", finish_reason=str(reason).lower(), extra={"prompt_feedback": answer.get("promptFeedback")})
        candidate = candidates[0]
        usage = answer.get("usageMetadata") or {}
        return Completion(
            text="".join(part.get("text", "") for part in (candidate.get("content") or {}).get("parts", []) if not part.get("thought")),
            prompt_tokens=usage.get("promptTokenCount"),
            completion_tokens=usage.get("candidatesTokenCount", 0 if usage else None),
            finish_reason=normalized_finish(candidate.get("finishReason"), {"MAX_TOKENS"}, {"STOP"}),
            extra={"thoughts_tokens": usage["thoughtsTokenCount"]} if "thoughtsTokenCount" in usage else {},
        )


class VertexEngine(GeminiEngine):
    """Gemini models on Vertex AI (and servers that speak its API): the Gemini request and answer,
    authenticated with `Authorization: Bearer TOKEN`, an OAuth access token (`gcloud auth
    print-access-token`; it expires after an hour) in VERTEX_ACCESS_TOKEN or the variable --api-key-env
    names. The root names the project and region, so --base-url is required:
    https://REGION-aiplatform.googleapis.com/v1/projects/PROJECT/locations/REGION/publishers/google
    """

    provider = "vertex"
    default_base_url = ""
    default_key_env = "VERTEX_ACCESS_TOKEN"
    base_url_hint = ("Vertex AI's root names your project and region, e.g. https://us-central1-aiplatform.googleapis.com/"
                     "v1/projects/PROJECT/locations/us-central1/publishers/google")

    def auth_headers(self) -> dict:
        return {"authorization": f"Bearer {self.key.reveal()}"}


API_ENGINES: dict[str, type[HTTPEngine]] = {e.provider: e for e in (OpenAIEngine, AnthropicEngine, GeminiEngine, VertexEngine)}
