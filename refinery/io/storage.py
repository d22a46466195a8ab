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
    """Publish a folder so that a reader finds either the previous finished version or the new one.

    Local disks: every file is written under ``<out>.tmp-<pid>-<token>``, then the folder is moved
    onto ``<out>`` in one rename; a crash leaves only the temporary folder, which the next run on
    the same output removes. Object stores have no rename: files go straight under ``<out>``, and
    ``versioned(name)`` gives data files this run's id (``part-00000-<run>.parquet``) so they never
    overwrite the files of the finished version. The caller's manifest, written last, lists exactly
    the files to read; ``commit`` then removes every file this run did not write (the old run's and
    a crashed run's), and ``abort`` removes only this run's versioned files.
    """

    def __init__(self, out: str, storage_options: dict | None = None):
        import time
        import uuid

        self.out = out.rstrip("/")
        self.fs, self.path = get_fs(self.out, storage_options)
        self.local = is_local(self.fs)
        self.run_id = f"{time.strftime('%Y%m%dT%H%M%S')}-{uuid.uuid4().hex[:8]}"
        self._written: set[str] = set()
        if self.local:
            remove_stale_temps(self.path)
            self.tmp = f"{self.path}.tmp-{os.getpid()}-{self.run_id}"
        else:
            self.tmp = self.path
        self.fs.makedirs(self.tmp, exist_ok=True)

    def versioned(self, name: str) -> str:
        """The name a data file is published under: ``name`` locally, with the run id on object stores."""
        if self.local:
            return name
        stem, dot, ext = name.partition(".")
        return f"{stem}-{self.run_id}{dot}{ext}"

    def file(self, name: str) -> str:
        self._written.add(name)
        return join(self.tmp, name)

    def write_bytes(self, name: str, data: bytes) -> None:
        with self.fs.open(self.file(name), "wb") as fh:
            fh.write(data)

    def write_text(self, name: str, text: str) -> None:
        self.write_bytes(name, text.encode("utf-8"))

    def write_parquet(self, name: str, table) -> None:
        import pyarrow.parquet as pq

        with self.fs.open(self.file(name), "wb") as fh:
            pq.write_table(table, fh)

    def commit(self) -> None:
        if self.local:
            if self.fs.exists(self.path):
                self.fs.rm(self.path, recursive=True)
            self.fs.mv(self.tmp, self.path, recursive=True)
            return
        keep = {join(self.path, name) for name in self._written}
        stale = [f for f in self.fs.find(self.path) if f not in keep]
        if stale:
            self.fs.rm(stale)

    def abort(self) -> None:
        if self.local:
            if self.fs.exists(self.tmp):
                self.fs.rm(self.tmp, recursive=True)
            return
        own = [join(self.path, name) for name in self._written if self.run_id in name]
        for path in own:
            try:
                self.fs.rm(path)
            except Exception:  # noqa: BLE001 — best effort: the store may be why we abort; never mask that error
                pass

    def __enter__(self):
        return self

    def __exit__(self, exc_type, exc, tb):
        if exc_type is not None:
            self.abort()
        return False


RUN_MARKER = "_SUCCESS"


class RunOutput:
    """A run that publishes several parts under one folder (``zfilter``: kept/, rejected/, report/).

    Entering removes ``<out>/_SUCCESS``; a clean exit writes it last, with the parts and figures the
    run reports. A folder without the marker holds no finished run, even if each part looks whole.
    """

    def __init__(self, out: str, storage_options: dict | None = None):
        self.out = out.rstrip("/")
        self.fs, self.path = get_fs(self.out, storage_options)
        self.summary: dict = {}

    def __enter__(self) -> "RunOutput":
        marker = join(self.path, RUN_MARKER)
        if self.fs.exists(marker):
            self.fs.rm(marker)
        return self

    def __exit__(self, exc_type, exc, tb):
        if exc_type is None:
            import json
            import time

            self.fs.makedirs(self.path, exist_ok=True)
            parts = sorted(posixpath.basename(p.rstrip("/")) for p in self.fs.ls(self.path, detail=False)
                           if posixpath.basename(p.rstrip("/")) != RUN_MARKER)
            body = {"finished": time.strftime("%Y-%m-%dT%H:%M:%S%z"), "parts": parts, **redact(self.summary)}
            with self.fs.open(join(self.path, RUN_MARKER), "w") as fh:
                json.dump(body, fh, indent=2, default=str)
        return False


def publishes_run(fn):
    """Wrap an API function that writes several parts under its ``out`` argument in a ``RunOutput``:
    the marker goes when it starts and comes back, with the report's scalar figures, when it returns."""
    import functools
    import inspect

    signature = inspect.signature(fn)

    @functools.wraps(fn)
    def wrapper(*args, **kwargs):
        bound = signature.bind(*args, **kwargs)
        bound.apply_defaults()
        opts = bound.arguments.get("opts")
        storage_options = getattr(opts, "storage_options", None) or bound.arguments.get("storage_options")
        with RunOutput(bound.arguments["out"], storage_options) as run:
            result = fn(*args, **kwargs)
            if isinstance(result, dict):
                run.summary = {k: v for k, v in result.items() if isinstance(v, (bool, int, float, str))}
        return result

    return wrapper


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
