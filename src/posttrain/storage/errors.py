"""Storage errors, which failures are worth retrying, and error text that never carries a secret.

Why a classification of our own: botocore already retries throttling and 5xx a few times inside
one call, but a long upload at the end of a training run must survive longer outages (a dropped
connection, an endpoint that is restarting) without losing the run, while a wrong bucket or rejected
credentials must fail at once with a message that says how to fix it instead of retrying for
minutes.
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass

from posttrain.errors import UserError

# Error codes that no amount of retrying will fix: the message names the likely fix instead.
PERMANENT_CODES = {
    "AccessDenied": "the credentials in use may not access this bucket/prefix; check the IAM policy",
    "AllAccessDisabled": "all access to this bucket is disabled",
    "InvalidAccessKeyId": "the access key id is not known to this endpoint; check AWS_PROFILE / AWS_ACCESS_KEY_ID",
    "SignatureDoesNotMatch": "the secret key does not match the access key id; check AWS_SECRET_ACCESS_KEY",
    "ExpiredToken": "the session token has expired; refresh the credentials",
    "InvalidToken": "the session token is not valid; refresh the credentials",
    "NoSuchBucket": "the bucket does not exist on this endpoint; create it or fix the URI / endpoint_url",
    "InvalidBucketName": "the bucket name is not valid",
    "NoSuchKey": "no object with this key",
    "404": "no object with this key",
    "403": "access denied; check the credentials and the bucket policy",
    "AccountProblem": "the account has a problem; see the provider's console",
    "InvalidObjectState": "the object is archived (e.g. Glacier) and must be restored first",
    "MethodNotAllowed": "the endpoint does not allow this operation",
}

_KEY_ID_RE = re.compile(r"\b(?:AKIA|ASIA|AIDA|AROA)[A-Z0-9]{12,20}\b")
_QUERY_SECRET_RE = re.compile(r"(X-Amz-(?:Signature|Credential|Security-Token)=)[^&\s'\"]+", re.IGNORECASE)
_SECRET_ENV = ("AWS_SECRET_ACCESS_KEY", "AWS_SESSION_TOKEN", "AWS_SECURITY_TOKEN", "AWS_ACCESS_KEY_ID")


class StorageError(UserError):
    """An S3 operation that cannot succeed as asked; the message says what, where and how to fix it."""


class UnsafeKeyError(StorageError):
    """A remote key that would be written outside the download folder (``..``, absolute path, ...)."""


@dataclass(frozen=True)
class UploadFailure:
    """One folder that did not reach S3 (verified); ``kept`` is where its files still are locally."""

    local_dir: str
    uri: str
    error: str
    kept: str

    def render(self) -> str:
        where = (f"local copy kept at {self.kept}" if os.path.exists(self.kept)
                 else f"no local copy left: {self.kept} was deleted during the upload")
        return f"{self.local_dir} -> {self.uri}: {self.error} ({where})"


class UploadError(StorageError):
    """Files that did not arrive complete after every retry; nothing local was deleted.

    ``missing`` lists the relative paths not verified remotely (single upload) and ``reason`` says
    why in one line; ``failures`` lists whole folders (background uploads); ``reports`` the uploads
    that did succeed before this error.
    """

    def __init__(self, message: str, *, missing: list[str] | None = None, reason: str | None = None,
                 failures: list[UploadFailure] | None = None, reports: list | None = None):
        super().__init__(message)
        self.reason = reason or message
        self.missing = list(missing or [])
        self.failures = list(failures or [])
        self.reports = list(reports or [])


def chain(exc: BaseException | None) -> list[BaseException]:
    """``exc`` and the exceptions behind it (boto3 wraps a ClientError in S3UploadFailedError)."""
    seen, out = set(), []
    while exc is not None and id(exc) not in seen:
        seen.add(id(exc))
        out.append(exc)
        exc = exc.__cause__ or exc.__context__
    return out


def error_code(exc: BaseException) -> str | None:
    """The S3 error code (``NoSuchBucket``, ``503``...) of ``exc`` or of what it wraps, if any."""
    from botocore.exceptions import ClientError

    for e in chain(exc):
        if isinstance(e, ClientError):
            return str(e.response.get("Error", {}).get("Code") or e.response.get("ResponseMetadata", {}).get("HTTPStatusCode"))
    return None


def is_transient(exc: BaseException) -> bool:
    """True when retrying later may succeed: network errors, timeouts, 5xx, throttling, bad checksums.

    False for local problems (a file that vanished, a full disk), rejected credentials, a missing
    bucket or key, and invalid parameters.
    """
    from botocore.exceptions import (ClientError, ConnectionError, FlexibleChecksumError, HTTPClientError,
                                     IncompleteReadError)
    from s3transfer.exceptions import RetriesExceededError

    network = (ConnectionError, HTTPClientError, IncompleteReadError, FlexibleChecksumError, RetriesExceededError,
               TransientMismatch)
    for e in chain(exc):
        if isinstance(e, ClientError):
            return error_code(e) not in PERMANENT_CODES
        if isinstance(e, network):
            return True
    return False


class TransientMismatch(Exception):
    """A transfer that finished with the wrong size: worth another try (raised and caught internally)."""


def describe(exc: BaseException) -> str:
    """One line for logs and error messages: error code, HTTP status, message, a hint; secrets removed."""
    from botocore.exceptions import ClientError

    for e in chain(exc):
        if isinstance(e, ClientError):
            err = e.response.get("Error", {})
            code = err.get("Code", "?")
            status = e.response.get("ResponseMetadata", {}).get("HTTPStatusCode")
            text = f"{code} (HTTP {status}): {err.get('Message') or 'no message'}"
            hint = PERMANENT_CODES.get(str(code))
            return redact(f"{text}; {hint}" if hint else text)
    return redact(f"{type(exc).__name__}: {exc}")


def redact(text: str) -> str:
    """Remove credential material from ``text``: the values of AWS secret env vars, key ids, signatures."""
    for name in _SECRET_ENV:
        value = os.environ.get(name)
        if value and len(value) >= 4:
            text = text.replace(value, "***")
    text = _KEY_ID_RE.sub("***", text)
    return _QUERY_SECRET_RE.sub(r"\1***", text)
