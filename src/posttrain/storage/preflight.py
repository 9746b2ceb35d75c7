"""Check a recipe's S3 settings before anything heavy starts: credentials, endpoint, bucket.

Without this, missing credentials or an endpoint that does not answer surface as a raw botocore
traceback at the first download or upload, minutes into a run. Here each problem names the recipe
key and the reason, within a few seconds: one attempt per request, short timeouts.
"""

from __future__ import annotations

CONNECT_TIMEOUT_S = 3.0
READ_TIMEOUT_S = 5.0


def s3_problems(s3, sources: list[tuple[str, str]]) -> list[tuple[str, str]]:
    """(key, message) for the `s3` section (may be None) and the s3:// sources [(key, uri)]."""
    from .location import S3Location

    buckets: dict[str, str] = {}  # bucket -> the key that names it
    if s3 is not None:
        buckets[s3.bucket] = "s3.bucket"
    for key, uri in sources:
        try:
            buckets.setdefault(S3Location.parse(uri).bucket, key)
        except ValueError:
            continue  # reported by the URI check
    if not buckets:
        return []

    import boto3
    import botocore.exceptions as bx

    endpoint = s3.endpoint_url if s3 is not None else None
    region = s3.region if s3 is not None else None
    where = "s3.endpoint_url" if endpoint else next(iter(buckets.values()))
    if boto3.session.Session().get_credentials() is None:
        return [(where if s3 is not None else next(iter(buckets.values())),
                 "no AWS credentials found: set AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY, or AWS_PROFILE, or run where an "
                 "instance role applies.")]
    from .errors import PERMANENT_CODES, error_code, redact
    from .s3 import make_client

    client = make_client(endpoint, region, max_attempts=1, connect_timeout=CONNECT_TIMEOUT_S, read_timeout=READ_TIMEOUT_S)
    shown = endpoint or "the AWS endpoint"
    out = []
    for bucket, key in buckets.items():
        try:
            client.head_bucket(Bucket=bucket)
        except (bx.EndpointConnectionError, bx.ConnectTimeoutError, bx.ReadTimeoutError) as e:
            return [(where, f"{shown} does not answer ({type(e).__name__}: {redact(str(e))}); check the URL and that the "
                            "server is running and reachable from this machine.")]
        except bx.ClientError as e:
            code = error_code(e) or "error"
            if code in ("403", "AccessDenied") and key != "s3.bucket":
                continue  # reading one object may be allowed without bucket-level access; the download will tell
            reason = {"404": PERMANENT_CODES["NoSuchBucket"], "NoSuchBucket": PERMANENT_CODES["NoSuchBucket"]}.get(code) \
                or PERMANENT_CODES.get(code, redact(str(e)))
            out.append((key, f"bucket {bucket!r} on {shown}: {code}: {reason}."))
        except bx.BotoCoreError as e:
            return [(where, f"{shown}: {type(e).__name__}: {redact(str(e))}")]
    return out
