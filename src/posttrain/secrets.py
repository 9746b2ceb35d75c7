"""What counts as a secret in posttrain's outputs, and how it is blanked (DESIGN invariant 6).

Standard library only and at the bottom of the layers: the recipe loader (resolved_recipe.yaml,
`validate`, the start-up table, recorded command lines) and the http reward's error messages use
the same rules.
"""

from __future__ import annotations

import re

__all__ = ["REDACTED", "SECRET_CONTAINERS", "SECRET_KEYS", "is_secret_key", "redact_tree", "redact_url"]

# Keys whose values are secrets wherever they appear (compared lower-case, '-' read as '_'), and
# keys under which EVERY value is one: HTTP headers carry credentials under any name
# (Authorization, X-Api-Key, Cookie, a vendor's own), so a reward's `headers` is redacted whole.
SECRET_KEYS = {"api_key", "apikey", "x_api_key", "hub_token", "token", "access_token", "auth_token", "password",
               "secret", "secret_access_key", "session_token", "authorization", "proxy_authorization", "cookie"}
SECRET_CONTAINERS = {"headers"}
REDACTED = "***"
# Credentials inside URLs: user:password@host, and query parameters that carry keys or tokens.
_URL_USERINFO = re.compile(r"(?<=://)([^/\s:@]+):[^/\s@]+@")
_URL_SECRET_QUERY = re.compile(r"([?&](?:api[_-]?key|key|token|access[_-]?token|auth|signature|sig|password|secret)=)[^&#\s]+", re.IGNORECASE)


def is_secret_key(key) -> bool:
    """``api_key``, ``Authorization``, ``X-Api-Key``, ... (see SECRET_KEYS)."""
    return str(key).lower().replace("-", "_") in SECRET_KEYS


def redact_url(text: str) -> str:
    """``text`` with the password of ``user:password@host`` URLs and secret query values replaced by ***.

    >>> redact_url("http://bob:pw@host/score?api_key=k&v=1")
    'http://bob:***@host/score?api_key=***&v=1'
    """
    if "://" not in text and "?" not in text:
        return text
    return _URL_SECRET_QUERY.sub(rf"\g<1>{REDACTED}", _URL_USERINFO.sub(rf"\1:{REDACTED}@", text))


def redact_tree(node):
    """A copy of a JSON-like tree with secret values blanked: values of secret keys, every value
    under a SECRET_CONTAINERS key (header names stay, to show what was sent), credentials in URLs."""
    if isinstance(node, dict):
        out = {}
        for key, value in node.items():
            if key in SECRET_CONTAINERS and isinstance(value, dict):
                out[key] = {name: REDACTED for name in value}
            elif is_secret_key(key) and value:
                out[key] = REDACTED
            else:
                out[key] = redact_tree(value)
        return out
    if isinstance(node, list):
        return [redact_tree(v) for v in node]
    if isinstance(node, str):
        return redact_url(node)
    return node
