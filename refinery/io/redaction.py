"""Secrets never leave the process: credentials in configs, manifests, argument lists and messages are
replaced by ``***`` before anything is written or shown."""
from __future__ import annotations

import re

# A name is split into its parts at _ . - and camelCase (``aws_secret_access_key``, ``SessionToken``,
# ``secretKey``). A credential's: ``key`` alone (s3fs's); a part that is a credential word, or ends in one
# (``pgpassword``); ``key`` after a word that makes it one (``storage_key``, ``SSECustomerKey``). Not
# ``tokenizer``, ``max_tokens``, weights' ``node_key``, a file ``m_key.yaml``, nor a name of where a credential
# is kept (``api_key_env``).
_PARTS = re.compile(r"[A-Z]+(?![a-z])|[A-Z]?[a-z]+|\d+")
_WORDS = {"secret", "token", "password", "passwd", "pwd", "passphrase", "credential", "credentials", "auth",
          "authorization", "session", "apikey", "sas", "signature", "cookie"}
_ENDINGS = ("password", "passwd", "secret", "token")
_KEY_KINDS = {"access", "secret", "api", "account", "storage", "encryption", "master", "private", "sas",
              "customer", "client", "shared", "subscription", "signing", "service", "auth"}
_KEPT_WHERE = {"env", "var", "file", "path"}
_ASSIGNMENT = re.compile(r"(?<![\w.-])([\w.-]+)(\s*[=:]\s*)([^\s,&'\"}]+)")
_URL_PASSWORD = re.compile(r"(://[^/@\s:]+):[^/@\s]+@")
REDACTED = "***"


def is_credential_name(name: str) -> bool:
    """Whether a setting or parameter of this name holds a credential (see the rules above)."""
    parts = [p.lower() for piece in re.split(r"[_.\-\s]+", str(name)) for p in _PARTS.findall(piece)]
    if not parts or parts[-1] in _KEPT_WHERE:
        return False
    if parts == ["key"] or any(p in _WORDS or p.endswith(_ENDINGS) for p in parts):
        return True
    return any(p == "key" and i and parts[i - 1] in _KEY_KINDS for i, p in enumerate(parts))


def redact_text(text: str) -> str:
    """``text`` with the values of credential ``NAME=value`` (or ``NAME: value``) pairs and URL passwords replaced
    by ***; another pair's value is searched in turn (``url=https://h/?token=…``, ``a=b;password=…``)."""
    def hidden(m):
        value = REDACTED if is_credential_name(m.group(1)) else redact_text(m.group(3))
        return m.group(1) + m.group(2) + value
    return _URL_PASSWORD.sub(rf"\1:{REDACTED}@", _ASSIGNMENT.sub(hidden, text))


def redact(value):
    """A copy of a config, manifest or argument list with credentials replaced by ***: the values under
    credentials' names (``is_credential_name``), and credential assignments or URL passwords inside strings."""
    if isinstance(value, dict):
        return {k: (REDACTED if value_is_secret(k, v) else redact(v)) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return type(value)(redact(v) for v in value)
    if isinstance(value, str):
        return redact_text(value)
    return value


def secrets_as_variables(options: dict) -> dict:
    """Storage options with each credential's value replaced by ``${REFINERY_<NAME>}``: a pipeline file that names
    where its credentials come from, never what they are."""
    return {k: (f"${{REFINERY_{k.upper()}}}" if value_is_secret(k, v) else
                secrets_as_variables(v) if isinstance(v, dict) else v) for k, v in options.items()}


def value_is_secret(name, value) -> bool:
    return isinstance(value, (str, bytes)) and is_credential_name(name)
