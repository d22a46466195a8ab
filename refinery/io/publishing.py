"""Atomic publishing: a reader finds either the previous finished version of a folder or the new one
(``AtomicDir``), and a run of several parts publishes them all, with its ``_SUCCESS``, in one commit (``RunOutput``:
one rename of the whole folder locally, one write of the pointer ``_SUCCESS`` on an object store).
"""
from __future__ import annotations

import contextlib
import json
import os
import posixpath
import shutil
import time
from abc import ABC, abstractmethod

import pyarrow as pa
import pyarrow.parquet as pq

from refinery.io import store_answers
from refinery.io.committed import RUNS
from refinery.io.local_swap import released, remove_stale_temps, swap_in, temporary_folder
from refinery.io.location import (CLEANUP_SECONDS, folder_entries, get_fs, is_local, join, on_store,
                                  with_deadline)
from refinery.io.ownership import (OWNER_MARKER, RESUMABLE, RUN_ID_IN_NAME, RUN_MARKER, claim_folder, claim_output, made_folder,
                                   marker_body, new_run_id, owned_files, read_marker, remove_failed_output,
                                   remove_present, unpublish_run)
from refinery.io.redaction import redact
from refinery.io.scratch import forget_shown, show_as


_published: dict[str, tuple] = {}   # each folder this process published (``AtomicDir.commit``): (fs, path)
# a store's run folders (``<out>/_runs/<run>``) this process is writing: {folder: the parts opened in it so far}
_new_run_folders: dict[str, set] = {}


def _first_in_a_new_run_folder(path: str) -> bool:
    """Whether ``path`` is a run folder this process is writing (``RunOutput``), or a part of one, not opened
    before: the run's new id names the folder, so nothing is there to claim, list or remove, and its first
    ``AtomicDir`` skips those requests."""
    for folder, opened in _new_run_folders.items():
        if (path == folder or path.startswith(folder + "/")) and path not in opened:
            opened.add(path)
            return True
    return False


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


def versioned_name(name: str, run_id: str) -> str:
    """``name`` with a run's id before its extensions (``part-00000-<run>.parquet``): an object store's data file of
    that run, which never overwrites another run's."""
    stem, dot, ext = name.partition(".")
    return f"{stem}-{run_id}{dot}{ext}"


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

    def __init__(self, out: str, storage_options: dict | None = None, *, output: bool = True):
        self.out = out.rstrip("/")
        self.output = output   # an output a user reads (not a checkpoint's piece): what an interrupt names
        self.fs, self.path = get_fs(self.out, storage_options)
        self.local = is_local(self.fs)
        # in a store's new run folder there is nothing of anyone's: the run's whole folder is removed after a cut
        self._new = not self.local and _first_in_a_new_run_folder(self.path)
        if not self._new:   # a store's folder is marked before the first file, so a cut run's files are ours to remove
            (claim_output if self.local else claim_folder)(self.out, storage_options)
            store_answers.writing(self.path)
        self.run_id = new_run_id()
        self._written: set[str] = set()
        if self.local:
            remove_stale_temps(self.path)
            self.tmp = temporary_folder(self.path, self.run_id)
        else:
            self.tmp = self.path
        if not self._new:
            with on_store(self.out, "making the output folder"):
                self.fs.makedirs(self.tmp, exist_ok=True)

    def versioned(self, name: str) -> str:
        """The name a data file is published under: ``name`` locally, with the run id on object stores."""
        return name if self.local else versioned_name(name, self.run_id)

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
            try:
                swap_in(self.tmp, self.path)
            finally:
                released(self.tmp)
            self._publish()
            return
        old, listed = set(), []
        if not self._new:
            with on_store(self.out, "listing the previous version's files"):
                old = owned_files(self.fs, self.path)
                listed = self.fs.find(self.path)
        stale = {f for f in old if f not in ours}
        stale |= {p for p in (posixpath.relpath(f, self.path) for f in listed)
                  if p not in ours and RUN_ID_IN_NAME.search(posixpath.basename(p))}
        self._put_marker(ours | stale)   # a cut clean-up leaves them listed for the next run to remove
        self._publish()
        if stale:
            with on_store(self.out, "removing the previous version's files (the new one is published; the "
                                    "next run removes them)"):
                self.fs.rm([join(self.path, f) for f in sorted(stale)])
            self._put_marker(ours)
        store_answers.done_writing(self.path)

    def _publish(self) -> None:
        """Named among what this process published (``published_folders``), where it is an output."""
        if self.output:
            _published.setdefault(self.out, (self.fs, self.path))

    def abort(self) -> None:
        """Remove this run's files: the temporary folder, or on a store the run's id-named files within
        ``CLEANUP_SECONDS`` (the store may be why the run failed; what is left, the next run removes)."""
        if self.local:
            shutil.rmtree(self.tmp, ignore_errors=True)
            released(self.tmp)
            return
        own = [join(self.path, name) for name in sorted(self._written) if self.run_id in name]
        if own:
            with_deadline(CLEANUP_SECONDS, self.fs.rm, own)


