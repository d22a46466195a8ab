"""Atomic publishing: a reader finds either the previous finished version of a folder or the new one
(``AtomicDir``), and a run of several parts is finished only when its ``_SUCCESS`` is written (``RunOutput``).
"""
from __future__ import annotations

import contextlib
import ctypes
import glob
import json
import os
import posixpath
import re
import shutil
import time
from abc import ABC, abstractmethod

import pyarrow as pa
import pyarrow.parquet as pq

from refinery.io.contained import inside
from refinery.io.location import (CLEANUP_SECONDS, folder_entries, get_fs, is_local, join, json_object, on_store,
                                  with_deadline)
from refinery.io.ownership import (OWNER_MARKER, RUN_MARKER, claim_folder, claim_output, made_folder, marker_body,
                                   new_run_id, owned_files, published_run, read_marker, remove_failed_output,
                                   remove_present, unpublish_run)
from refinery.io.redaction import redact


_RUN_ID = re.compile(r"-\d{8}T\d{6}-[0-9a-f]{8}(?=\.|$)")   # the run id in an object-store file's name


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


def _foreign_entries(root: str, owned: set[str]) -> list[str]:
    """Paths under local folder ``root`` (relative) that refinery did not write: files, links and folders
    holding none of ``owned``, taken whole."""
    under = {posixpath.dirname(f) for f in owned}
    parents = set()
    for d in under:
        while d and d not in parents:   # owned paths are relative (``contained.inside``); "/" would stop too
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


class AbortsOnError(ABC):
    """A writer used as a context manager: ``abort()`` when the block raises; publishing stays the caller's
    ``commit()``."""

    @abstractmethod
    def abort(self) -> None:
        """Remove what this writer wrote."""

    def __enter__(self):
        return self

    def __exit__(self, exc_type, exc, tb):
        if exc_type is not None:
            self.abort()
        return False


class AtomicDir(AbortsOnError):
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

    @contextlib.contextmanager
    def open(self, name: str):
        """The file ``name`` of the folder opened for writing (binary), for a writer that streams into it. The
        store's errors in opening and closing it are named with the file; the writer's own pass through."""
        target, url = self.file(name), f"{self.out}/{name}"
        with on_store(url, "writing"):
            if self.local and "/" in name:
                self.fs.makedirs(posixpath.dirname(target), exist_ok=True)
            fh = self.fs.open(target, "wb")
        try:
            yield fh
        except BaseException:
            with contextlib.suppress(Exception):
                fh.close()
            raise
        with on_store(url, "writing"):
            fh.close()

    def write_bytes(self, name: str, data: bytes) -> None:
        with self.open(name) as fh, on_store(f"{self.out}/{name}", "writing"):
            fh.write(data)

    def read_bytes(self, name: str) -> bytes:
        """A file this run wrote into the folder (to rewrite it before the commit)."""
        with on_store(f"{self.out}/{name}", "reading"), self.fs.open(join(self.tmp, name), "rb") as fh:
            return fh.read()

    def write_text(self, name: str, text: str) -> None:
        self.write_bytes(name, text.encode("utf-8"))

    def write_parquet(self, name: str, table) -> None:
        sink = pa.BufferOutputStream()
        pq.write_table(table, sink)
        self.write_bytes(name, sink.getvalue().to_pybytes())

    def _put_marker(self, files) -> None:
        with on_store(self.out, f"writing {OWNER_MARKER}"), self.fs.open(join(self.tmp, OWNER_MARKER), "wb") as fh:
            fh.write(marker_body(files, run=self.run_id).encode())

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


