"""Secrets never leave the process: credentials in configs, manifests, argument lists and messages are
replaced by ``***`` before anything is written or shown."""
from __future__ import annotations

import re


_SECRET = r"[\w.-]*(?:key|secret|token|passw|session|credential|auth)[\w.-]*"
_SECRET_NAME = re.compile(_SECRET, re.I)
_SECRET_ASSIGNMENT = re.compile(rf"(?i)\b({_SECRET})(\s*[=:]\s*)([^\s,&'\"}}]+)")
_URL_PASSWORD = re.compile(r"(://[^/@\s:]+):[^/@\s]+@")
REDACTED = "***"


def redact_text(text: str) -> str:
    """``text`` with the values of credential-like ``NAME=value`` pairs and URL passwords replaced by ***."""
    return _URL_PASSWORD.sub(rf"\1:{REDACTED}@", _SECRET_ASSIGNMENT.sub(rf"\1\2{REDACTED}", text))


def redact(value):
    """A copy of a config, manifest or argument list with credentials replaced by ***: values under
    names that look like credentials (key, secret, token, password, session, credential, auth), and
    credential assignments or URL passwords inside strings."""
    if isinstance(value, dict):
        return {k: (REDACTED if value_is_secret(k, v) else redact(v)) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return type(value)(redact(v) for v in value)
    if isinstance(value, str):
        return redact_text(value)
    return value


def value_is_secret(name, value) -> bool:
    return isinstance(value, (str, bytes)) and bool(_SECRET_NAME.fullmatch(str(name)))
