"""The one retry helper: the wait formula by hand, Retry-After honoured and capped, what is retried."""

from __future__ import annotations

import random
import time

import pytest

from posttrain.net.retry import RetryPolicy, call_with_retries, parse_retry_after


class Flaky:
    """Raises the given errors in turn, then returns "ok"; counts calls."""

    def __init__(self, *errors):
        self.errors, self.calls = list(errors), 0

    def __call__(self):
        self.calls += 1
        if self.errors:
            raise self.errors.pop(0)
        return "ok"


class Busy(Exception):
    def __init__(self, retry_after=None):
        super().__init__("busy")
        self.retry_after = retry_after


def test_delay_doubles_within_equal_jitter_and_stops_at_max_delay():
    policy = RetryPolicy(retries=10, backoff=0.5, max_delay=3.0)
    rng = random.Random(0)
    for k, full in enumerate([0.5, 1.0, 2.0, 3.0, 3.0]):
        draws = [policy.delay(k, rng=rng) for _ in range(200)]
        assert full / 2 <= min(draws) and max(draws) <= full  # half fixed, half random
        assert max(draws) - min(draws) > full / 4  # and really jittered


def test_retry_after_is_a_lower_bound_and_is_capped():
    policy = RetryPolicy(backoff=0.01, max_delay=0.01, retry_after_max=5.0)
    assert policy.delay(0, retry_after=2.0) == 2.0
    assert policy.delay(0, retry_after=86400.0) == 5.0  # "come back tomorrow" waits 5 s
    assert policy.delay(0, retry_after=float("inf")) == 5.0
    assert policy.delay(0, retry_after=0.0) <= 0.01  # an early Retry-After does not shorten the backoff below itself
    assert RetryPolicy(backoff=8, max_delay=30).delay(0, retry_after=1.0) >= 4.0


def test_negative_settings_are_refused():
    with pytest.raises(ValueError):
        RetryPolicy(retries=-1)


def test_fails_twice_then_succeeds_with_logged_waits(caplog):
    waits, attempts = [], []
    fn = Flaky(Busy(), Busy())
    out = call_with_retries(fn, policy=RetryPolicy(retries=3, backoff=1.0), retryable=lambda e: isinstance(e, Busy),
                            sleep=waits.append, on_attempt=attempts.append, what="fetch of x")
    assert out == "ok" and fn.calls == 3 and attempts == [1, 2, 3]
    assert 0.5 <= waits[0] <= 1.0 and 1.0 <= waits[1] <= 2.0
    assert caplog.text.count("fetch of x failed (Busy: busy); retry") == 2


def test_the_last_error_is_raised_after_the_retries_run_out():
    fn = Flaky(Busy(), Busy(), Busy())
    with pytest.raises(Busy):
        call_with_retries(fn, policy=RetryPolicy(retries=2), retryable=lambda e: True, sleep=lambda s: None)
    assert fn.calls == 3


def test_errors_that_are_not_retryable_raise_at_once():
    fn = Flaky(KeyError("x"))
    with pytest.raises(KeyError):
        call_with_retries(fn, policy=RetryPolicy(retries=5), retryable=lambda e: isinstance(e, Busy), sleep=lambda s: None)
    assert fn.calls == 1


def test_retry_after_read_from_the_error_is_capped_in_real_time():
    fn = Flaky(Busy(retry_after=3600.0))
    start = time.perf_counter()
    out = call_with_retries(fn, policy=RetryPolicy(retries=1, backoff=0.0, retry_after_max=0.2),
                            retryable=lambda e: True, retry_after=lambda e: e.retry_after)
    assert out == "ok" and 0.2 <= time.perf_counter() - start < 1.0


def test_describe_hides_what_the_caller_wants_hidden(caplog):
    fn = Flaky(Busy())
    call_with_retries(fn, policy=RetryPolicy(retries=1, backoff=0.0), retryable=lambda e: True, sleep=lambda s: None,
                      describe=lambda e: "redacted")
    assert "redacted" in caplog.text and "busy" not in caplog.text


def test_parse_retry_after():
    assert parse_retry_after("2") == 2.0 and parse_retry_after("0.25") == 0.25 and parse_retry_after("-3") == 0.0
    assert parse_retry_after(None) is None and parse_retry_after("soon") is None and parse_retry_after("nan") is None
    future = time.strftime("%a, %d %b %Y %H:%M:%S GMT", time.gmtime(time.time() + 30))
    assert 25 < parse_retry_after(future) <= 30