class RunOutput:
    """A run that publishes several parts under one folder (``zfilter``: kept/, rejected/, report/).

    Entering claims the folder (``claim_output``; a new one gets refinery's marker at once) and removes
    ``<out>/_SUCCESS``; a clean exit writes it last, with the parts and figures the run reports. A folder
    without ``_SUCCESS`` holds no finished run, even if each part looks whole. A run that fails or is
    interrupted before it replaced any part puts the previous ``_SUCCESS`` back: that run is still whole.
    One that fails in a folder it created (or found empty) removes what it wrote (``remove_failed_output``). Once a
    run finished, the parts of the run before it that it did not write again (another stage's) are removed.
    """

    def __init__(self, out: str, storage_options: dict | None = None):
        self.out = out.rstrip("/")
        self.storage_options = storage_options
        self.fs, self.path = get_fs(self.out, storage_options)
        self.summary: dict = {}
        self._previous: tuple[bytes, dict] | None = None   # the finished run's _SUCCESS and its parts' run ids

    def _part_runs(self, parts) -> dict:
        return {p: published_run(join(self.out, p), self.storage_options) for p in parts}

    def _published_parts(self) -> dict:
        """{part: its run id} of every subfolder that holds a part a run published (a marker with a run id)."""
        entries = [n for n in folder_entries(self.fs, self.path) if self.fs.exists(join(self.path, n, OWNER_MARKER))]
        return {p: run for p, run in self._part_runs(entries).items() if run is not None}

    def __enter__(self) -> "RunOutput":
        self._made = made_folder(self.out, self.storage_options)
        self._new = claim_folder(self.out, self.storage_options, (OWNER_MARKER, RUN_MARKER)) == "new"
        marker = join(self.path, RUN_MARKER)
        with on_store(self.out, f"removing {RUN_MARKER}"):
            previous = json_object(self.fs, marker)
            if previous is not None:
                parts = inside(marker, "parts", previous.get("parts", []))
                self._previous = (self.fs.cat_file(marker), self._part_runs(parts))
            self._found = {} if self._new else self._published_parts()   # an earlier run's, finished or not
            self._own = {} if self._new else read_marker(self.out, self.storage_options)   # its files in OUT itself
            if self.fs.exists(marker):
                self.fs.rm(marker)
        return self

    def __exit__(self, exc_type, exc, tb):
        if exc_type is None:
            with on_store(self.out, f"writing {RUN_MARKER}"):
                published = self._published_parts()
                earlier = sorted(p for p, run in self._found.items() if published.get(p) == run)   # not rewritten
                body = {"finished": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
                        "parts": sorted(set(published) - set(earlier)), **redact(self.summary)}
                self.fs.makedirs(self.path, exist_ok=True)
                with self.fs.open(join(self.path, RUN_MARKER), "w") as fh:
                    json.dump(body, fh, indent=2, default=str)
            for part in earlier:   # an earlier run's parts: not this run's; what a cut removal leaves, the next removes
                with_deadline(CLEANUP_SECONDS, unpublish_run, join(self.out, part), self.storage_options)
            with_deadline(CLEANUP_SECONDS, self._remove_earlier_files)
        elif self._new and not getattr(exc, "keeps_output", False):   # an error may leave what the user must read
            remove_failed_output(self.out, self._made, self.storage_options)
        elif self._previous is not None:
            body, runs = self._previous
            with_deadline(CLEANUP_SECONDS, self._restore, body, runs)
        return False

    def _remove_earlier_files(self) -> None:
        """The files an earlier run published in OUT itself (``probe``'s report.json, say) that this run did not
        publish again (the folder's marker is the one found on entering): removed, the marker listing itself."""
        own = read_marker(self.out, self.storage_options)
        stale = set(own.get("files", ())) - {OWNER_MARKER, RUN_MARKER}
        if not stale or not self._own or own.get("run") != self._own.get("run"):
            return
        remove_present(self.fs, self.path, stale)
        marker = marker_body([OWNER_MARKER, RUN_MARKER], run=new_run_id())
        self.fs.pipe_file(join(self.path, OWNER_MARKER), marker.encode())

    def _restore(self, body: bytes, runs: dict) -> None:
        if self._part_runs(runs) == runs:   # no part replaced: the previous run is whole again
            self.fs.pipe_file(join(self.path, RUN_MARKER), body)
