"""fsspec helpers: one place that turns a user's path or URL into (filesystem, path), and that publishes folders.

Every call to an object store has a deadline: S3 clients connect within ``CONNECT_TIMEOUT`` seconds, wait at
most the I/O timeout (``--io-timeout``, ``REFINERY_IO_TIMEOUT``; ``IO_TIMEOUT`` by default) for each read,
and try a call ``STORE_ATTEMPTS`` times in all (botocore's standard retry mode, s3fs's own retry loop off,
so the two do not multiply). Clean-up after a failure has its own budget, ``CLEANUP_SECONDS``: what it
cannot remove in time stays listed for the next run on the same output, which removes it.
"""
from __future__ import annotations

import contextlib
import ctypes
import errno
import functools
import glob
import json
import os
import posixpath
import re
import shutil
import threading
import time
import uuid

import fsspec
import pyarrow as pa
import pyarrow.parquet as pq
from fsspec.core import url_to_fs

from refinery import __version__


CONNECT_TIMEOUT = 10.0
IO_TIMEOUT = 60.0
STORE_ATTEMPTS = 3
CLEANUP_SECONDS = 30.0
S3_PROTOCOLS = ("s3", "s3a")
BUCKET_PROTOCOLS = (*S3_PROTOCOLS, "gs", "gcs", "az", "abfs", "abfss")   # stores whose paths start with a bucket


def io_timeout() -> float:
    """Seconds a store may take to answer one read: ``REFINERY_IO_TIMEOUT`` (set by ``--io-timeout``)."""
    value = os.environ.get("REFINERY_IO_TIMEOUT")
    try:
        timeout = float(value) if value else IO_TIMEOUT
    except ValueError:
        raise ValueError(f"REFINERY_IO_TIMEOUT={value!r} is not a number of seconds") from None
    if timeout <= 0:
        raise ValueError(f"the I/O timeout must be a positive number of seconds, got {value}")
    return timeout


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


# botocore's checksum settings: {Config keyword: environment variable}; refinery's default is "when_required"
CHECKSUM_SETTINGS = {"request_checksum_calculation": "AWS_REQUEST_CHECKSUM_CALCULATION",
                     "response_checksum_validation": "AWS_RESPONSE_CHECKSUM_VALIDATION"}


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


def get_fs(url: str, storage_options: dict | None = None) -> tuple[fsspec.AbstractFileSystem, str]:
    protocol = url.split("://", 1)[0] if "://" in url else "file"
    fs, path = url_to_fs(url, **merged(storage_options_from_env(protocol), storage_options or {}))
    if protocol in S3_PROTOCOLS:
        fs.retries = 1   # botocore retries (STORE_ATTEMPTS); s3fs's loop around it would multiply them
    return fs, path


def store_error(url: str, operation: str, error: BaseException) -> OSError:
    """One line naming what failed where: the URL, the operation, and the store's or the disk's answer (a full
    disk with the space left on it)."""
    text = " ".join(str(error).split()) or type(error).__name__
    if isinstance(error, OSError) and error.errno == errno.ENOSPC and "://" not in url:
        probe = url
        while probe and not os.path.exists(probe):
            probe = os.path.dirname(probe)
        free = shutil.disk_usage(probe or ".").free
        text = f"no space left on device ({free / 2**20:,.1f} MiB free there)"
    elif "checksum" in text.lower():
        text += (" (a store that does not support checksums: set " +
                 " and ".join(f"{variable}=when_required" for variable in CHECKSUM_SETTINGS.values()) + ")")
    wrapped = OSError(f"{url}: {operation} failed: {text}")
    wrapped.errno = getattr(error, "errno", None)
    return wrapped


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
            raise ValueError(f"--storage-option {pair!r} is not KEY=VALUE")
        if key == "endpoint_url":
            options.setdefault("client_kwargs", {})["endpoint_url"] = value
        else:
            options[key] = value
    return options


def remove_stale_temps(path: str) -> list[str]:
    """Remove ``<path>.tmp-<pid>-*`` folders left by runs whose process is gone (a kill -9, a crash)."""
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


