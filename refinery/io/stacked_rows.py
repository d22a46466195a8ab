"""Sparse rows stacked block by block, the blocks past a memory share waiting in spill files (``StackedRows``), then
laid out in files in the order a model reads them and read a block at a time (``RowBlocks``): what a model over a
whole corpus's hashed n-grams reads (AFLite's Φ, a data map's and the confidence filter's task models), so that the
process holds one block of them, whatever the corpus's rows."""
from __future__ import annotations

import os
import tempfile

import numba
import numpy as np

from refinery.io.scratch import process_folder, read_at, write_at


class StackedRows:
    """Sparse row blocks (CSR) as they come, to be laid out in a given order (``blocks``): blocks are kept as they
    come until they pass ``in_memory`` bytes, then every block's columns and values go to files of a temporary
    folder, from which ``blocks`` reads them back one at a time."""

    def __init__(self, columns: int, in_memory: int = 256 << 20, prefix: str = "rows-", count_columns: bool = False):
        self.columns, self.in_memory = columns, in_memory
        # the rows holding each column (``count_columns``; rows hold a column once: canonical CSR)
        self.document_frequency = np.zeros(columns, np.int64) if count_columns else None
        self._held, self._held_bytes, self._lengths = [], 0, []
        self.spilled = 0   # values written to the spill files
        self._read = 0     # values read back from them
        self._folder = self._files = None
        self._prefix = prefix

    def append(self, block) -> None:
        """One block of rows (CSR with ``columns`` columns)."""
        self._lengths.append(np.diff(block.indptr).astype(np.int32))
        if self.document_frequency is not None:
            self.document_frequency += np.bincount(block.indices, minlength=self.columns)
        self._held.append((block.indices.astype(np.int32, copy=False), block.data.astype(np.float32, copy=False)))
        self._held_bytes += block.indices.nbytes + block.data.nbytes
        if self._held_bytes > self.in_memory:
            self._spill()

    def _spill(self) -> None:
        if self._files is None:
            self._folder = tempfile.TemporaryDirectory(prefix=self._prefix, dir=process_folder())
            self._files = [open(os.path.join(self._folder.name, name), "w+b") for name in ("indices.i32", "data.f32")]
        for indices, data in self._held:
            self._files[0].write(indices.tobytes())
            self._files[1].write(data.tobytes())
            self.spilled += len(indices)
        self._held, self._held_bytes = [], 0

    def blocks(self, order: np.ndarray, block_rows: int, relabel: np.ndarray | None = None,
               columns: int | None = None, transform=None) -> "RowBlocks":
        """The rows appended, laid out in two files (columns, values) in ``order`` (row ``order[i]`` of the rows
        appended at position i) and handed back as ``RowBlocks`` of ``block_rows`` positions; the spill files are
        removed. Each block's rows must come in the order they were appended (``order`` sorted within each block),
        so that the rows an appended block gives each block lie together there: one write per (appended block,
        block), whatever the corpus's size, and the files are written through the OS's page cache, not held.
        ``relabel``: each column's new number (``columns`` of them), applied as the rows are laid out; ``transform``:
        called on each appended block's rows as CSR arrays (indptr, indices, data), to change their values in place
        before they are written (a row-wise weighting such as ``ngram.tf_idf``'s)."""
        if self._files is not None and self._held:
            self._spill()
        lengths = np.concatenate([np.zeros(0, np.int32), *self._lengths])
        rows = len(lengths)
        place = np.empty(rows, np.int64)
        place[order] = np.arange(rows)
        indptr = np.zeros(rows + 1, np.int64)
        np.cumsum(lengths[order], out=indptr[1:])
        laid_out = RowBlocks.create(indptr, self.columns if columns is None else columns, block_rows, self._prefix)
        first = 0
        try:
            for block_lengths in self._lengths:
                values = int(block_lengths.sum(dtype=np.int64))
                indices, data = self._next_block((np.empty(values, np.int32), np.empty(values, np.float32)))
                if relabel is not None:
                    indices = relabel[indices]
                starts = np.concatenate([[0], np.cumsum(block_lengths, dtype=np.int64)])
                if transform is not None:
                    transform(starts, indices, data)
                laid_out.write_rows(place[first:first + len(block_lengths)], starts, indices, data)
                first += len(block_lengths)
        except BaseException:
            laid_out.close()
            raise
        self._lengths = []
        if self._files is not None:
            for fh in self._files:
                fh.close()
            self._folder.cleanup()
        return laid_out

    def _next_block(self, into: tuple[np.ndarray, np.ndarray]) -> tuple[np.ndarray, np.ndarray]:
        """``into`` (columns, values), sized for the next block, filled with it: read back from the spill files, or
        copied from the next held block."""
        if self._files is None or self._read >= self.spilled:
            into[0][:], into[1][:] = self._held.pop(0)
            return into
        for fh, array in zip(self._files, into):
            if self._read == 0:
                fh.seek(0)
            view = memoryview(array).cast("B")
            if fh.readinto(view) != len(view):
                raise OSError(f"{fh.name}: the spill file ends short of its {self.spilled:,} values")
        self._read += len(into[0])
        return into

