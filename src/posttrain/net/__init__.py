"""Networking shared by every layer that talks to a server: one retry helper, one HTTP client.

- `posttrain.net.retry`: `RetryPolicy` + `call_with_retries` (exponential backoff with jitter,
  Retry-After honoured up to a cap). The S3 transfers, the API engines, the http reward and remote
  media all retry through it, so "retry" means the same thing everywhere.
- `posttrain.net.http`: one process-wide `httpx.Client` (connection reuse, timeouts) and
  `send()`, which turns every transport failure into `TransportError` / `HTTPStatusError`.

This package imports only the standard library at import time (httpx loads on the first request),
so recipe validation stays fast. It knows nothing about data, generation or rewards: they import it.
"""