# ---------------------------------------------------------------- what refinery wrote, and nothing else

OWNER_MARKER = ".refinery.json"   # in every folder refinery publishes: the files it wrote there, and the run
EARLIER_MARKER = "_refinery.json"  # the marker of refinery 0.1 (readers of a data folder took it for data)
RUN_MARKER = "_SUCCESS"           # a multi-part run's folder: written last, when every part is finished
MARKER_FORMAT = "refinery-output/1"   # the marker's "format": what no other tool writes
_RUN_ID = re.compile(r"-\d{8}T\d{6}-[0-9a-f]{8}(?=\.|$)")   # the run id in an object-store file's name


class ForeignOutput(FileExistsError):
    """``--out`` names a folder (or a file) that refinery did not write: refused whatever ``--mode``."""


class OutputOverlapsInput(ValueError):
    """``--out`` is, holds or lies inside an input: refused unless the run replaces a corpus in place."""


def new_run_id() -> str:
    return f"{time.strftime('%Y%m%dT%H%M%S')}-{uuid.uuid4().hex[:8]}"


def _entries(fs, path: str) -> list[str]:
    fs.invalidate_cache(path)
    try:
        return [posixpath.basename(p.rstrip("/")) for p in fs.ls(path, detail=False)]
    except FileNotFoundError:
        return []


def is_marker(body) -> bool:
    """Whether ``body`` (a parsed ``.refinery.json``) is refinery's own marker: its format, the files it
    lists and the run that wrote them. A ``_SUCCESS`` or ``manifest.json`` proves nothing: other tools
    (Spark, Hadoop, a user's notes) write files of those names."""
    return (isinstance(body, dict) and body.get("format") == MARKER_FORMAT and isinstance(body.get("files"), list)
            and isinstance(body.get("run"), str))


def _is_earlier_marker(body) -> bool:
    """Whether ``body`` (a parsed ``_refinery.json``) is the marker refinery 0.1 wrote: its name and the files."""
    return (isinstance(body, dict) and str(body.get("written_by", "")).startswith("refinery ")
            and isinstance(body.get("files"), list))


def _marker(fs, path: str) -> tuple[str, dict] | None:
    """(name, body) of refinery's marker in folder ``path`` (this version's, else refinery 0.1's), or None."""
    for name, valid in ((OWNER_MARKER, is_marker), (EARLIER_MARKER, _is_earlier_marker)):
        body = json_object(fs, join(path, name))
        if valid(body):
            return name, body
    return None


def claim_output(out: str, storage_options: dict | None = None) -> str:
    """Whether refinery may write ``out``: ``"new"`` (absent or an empty folder) or ``"ours"`` (a folder whose
    ``.refinery.json`` is refinery's marker, ``is_marker``). Anything else raises ``ForeignOutput`` naming a
    file found there: refinery never deletes or replaces what it did not write."""
    fs, path = get_fs(out, storage_options)
    fs.invalidate_cache(path)
    with on_store(out, "looking at the output folder"):
        check_bucket(out, fs, path)
        is_file = fs.isfile(path)
        entries = [] if is_file or not fs.exists(path) else _entries(fs, path)
        ours = bool({OWNER_MARKER, EARLIER_MARKER} & set(entries)) and _marker(fs, path) is not None
    if is_file:
        raise ForeignOutput(f"--out {out} is a file, not a folder; give a folder for refinery's outputs")
    if not entries:
        return "new"
    if ours:
        return "ours"
    shown = ", ".join(sorted(entries)[:4]) + (" …" if len(entries) > 4 else "")
    raise ForeignOutput(f"--out {out} already holds files refinery did not write ({shown}); refinery never "
                        "deletes or replaces them: give a new or empty folder (e.g. "
                        f"{join(out.rstrip('/'), 'refinery-out')})")


class MissingBucket(FileNotFoundError):
    """An object-store URL whose bucket does not exist: refinery never creates buckets."""


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


