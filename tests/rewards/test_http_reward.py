"""The http reward against a real HTTP server on 127.0.0.1: payload, retries, failure policy, secrets."""

import json
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from posttrain.rewards.builtin import get_reward
from posttrain.rewards.http import RewardServiceError


class Scorer:
    """A reward service: pays 1.0 when the completion contains the gold answer; can fail first."""

    def __init__(self, fail_first: int = 0, status: int | str = 503, answer: dict | None = None, delay: float = 0.0,
                 fail_when: str | None = None):
        self.fail_first, self.status, self.answer = fail_first, status, answer
        self.delay = delay  # seconds each answer takes: a slow service
        self.fail_when = fail_when  # answer 400 to a request whose completions contain this text
        self.in_flight = self.most_in_flight = 0  # requests being answered at once, and the most seen
        self.lock = threading.Lock()
        self.retry_after = None
        self.requests: list[dict] = []
        self.headers: list[dict] = []
        scorer = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self):
                body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
                with scorer.lock:
                    scorer.requests.append(body)
                    scorer.headers.append(dict(self.headers))
                    scorer.in_flight += 1
                    scorer.most_in_flight = max(scorer.most_in_flight, scorer.in_flight)
                time.sleep(scorer.delay)  # the service "working": requests counted in flight overlap here
                with scorer.lock:
                    scorer.in_flight -= 1  # before answering: the client may send its next request as soon as it has this one
                self.answer_request(body)

            def answer_request(self, body):
                if scorer.fail_when and any(scorer.fail_when in c for c in body["completions"]):
                    self.send_response(400)
                    self.send_header("Content-Length", "0")
                    self.end_headers()
                    return
                if len(scorer.requests) <= scorer.fail_first and scorer.status == "truncate":
                    self.send_response(200)
                    self.send_header("Content-Length", "100")  # promises 100 bytes, sends 10, closes
                    self.end_headers()
                    self.wfile.write(b'{"rewards"')
                    return
                if len(scorer.requests) <= scorer.fail_first:
                    self.send_response(scorer.status)
                    if scorer.retry_after:
                        self.send_header("Retry-After", scorer.retry_after)
                    self.end_headers()
                    return
                rewards = [1.0 if gold in c else 0.0 for c, gold in zip(body["completions"], body["columns"]["answer"])]
                payload = json.dumps(scorer.answer or {"rewards": rewards}).encode()
                self.send_response(200)
                self.send_header("Content-Length", str(len(payload)))
                self.end_headers()
                self.wfile.write(payload)

            def log_message(self, *args):
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_port}/score"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def close(self):
        self.server.shutdown()


@pytest.fixture
def scorer():
    servers = []

    def make(**kwargs):
        servers.append(Scorer(**kwargs))
        return servers[-1]

    yield make
    for s in servers:
        s.close()


TRL_EXTRAS = {"prompts": ["p1", "p2", "p3"], "completion_ids": [[1], [2], [3]], "trainer_state": object(), "log_metric": print}


def test_posts_completions_and_json_columns_only(scorer):
    server = scorer()
    reward = get_reward("http", url=server.url, batch_size=2)
    out = reward(["it is 5", "7", "no"], answer=["5", "8", "1"], difficulty=[1, 2, 3], **TRL_EXTRAS)
    assert out == [1.0, 0.0, 0.0] and reward.__name__ == "http"
    assert len(server.requests) == 2  # batches of 2 and 1 (sent together: either may arrive first)
    first = next(r for r in server.requests if r["prompts"][0] == "p1")
    assert first["prompts"] == ["p1", "p2"] and first["completions"] == ["it is 5", "7"]
    assert first["columns"] == {"answer": ["5", "8"], "difficulty": [1, 2]}  # no trainer_state, no ids


def test_retries_server_errors_then_succeeds(scorer):
    server = scorer(fail_first=2, status=500)
    reward = get_reward("http", url=server.url, retries=3, backoff=0.01)
    assert reward(["5"], answer=["5"]) == [1.0]
    assert len(server.requests) == 3


def test_failure_policy(scorer):
    server = scorer(fail_first=100, status=503)
    with pytest.raises(RewardServiceError, match="failed after 2 attempts"):
        get_reward("http", url=server.url, retries=1, backoff=0.01)(["5"], answer=["5"])
    assert get_reward("http", url=server.url, retries=0, on_error="skip")(["5", "6"], answer=["5", "6"]) == [None, None]


def test_client_errors_are_not_retried(scorer):
    server = scorer(fail_first=100, status=400)
    with pytest.raises(RewardServiceError, match="HTTP 400"):
        get_reward("http", url=server.url, retries=3, backoff=0.01)(["5"], answer=["5"])
    assert len(server.requests) == 1


def test_unreachable_service_times_out_cleanly():
    with pytest.raises(RewardServiceError, match="failed after 2 attempts"):
        get_reward("http", url="http://127.0.0.1:9/none", retries=1, backoff=0.01, timeout=0.5)(["5"], answer=["5"])


