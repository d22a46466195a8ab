"""Where refinery reads and writes: one place that turns a user's path or URL into (filesystem, path), with
the storage options, the deadlines and the errors of the stores.

One deadline a call: every call to an object store, its retries included, ends within the I/O timeout
(``--io-timeout``, ``REFINERY_IO_TIMEOUT``; ``store_failures.IO_TIMEOUT`` by default), so a store that accepts and
never answers fails the run in that time (S3: ``s3_deadlines``, which botocore's ``STORE_ATTEMPTS`` tries fit in;
s3fs's own retry loop is off, so the two do not multiply). A connection times out after ``CONNECT_TIMEOUT`` seconds,
a read that goes silent after the I/O timeout. Clean-up after a failure has its own budget, ``CLEANUP_SECONDS``: what
it cannot remove in time stays listed for the next run on the same output, which removes it.

Every failure of a store or a disk is one line naming the URL and the operation (``store_failures.StoreError``),
whatever carried it (``store_failures.store_failure_in``: DuckDB and Arrow keep only an error's text).
"""
from __future__ import annotations

import contextlib
import functools
import json
import os
import pkgutil
import posixpath
import threading
from typing import TYPE_CHECKING

from refinery.io.store_failures import CHECKSUM_SETTINGS, io_timeout, store_error
from refinery.messages import Refusal, Setting

if TYPE_CHECKING:
    import fsspec

CONNECT_TIMEOUT = 10.0
STORE_ATTEMPTS = 3
CLEANUP_SECONDS = 30.0
S3_PROTOCOLS = ("s3", "s3a")
BUCKET_PROTOCOLS = (*S3_PROTOCOLS, "gs", "gcs", "az", "abfs", "abfss")   # stores whose paths start with a bucket


def storage_options_from_env(protocol: str) -> dict:
    """Storage options taken from the environment (credentials are never logged), with the deadlines.

    S3: ``AWS_ENDPOINT_URL`` / ``REFINERY_S3_ENDPOINT`` choose an S3-compatible endpoint;
    credentials come from the usual AWS variables, read by botocore itself. Checksums are asked for and
    checked only where an operation requires them (``CHECKSUM_SETTINGS``), as S3-compatible stores (rclone,
    older MinIO, Ceph) support no more, unless the environment or the AWS profile sets them.
    """
    if protocol not in S3_PROTOCOLS:
        return {}
    timeout = io_timeout()
    options = {"config_kwargs": {"connect_timeout": min(CONNECT_TIMEOUT, timeout), "read_timeout": timeout,
                                 "retries": {"total_max_attempts": STORE_ATTEMPTS, "mode": "standard"},
                                 **_checksum_defaults()}}
    endpoint = os.environ.get("REFINERY_S3_ENDPOINT") or os.environ.get("AWS_ENDPOINT_URL")
    if endpoint:
        options["client_kwargs"] = {"endpoint_url": endpoint}
    return options


def _checksum_defaults() -> dict:
    """``when_required`` for each checksum setting that neither the environment nor the AWS profile sets."""
    profile = _aws_profile_settings()
    return {key: "when_required" for key, variable in CHECKSUM_SETTINGS.items()
            if not os.environ.get(variable) and key not in profile}


@functools.lru_cache(maxsize=1)
def _aws_profile_settings() -> frozenset:
    """The keys the AWS config file's active profile sets (``~/.aws/config``), or none without botocore."""
    try:
        import botocore.session

        return frozenset(botocore.session.Session().get_scoped_config())
    except Exception:  # noqa: BLE001 — no botocore, or an unreadable profile: botocore itself will say so
        return frozenset()


def merged(base: dict, extra: dict) -> dict:
    """``extra`` over ``base``, nested dicts (client_kwargs, config_kwargs; nested configs) merged key by key."""
    out = dict(base)
    for key, value in extra.items():
        out[key] = merged(out[key], value) if isinstance(value, dict) and isinstance(out.get(key), dict) else value
    return out


def get_fs(url: str, storage_options: dict | None = None) -> tuple["fsspec.AbstractFileSystem", str]:
    """The filesystem a path or URL lives on, with the options from the environment and ``storage_options``
    (fsspec is imported here: a command's start does not pay for it)."""
    from fsspec.core import url_to_fs

    protocol = url.split("://", 1)[0] if "://" in url else "file"
    if protocol in S3_PROTOCOLS:
        _s3_with_deadlines()
    fs, path = url_to_fs(url, **merged(storage_options_from_env(protocol), storage_options or {}))
    if protocol in S3_PROTOCOLS:
        fs.retries = 1   # botocore retries (STORE_ATTEMPTS); s3fs's loop around it would multiply them
    return fs, path


S3_CLASS = "refinery.io.s3_deadlines:S3WithDeadlines"   # named, so that a command's start does not import s3fs