def _location(url: str) -> tuple[str, str]:
    """(protocol, absolute normalized path) of a path or URL; a glob keeps its pattern below its folder."""
    protocol, sep, rest = url.partition("://")
    if not sep:
        protocol, rest = "file", url
    magic = re.search(r"[*?[]", rest)
    folder = rest[:magic.start()].rpartition("/")[0] if magic else rest
    pattern = rest[len(folder):].lstrip("/") if magic else ""
    if protocol == "file":
        folder = os.path.realpath(os.path.expanduser(folder or "."))
    else:
        folder = posixpath.normpath("/" + folder.strip("/"))
    return protocol, posixpath.join(folder, pattern) if pattern else folder


def check_out_apart(out: str, inputs, replaces: str | None = None, storage_options: dict | None = None) -> None:
    """Refuse an ``out`` that is, holds or lies inside one of ``inputs``: writing there would replace or mix
    with the data the run reads. ``replaces`` (``--in-place``) is the part of ``out`` the run publishes its
    corpus as (``OUT/kept``, ``OUT/corpus``): an input that is that part of a folder refinery wrote is allowed,
    and the run replaces it, atomically, once it has read it."""
    o_protocol, o_path = _location(out)
    for given in inputs:
        i_protocol, i_path = _location(str(given))
        if i_protocol != o_protocol:
            continue
        if replaces is not None and i_path == _location(replaces)[1] and claim_output(out, storage_options) == "ours":
            continue
        if replaces is not None:
            hint = f"; --in-place reruns a stage on its own output: --out {out} for the input {replaces}"
        else:   # a part of an earlier output (OUT/kept): the user may mean to run the stage on it again
            hint = ("; or --in-place to rerun a stage on its own output, replacing it"
                    if posixpath.dirname(i_path) == o_path else "")
        if o_path == i_path:
            raise OutputOverlapsInput(f"--out {out} is the input {given}: refinery would replace the data it reads; "
                                      f"give another folder{hint}")
        if i_path.startswith(o_path.rstrip("/") + "/"):
            raise OutputOverlapsInput(f"--out {out} holds the input {given}: refinery would write among the data "
                                      f"it reads; give a folder outside it{hint}")
        if o_path.startswith(i_path.rstrip("/") + "/"):
            raise OutputOverlapsInput(f"--out {out} lies inside the input {given}: refinery would write into the "
                                      "data it reads; give a folder outside it")


def made_folder(out: str, storage_options: dict | None = None) -> str | None:
    """The outermost folder that writing ``out`` would create (``out`` itself or an absent parent on a local
    disk), or None where ``out`` exists: what a failed run removes again."""
    fs, path = get_fs(out, storage_options)
    fs.invalidate_cache(path)
    with on_store(out, "looking at the output folder"):
        if fs.exists(path):
            return None
        if not is_local(fs):
            return path
        top = path
        while os.path.dirname(top) != top and not os.path.exists(os.path.dirname(top)):
            top = os.path.dirname(top)
        return top


def remove_failed_output(out: str, made: str | None, storage_options: dict | None = None,
                         keep_finished: bool = False) -> None:
    """After a failed run into ``out``, remove what it left: the folder ``made`` that it created (or, where
    ``out`` was an empty folder already, what it put in it), unless the run kept finished work to continue
    from: ``_checkpoints``, or with ``keep_finished`` anything beside refinery's marker (a pipeline's finished
    steps). Best effort within ``CLEANUP_SECONDS``; never touches a folder refinery did not make or find empty."""
    fs, path = get_fs(out, storage_options)

    def remove():
        entries = _entries(fs, path)
        if "_checkpoints" in entries or (keep_finished and set(entries) - {OWNER_MARKER}):
            return
        if made is not None:
            fs.rm(made, recursive=True)
        else:
            for name in entries:
                fs.rm(join(path, name), recursive=True)

    with_deadline(CLEANUP_SECONDS, remove)