def test_api_key_goes_in_the_header_and_never_in_errors(scorer, monkeypatch, caplog):
    monkeypatch.setenv("SCORER_KEY", "sk-very-secret")
    server = scorer(fail_first=1)
    reward = get_reward("http", url=server.url, api_key_env="SCORER_KEY", retries=1, backoff=0.01)
    assert reward(["5"], answer=["5"]) == [1.0]
    assert server.headers[-1]["Authorization"] == "Bearer sk-very-secret"
    assert "sk-very-secret" not in caplog.text
    with pytest.raises(RewardServiceError) as e:
        get_reward("http", url="http://127.0.0.1:9/x", api_key_env="SCORER_KEY", retries=0, timeout=0.2)(["5"], answer=["5"])
    assert "sk-very-secret" not in str(e.value)


def test_an_answer_cut_short_is_retried_and_obeys_on_error_skip(scorer):
    server = scorer(fail_first=1, status="truncate")
    assert get_reward("http", url=server.url, retries=1, backoff=0.01)(["5"], answer=["5"]) == [1.0]
    assert len(server.requests) == 2
    server = scorer(fail_first=100, status="truncate")
    assert get_reward("http", url=server.url, retries=1, backoff=0.01, on_error="skip")(["5"], answer=["5"]) == [None]
    with pytest.raises(RewardServiceError, match=r"failed after 2 attempts \(last: truncated"):
        get_reward("http", url=server.url, retries=1, backoff=0.01)(["5"], answer=["5"])


@pytest.mark.parametrize("answer", [{"rewards": 5}, {"rewards": ["high"]}, {"score": [1.0]}, ["not", "a", "dict"]])
def test_malformed_answers_are_errors_that_skip_covers(scorer, answer):
    server = scorer(answer=answer)
    with pytest.raises(RewardServiceError, match="rewards"):
        get_reward("http", url=server.url, retries=0)(["5"], answer=["5"])
    assert get_reward("http", url=server.url, retries=0, on_error="skip")(["5"], answer=["5"]) == [None]


def test_a_huge_retry_after_is_capped(scorer):
    import time

    server = scorer(fail_first=1, status=429)
    server.retry_after = "86400"
    start = time.perf_counter()
    assert get_reward("http", url=server.url, retries=1, backoff=0.01, retry_after_max=0.3)(["5"], answer=["5"]) == [1.0]
    assert 0.3 <= time.perf_counter() - start < 3


def test_failure_messages_hide_credentials_in_the_url():
    from posttrain.rewards.http import RewardServiceError, http_reward

    with pytest.raises(RewardServiceError) as failure:
        http_reward(["x"], url="http://bob:pw-SECRET@127.0.0.1:9/score?api_key=SECRET2", retries=0, timeout=2)
    assert "SECRET" not in str(failure.value) and "http://bob:***@127.0.0.1:9/score?api_key=***" in str(failure.value)


def test_a_redirect_is_not_followed_with_the_key(http_server, monkeypatch):
    monkeypatch.setenv("SCORER_KEY", "sk-very-secret")
    elsewhere = http_server()
    redirecting = http_server(handler=lambda m, p, h, b: (308, {"Location": elsewhere.url + "/score"}, b""))
    with pytest.raises(RewardServiceError, match="HTTP 308, a redirect, not followed"):
        get_reward("http", url=redirecting.url + "/score", api_key_env="SCORER_KEY", retries=0)(["5"], answer=["5"])
    assert elsewhere.requests == []


def test_batches_go_out_together_up_to_max_concurrency(scorer):
    """A slow service sees the batches of one call overlap (at most max_concurrency at once), and the
    rewards still come back in the completions' order. Wall time is a benchmark (grpo_step.py --http)."""
    completions = [f"answer {i}" for i in range(8)]
    gold = [str(i) if i % 2 else "x" for i in range(8)]
    expected = [1.0 if i % 2 else 0.0 for i in range(8)]
    for concurrency, most in ((8, 8), (3, 3), (1, 1)):
        server = scorer(delay=0.1)
        out = get_reward("http", url=server.url, batch_size=1, max_concurrency=concurrency)(completions, answer=gold)
        assert out == expected
        assert len(server.requests) == 8
        assert server.most_in_flight == most if most == 1 else 2 <= server.most_in_flight <= most, (concurrency, server.most_in_flight)


def test_concurrent_batches_keep_the_failure_policy(scorer):
    server = scorer(delay=0.05, fail_when="bad")
    completions, gold = ["5", "bad 6", "7", "8"], ["5", "6", "7", "0"]
    assert get_reward("http", url=server.url, batch_size=1, on_error="skip")(completions, answer=gold) == [1.0, None, 1.0, 0.0]
    with pytest.raises(RewardServiceError, match="HTTP 400"):
        get_reward("http", url=server.url, batch_size=1)(completions, answer=gold)


@pytest.mark.parametrize("options", [{"max_concurrency": 0}, {"batch_size": 0}, {"max_concurrency": 2.5}, {"on_error": "ignore"}])
def test_bad_option_values_fail_when_the_recipe_loads(options):
    with pytest.raises(ValueError, match=next(iter(options))):
        get_reward("http", url="http://127.0.0.1:9/score", **options)
