"""The one retry helper: exponential backoff with jitter, a capped Retry-After, attempts counted.

    policy = RetryPolicy(retries=3, backoff=0.5)
    body = call_with_retries(lambda: fetch(url), policy=policy, retryable=is_transient,
                             what=f"download of {url}")

Why our own ~80 lines and not tenacity: the callers need three things a generic decorator makes
awkward - the server's Retry-After (read from the exception) as a lower bound on the wait, a hard
cap on it (a server saying "retry in 1 day" must not park a training run), and the number of
attempts for error messages ("failed after 3 attempts"). Everything else is a loop.

The wait before retry k (k = 0 for the first retry) is "equal jitter" (AWS architecture blog,
"Exponential Backoff And Jitter", 2015):

    d = min(max_delay, backoff * 2**k);   wait = d/2 + uniform(0, d/2)

Half the wait is fixed, so retries really do back off (full jitter can draw three near-zero waits
in a row against an overloaded server); the other half spreads clients that failed together. When
the failure carries a Retry-After of r seconds, the wait is max(min(r, retry_after_max), wait):
honoured as a lower bound (the server knows when it will take requests again) but never beyond the
cap.

Only the standard library: S3 code (botocore), httpx code and tests use it alike. Retrying is the
caller's choice per exception (`retryable`); anything else propagates at once, unchanged.
"""

from __future__ import annotations

import email.utils
import logging
import random
import time
from dataclasses import dataclass
from typing import Callable, TypeVar

log = logging.getLogger("posttrain.net")

T = TypeVar("T")


@dataclass(frozen=True)
class RetryPolicy:
    """retries: extra attempts after the first (0 = try once). backoff: seconds, the base of the
    exponential wait. max_delay: seconds, cap on the backoff part. retry_after_max: seconds, cap on
    a server's Retry-After (see the module docstring)."""

    retries: int = 3
    backoff: float = 0.5
    max_delay: float = 30.0
    retry_after_max: float = 60.0

    def __post_init__(self):
        if self.retries < 0 or self.backoff < 0 or self.max_delay < 0 or self.retry_after_max < 0:
            raise ValueError(f"RetryPolicy needs non-negative values, got {self}")

    def delay(self, retry_index: int, retry_after: float | None = None, rng: random.Random | None = None) -> float:
        """Seconds to wait before retry number ``retry_index`` (0-based)."""
        d = min(self.max_delay, self.backoff * 2 ** retry_index)
        wait = d / 2 + (rng or random).uniform(0, d / 2)
        if retry_after is not None:
            wait = max(min(retry_after, self.retry_after_max), wait)
        return wait


def call_with_retries(fn: Callable[[], T], *, policy: RetryPolicy, retryable: Callable[[BaseException], bool],
                      what: str = "request", retry_after: Callable[[BaseException], float | None] | None = None,
                      on_attempt: Callable[[int], None] | None = None, sleep: Callable[[float], None] = time.sleep,
                      describe: Callable[[BaseException], str] | None = None) -> T:
    """``fn()``, retried per ``policy`` while ``retryable(exc)`` is true; the last error is re-raised.

    ``retry_after(exc)`` reads a server-requested wait from the error (None: none asked).
    ``on_attempt(n)`` is told the number of each attempt as it starts (1, 2, ...), so callers can
    say how many tries a result or failure took. Each retry is logged at WARNING with ``what``
    and ``describe(exc)`` (default: the exception's type and message; pass one that hides secrets).
    """
    for attempt in range(policy.retries + 1):
        if on_attempt is not None:
            on_attempt(attempt + 1)
        try:
            return fn()
        except Exception as exc:
            if attempt == policy.retries or not retryable(exc):
                raise
            wait = policy.delay(attempt, retry_after(exc) if retry_after else None)
            text = describe(exc) if describe else f"{type(exc).__name__}: {exc}"
            log.warning("%s failed (%s); retry %d of %d in %.1f s", what, text, attempt + 1, policy.retries, wait)
            sleep(wait)
    raise AssertionError("unreachable: the last attempt returns or raises")


def parse_retry_after(value: str | None) -> float | None:
    """Seconds to wait from a Retry-After header: a number of seconds or an HTTP date (RFC 9110)."""
    if not value:
        return None
    try:
        seconds = float(value)
        return max(0.0, seconds) if seconds == seconds else None  # NaN is no answer
    except ValueError:
        pass
    try:
        return max(0.0, email.utils.parsedate_to_datetime(value).timestamp() - time.time())
    except (TypeError, ValueError, OverflowError):
        return None