def _s3_with_deadlines() -> None:
    """Make ``s3://`` and ``s3a://`` refinery's S3 (``s3_deadlines``): each call within the I/O timeout, named, its
    lookups asked once in a run. fsspec imports it by its name when first asked for; where s3fs's own class was
    loaded through fsspec already (a notebook's ``pd.read_parquet("s3://…")`` before refinery), that class is
    replaced by refinery's (fsspec would otherwise keep answering with it)."""
    from fsspec import register_implementation
    from fsspec.registry import registry

    for protocol in S3_PROTOCOLS:
        loaded = registry.get(protocol)
        if loaded is None:
            register_implementation(protocol, S3_CLASS.replace(":", "."), clobber=True)
        elif f"{loaded.__module__}:{loaded.__qualname__}" != S3_CLASS:
            register_implementation(protocol, pkgutil.resolve_name(S3_CLASS), clobber=True)


def is_local(fs) -> bool:
    return "file" in (fs.protocol if isinstance(fs.protocol, tuple) else (fs.protocol,))


def join(base: str, *parts: str) -> str:
    return posixpath.join(base, *parts)


def parse_storage_options(pairs) -> dict:
    """``key=value`` pairs from ``--storage-option`` into an fsspec options dict."""
    options: dict = {}
    for pair in pairs or ():
        key, _, value = pair.partition("=")
        if not _:
            raise Refusal(Setting("storage_options", repr(pair), option="--storage-option", placeholder=True),
                          " is not KEY=VALUE", code="invalid-setting")
        if key == "endpoint_url":
            options.setdefault("client_kwargs", {})["endpoint_url"] = value
        else:
            options[key] = value
    return options


def folder_entries(fs, path: str) -> list[str]:
    """The names in folder ``path`` (none where it is absent), listed afresh."""
    fs.invalidate_cache(path)
    try:
        return [posixpath.basename(p.rstrip("/")) for p in fs.ls(path, detail=False)]
    except FileNotFoundError:
        return []


def forget_listings(fs, path: str) -> None:
    """Drop what ``fs`` cached of the folder ``path``, the folders above it and those under it (s3fs keeps listings:
    a later look must see what another process, or a run in this one, wrote or removed since)."""
    fs.invalidate_cache(path)
    under = path.rstrip("/") + "/"
    for listed in [d for d in getattr(fs, "dircache", {}) if d.startswith(under)]:
        fs.dircache.pop(listed, None)


def json_object(fs, path: str) -> dict | None:
    """The JSON object in ``path``, or None where there is no such file or it is not a JSON object."""
    try:
        with fs.open(path, "r") as fh:
            body = json.load(fh)
    except (FileNotFoundError, IsADirectoryError, NotADirectoryError, ValueError):
        return None
    return body if isinstance(body, dict) else None



# ---------------------------------------------------------------- what a store answered, and what refinery refuses

class ForeignOutput(FileExistsError, Refusal):
    """``--out`` names a folder (or a file) that refinery did not write: refused whatever ``--mode`` (a refusal,
    and a ``FileExistsError`` as it always was)."""

    code = "not-refinerys"


class MissingInput(FileNotFoundError, Refusal):
    """A path the run reads that holds nothing to read (a refusal, and a ``FileNotFoundError``)."""

    code = "bad-input"


class MissingBucket(FileNotFoundError, Refusal):
    """An object-store URL whose bucket does not exist: refinery never creates buckets."""

    code = "storage"


def check_bucket(url: str, fs, path: str) -> None:
    """Raise ``MissingBucket`` where ``url`` is on an object store and its bucket does not exist (writing
    there would create it: a new bucket on the user's account that nobody asked for). A store that refuses
    to say (no credentials, no permission) raises its own error, which ``on_store`` names with the URL."""
    scheme = url.split("://", 1)[0] if "://" in url else "file"
    if scheme not in BUCKET_PROTOCOLS:
        return
    bucket = path.split("/", 1)[0]
    fs.invalidate_cache(bucket)
    try:
        fs.info(bucket)
    except FileNotFoundError:
        raise MissingBucket(f"{url}: the bucket {scheme}://{bucket} does not exist; refinery never creates "
                            "buckets: create it, or name one that exists") from None


@contextlib.contextmanager
def on_store(url: str, operation: str):
    """Errors of the calls inside (a store's, a disk's) raised again as one line naming ``url`` and
    ``operation``; a missing file stays ``FileNotFoundError`` for the callers that look for one."""
    try:
        yield
    except (FileNotFoundError, ForeignOutput):
        raise
    except Exception as e:  # noqa: BLE001 — any store or disk error, named with where it happened
        raise store_error(url, operation, e) from e


def with_deadline(seconds: float, fn, *args) -> None:
    """``fn(*args)`` on a daemon thread, waited for at most ``seconds``, its errors dropped: best-effort
    clean-up against a store that may not answer (an abandoned call ends with the process; what it did not
    remove, the next run does)."""
    def call():
        try:
            fn(*args)
        except Exception:  # noqa: BLE001 — best effort: never mask the error that made the run clean up
            pass

    worker = threading.Thread(target=call, daemon=True, name="refinery-cleanup")
    worker.start()
    worker.join(seconds)


def pyarrow_filesystem(url: str, storage_options: dict | None = None):
    """The filesystem of ``url`` as Arrow's readers take one (None: the local disk, which they reach themselves)."""
    from pyarrow.fs import FSSpecHandler, PyFileSystem

    fs, _ = get_fs(url, storage_options)
    return None if is_local(fs) else PyFileSystem(FSSpecHandler(fs))