class RowBlocks:
    """Sparse rows (CSR: columns int32, values float32) in blocks of ``block_rows`` consecutive rows, handed out one
    block at a time (``block``, ``matrix``). Their columns and values lie in two files of a scratch folder, read
    with ``pread`` (threads may read side by side) through the OS's page cache, which keeps what memory allows: the
    process holds the row starts (8 bytes a row) and the blocks being read. Pickled, they are read from the same files
    by the process that unpickles them (a Ray task on this node); ``in_memory`` gives the same blocks from arrays,
    which Ray's object store can hand to tasks on any node."""

    def __init__(self, indptr: np.ndarray, columns: int, block_rows: int, arrays: tuple | None = None):
        self.indptr, self.columns, self.block_rows = indptr, columns, block_rows
        self.arrays = arrays          # (columns, values) held, or None: in the files
        self._folder = None
        self._paths: list[str] = []   # the files' (in files)
        self._handles: list[int] = []

    @classmethod
    def create(cls, indptr: np.ndarray, columns: int, block_rows: int, prefix: str = "rows-") -> "RowBlocks":
        """Empty files sized for the rows ``indptr`` delimits, to be filled by ``write_rows``."""
        blocks = cls(indptr, columns, block_rows)
        blocks._folder = tempfile.TemporaryDirectory(prefix=prefix, dir=process_folder())
        blocks._paths = [os.path.join(blocks._folder.name, name) for name in ("indices.i32", "data.f32")]
        for path in blocks._paths:
            handle = os.open(path, os.O_RDWR | os.O_CREAT, 0o600)
            os.ftruncate(handle, int(indptr[-1]) * 4)
            blocks._handles.append(handle)
        return blocks

    @property
    def rows(self) -> int:
        return len(self.indptr) - 1

    @property
    def shape(self) -> tuple[int, int]:
        return self.rows, self.columns

    def __len__(self) -> int:
        return -(-self.rows // self.block_rows)

    def span(self, block: int) -> tuple[int, int]:
        """The rows [start, stop) of ``block``."""
        return block * self.block_rows, min((block + 1) * self.block_rows, self.rows)

    def write_rows(self, to: np.ndarray, starts: np.ndarray, indices: np.ndarray, data: np.ndarray) -> None:
        """Rows given in some order (row r's ``indices`` and ``data`` at ``starts[r]:starts[r + 1]``) to their places
        ``to``, grouped by block: each block's rows among them must be a run of consecutive places (refused
        otherwise), written with one ``pwrite`` of each file."""
        by_block = np.argsort(to // self.block_rows, kind="stable")
        placed = to[by_block]
        firsts = np.concatenate([[0], np.flatnonzero(np.diff(placed // self.block_rows)) + 1])
        steps = np.diff(placed)
        steps[firsts[1:] - 1] = 1   # a new block may start anywhere
        if len(steps) and np.any(steps != 1):
            raise RuntimeError("each block's rows must come in the order of their places")
        columns, values = _gathered_rows(starts, by_block, indices, data)
        sizes = np.add.reduceat(np.diff(starts)[by_block], firsts) if len(placed) else []
        at = 0
        for first, size in zip(firsts, sizes):
            offset = int(self.indptr[placed[first]])
            for handle, array in zip(self._handles, (columns, values)):
                write_at(handle, array[at:at + size], offset * array.itemsize)
            at += int(size)

    def block(self, block: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """(row starts from 0, columns, values) of ``block``'s rows."""
        start, stop = self.span(block)
        lo, hi = int(self.indptr[start]), int(self.indptr[stop])
        local = self.indptr[start:stop + 1] - lo
        if self.arrays is not None:
            return local, self.arrays[0][lo:hi], self.arrays[1][lo:hi]
        indices, data = np.empty(hi - lo, np.int32), np.empty(hi - lo, np.float32)
        for handle, array in zip(self._handles, (indices, data)):
            read_at(handle, array, lo * array.itemsize)
        return local, indices, data

    def matrix(self, block: int):
        """``block``'s rows as a CSR matrix of ``columns`` columns."""
        import scipy.sparse as sp

        indptr, indices, data = self.block(block)
        return sp.csr_matrix((data, indices, indptr), shape=(len(indptr) - 1, self.columns))

    def in_memory(self) -> "RowBlocks":
        """The same blocks from arrays (the files read whole)."""
        if self.arrays is not None:
            return self
        indices, data = np.empty(int(self.indptr[-1]), np.int32), np.empty(int(self.indptr[-1]), np.float32)
        for handle, array in zip(self._handles, (indices, data)):
            read_at(handle, array, 0)
        return RowBlocks(self.indptr, self.columns, self.block_rows, (indices, data))

    def close(self) -> None:
        """The files removed (blocks in memory: nothing to do)."""
        for handle in self._handles:
            os.close(handle)
        self._handles = []
        if self._folder is not None:
            self._folder.cleanup()
            self._folder = None

    def __getstate__(self):
        """Blocks in files travel as a reader of the same files, for another process of this machine (a Ray task on
        this node: hand other nodes ``in_memory()``); the files stay this object's, removed by its ``close`` alone."""
        return {**self.__dict__, "_folder": None, "_handles": []}

    def __setstate__(self, state: dict) -> None:
        self.__dict__.update(state)
        self._handles = [os.open(path, os.O_RDONLY) for path in self._paths] if self.arrays is None else []

    def __del__(self):
        self.close()


@numba.njit(nogil=True, cache=True)
def _gathered_rows(starts, order, indices, data):
    """The rows' columns and values one after the other in ``order`` (rows given by their value ``starts``)."""
    total = 0
    for r in order:
        total += starts[r + 1] - starts[r]
    columns, values = np.empty(total, indices.dtype), np.empty(total, data.dtype)
    at = 0
    for r in order:
        for p in range(starts[r], starts[r + 1]):
            columns[at], values[at] = indices[p], data[p]
            at += 1
    return columns, values
