"""The `http` reward: score completions with a remote service.

    rewards:
      - name: http
        url: http://127.0.0.1:8000/score
        api_key_env: SCORER_KEY        # sent as 'Authorization: Bearer ...'; never logged
        timeout: 30                    # seconds per request
        retries: 3                     # extra attempts on connection errors, timeouts, cut-off answers, 429 and 5xx
        backoff: 0.5                   # seconds; the wait doubles per retry (with jitter, see posttrain.net.retry)
        retry_after_max: 60            # seconds; a server's Retry-After is honoured up to this
        batch_size: 64                 # completions per request (1 for a service that scores one at a time)
        max_concurrency: 8             # requests in flight at once when a step has several batches; 1: one after another
        on_error: fail                 # fail: stop the run | skip: this reward is None for the batch

Request body (JSON): {"prompts": [...], "completions": [...], "columns": {"answer": [...], ...}}
with one entry per completion. Only JSON-serialisable values are sent: TRL also passes objects
such as the trainer state to reward functions, and those never reach the wire.
Response body: {"rewards": [float | null, ...]}, one per completion (null: no opinion).
Requests go through posttrain's shared HTTP client (connections reused between batches). The
batches of one call go out together, at most `max_concurrency` at a time (threads; the client's
pool is thread-safe), so a slow service costs a step about one request's latency, not one per
batch: 8 batches against a service that takes 0.3 s each took 0.31 s instead of 2.4 s
(benchmarks/grpo_step.py --http). Rewards come back in the completions' order whatever order the
answers arrive in.
With `on_error: skip`, every failure of a batch (after its retries) gives None rewards; TRL ignores a None reward for that completion (it is not counted as 0).
"""

from __future__ import annotations

import json
import logging
import os
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from posttrain.net.http import HTTPStatusError, TransportError, is_retryable, retry_after_of, send
from posttrain.net.retry import RetryPolicy, call_with_retries
from posttrain.secrets import redact_url

logger = logging.getLogger(__name__)
NOT_DATA = {"trainer_state", "log_extra", "log_metric", "environments", "completion_ids"}


class RewardServiceError(RuntimeError):
    pass


def jsonable_columns(kwargs: dict[str, Any]) -> dict[str, list]:
    """The dataset columns among TRL's keyword arguments: JSON-serialisable lists only."""
    out = {}
    for key, value in kwargs.items():
        if key in NOT_DATA or key == "prompts":
            continue
        try:
            json.dumps(value)
        except (TypeError, ValueError):
            continue
        out[key] = value
    return out


def _post(url: str, body: dict, headers: dict, timeout: float, policy: RetryPolicy) -> list:
    """The service's rewards for one batch, through the shared client and retry helper.

    Every failure becomes RewardServiceError (so `on_error: skip` covers them all): retried ones
    (connection errors, timeouts, bodies cut short, 408/429/5xx) after the last attempt, others
    (a 4xx, an answer that is not a valid rewards list) at once."""
    attempts = [0]
    shown = redact_url(url)  # error messages reach logs: no user:password@ or ?api_key= in them

    def once() -> list:
        response = send("POST", url, json=body, headers=headers, timeout=timeout, follow_redirects=False)
        try:
            rewards = json.loads(response.content)["rewards"]
        except (ValueError, KeyError, TypeError) as e:
            raise RewardServiceError(f"reward service {shown} answered without a valid 'rewards' list: "
                                     f"{type(e).__name__}: {e}") from None
        if not isinstance(rewards, list) or not all(r is None or (isinstance(r, (int, float)) and not isinstance(r, bool))
                                                    for r in rewards):
            raise RewardServiceError(f"reward service {shown} answered 'rewards' that is not a list of numbers or nulls: "
                                     f"{str(rewards)[:200]}")
        if len(rewards) != len(body["completions"]):
            raise RewardServiceError(f"reward service {shown} returned {len(rewards)} rewards for {len(body['completions'])} completions")
        return rewards

    try:
        return call_with_retries(once, policy=policy, retryable=is_retryable, retry_after=retry_after_of,
                                 on_attempt=lambda n: attempts.__setitem__(0, n), what=f"reward service {shown}")
    except HTTPStatusError as e:
        if 300 <= e.status < 400:  # not followed: the request may carry a key (see posttrain.net.http.send)
            raise RewardServiceError(f"reward service {shown} answered HTTP {e.status}, a redirect, not followed: the "
                                     f"request may carry a key; give the final URL") from None
        if not is_retryable(e):
            raise RewardServiceError(f"reward service {shown} answered HTTP {e.status}; not retried (a client error)") from None
        last = f"HTTP {e.status}"
    except TransportError as e:
        if not is_retryable(e):
            raise RewardServiceError(f"reward service {shown}: {e}") from None
        last = str(e)
    raise RewardServiceError(f"reward service {shown} failed after {attempts[0]} attempts (last: {last})")


