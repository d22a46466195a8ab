"""Finished pieces of long work, kept so that a rerun finds them again and knows they come from the same work.

The one way refinery resumes. A task that works through pieces for long (the folds of a transformer's
cross-fitting, shards of generated rows, AFLite's iterations, the data map's epochs, RAZOR's rounds, IBADR's
iterations, a comparison's (corpus, seed) runs) keeps each finished piece under its task's folder:

- a **table** ``<name>.parquet`` (``put``/``get``), written whole before it is named (a temporary name, then a
  move), so a kill leaves either the piece or nothing;
- or a **folder** ``<name>/`` (``folder``: tables, JSON and the folders libraries save models as), published whole
  by ``AtomicDir`` and finished once its own ``key.json`` is written, last.

Keys: the task's ``key`` (settings and input fingerprints) is kept as the task folder's ``key.json``; a rerun with
another key clears the pieces first. A folder piece may carry a key of its own (``folder(name, key)``), and
``get(name, file, key=...)`` reuses it only under that key (a comparison's run, reused while its fingerprint holds).

Where: under ``OUT/_checkpoints/<task>/`` on the output's own store (a local disk or any fsspec URL), cleared by the
stage once its output is published (``clear``; ``remove_checkpoints`` for a finished output reused as it is); or,
``kept``, as ``OUT/<task>/`` (a ``RESUMABLE`` name: commits keep it), which stays in the finished output (a later
comparison reuses its runs). ``local`` pieces (models saved and loaded by their libraries by path) stay on the local
disk: under the output folder, or for an output on an object store under ``~/.cache/refinery/<task>/<the URL's
digest>``, so that a rerun on the same machine continues.
"""
from __future__ import annotations

import contextlib
import hashlib
import json
import os
import posixpath
import uuid
from typing import Iterator

import pyarrow as pa
import pyarrow.parquet as pq

from refinery.io import store_answers
from refinery.io.location import folder_entries, get_fs, is_local, join, on_store
from refinery.io.ownership import RESUMABLE, claim_folder
from refinery.io.publishing import AtomicDir

CHECKPOINTS = "_checkpoints"   # a stage's pieces until its output is published
KEY = "key.json"               # the task's key in its folder; a folder piece's own key in the piece
CACHE = os.path.join("~", ".cache", "refinery")   # local pieces of an output on an object store


def table_digest(table: pa.Table) -> str:
    """sha256 of a table's Arrow IPC stream: part of a checkpoint's key, the rows it was made from."""
    sink = pa.BufferOutputStream()
    with pa.ipc.new_stream(sink, table.schema) as writer:
        writer.write_table(table)
    return hashlib.sha256(sink.getvalue()).hexdigest()


def remove_checkpoints(out: str, storage_options: dict | None = None) -> None:
    """Every task's checkpoints in ``out`` (its ``_checkpoints`` folder, refinery's alone): what a finished output
    that a rerun reuses needs none of."""
    fs, path = get_fs(join(out, CHECKPOINTS), storage_options)
    with on_store(out, "removing checkpoints"):
        if CHECKPOINTS in folder_entries(fs, posixpath.dirname(path)):   # the listing a run of ``out`` made already
            fs.rm(path, recursive=True)


def _canonical(key):
    return json.loads(json.dumps(key, sort_keys=True, default=str))