def claim_folder(out: str, storage_options: dict | None = None, files=(OWNER_MARKER,)) -> str:
    """``claim_output``, then a new folder is made with refinery's marker (listing ``files``) in it; a folder
    of refinery 0.1 gets this version's marker in place of its ``_refinery.json``."""
    claim = claim_output(out, storage_options)
    fs, path = get_fs(out, storage_options)
    earlier = None if claim == "new" else json_object(fs, join(path, EARLIER_MARKER))
    if claim == "new" or (_is_earlier_marker(earlier) and not is_marker(json_object(fs, join(path, OWNER_MARKER)))):
        listed = sorted({*files, *(earlier or {}).get("files", ())} - {EARLIER_MARKER})
        with on_store(out, f"writing {OWNER_MARKER}"):
            fs.makedirs(path, exist_ok=True)
            with fs.open(join(path, OWNER_MARKER), "wb") as fh:
                fh.write(_marker_body(listed, run=new_run_id()).encode())
            if earlier is not None:
                fs.rm(join(path, EARLIER_MARKER))
    return claim


def owned_files(fs, path: str) -> set[str]:
    """The files (paths relative to ``path``) that refinery's marker in ``path`` says it wrote."""
    found = _marker(fs, path)
    return {found[0], *found[1]["files"]} if found else set()


def json_object(fs, path: str) -> dict | None:
    """The JSON object in ``path``, or None where there is no such file or it is not a JSON object."""
    try:
        with fs.open(path, "r") as fh:
            body = json.load(fh)
    except (FileNotFoundError, IsADirectoryError, ValueError):
        return None
    return body if isinstance(body, dict) else None


def _marker_body(files, **extra) -> str:
    return json.dumps({"format": MARKER_FORMAT, "written_by": f"refinery {__version__}", "files": sorted(files),
                       **extra}, indent=1)


def read_marker(out: str, storage_options: dict | None = None) -> dict:
    """The body of refinery's marker in ``out`` ({} where there is none)."""
    fs, path = get_fs(out, storage_options)
    found = _marker(fs, path)
    return found[1] if found else {}


def stamp_marker(out: str, storage_options: dict | None = None, **extra) -> None:
    """Add ``extra`` keys (a finished command's fingerprint) to refinery's marker in ``out``."""
    fs, path = get_fs(out, storage_options)
    body = {"run": new_run_id(), **read_marker(out, storage_options), **extra}
    files = body.pop("files", [OWNER_MARKER])
    body.pop("written_by", None)
    body.pop("format", None)
    with on_store(out, f"writing {OWNER_MARKER}"), fs.open(join(path, OWNER_MARKER), "wb") as fh:
        fh.write(_marker_body(files, **body).encode())


def _foreign_entries(root: str, owned: set[str]) -> list[str]:
    """Paths under local folder ``root`` (relative) that refinery did not write: files, links and folders
    holding none of ``owned``, taken whole."""
    under = {posixpath.dirname(f) for f in owned}
    parents = set()
    for d in under:
        while d:
            parents.add(d)
            d = posixpath.dirname(d)
    foreign, todo = [], [""]
    while todo:
        rel = todo.pop()
        for name in sorted(os.listdir(os.path.join(root, rel))):
            child = posixpath.join(rel, name) if rel else name
            if child in owned or child == OWNER_MARKER:
                continue
            if child in parents and not os.path.islink(os.path.join(root, child)):
                todo.append(child)
            else:
                foreign.append(child)
    return foreign


def _exchange(a: str, b: str) -> bool:
    """Swap two local paths in one step (Linux ``renameat2(RENAME_EXCHANGE)``); False where unsupported."""
    try:
        renameat2 = ctypes.CDLL(None, use_errno=True).renameat2
    except (AttributeError, OSError):
        return False
    at_fdcwd, rename_exchange = -100, 2
    return renameat2(at_fdcwd, os.fsencode(a), at_fdcwd, os.fsencode(b), rename_exchange) == 0


_published: dict[str, tuple] = {}   # each folder this process published (``AtomicDir.commit``): (fs, path)


def published_folders() -> list[str]:
    """The folders this process published (``AtomicDir.commit``) that still hold refinery's marker (a failed
    run removes the folders it made), in the order they were first published: what an interrupt leaves."""
    return [out for out, (fs, path) in _published.items() if fs.exists(join(path, OWNER_MARKER))]


