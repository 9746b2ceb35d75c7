"""Route posttrain's own log records (storage cache paths and upload reports, retries, media drops)
to the user: one concise line each on stderr.

    [storage] downloaded s3://bucket/models/sft to /root/.cache/posttrain/s3/3f2a...
    [net] warning: reward service http://127.0.0.1:8000/score failed (HTTP 503); retry 1/3 in 0.4 s

Modules log with ``logging.getLogger("posttrain.<area>")``; nothing reached the user before this,
because nothing configured logging and Python drops INFO records by default. The CLI calls
`configure_logging` once at start-up. Only the ``posttrain`` logger is touched: libraries keep
their own settings, and records still propagate to the root logger (pytest's caplog sees them).
``POSTTRAIN_LOG_LEVEL`` (DEBUG, INFO, WARNING, ERROR; default INFO) sets the threshold.
"""

from __future__ import annotations

import logging
import os
import sys

__all__ = ["configure_logging"]

LOGGER = "posttrain"
LEVELS = ("DEBUG", "INFO", "WARNING", "ERROR")


class _StderrHandler(logging.Handler):
    """Writes to whatever ``sys.stderr`` is at the time (tests and tools swap it)."""

    def emit(self, record: logging.LogRecord) -> None:
        try:
            sys.stderr.write(self.format(record) + "\n")
            sys.stderr.flush()
        except Exception:  # noqa: BLE001 - logging must never break the run
            self.handleError(record)


class _ConciseFormatter(logging.Formatter):
    """``[area] message``; warnings and errors say so: ``[area] warning: message``."""

    def format(self, record: logging.LogRecord) -> str:
        area = record.name.removeprefix(LOGGER).lstrip(".").split(".")[0] or LOGGER
        level = "" if record.levelno < logging.WARNING else f"{record.levelname.lower()}: "
        text = f"[{area}] {level}{record.getMessage()}"
        if record.exc_info and record.levelno >= logging.ERROR:
            text += "\n" + self.formatException(record.exc_info)
        return text


def configure_logging(level: str | None = None) -> None:
    """Show posttrain's records at ``level`` (default ``$POSTTRAIN_LOG_LEVEL`` or INFO) on stderr.
    Idempotent: calling it again only changes the level."""
    from posttrain.errors import UserError

    name = (level or os.environ.get("POSTTRAIN_LOG_LEVEL") or "INFO").upper()
    if name not in LEVELS:
        raise UserError(f"POSTTRAIN_LOG_LEVEL={name}: expected one of {', '.join(LEVELS)}")
    logger = logging.getLogger(LOGGER)
    logger.setLevel(name)
    if not any(isinstance(h, _StderrHandler) for h in logger.handlers):
        handler = _StderrHandler()
        handler.setFormatter(_ConciseFormatter())
        logger.addHandler(handler)