def _mark_folders_within(location: str, run_id: str) -> None:
    """Refinery's marker in every folder of a run's local ``location`` (below it) that has none: one a part's path
    passes through (a composition's ``stages/z_original/``), listing the files it holds, so that the next overwrite
    finds the folder refinery's, not the user's (``_foreign_entries``)."""
    for folder, _, names in os.walk(location):
        if folder != location and OWNER_MARKER not in names:
            with open(os.path.join(folder, OWNER_MARKER), "w") as fh:
                fh.write(marker_body([OWNER_MARKER, *names], run=run_id))


class RunOutput:
    """One commit for a run that publishes several parts under one folder (``zfilter``: kept/, rejected/, report/):
    until the commit every reader finds the previous finished run whole, ``_SUCCESS`` included, and after it the
    new one whole.

    Entering claims the folder (``claim_output``; a new one gets refinery's marker at once). The run writes its parts
    at ``location``, where no reader looks. Locally that is ``<out>.tmp-<pid>-<run>``, which the commit swaps with
    the folder in one rename (``swap_in``: what the user put in the folder, and a task's resumable work,
    ``RESUMABLE``, move across). On an object store, which has no rename, it is ``<out>/_runs/<run>/``, and the
    commit is one write of ``<out>/_SUCCESS`` naming that run (``committed``: readers resolve it); the earlier runs'
    files are removed after it, best effort (the next commit removes what a cut clean-up leaves). ``_SUCCESS``
    carries the run's ``summary``: a folder without it holds no finished run. A run that fails removes what it
    wrote, and in a folder it created the folder (``remove_failed_output``); one whose error names files the user
    must read (``keeps_output``: the rejects of an input without a good row) leaves them, published unfinished
    on a local disk and where the error names them on a store.
    """

    def __init__(self, out: str, storage_options: dict | None = None):
        self.out = out.rstrip("/")
        self.storage_options = storage_options
        self.fs, self.path = get_fs(self.out, storage_options)
        self.local = is_local(self.fs)
        self.run_id = new_run_id()
        self.location = self.out   # where the run writes its parts until the commit
        self.summary: dict = {}

    def __enter__(self) -> "RunOutput":
        self._made = made_folder(self.out, self.storage_options)
        self._new = claim_folder(self.out, self.storage_options, (OWNER_MARKER, RUN_MARKER, RUNS)) == "new"
        if self.local:
            remove_stale_temps(self.path)
            self.location = temporary_folder(self.path, self.run_id)
            os.makedirs(self.location)
            show_as(self.location, self.out)
        else:
            self._mark_runs()
            self.location = join(self.out, RUNS, self.run_id)
            _new_run_folders[join(self.path, RUNS, self.run_id)] = set()
            store_answers.writing(join(self.path, RUNS, self.run_id))   # Ray's workers write the parts there
        return self

    def __exit__(self, exc_type, exc, tb):
        _new_run_folders.pop(join(self.path, RUNS, self.run_id), None)
        store_answers.done_writing(join(self.path, RUNS, self.run_id))   # the block's workers are done
        try:
            if exc_type is None:
                self._commit(finished=True)
            elif getattr(exc, "keeps_output", False):   # an error may leave what the user must read
                if self.local:
                    self._commit(finished=False)
            else:
                with_deadline(CLEANUP_SECONDS, self._discard)
                if self._new:
                    remove_failed_output(self.out, self._made, self.storage_options)
        finally:
            forget_shown(self.location)
        return False

    def _mark_runs(self) -> None:
        """Refinery's marker in the store's folder lists ``_runs/`` before the first file is written there: a cut
        run's files are refinery's to remove."""
        found = read_marker(self.out, self.storage_options)
        files = found.files if found else []
        if RUNS not in files:
            with on_store(self.out, f"writing {OWNER_MARKER}"):
                self.fs.pipe_file(join(self.path, OWNER_MARKER),
                                  marker_body({*files, OWNER_MARKER, RUNS},
                                              run=(found and found.run) or new_run_id()).encode())

    def _record(self, parts) -> bytes:
        body = {"finished": time.strftime("%Y-%m-%dT%H:%M:%S%z"), "run": self.run_id, "parts": sorted(parts),
                **({} if self.local else {"root": f"{RUNS}/{self.run_id}"}), **redact(self.summary)}
        return json.dumps(body, indent=2, default=str).encode()

    def _commit(self, finished: bool) -> None:
        if self.local:
            _mark_folders_within(self.location, self.run_id)
            files = owned_files(self.fs, self.location) - {OWNER_MARKER}   # what a part "" wrote into the folder
            if finished:
                parts = [n for n in os.listdir(self.location) if n not in files and n != OWNER_MARKER]
                self.fs.pipe_file(join(self.location, RUN_MARKER), self._record(parts))
                files.add(RUN_MARKER)
            self.fs.pipe_file(join(self.location, OWNER_MARKER),
                              marker_body(files | {OWNER_MARKER}, run=self.run_id).encode())
            try:
                swap_in(self.location, self.path, RESUMABLE)
            finally:
                released(self.location)
        else:
            with on_store(self.out, f"writing {RUN_MARKER}"):
                parts = [n for n in folder_entries(self.fs, self.location) if n != OWNER_MARKER]
                self.fs.pipe_file(join(self.path, RUN_MARKER), self._record(parts))
            with_deadline(CLEANUP_SECONDS, self._remove_earlier_runs)
        _published.setdefault(self.out, (self.fs, self.path))

    def _discard(self) -> None:
        """Remove what this run wrote (on a store within ``CLEANUP_SECONDS``: the store may be why the run failed;
        what is left, the next commit removes)."""
        if self.local:
            shutil.rmtree(self.location, ignore_errors=True)
            released(self.location)
        elif self.fs.exists(self.location):
            self.fs.rm(self.location, recursive=True)

    def _remove_earlier_runs(self) -> None:
        """On a store, after the commit: the other runs under ``_runs/``, and what a run of refinery before
        ``_runs/`` published in the folder (its parts, its files beside them)."""
        runs = join(self.path, RUNS)
        earlier = [join(runs, name) for name in folder_entries(self.fs, runs) if name != self.run_id]
        if earlier:
            self.fs.rm(earlier, recursive=True)
        for name in folder_entries(self.fs, self.path):
            if name not in (RUNS, OWNER_MARKER, RUN_MARKER, *RESUMABLE) and \
                    self.fs.exists(join(self.path, name, OWNER_MARKER)):
                unpublish_run(join(self.out, name), self.storage_options)
        own = read_marker(self.out, self.storage_options)
        stale = set(own.files if own else ()) - {OWNER_MARKER, RUN_MARKER, RUNS}
        if stale:
            remove_present(self.fs, self.path, stale)
            self.fs.pipe_file(join(self.path, OWNER_MARKER),
                              marker_body([OWNER_MARKER, RUN_MARKER, RUNS], run=own.run or new_run_id()).encode())
