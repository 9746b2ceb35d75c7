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

__all__ = ["configure_logging", "quiet_libraries", "verbose"]

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


# ------------------------------------------------------------------------------ other libraries' noise
# What every run printed and no run needed: DeepSpeed's "Setting accelerator to CPU" (it is imported
# by accelerate whenever installed), transformers' "Loading weights" / "Writing model shards" bars,
# and the libraries' FutureWarning/DeprecationWarning/UserWarning lines about their own internals.
# Off unless POSTTRAIN_VERBOSE=1 (`--verbose` on any command sets it, and ranks inherit it).
# Errors, the training progress bar, hub download bars and posttrain's own messages are untouched.
LIBRARIES = r"(transformers|trl|peft|accelerate|deepspeed|torch|datasets|huggingface_hub)(\..*)?$"


def verbose() -> bool:
    return os.environ.get("POSTTRAIN_VERBOSE") == "1"


class _ErrorsOnly(logging.Filter):
    def filter(self, record: logging.LogRecord) -> bool:
        return record.levelno >= logging.ERROR


def quiet_libraries() -> None:
    """Silence the libraries' routine output unless verbose. Idempotent; imports nothing: what is
    not imported yet is configured when this runs again after it is (run.py, the local engine)."""
    if verbose():
        return
    import warnings

    for category in (FutureWarning, DeprecationWarning, UserWarning):
        warnings.filterwarnings("ignore", category=category, module=LIBRARIES)
    deepspeed = logging.getLogger("DeepSpeed")  # the logger DeepSpeed creates (setLevel there keeps this filter)
    if not any(isinstance(f, _ErrorsOnly) for f in deepspeed.filters):
        deepspeed.addFilter(_ErrorsOnly())
    if "transformers" in sys.modules:
        from huggingface_hub.utils import are_progress_bars_disabled, enable_progress_bars
        from transformers.utils import logging as hf_logging

        hub_bars = not are_progress_bars_disabled()
        # (not set_verbosity_error: TrainingArguments turns the training progress bar off when transformers' level is above WARNING)
        hf_logging.disable_progress_bar()  # transformers' own bars (loading and writing weights) ...
        if hub_bars:
            enable_progress_bars()  # ... but a model download keeps its bar