def check_options(**options: Any) -> None:
    """The option values that would fail a run, checked when the recipe loads (ValueError names the option).

    >>> check_options(url="http://x/score", max_concurrency=0)
    Traceback (most recent call last):
    ValueError: http reward: max_concurrency must be a whole number >= 1, not 0
    """
    if options.get("on_error", "fail") not in ("fail", "skip"):
        raise ValueError(f"http reward: on_error must be 'fail' or 'skip', not {options['on_error']!r}")
    for name in ("batch_size", "max_concurrency"):
        value = options.get(name, 1)
        if isinstance(value, bool) or not isinstance(value, int) or value < 1:
            raise ValueError(f"http reward: {name} must be a whole number >= 1, not {value!r}")


def http_reward(
    completions: list,
    *,
    url: str,
    timeout: float = 30.0,
    retries: int = 3,
    backoff: float = 0.5,
    retry_after_max: float = 60.0,
    batch_size: int = 64,
    max_concurrency: int = 8,
    on_error: str = "fail",
    api_key_env: str | None = None,
    headers: dict | None = None,
    **kwargs: Any,
) -> list[float | None]:
    """POST completions (and the dataset's columns) to `url` in batches, up to `max_concurrency` at
    once; return its rewards in the completions' order."""
    check_options(batch_size=batch_size, max_concurrency=max_concurrency, on_error=on_error)
    sent_headers = dict(headers or {})
    if api_key_env:
        key = os.environ.get(api_key_env)
        if not key:
            raise RewardServiceError(f"http reward: environment variable {api_key_env} (api_key_env) is not set")
        sent_headers["Authorization"] = f"Bearer {key}"
    policy = RetryPolicy(retries=retries, backoff=backoff, retry_after_max=retry_after_max)
    prompts = kwargs.get("prompts") or [None] * len(completions)
    columns = jsonable_columns(kwargs)
    bodies = [{"prompts": prompts[start:start + batch_size], "completions": completions[start:start + batch_size],
               "columns": {k: v[start:start + batch_size] for k, v in columns.items()}}
              for start in range(0, len(completions), batch_size)]

    def score(body: dict) -> list[float | None]:
        try:
            return _post(url, body, sent_headers, timeout, policy)
        except RewardServiceError:
            if on_error == "fail":
                raise
            logger.warning("http reward: skipping %d completions after the service failed", len(body["completions"]))
            return [None] * len(body["completions"])

    if len(bodies) <= 1 or max_concurrency == 1:
        return [r for body in bodies for r in score(body)]
    pool = ThreadPoolExecutor(max_workers=min(max_concurrency, len(bodies)), thread_name_prefix="http-reward")
    try:
        futures = [pool.submit(score, body) for body in bodies]
        return [r for future in futures for r in future.result()]  # the first failure (in batch order) is raised
    finally:
        pool.shutdown(wait=True, cancel_futures=True)  # with on_error=fail, batches not yet sent are not sent
