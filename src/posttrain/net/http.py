"""The one HTTP client: a process-wide `httpx.Client` with connection reuse, and `send()`.

Why httpx: a maintained client with a thread-safe connection pool (urllib opened a new TCP/TLS
connection per request), separate connect/read timeouts, proxy settings from the environment like
urllib, and - what matters for "nothing half-read is trusted" - it raises when a body ends before
its Content-Length (urllib's `http.client.IncompleteRead` escaped the callers' error handling).

`send()` returns a complete `Response` or raises one of two errors, so callers never see httpx's
own exception zoo:

- `TransportError(kind, detail)`: kind is "timeout" (nothing within `timeout` seconds: connecting,
  or between two reads of the answer), "connection" (refused, reset, DNS), "truncated" (the body
  stopped short), "too_large" (more than `max_bytes`), or "invalid_request" (a bad URL or header;
  never retried).
- `HTTPStatusError(status, text, retry_after)`: an answer with status >= 400 (unless
  `raise_for_status=False`); `retry_after` is the parsed Retry-After header in seconds, or None.

`is_retryable(exc)` says which of those are worth another attempt (timeouts, connection problems,
truncated bodies, 408/429/5xx); use it with `posttrain.net.retry.call_with_retries`.

One client per process (a forked child builds its own: a pool's sockets must not be shared across
processes). httpx is imported on the first request, keeping `posttrain validate` fast.
"""

from __future__ import annotations

import os
import threading
from dataclasses import dataclass, field

from posttrain.net.retry import parse_retry_after

RETRYABLE_STATUS = frozenset({408, 429} | set(range(500, 600)))
RETRYABLE_KINDS = frozenset({"timeout", "connection", "truncated"})
USER_AGENT = "posttrain (httpx)"

_lock = threading.Lock()
_client = None
_client_pid = None


class NetError(Exception):
    """Base of the errors `send` raises."""


class TransportError(NetError):
    """No complete answer arrived; ``kind`` is one of timeout, connection, truncated, too_large,
    invalid_request (see the module docstring)."""

    def __init__(self, kind: str, detail: str):
        super().__init__(f"{kind}: {detail}")
        self.kind, self.detail = kind, detail


class HTTPStatusError(NetError):
    """The server answered with an error status; ``text`` is its body (decoded, for messages)."""

    def __init__(self, status: int, text: str, retry_after: float | None = None):
        super().__init__(f"HTTP {status}")
        self.status, self.text, self.retry_after = status, text, retry_after


@dataclass
class Response:
    status: int
    content: bytes
    headers: dict[str, str] = field(default_factory=dict)  # names lower-cased

    def text(self) -> str:
        return self.content.decode("utf-8", "replace")


def client():
    """This process's shared `httpx.Client` (created on first use, thread-safe)."""
    global _client, _client_pid
    with _lock:
        if _client is None or _client_pid != os.getpid():
            import httpx

            _client = httpx.Client(
                limits=httpx.Limits(max_connections=None, max_keepalive_connections=64, keepalive_expiry=30.0),
                headers={"user-agent": USER_AGENT}, follow_redirects=True, trust_env=True)
            _client_pid = os.getpid()
        return _client


def send(method: str, url: str, *, timeout: float, headers: dict | None = None, json=None, content: bytes | None = None,
         max_bytes: int | None = None, raise_for_status: bool = True, follow_redirects: bool = True) -> Response:
    """One request through the shared client; the whole body is read before returning.

    ``timeout``: seconds for connecting and for each wait between reads of the answer (a server
    that trickles bytes is not cut off; one that goes silent is). ``max_bytes``: refuse a body
    larger than this (checked while it streams, so a huge file is not held in memory).
    ``follow_redirects=False`` for requests that carry a secret in a header: httpx drops only
    ``Authorization`` on a redirect to another host, not ``x-api-key`` and the like, so such a
    redirect is an error (HTTPStatusError with the 3xx status and its Location) instead.
    """
    import httpx

    try:
        request = client().build_request(method, url, headers=headers, json=json, content=content,
                                         timeout=httpx.Timeout(timeout))
        response = client().send(request, stream=True, follow_redirects=follow_redirects)
        try:
            chunks, size = [], 0
            for chunk in response.iter_bytes():
                size += len(chunk)
                if max_bytes is not None and size > max_bytes:
                    raise TransportError("too_large", f"{url}: the answer is larger than {max_bytes} bytes")
                chunks.append(chunk)
        finally:
            response.close()
    except httpx.TimeoutException:
        raise TransportError("timeout", f"no answer within the timeout of {timeout} s") from None
    except (httpx.UnsupportedProtocol, httpx.InvalidURL, httpx.LocalProtocolError) as e:
        raise TransportError("invalid_request", f"{type(e).__name__}: {e}") from None
    except httpx.RemoteProtocolError as e:  # includes "body shorter than its Content-Length"
        raise TransportError("truncated", f"the answer broke off ({e})") from None
    except (httpx.TransportError, httpx.DecodingError) as e:
        raise TransportError("connection", f"{type(e).__name__}: {e}") from None
    except (ValueError, TypeError) as e:  # a header value httpx cannot encode; the message may quote it
        raise TransportError("invalid_request", f"{type(e).__name__}: {e}") from None
    out = Response(response.status_code, b"".join(chunks), {k.lower(): v for k, v in response.headers.items()})
    if raise_for_status and out.status >= 400:
        raise HTTPStatusError(out.status, out.text(), parse_retry_after(out.headers.get("retry-after")))
    if raise_for_status and 300 <= out.status < 400 and not follow_redirects:
        raise HTTPStatusError(out.status, f"redirected to {out.headers.get('location')!r}; not followed (the request "
                                          f"carries credentials): use the final URL")
    return out


def is_retryable(exc: BaseException) -> bool:
    """True for failures another attempt may fix: timeouts, connection problems, truncated bodies,
    and HTTP 408, 429, 5xx."""
    if isinstance(exc, TransportError):
        return exc.kind in RETRYABLE_KINDS
    return isinstance(exc, HTTPStatusError) and exc.status in RETRYABLE_STATUS


def retry_after_of(exc: BaseException) -> float | None:
    """The Retry-After an `HTTPStatusError` carried, for `call_with_retries(retry_after=...)`."""
    return exc.retry_after if isinstance(exc, HTTPStatusError) else None