class AtomicDir:
    """Publish a folder so that a reader finds either the previous finished version or the new one.

    Refinery only ever removes files it wrote: a folder it did not write is refused (``claim_output``), and
    each published folder carries ``.refinery.json``, the list of its files, so that replacing it removes
    those and leaves anything a user put beside them.

    Local disks: every file is written under ``<out>.tmp-<pid>-<token>``, then swapped with ``<out>`` in
    one step; files of the old folder that refinery did not write are moved into the new one, and the
    rest of the old folder is removed. A crash leaves only the temporary folder, which the next run on the
    same output removes. Object stores have no rename: files go straight under ``<out>``, and
    ``versioned(name)`` gives data files this run's id (``part-00000-<run>.parquet``) so they never
    overwrite the files of the finished version. The caller's manifest, written last, lists exactly
    the files to read; ``commit`` then removes the old run's files and any other run's id-named files,
    and ``abort`` removes only this run's versioned files.
    """

    def __init__(self, out: str, storage_options: dict | None = None):
        self.out = out.rstrip("/")
        self.fs, self.path = get_fs(self.out, storage_options)
        self.local = is_local(self.fs)
        # an object store's folder is marked before the first file, so a cut run's files are ours to remove
        (claim_output if self.local else claim_folder)(self.out, storage_options)
        self.run_id = new_run_id()
        self._written: set[str] = set()
        if self.local:
            remove_stale_temps(self.path)
            self.tmp = f"{self.path}.tmp-{os.getpid()}-{self.run_id}"
        else:
            self.tmp = self.path
        with on_store(self.out, "making the output folder"):
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
        target = self.file(name)
        if self.local and "/" in name:
            self.fs.makedirs(posixpath.dirname(target), exist_ok=True)
        with on_store(f"{self.out}/{name}", "writing"), self.fs.open(target, "wb") as fh:
            fh.write(data)

    def write_text(self, name: str, text: str) -> None:
        self.write_bytes(name, text.encode("utf-8"))

    def write_parquet(self, name: str, table) -> None:
        sink = pa.BufferOutputStream()
        pq.write_table(table, sink)
        self.write_bytes(name, sink.getvalue().to_pybytes())

    def _put_marker(self, files) -> None:
        with on_store(self.out, f"writing {OWNER_MARKER}"), self.fs.open(join(self.tmp, OWNER_MARKER), "wb") as fh:
            fh.write(_marker_body(files, run=self.run_id).encode())

    def commit(self) -> None:
        ours = self._written | {OWNER_MARKER}
        if self.local:
            self._put_marker(ours)
            self._publish_local()
            _published.setdefault(self.out, (self.fs, self.path))
            return
        with on_store(self.out, "listing the previous version's files"):
            old = owned_files(self.fs, self.path)
            listed = self.fs.find(self.path)
        stale = {f for f in old if f not in ours}
        stale |= {p for p in (posixpath.relpath(f, self.path) for f in listed)
                  if p not in ours and _RUN_ID.search(posixpath.basename(p))}
        self._put_marker(ours | stale)   # a cut clean-up leaves them listed for the next run to remove
        _published.setdefault(self.out, (self.fs, self.path))
        if stale:
            with on_store(self.out, "removing the previous version's files (the new one is published; the "
                                    "next run removes them)"):
                self.fs.rm([join(self.path, f) for f in sorted(stale)])
            self._put_marker(ours)

    def _publish_local(self) -> None:
        if not os.path.lexists(self.path):
            os.rename(self.tmp, self.path)
            return
        foreign = _foreign_entries(self.path, owned_files(self.fs, self.path))
        clash = [f for f in foreign if any(w == f or w.startswith(f + "/") or f.startswith(w + "/")
                                           for w in self._written)]
        if clash:
            raise FileExistsError(f"{self.out}/{clash[0]} was not written by refinery and is in the way of its "
                                  "output of the same name; move it elsewhere and run again")
        old = self.tmp
        if not _exchange(self.tmp, self.path):
            old = f"{self.tmp}-old"
            os.rename(self.path, old)
            os.rename(self.tmp, self.path)
        try:
            for rel in foreign:
                target = os.path.join(self.path, rel)
                os.makedirs(os.path.dirname(target), exist_ok=True)
                os.rename(os.path.join(old, rel), target)
        except OSError as e:
            kept = f"{self.path}.kept-{self.run_id}"
            os.rename(old, kept)
            raise OSError(f"{self.out}: could not move back files refinery did not write ({e}); the previous "
                          f"folder, with them, is at {kept}") from None
        shutil.rmtree(old, ignore_errors=True)   # what is left there, refinery wrote

    def abort(self) -> None:
        """Remove this run's files: the temporary folder, or on a store the run's id-named files within
        ``CLEANUP_SECONDS`` (the store may be why the run failed; what is left, the next run removes)."""
        if self.local:
            shutil.rmtree(self.tmp, ignore_errors=True)
            return
        own = [join(self.path, name) for name in sorted(self._written) if self.run_id in name]
        if own:
            with_deadline(CLEANUP_SECONDS, self.fs.rm, own)

    def __enter__(self):
        return self

    def __exit__(self, exc_type, exc, tb):
        if exc_type is not None:
            self.abort()
        return False


