"""Secrets never leave the process: credentials in configs, manifests, argument lists and messages are
replaced by ``***`` before anything is written or shown."""
from __future__ import annotations

import re


# A credential's name: ``key`` alone (s3fs's), or a credential word as a whole part of a name split at _ . -
# (``secret``, ``aws_secret_access_key``, ``session_token``, ``api-key``; not ``tokenizer``, ``max_tokens``,
# ``node_key``, ``m_key.yaml``, nor a name of where a credential is kept, ``api_key_env``)
_CREDENTIAL = (r"key|(?![\w.-]*[_.-](?:env|var|file|path)$)"
               r"(?:[\w.-]*[_.-])?(?:secret|token|passw(?:or)?d|pwd|passphrase|credentials?|auth|authorization"
               r"|api[_-]?key|apikey|access[_-]?key(?:[_-]id)?|account[_-]?key|private[_-]?key|sas)(?:[_.-][\w.-]*)?")
_SECRET_NAME = re.compile(_CREDENTIAL, re.I)
_SECRET_ASSIGNMENT = re.compile(r"(?i)(?<![\w.-])([\w.-]+)(\s*[=:]\s*)([^\s,&'\"}]+)")
_URL_PASSWORD = re.compile(r"(://[^/@\s:]+):[^/@\s]+@")
REDACTED = "***"


def redact_text(text: str) -> str:
    """``text`` with the values of credential-like ``NAME=value`` pairs and URL passwords replaced by ***."""
    def hidden(m):
        return m.group(1) + m.group(2) + REDACTED if _SECRET_NAME.fullmatch(m.group(1)) else m.group(0)
    return _URL_PASSWORD.sub(rf"\1:{REDACTED}@", _SECRET_ASSIGNMENT.sub(hidden, text))


def redact(value):
    """A copy of a config, manifest or argument list with credentials replaced by ***: values under
    names that are credentials' (key; names with a part secret, token, password, credential, auth, api_key,
    access_key, …), and credential assignments or URL passwords inside strings."""
    if isinstance(value, dict):
        return {k: (REDACTED if value_is_secret(k, v) else redact(v)) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return type(value)(redact(v) for v in value)
    if isinstance(value, str):
        return redact_text(value)
    return value


def value_is_secret(name, value) -> bool:
    return isinstance(value, (str, bytes)) and bool(_SECRET_NAME.fullmatch(str(name)))
