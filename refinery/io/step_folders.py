"""Finished steps of a long task kept as whole folders, so that a killed run continues after its last one.

A step that leaves models behind (saved by their libraries as folders and loaded back by path) beside its tables
is kept as the folder ``<root>/<name>``, published whole by ``AtomicDir``: a kill leaves only a temporary folder,
removed when the step is written again. Libraries save and load models on a local disk, so the root is local
(``local_root``): under the output folder itself, or, for an output on an object store, under a cache folder named
by the output's URL, so that a rerun on the same machine continues.
"""
from __future__ import annotations

import hashlib
import json
import os
import shutil

import pyarrow as pa
import pyarrow.parquet as pq

from refinery.io.location import get_fs, is_local
from refinery.io.publishing import AtomicDir

CACHE = os.path.join("~", ".cache", "refinery")


def local_root(out: str, task: str, storage_options: dict | None = None) -> str:
    """Where the steps of ``task`` of a run into ``out`` are kept: ``out/task`` on a local disk; for an object
    store, ``~/.cache/refinery/task/<the URL's digest>``."""
    fs, path = get_fs(out, storage_options)
    if is_local(fs):
        return os.path.join(path, task)
    return os.path.join(os.path.expanduser(CACHE), task, hashlib.sha256(out.encode()).hexdigest()[:16])


class StepFolders:
    """The finished steps under the local folder ``root``, one folder each."""

    def __init__(self, root: str):
        self.root = root

    def path(self, name: str, *parts: str) -> str:
        """The local path of step ``name`` (or of ``parts`` inside it), to read from."""
        return os.path.join(self.root, name, *parts)

    def read_json(self, name: str, file: str):
        """The JSON file ``file`` of finished step ``name``."""
        with open(self.path(name, file), encoding="utf-8") as fh:
            return json.load(fh)

    def read_table(self, name: str, file: str) -> pa.Table:
        """The Parquet file ``file`` of finished step ``name``."""
        return pq.read_table(self.path(name, file))

    def done(self) -> list[str]:
        """The names of the published steps, in order (a dead run's temporary folders are not steps), as
        ``Checkpoints.done`` names a task's finished pieces."""
        if not os.path.isdir(self.root):
            return []
        return sorted(name for name in os.listdir(self.root) if ".tmp-" not in name)

    def write(self, name: str) -> AtomicDir:
        """The folder of step ``name`` (``file(name)`` gives a library's writer a path in it), published whole by
        its ``commit``."""
        return AtomicDir(self.path(name))

    def remove(self, name: str, *parts: str) -> None:
        """Remove a finished step, or ``parts`` of it no later step needs (a folder gone already is no error)."""
        shutil.rmtree(self.path(name, *parts), ignore_errors=True)

    def clear(self) -> None:
        """Remove every step (a run that starts over)."""
        shutil.rmtree(self.root, ignore_errors=True)
