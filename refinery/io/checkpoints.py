"""Finished pieces of a long task, kept so that a killed run continues where it stopped.

A stage that works through pieces for long (the folds of a transformer's cross-fitting, shards of generated
rows) saves each finished piece as a Parquet file under ``OUT/_checkpoints/<task>/`` on the output's own
store (a local disk or any fsspec URL), next to ``key.json``: what must not change for a piece to be reused
(the stage's settings and its input's fingerprints). A rerun with the same key reads the finished pieces
back instead of computing them; a different key clears them first. The stage removes its checkpoints once
its output is published. Each piece is written whole before it is named (a temporary name, then a move), so
a kill leaves either the piece or nothing.
"""
from __future__ import annotations

import hashlib
import json
import os
import uuid

import pyarrow as pa
import pyarrow.parquet as pq

from refinery.io.location import get_fs, join, on_store
from refinery.io.ownership import claim_folder

CHECKPOINTS = "_checkpoints"


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
        if fs.exists(path):
            fs.rm(path, recursive=True)


class Checkpoints:
    """The finished pieces of ``task`` for a run into ``out`` made with ``key``."""

    def __init__(self, out: str, task: str, key: dict, storage_options: dict | None = None):
        claim_folder(out, storage_options)   # never inside a folder refinery did not write
        self.root = join(out, CHECKPOINTS, task)
        self.fs, self.path = get_fs(self.root, storage_options)
        self.key = json.loads(json.dumps(key, sort_keys=True, default=str))
        with on_store(self.root, "reading checkpoints"):
            if self._stored_key() != self.key:
                self._remove()
                self.fs.makedirs(self.path, exist_ok=True)
                with self.fs.open(join(self.path, "key.json"), "w") as fh:
                    json.dump(self.key, fh, indent=1, sort_keys=True)

    def _stored_key(self):
        try:
            with self.fs.open(join(self.path, "key.json"), "r") as fh:
                return json.load(fh)
        except (FileNotFoundError, ValueError):
            return None

    def _remove(self) -> None:
        if self.fs.exists(self.path):
            self.fs.rm(self.path, recursive=True)

    def done(self) -> list[str]:
        """The names of the finished pieces."""
        with on_store(self.root, "listing checkpoints"):
            self.fs.invalidate_cache(self.path)
            return sorted(os.path.basename(p)[:-len(".parquet")] for p in self.fs.ls(self.path, detail=False)
                          if p.endswith(".parquet"))

    def get(self, name: str) -> pa.Table | None:
        """The finished piece ``name``, or None."""
        file = join(self.path, f"{name}.parquet")
        with on_store(self.root, f"reading checkpoint {name}"):
            if not self.fs.exists(file):
                return None
            with self.fs.open(file, "rb") as fh:
                return pq.read_table(fh)

    def put(self, name: str, table: pa.Table) -> None:
        """Save the finished piece ``name`` (whole, or not at all)."""
        temporary = join(self.path, f".{name}.{uuid.uuid4().hex}.tmp")
        with on_store(self.root, f"writing checkpoint {name}"):
            with self.fs.open(temporary, "wb") as fh:
                pq.write_table(table, fh)
            self.fs.mv(temporary, join(self.path, f"{name}.parquet"))

    def remove(self, name: str) -> None:
        """Remove the finished piece ``name`` (a later one supersedes it); one not there is no error."""
        file = join(self.path, f"{name}.parquet")
        with on_store(self.root, f"removing checkpoint {name}"):
            if self.fs.exists(file):
                self.fs.rm(file)

    def clear(self) -> None:
        """Remove the task's checkpoints (and ``_checkpoints`` when no other task has any)."""
        with on_store(self.root, "removing checkpoints"):
            self._remove()
            parent = self.path.rsplit("/", 1)[0]
            if self.fs.exists(parent) and not self.fs.ls(parent, detail=False):
                self.fs.rm(parent, recursive=True)