class RunOutput:
    """A run that publishes several parts under one folder (``zfilter``: kept/, rejected/, report/).

    Entering claims the folder (``claim_output``; a new one gets refinery's marker at once) and removes
    ``<out>/_SUCCESS``; a clean exit writes it last, with the parts and figures the run reports. A folder
    without ``_SUCCESS`` holds no finished run, even if each part looks whole. A run that fails or is
    interrupted before it replaced any part puts the previous ``_SUCCESS`` back: that run is still whole.
    One that fails in a folder it created (or found empty) removes what it wrote (``remove_failed_output``).
    """

    def __init__(self, out: str, storage_options: dict | None = None):
        self.out = out.rstrip("/")
        self.storage_options = storage_options
        self.fs, self.path = get_fs(self.out, storage_options)
        self.summary: dict = {}
        self._previous: tuple[bytes, dict] | None = None   # the finished run's _SUCCESS and its parts' run ids

    def _part_runs(self, parts) -> dict:
        return {p: read_marker(join(self.out, p), self.storage_options).get("run") for p in parts}

    def __enter__(self) -> "RunOutput":
        self._made = made_folder(self.out, self.storage_options)
        self._new = claim_folder(self.out, self.storage_options, (OWNER_MARKER, RUN_MARKER)) == "new"
        marker = join(self.path, RUN_MARKER)
        with on_store(self.out, f"removing {RUN_MARKER}"):
            previous = json_object(self.fs, marker)
            if previous is not None:
                self._previous = (self.fs.cat_file(marker), self._part_runs(previous.get("parts", ())))
            if self.fs.exists(marker):
                self.fs.rm(marker)
        return self

    def __exit__(self, exc_type, exc, tb):
        if exc_type is None:
            with on_store(self.out, f"writing {RUN_MARKER}"):
                self.fs.makedirs(self.path, exist_ok=True)
                parts = sorted(name for name in _entries(self.fs, self.path)
                               if name not in (RUN_MARKER, OWNER_MARKER)
                               and self.fs.exists(join(self.path, name, OWNER_MARKER)))
                body = {"finished": time.strftime("%Y-%m-%dT%H:%M:%S%z"), "parts": parts, **redact(self.summary)}
                with self.fs.open(join(self.path, RUN_MARKER), "w") as fh:
                    json.dump(body, fh, indent=2, default=str)
        elif self._new and not getattr(exc, "keeps_output", False):   # an error may leave what the user must read
            remove_failed_output(self.out, self._made, self.storage_options)
        elif self._previous is not None:
            body, runs = self._previous
            with_deadline(CLEANUP_SECONDS, self._restore, body, runs)
        return False

    def _restore(self, body: bytes, runs: dict) -> None:
        if self._part_runs(runs) == runs:   # no part replaced: the previous run is whole again
            self.fs.pipe_file(join(self.path, RUN_MARKER), body)


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
