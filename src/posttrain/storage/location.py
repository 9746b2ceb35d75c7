"""`s3://bucket/key/prefix` URIs as a small value type, parsed once and checked up front.

Pure standard library, so the recipe schema can validate an ``s3://`` value without importing
boto3. Bucket names follow the S3 naming rules (3-63 characters, lowercase letters, digits, dots and
hyphens); S3-compatible servers (MinIO, Ceph, R2, moto) accept the same names.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from posttrain.errors import UserError

SCHEME = "s3://"
_BUCKET_RE = re.compile(r"[a-z0-9][a-z0-9.\-]{1,61}[a-z0-9]")


class S3URIError(UserError, ValueError):
    """A malformed ``s3://`` URI (a ValueError, and a UserError so the CLI prints it without a traceback)."""


def is_s3_uri(value: object) -> bool:
    """True for strings that start with ``s3://`` (what recipe fields use to switch to S3)."""
    return isinstance(value, str) and value.startswith(SCHEME)


@dataclass(frozen=True)
class S3Location:
    """A bucket and a key prefix, normalised: no leading or trailing ``/`` on ``prefix``.

    >>> loc = S3Location.parse("s3://my-bucket/runs/sft-1/")
    >>> loc.bucket, loc.prefix, loc.uri
    ('my-bucket', 'runs/sft-1', 's3://my-bucket/runs/sft-1')
    >>> loc.child("checkpoint-4").uri
    's3://my-bucket/runs/sft-1/checkpoint-4'
    """

    bucket: str
    prefix: str = ""

    @classmethod
    def parse(cls, uri: str) -> S3Location:
        """Parse ``s3://bucket[/prefix]``; raises `S3URIError` saying what is wrong and what is expected."""
        if not isinstance(uri, str) or not uri.startswith(SCHEME):
            raise S3URIError(f"{uri!r} is not an S3 URI: expected s3://BUCKET/PATH (for example s3://my-bucket/runs/sft)")
        rest = uri[len(SCHEME):]
        bucket, _, prefix = rest.partition("/")
        if not bucket:
            raise S3URIError(f"{uri!r} has no bucket: expected s3://BUCKET/PATH")
        if not _BUCKET_RE.fullmatch(bucket) or ".." in bucket:
            raise S3URIError(
                f"{uri!r}: bucket name {bucket!r} is not valid (3-63 characters: lowercase letters, digits, "
                f"'.' and '-', starting and ending with a letter or digit)")
        if any(c in uri for c in "\x00\r\n"):
            raise S3URIError(f"{uri!r} contains a control character")
        prefix = prefix.strip("/")
        parts = prefix.split("/") if prefix else []
        if any(p in ("", ".", "..") for p in parts):
            raise S3URIError(
                f"{uri!r}: the path has an empty, '.' or '..' component; write it without '//', './' or '../'")
        return cls(bucket, prefix)

    @property
    def uri(self) -> str:
        return f"{SCHEME}{self.bucket}/{self.prefix}" if self.prefix else f"{SCHEME}{self.bucket}"

    @property
    def name(self) -> str:
        """The last path component (the bucket for a bare bucket): the local name of a download."""
        return self.prefix.rsplit("/", 1)[-1] if self.prefix else self.bucket

    def child(self, *parts: str) -> S3Location:
        """This location extended by ``parts`` (each may itself contain ``/``)."""
        extra = "/".join(p.strip("/") for p in parts if p.strip("/"))
        return S3Location(self.bucket, f"{self.prefix}/{extra}".strip("/") if extra else self.prefix)

    def key(self, relative: str) -> str:
        """The object key for ``relative`` (a POSIX path) under this prefix."""
        return f"{self.prefix}/{relative}" if self.prefix else relative

    def dir_prefix(self) -> str:
        """The listing prefix for "everything under this folder": ``prefix/`` (or ``""`` for a bucket).

        The trailing slash matters: without it, ``runs/a`` would also match ``runs/ab/...``.
        """
        return f"{self.prefix}/" if self.prefix else ""

    def __str__(self) -> str:
        return self.uri
