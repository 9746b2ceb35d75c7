"""The shared HTTP client against real servers on 127.0.0.1: connection reuse, errors by kind,
503-then-OK and a huge Retry-After through the retry helper, bodies cut short, timeouts."""

from __future__ import annotations

import threading
import time

import pytest

from posttrain.net.http import HTTPStatusError, TransportError, is_retryable, retry_after_of, send
from posttrain.net.retry import RetryPolicy, call_with_retries

BODY = b"x" * 5000


def fetch(url, policy=RetryPolicy(retries=3, backoff=0.01), timeout=5.0):
    return call_with_retries(lambda: send("GET", url, timeout=timeout), policy=policy,
                             retryable=is_retryable, retry_after=retry_after_of)


def test_connections_are_reused_across_requests_and_threads(http_server):
    server = http_server({"/f": BODY})
    for _ in range(5):
        assert send("GET", server.url + "/f", timeout=5).content == BODY
    assert len({r["port"] for r in server.requests}) == 1  # one TCP connection for five requests
    threads = [threading.Thread(target=lambda: send("GET", server.url + "/f", timeout=5)) for _ in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len(server.requests) == 13


def test_post_json_and_headers_arrive(http_server):
    server = http_server(handler=lambda m, p, h, b: (200, {}, b if h.get("x-token") == "t" else b"no"))
    out = send("POST", server.url + "/echo", json={"a": [1, 2]}, headers={"x-token": "t"}, timeout=5)
    assert out.status == 200 and out.content == b'{"a":[1,2]}'
    assert server.requests[0]["headers"]["content-type"] == "application/json"


def test_503_twice_then_ok(http_server):
    server = http_server({"/f": BODY})
    server.script["/f"] = [("status", 503, {}), ("status", 503, {})]
    assert fetch(server.url + "/f").content == BODY
    assert server.count("/f") == 3


def test_a_huge_retry_after_is_capped(http_server):
    server = http_server({"/f": BODY})
    server.script["/f"] = [("status", 429, {"Retry-After": "86400"})]
    start = time.perf_counter()
    out = fetch(server.url + "/f", policy=RetryPolicy(retries=2, backoff=0.01, retry_after_max=0.3))
    assert out.content == BODY and 0.3 <= time.perf_counter() - start < 2


def test_a_retry_after_under_the_cap_is_honoured(http_server):
    server = http_server({"/f": BODY})
    server.script["/f"] = [("status", 503, {"Retry-After": "0.4"})]
    start = time.perf_counter()
    assert fetch(server.url + "/f").content == BODY
    assert time.perf_counter() - start >= 0.4


def test_status_errors_carry_status_body_and_retry_after(http_server):
    server = http_server()
    with pytest.raises(HTTPStatusError) as e:
        fetch(server.url + "/missing")
    assert e.value.status == 404 and "no file /missing" in e.value.text and not is_retryable(e.value)
    assert server.count("/missing") == 1  # a 404 is not retried
    server.script["/busy"] = [("status", 503, {"Retry-After": "7"})]
    with pytest.raises(HTTPStatusError) as e:
        send("GET", server.url + "/busy", timeout=5)
    assert e.value.retry_after == 7.0 and is_retryable(e.value)
    assert send("GET", server.url + "/missing", timeout=5, raise_for_status=False).status == 404


def test_a_body_cut_short_is_an_error_and_is_retried(http_server):
    server = http_server({"/f": BODY})
    server.script["/f"] = [("truncate", BODY)]
    with pytest.raises(TransportError) as e:
        send("GET", server.url + "/f", timeout=5)
    assert e.value.kind == "truncated" and is_retryable(e.value)
    server.script["/f"] = [("truncate", BODY), ("truncate", BODY)]
    assert fetch(server.url + "/f").content == BODY


def test_a_server_that_never_answers_times_out(http_server):
    server = http_server({"/f": BODY})
    server.script["/f"] = ["hang", "hang"]
    start = time.perf_counter()
    with pytest.raises(TransportError) as e:
        fetch(server.url + "/f", policy=RetryPolicy(retries=1, backoff=0.01), timeout=0.3)
    assert e.value.kind == "timeout" and "0.3 s" in str(e.value)
    assert 0.6 <= time.perf_counter() - start < 3 and server.count("/f") == 2


def test_refused_oversized_and_invalid():
    with pytest.raises(TransportError) as e:
        send("GET", "http://127.0.0.1:9/x", timeout=1)
    assert e.value.kind == "connection" and is_retryable(e.value)
    with pytest.raises(TransportError) as e:
        send("GET", "ftp://example.invalid/x", timeout=1)
    assert e.value.kind == "invalid_request" and not is_retryable(e.value)


def test_max_bytes_stops_a_large_body(http_server):
    server = http_server({"/f": BODY})
    with pytest.raises(TransportError) as e:
        send("GET", server.url + "/f", timeout=5, max_bytes=1000)
    assert e.value.kind == "too_large" and not is_retryable(e.value)
    assert send("GET", server.url + "/f", timeout=5, max_bytes=len(BODY)).content == BODY


def test_redirects_are_followed_for_plain_gets_and_refused_with_credentials(http_server):
    target = http_server({"/f": BODY})
    origin = http_server(handler=lambda m, p, h, b: (307, {"Location": target.url + "/f"}, b""))
    assert send("GET", origin.url + "/x", timeout=5).content == BODY  # media behind a CDN redirect
    with pytest.raises(HTTPStatusError) as e:
        send("POST", origin.url + "/x", json={}, headers={"x-api-key": "secret"}, timeout=5, follow_redirects=False)
    assert e.value.status == 307 and "not followed" in e.value.text and not is_retryable(e.value)
    assert all("x-api-key" not in r["headers"] for r in target.requests)  # the key never went to the other host
