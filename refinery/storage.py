"""fsspec helpers: one place that turns a user's path or URL into (filesystem, path)."""
from __future__ import annotations

import os
import posixpath
import re

import fsspec
from fsspec.core import url_to_fs


def storage_options_from_env(protocol: str) -> dict:
    """Storage options taken from the environment (credentials are never logged).

    S3: ``AWS_ENDPOINT_URL`` / ``REFINERY_S3_ENDPOINT`` choose an S3-compatible endpoint;
    credentials come from the usual AWS variables, read by botocore itself.
    """
    if protocol in ("s3", "s3a"):
        endpoint = os.environ.get("REFINERY_S3_ENDPOINT") or os.environ.get("AWS_ENDPOINT_URL")
        if endpoint:
            return {"client_kwargs": {"endpoint_url": endpoint}}
    return {}


def get_fs(url: str, storage_options: dict | None = None) -> tuple[fsspec.AbstractFileSystem, str]:
    protocol = url.split("://", 1)[0] if "://" in url else "file"
    options = {**storage_options_from_env(protocol), **(storage_options or {})}
    return url_to_fs(url, **options)


def unstrip(fs: fsspec.AbstractFileSystem, path: str) -> str:
    """The full URL of ``path`` on ``fs`` (fsspec strips the protocol)."""
    return fs.unstrip_protocol(path) if not _is_local(fs) else path


def _is_local(fs) -> bool:
    return "file" in (fs.protocol if isinstance(fs.protocol, tuple) else (fs.protocol,))


def is_local(fs) -> bool:
    return _is_local(fs)


def join(base: str, *parts: str) -> str:
    return posixpath.join(base, *parts)


def parse_storage_options(pairs) -> dict:
    """``key=value`` pairs from ``--storage-option`` into an fsspec options dict."""
    options: dict = {}
    for pair in pairs or ():
        key, _, value = pair.partition("=")
        if not _:
            raise ValueError(f"--storage-option {pair!r} is not KEY=VALUE")
        if key == "endpoint_url":
            options.setdefault("client_kwargs", {})["endpoint_url"] = value
        else:
            options[key] = value
    return options


def remove_stale_temps(path: str) -> list[str]:
    """Remove ``<path>.tmp-<pid>-*`` folders left by runs whose process is gone (a kill -9, a crash)."""
    import glob
    import shutil

    removed = []
    for tmp in glob.glob(glob.escape(path) + ".tmp-*-*"):
        pid = os.path.basename(tmp).rsplit(".tmp-", 1)[1].split("-", 1)[0]
        if pid.isdigit() and int(pid) != os.getpid() and not _alive(int(pid)):
            shutil.rmtree(tmp, ignore_errors=True)
            removed.append(tmp)
    return removed


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except (ProcessLookupError, OverflowError):  # no such process (or no such pid at all)
        return False
    except PermissionError:
        return True
    return True


class AtomicDir:
    """Write a folder's files under ``<out>.tmp-<token>``, then move it onto ``<out>`` in one step.

    A reader that finds ``<out>`` finds it whole; a crash leaves only the temporary folder.
    Object stores have no atomic rename: there the files go straight under ``<out>`` (the
    old output removed first) and the caller's manifest, written last, marks it finished.
    """

    def __init__(self, out: str, storage_options: dict | None = None):
        import uuid

        self.out = out.rstrip("/")
        self.fs, self.path = get_fs(self.out, storage_options)
        self.local = is_local(self.fs)
        if self.local:
            remove_stale_temps(self.path)
            self.tmp = f"{self.path}.tmp-{os.getpid()}-{uuid.uuid4().hex[:12]}"
        else:
            self.tmp = self.path
            if self.fs.exists(self.path):
                self.fs.rm(self.path, recursive=True)
        self.fs.makedirs(self.tmp, exist_ok=True)

    def file(self, name: str) -> str:
        return join(self.tmp, name)

    def write_bytes(self, name: str, data: bytes) -> None:
        with self.fs.open(self.file(name), "wb") as fh:
            fh.write(data)

    def write_text(self, name: str, text: str) -> None:
        self.write_bytes(name, text.encode("utf-8"))

    def commit(self) -> None:
        if not self.local:
            return
        if self.fs.exists(self.path):
            self.fs.rm(self.path, recursive=True)
        self.fs.mv(self.tmp, self.path, recursive=True)

    def abort(self) -> None:
        if self.fs.exists(self.tmp):
            self.fs.rm(self.tmp, recursive=True)

    def __enter__(self):
        return self

    def __exit__(self, exc_type, exc, tb):
        if exc_type is not None:
            self.abort()
        return False


# ---------------------------------------------------------------- secrets never leave the process

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
