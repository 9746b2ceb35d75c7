"""The `http` reward: score completions with a remote service.

    rewards:
      - name: http
        url: http://127.0.0.1:8000/score
        api_key_env: SCORER_KEY        # sent as 'Authorization: Bearer ...'; never logged
        timeout: 30                    # seconds per request
        retries: 3                     # extra attempts on connection errors, timeouts, 429 and 5xx
        batch_size: 64                 # completions per request
        on_error: fail                 # fail: stop the run | skip: this reward is None for the batch

Request body (JSON): {"prompts": [...], "completions": [...], "columns": {"answer": [...], ...}}
with one entry per completion. Only JSON-serialisable values are sent: TRL also passes objects
such as the trainer state to reward functions, and those never reach the wire.
Response body: {"rewards": [float | null, ...]}, one per completion (null: no opinion).
With `on_error: skip`, TRL ignores a None reward for that completion (it is not counted as 0).
"""

from __future__ import annotations

import json
import logging
import os
import random
import time
import urllib.error
import urllib.request
from typing import Any

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


def _post(url: str, body: dict, headers: dict, timeout: float, retries: int, backoff: float) -> list:
    data = json.dumps(body).encode()
    last = ""
    for attempt in range(retries + 1):
        request = urllib.request.Request(url, data=data, method="POST", headers={"Content-Type": "application/json", **headers})
        try:
            with urllib.request.urlopen(request, timeout=timeout) as response:
                rewards = json.loads(response.read())["rewards"]
            if len(rewards) != len(body["completions"]):
                raise RewardServiceError(f"reward service {url} returned {len(rewards)} rewards for {len(body['completions'])} completions")
            return rewards
        except urllib.error.HTTPError as e:
            last = f"HTTP {e.code}"
            if e.code != 429 and e.code < 500:
                raise RewardServiceError(f"reward service {url} answered {last}; not retried (a client error)") from None
        except (urllib.error.URLError, TimeoutError, ConnectionError, OSError) as e:
            last = type(e).__name__ + (f": {e.reason}" if isinstance(e, urllib.error.URLError) else "")
        except (KeyError, ValueError) as e:
            raise RewardServiceError(f"reward service {url} answered without a valid 'rewards' list: {e}") from None
        if attempt < retries:
            delay = backoff * 2**attempt * (1 + random.random() / 2)
            logger.warning("reward service %s: %s; retry %d/%d in %.1fs", url, last, attempt + 1, retries, delay)
            time.sleep(delay)
    raise RewardServiceError(f"reward service {url} failed after {retries + 1} attempts (last: {last})")


def http_reward(
    completions: list,
    *,
    url: str,
    timeout: float = 30.0,
    retries: int = 3,
    backoff: float = 0.5,
    batch_size: int = 64,
    on_error: str = "fail",
    api_key_env: str | None = None,
    headers: dict | None = None,
    **kwargs: Any,
) -> list[float | None]:
    """POST completions (and the dataset's columns) to `url` in batches; return its rewards."""
    if on_error not in ("fail", "skip"):
        raise ValueError(f"http reward: on_error must be 'fail' or 'skip', not {on_error!r}")
    sent_headers = dict(headers or {})
    if api_key_env:
        key = os.environ.get(api_key_env)
        if not key:
            raise RewardServiceError(f"http reward: environment variable {api_key_env} (api_key_env) is not set")
        sent_headers["Authorization"] = f"Bearer {key}"
    prompts = kwargs.get("prompts") or [None] * len(completions)
    columns = jsonable_columns(kwargs)
    rewards: list[float | None] = []
    for start in range(0, len(completions), batch_size):
        end = start + batch_size
        body = {"prompts": prompts[start:end], "completions": completions[start:end], "columns": {k: v[start:end] for k, v in columns.items()}}
        try:
            rewards += _post(url, body, sent_headers, timeout, retries, backoff)
        except RewardServiceError:
            if on_error == "fail":
                raise
            logger.warning("http reward: skipping %d completions after the service failed", len(body["completions"]))
            rewards += [None] * len(body["completions"])
    return rewards
