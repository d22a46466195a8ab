"""Sparse rows stacked into one CSR matrix block by block, the blocks past a memory share waiting in spill files
(``StackedRows``): what a model over a whole corpus's hashed n-grams reads (AFLite's Φ, a data map's and the
confidence filter's task models)."""
from __future__ import annotations

import os
import tempfile

import numba
import numpy as np

from refinery.io.scratch import process_folder


class StackedRows:
    """Sparse row blocks (CSR) stacked into one matrix without holding the rows twice: blocks are kept as they come
    until they pass ``in_memory`` bytes, then every block's columns and values go to files of a temporary folder;
    ``matrix`` allocates the whole matrix once and reads them back into it (``np.vstack`` of the blocks would hold
    the blocks and the matrix together)."""

    def __init__(self, columns: int, in_memory: int = 256 << 20, prefix: str = "rows-"):
        self.columns, self.in_memory = columns, in_memory
        self._held, self._held_bytes, self._lengths = [], 0, []
        self.spilled = 0   # values written to the spill files
        self._read = 0     # values read back from them
        self._folder = self._files = None
        self._prefix = prefix

    def append(self, block) -> None:
        """One block of rows (CSR with ``columns`` columns)."""
        self._lengths.append(np.diff(block.indptr).astype(np.int32))
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

    def matrix(self, order: np.ndarray | None = None):
        """The stacked rows (CSR, float32 values); the temporary files are removed. ``order``: row ``order[i]`` of
        the rows appended is the matrix's row i (each block's rows scattered to their places as it is read)."""
        import scipy.sparse as sp

        if self._files is not None and self._held:
            self._spill()   # the last blocks too: none of them beside the whole matrix
        rows = sum(len(lengths) for lengths in self._lengths)
        nnz = sum(int(lengths.sum(dtype=np.int64)) for lengths in self._lengths)
        indptr = np.zeros(rows + 1, np.int32 if nnz < 2 ** 31 else np.int64)   # SciPy's own choice: no copy
        if order is None:
            for at, lengths in zip(np.cumsum([0] + [len(x) for x in self._lengths]), self._lengths):
                np.cumsum(lengths, dtype=indptr.dtype, out=indptr[at + 1:at + 1 + len(lengths)])
                indptr[at + 1:at + 1 + len(lengths)] += indptr[at]
            place = None
        else:
            np.cumsum(np.concatenate([np.zeros(0, np.int32), *self._lengths])[order], dtype=indptr.dtype,
                      out=indptr[1:])
            place = np.empty(rows, order.dtype)
            place[order] = np.arange(rows, dtype=order.dtype)
        indices, data = np.empty(nnz, np.int32), np.empty(nnz, np.float32)
        first = at = 0
        for lengths in self._lengths:
            values = int(lengths.sum(dtype=np.int64))
            if place is None:   # in place: read or copied straight into the matrix
                self._next_block((indices[at:at + values], data[at:at + values]))
            else:
                block = self._next_block((np.empty(values, np.int32), np.empty(values, np.float32)))
                _scatter_rows(lengths, block, place[first:first + len(lengths)], (indptr, indices, data))
            at, first = at + values, first + len(lengths)
        self._lengths = []
        if self._files is not None:
            for fh in self._files:
                fh.close()
            self._folder.cleanup()
        return sp.csr_matrix((data, indices, indptr), shape=(rows, self.columns))

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


@numba.njit(nogil=True, cache=True)
def _scatter_rows(lengths, block, place, matrix):
    """Row r of ``block`` (columns, values; ``lengths`` values a row) to the matrix's row ``place[r]``."""
    columns, values = block
    indptr, indices, data = matrix
    at = 0
    for r in range(len(lengths)):
        to = indptr[place[r]]
        for j in range(lengths[r]):
            indices[to + j], data[to + j] = columns[at + j], values[at + j]
        at += lengths[r]