class Checkpoints:
    """The finished pieces of ``task`` for a run into ``out``, reused while ``key`` is unchanged (None: the task
    has no key of its own, its pieces may). ``kept``: the pieces stay in the finished output as ``out/<task>``;
    ``local``: they stay on the local disk (``path`` gives a library a piece's folder to load); ``resume=False``:
    an earlier run's pieces are removed, whatever their key."""

    def __init__(self, out: str, task: str, key: dict | None = None, storage_options: dict | None = None, *,
                 kept: bool = False, local: bool = False, resume: bool = True):
        if kept and task not in RESUMABLE:
            raise RuntimeError(f"pieces kept in the output live in a folder each commit keeps "
                               f"({', '.join(RESUMABLE)}), not {task!r}")
        claim_folder(out, storage_options)   # never inside a folder refinery did not write
        self.storage_options = storage_options
        self.root = join(out, task) if kept else join(out, CHECKPOINTS, task)
        self.fs, self.path = get_fs(self.root, storage_options)
        self.local = is_local(self.fs)
        if local and not self.local:
            self.root = self.path = os.path.join(os.path.expanduser(CACHE), task,
                                                 hashlib.sha256(out.encode()).hexdigest()[:16])
            self.fs, _ = get_fs(self.root)
            self.local, self.storage_options = True, None
        if not self.local:
            store_answers.writing(self.path)   # a task's workers may write its pieces
        self._in_checkpoints = not kept and not local
        self.key = None if key is None else _canonical(key)
        with on_store(self.root, "reading checkpoints"):
            if not resume or (key is not None and self._json(KEY) != self.key):
                self._remove(self.path)
            if key is not None and self._json(KEY) is None:
                self.fs.makedirs(self.path, exist_ok=True)
                with self.fs.open(join(self.path, KEY), "w") as fh:
                    json.dump(self.key, fh, indent=1, sort_keys=True)

    def _file(self, name: str, *parts: str) -> str:
        return join(self.path, name, *parts) if parts else join(self.path, f"{name}.parquet")

    def _json(self, *parts: str):
        try:
            with self.fs.open(join(self.path, *parts), "r") as fh:
                return json.load(fh)
        except (FileNotFoundError, ValueError):
            return None

    def _remove(self, path: str) -> None:
        if self.fs.exists(path):
            self.fs.rm(path, recursive=True)

    def done(self) -> list[str]:
        """The names of the finished pieces, in order: tables, and folders whose ``key.json`` is written (a dead
        run's temporary folders and a folder cut short are not pieces)."""
        with on_store(self.root, "listing checkpoints"):
            self.fs.invalidate_cache(self.path)
            if not self.fs.exists(self.path):
                return []
            names = []
            for entry in self.fs.ls(self.path, detail=True):
                name = entry["name"].rstrip("/").rsplit("/", 1)[-1]
                if entry["type"] == "directory":
                    if ".tmp-" not in name and self.fs.exists(join(self.path, name, KEY)):
                        names.append(name)
                elif name.endswith(".parquet") and not name.startswith("."):
                    names.append(name[:-len(".parquet")])
            return sorted(names)

    def _made_under(self, name: str, key) -> bool:
        """Whether folder piece ``name`` is finished, and (``key`` not None) with its own key ``key``."""
        if key is None:
            return self.fs.exists(join(self.path, name, KEY))
        return self._json(name, KEY) == _canonical(key)

    def get(self, name: str, file: str | None = None, *, key=None) -> pa.Table | None:
        """The finished table piece ``name``, or the table ``file`` of the finished folder piece ``name``; None
        where there is none (with ``key``: none made under that key)."""
        path = self._file(name, *([file] if file else []))
        with on_store(self.root, f"reading checkpoint {name}"):
            if (file and not self._made_under(name, key)) or not self.fs.exists(path):
                return None
            with self.fs.open(path, "rb") as fh:
                return pq.read_table(fh)

    def read_json(self, name: str, file: str):
        """The JSON file ``file`` of the finished folder piece ``name`` (None where there is none)."""
        with on_store(self.root, f"reading checkpoint {name}"):
            return self._json(name, file) if self._made_under(name, None) else None

    def url_of(self, name: str) -> str:
        """The URL of the folder piece ``name`` (where its files are, for another folder on the store to take them)."""
        return join(self.root, name)

    def path_of(self, name: str, *parts: str) -> str:
        """The local path of the folder piece ``name`` (or of ``parts`` inside it), for a library to load."""
        if not self.local:
            raise RuntimeError(f"{self.root} is not on the local disk: keep the pieces local=True")
        return os.path.join(self.path, name, *parts)

    def put(self, name: str, table: pa.Table) -> None:
        """Save the finished table piece ``name`` (whole, or not at all)."""
        temporary = join(self.path, f".{name}.{uuid.uuid4().hex}.tmp")
        with on_store(self.root, f"writing checkpoint {name}"):
            self.fs.makedirs(self.path, exist_ok=True)
            with self.fs.open(temporary, "wb") as fh:
                pq.write_table(table, fh)
            self.fs.mv(temporary, self._file(name))

    @contextlib.contextmanager
    def folder(self, name: str, key=None) -> Iterator[AtomicDir]:
        """Write the folder piece ``name`` (``file(…)`` gives a library's writer a path in it), published whole with
        its own ``key`` when the block ends; a block that raises leaves no piece."""
        with on_store(self.root, f"writing checkpoint {name}"):
            self._remove(join(self.path, name, KEY))   # the piece it replaces is no longer finished
        with AtomicDir(join(self.root, name), self.storage_options, output=False) as d:
            yield d
            d.write_text(KEY, json.dumps(_canonical(key), sort_keys=True))   # last: the piece is finished
            d.commit()

    def remove(self, name: str, *parts: str) -> None:
        """Remove the finished piece ``name`` (a later one supersedes it), or ``parts`` of a folder piece no later
        piece needs; one not there is no error."""
        with on_store(self.root, f"removing checkpoint {name}"):
            self._remove(self._file(name, *parts))
            if not parts:
                self._remove(join(self.path, name))

    def clear(self) -> None:
        """Remove the task's pieces (and ``_checkpoints`` when no other task has any)."""
        with on_store(self.root, "removing checkpoints"):
            self._remove(self.path)
            parent = self.path.rsplit("/", 1)[0]
            if self._in_checkpoints and self.fs.exists(parent) and not self.fs.ls(parent, detail=False):
                self.fs.rm(parent, recursive=True)
