"""Text files as blocks of whole lines: read into buffers of their own (``line_blocks``), each a view
whose lines are spans between newline positions (``LineTexts``), decoded only where needed."""
from __future__ import annotations

from typing import Iterator

import numpy as np
import pyarrow as pa

BOM = b"\xef\xbb\xbf"
BLOCK_BYTES = 16 << 20  # whole lines read at a time


def line_blocks(fs, path, block_bytes: int) -> Iterator[tuple["LineTexts", int]]:
    """(whole lines of about ``block_bytes``, the 1-based number of their first line) of a text file; BOM removed.

    Each block is read into its own buffer after the partial line the last one left, and handed on as a
    view: no copy of the file's bytes beyond the read itself."""
    with fs.open(path, "rb", compression="infer") as fh:
        first, tail = 1, b""
        while True:
            buf = np.empty(len(tail) + block_bytes, np.uint8)   # not zeroed: the read fills it
            buf[:len(tail)] = np.frombuffer(tail, np.uint8)
            size = len(tail) + _read_into(fh, memoryview(buf)[len(tail):])
            if size == len(tail):
                break
            view = memoryview(buf)[:size]
            cut = _after_last_newline(buf, size)
            if cut == 0:   # no line ends yet: one line longer than a block
                tail = bytes(view)
                continue
            tail = bytes(view[cut:])
            lines = LineTexts(_without_bom(view[:cut]) if first == 1 else view[:cut])
            yield lines, first
            first += len(lines)
        if tail:
            yield LineTexts(_without_bom(memoryview(tail)) if first == 1 else memoryview(tail)), first


def _after_last_newline(buf: np.ndarray, size: int, step: int = 1 << 16) -> int:
    """The position after the last newline of ``buf[:size]`` (0: none), searched from the end."""
    for hi in range(size, 0, -step):
        found = np.flatnonzero(buf[max(0, hi - step):hi] == 10)
        if len(found):
            return max(0, hi - step) + int(found[-1]) + 1
    return 0


def _read_into(fh, view: memoryview) -> int:
    """Fill ``view`` from ``fh`` as far as the file goes (a compressed or remote stream may return less
    than asked); the number of bytes read."""
    filled = 0
    readinto = getattr(fh, "readinto", None)
    while filled < len(view):
        if readinto is not None:
            got = readinto(view[filled:]) or 0
        else:
            data = fh.read(len(view) - filled)
            got = len(data)
            view[filled:filled + got] = data
        if got == 0:
            break
        filled += got
    return filled


def _without_bom(view: memoryview) -> memoryview:
    return view[len(BOM):] if view[:len(BOM)] == BOM else view


class LineTexts:
    """The lines of a block of bytes (a view) as spans between newline positions; a line's text is decoded
    only when its row is rejected (``take``)."""

    def __init__(self, block: memoryview, starts: np.ndarray | None = None, ends: np.ndarray | None = None):
        self.block = block
        if starts is None:
            buf = np.frombuffer(block, np.uint8)
            ends = np.flatnonzero(buf == 10)
            if len(buf) and buf[-1] != 10:
                ends = np.append(ends, len(buf))
            starts = np.concatenate([[0], ends[:-1] + 1]).astype(np.int64)
        self.starts, self.ends = starts, ends

    def __len__(self) -> int:
        return len(self.starts)

    def subset(self, keep: np.ndarray) -> "LineTexts":
        return LineTexts(self.block, self.starts[keep], self.ends[keep])

    def raw(self, i: int) -> bytes:
        """Line ``i`` without its line end (as ``rstrip(b"\\r\\n")``)."""
        return bytes(self.block[self.starts[i]:self.ends[i]]).rstrip(b"\r\n")

    def too_long(self, indices: np.ndarray, limit: int) -> bool:
        """Whether a line of ``indices`` is longer than ``limit`` bytes without its line end."""
        longer = indices[(self.ends[indices] - self.starts[indices]) > limit]
        return any(len(self.raw(i)) > limit for i in longer)

    def nonblank(self, lo: int, hi: int) -> np.ndarray:
        """Lines in [lo, hi) that hold a byte other than ASCII whitespace (``bytes.strip``'s): only a line
        that is empty or starts with whitespace is looked at."""
        starts, ends = self.starts[lo:hi], self.ends[lo:hi]
        if not len(starts):
            return np.arange(lo, hi)
        lead = np.frombuffer(self.block, np.uint8)[np.minimum(starts, len(self.block) - 1)]
        suspect = np.flatnonzero((ends == starts) | (lead == 32) | ((lead >= 9) & (lead <= 13))) + lo
        blank = [i for i in suspect if not self.raw(i).strip()]
        return np.setdiff1d(np.arange(lo, hi), blank, assume_unique=True) if blank else np.arange(lo, hi)

    def all_objects(self, indices: np.ndarray) -> bool:
        """Whether each of these lines opens a JSON object: Arrow reads a ``null`` line as a row of nulls
        (Python's json rejects it) and crashes on a block that starts with one."""
        lead = np.frombuffer(self.block, np.uint8)[np.minimum(self.starts[indices], len(self.block) - 1)]
        return all(self.raw(i).lstrip()[:1] == b"{" for i in indices[lead != ord("{")])

    def take(self, indices) -> pa.Array:
        return pa.array([self.raw(i).decode("utf-8") for i in np.asarray(indices, dtype=np.int64)], pa.string())

