"""Local scratch folders: every temporary folder refinery makes (DuckDB's spill files and databases, spilled
counts, local copies of a store's shards, the Parquet the Python API writes of in-memory data, the browser's
pages) lies in its process's folder under the temporary directory, so that what a killed run left is found and
removed by the next, and the Parquet written into them. A scratch folder is the caller's to remove
(``remove_folder``) once nothing reads it any more; the process's folder goes at its exit. What refinery publishes
names such a file as the object it holds (``in_memory_names``), not by its passing path."""
from __future__ import annotations

import atexit
import contextlib
import fcntl
import os
import shutil
import tempfile
from typing import Iterable, Iterator

import pyarrow as pa
import pyarrow.parquet as pq

PROCESS_PREFIX = "refinery-"   # a process's folder: refinery-<pid>-<random> under the temporary directory
OWNER = ".refinery-owner"      # in it, locked (flock) by its process for as long as it lives

_OWN: dict[tuple[int, str], str] = {}   # (pid, temporary directory) → this process's folder there


def process_folder() -> str:
    """This process's folder under the temporary directory (``tempfile.gettempdir()``), made by the first call and
    removed at the process's exit. The process holds an exclusive ``flock`` on its ``OWNER`` file while it lives, and
    the call that makes the folder removes every other process's folder whose lock is free (``remove_abandoned``):
    a run killed by ``kill -9`` or the kernel's OOM killer, which could not remove its own, leaves nothing past the
    next run."""
    key = (os.getpid(), tempfile.gettempdir())
    folder = _OWN.get(key)
    if folder is not None and os.path.isdir(folder):
        return folder
    remove_abandoned(key[1])
    folder = tempfile.mkdtemp(prefix=f"{PROCESS_PREFIX}{key[0]}-", dir=key[1])
    staged = os.path.join(folder, OWNER + ".new")
    handle = os.open(staged, os.O_CREAT | os.O_WRONLY, 0o600)
    fcntl.flock(handle, fcntl.LOCK_EX)   # held until the process ends (the handle is never closed)
    os.rename(staged, os.path.join(folder, OWNER))   # visible to others only once locked
    _OWN[key] = folder
    atexit.register(_remove_own, key[0], folder)
    return folder


def remove_abandoned(directory: str) -> None:
    """Remove each folder under ``directory`` that holds an ``OWNER`` file nobody locks (its process has ended
    without removing it). Anything else is left: folders of live processes, of other users
    (unreadable), and whatever refinery did not make (no ``OWNER`` file)."""
    with contextlib.suppress(OSError), os.scandir(directory) as entries:
        for entry in entries:
            if not entry.name.startswith(PROCESS_PREFIX) or not entry.is_dir(follow_symlinks=False):
                continue
            try:
                handle = os.open(os.path.join(entry.path, OWNER), os.O_RDONLY | os.O_NOFOLLOW)
            except OSError:
                continue
            try:
                fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except OSError:
                continue   # its process lives
            else:
                shutil.rmtree(entry.path, ignore_errors=True)
            finally:
                os.close(handle)


def _remove_own(pid: int, folder: str) -> None:
    if os.getpid() == pid:   # not a forked child that inherited the exit handler
        shutil.rmtree(folder, ignore_errors=True)


def scratch_folder(prefix: str) -> str:
    """A new, empty folder named ``prefix…`` in this process's folder (``process_folder``)."""
    return tempfile.mkdtemp(prefix=prefix, dir=process_folder())


@contextlib.contextmanager
def temporary_folder(prefix: str) -> Iterator[str]:
    """A scratch folder (``scratch_folder``) removed when the block ends."""
    folder = scratch_folder(prefix)
    try:
        yield folder
    finally:
        remove_folder(folder)


def remove_folder(path: str) -> None:
    """Remove a scratch folder and all it holds; one already gone is no error."""
    shutil.rmtree(path, ignore_errors=True)


_SHOWN: dict[str, str] = {}   # a scratch file of in-memory data → how reports name it


def write_parquet_file(path: str, schema: pa.Schema, batches: Iterable[pa.RecordBatch], shown: str) -> int:
    """Write ``batches`` (cast to ``schema`` where a batch's schema differs) as one local Parquet file,
    making its folder, named ``shown`` in what refinery publishes; the rows written."""
    os.makedirs(os.path.dirname(path), exist_ok=True)
    _SHOWN[path] = shown
    rows = 0
    with pq.ParquetWriter(path, schema) as writer:
        for batch in batches:
            writer.write_batch(batch if batch.schema == schema else batch.cast(schema))
            rows += batch.num_rows
    return rows


def show_as(path: str, shown: str) -> None:
    """Name the local ``path`` as ``shown`` in what refinery publishes and says (a run's folder before its commit
    by the folder it is published as)."""
    _SHOWN[path] = shown


def forget_shown(path: str) -> None:
    _SHOWN.pop(path, None)


def in_memory_names(text: str) -> str:
    """``text`` with every scratch file of in-memory data named as what it holds (``pandas.DataFrame (in
    memory)``): a report's inputs, not a temporary path that is gone once the process ends."""
    for path, shown in _SHOWN.items():
        if path in text:
            text = text.replace(path, shown)
    return text


def write_at(handle: int, array, offset: int) -> None:
    """``array``'s bytes written into the open file ``handle`` at byte ``offset`` (``pwrite``, until all are)."""
    view = memoryview(array).cast("B")
    while len(view):
        written = os.pwrite(handle, view, offset)
        view, offset = view[written:], offset + written


def read_at(handle: int, array, offset: int) -> None:
    """``array`` filled from the open file ``handle`` at byte ``offset`` (``preadv`` into it, until full)."""
    view = memoryview(array).cast("B")
    while len(view):
        read = os.preadv(handle, [view], offset)
        if read == 0:
            raise OSError("a scratch file ends short of what was written to it")
        view, offset = view[read:], offset + read
