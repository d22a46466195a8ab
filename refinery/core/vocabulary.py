"""Text to dense token ids: each batch tokenized (the compiled byte scanner for ASCII text, the reference
Arrow tokenizer otherwise; both give the tokens of ``TokenizerOptions.tokenize``) and each token interned
in a compiled hash table (``TokenIds``)."""
from __future__ import annotations

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from refinery.core.features import TokenizerOptions
from refinery.core.kernels import BYTE_CLASS, FREE_SLOT, first_use, fnv, gram_bytes, intern_tokens, reinsert, scan_ascii
from refinery.messages import Refusal


def _grown(array: np.ndarray, size: int) -> np.ndarray:
    """``array`` with room for at least ``size`` rows (capacity doubled; new rows uninitialized)."""
    if len(array) >= size:
        return array
    capacity = max(len(array), 1)
    while capacity < size:
        capacity *= 2
    out = np.empty((capacity,) + array.shape[1:], dtype=array.dtype)
    out[:len(array)] = array
    return out


class TokenIds:
    """Interned tokens: byte strings → dense ids, in a compiled hash table (see ``intern_tokens``)."""

    def __init__(self, seed: tuple = ()):
        self.arena = np.empty(1 << 20, dtype=np.uint8)
        self.used = 0
        self.token_ends = np.empty(1 << 14, dtype=np.int64)
        self.table = np.full(1 << 15, FREE_SLOT, dtype=np.uint64)
        self.size = 0
        if seed:
            self.ids(pa.array(seed, pa.string()))

    def __len__(self) -> int:
        return self.size

    @property
    def nbytes(self) -> int:
        """Memory held (the table's while it doubles: the larger one is counted once it replaced it)."""
        return self.arena.nbytes + self.token_ends.nbytes + self.table.nbytes

    def intern(self, data: np.ndarray, starts: np.ndarray, ends: np.ndarray, hashes: np.ndarray | None = None
               ) -> np.ndarray:
        """Ids of the tokens ``data[starts[i]:ends[i]]`` (``hashes``: their FNV-1a hashes, computed
        if not given); the table doubles whenever it would pass half full (sized by the
        vocabulary, not the batch, so it stays in cache)."""
        hashes = fnv(data, starts, ends) if hashes is None else hashes
        ids = np.empty(len(starts), dtype=np.int64)
        self.arena = _grown(self.arena, self.used + int((ends - starts).sum()))
        done = 0
        while done < len(starts):
            limit = len(self.table) // 2
            self.token_ends = _grown(self.token_ends, limit)
            self.used, self.size, done = intern_tokens((data, starts, ends, hashes), ids, done,
                                                       (self.arena, self.token_ends, self.table),
                                                       self.used, self.size, limit)
            if done < len(starts):
                if 2 * len(self.table) > 1 << 32:
                    raise Refusal(f"TokenIds: {self.size:,} tokens; at most 2³¹ fit a table's 32-bit ids",
                                  code="over-budget")
                grown = np.full(2 * len(self.table), FREE_SLOT, dtype=np.uint64)
                reinsert(self.table, grown)
                self.table = grown
        return ids

    def ids(self, strings: pa.Array) -> np.ndarray:
        """Ids of the strings of an Arrow string array (no nulls), or of a dictionary-encoded one: its dictionary's
        entries interned in the order of their first use, so that each value gets the id it would get were the
        strings interned one by one, at the cost of the distinct strings."""
        if pa.types.is_dictionary(strings.type):
            encoded = strings.combine_chunks() if isinstance(strings, pa.ChunkedArray) else strings
            indices = encoded.indices.to_numpy(zero_copy_only=False).astype(np.int64, copy=False)
            used = first_use(indices, len(encoded.dictionary))   # the entries in the order of their first use
            if len(used) == len(encoded.dictionary) and np.array_equal(used, np.arange(len(used))):
                return self.ids(encoded.dictionary)[indices]     # a dictionary in that order already
            entry_ids = np.zeros(len(encoded.dictionary), dtype=np.int64)
            entry_ids[used] = self.ids(encoded.dictionary.take(pa.array(used)))
            return entry_ids[indices]
        data, offsets = string_buffers(strings)
        return self.intern(data, offsets[:-1], offsets[1:])

    def grams(self, first: np.ndarray, second: np.ndarray, suffix: str) -> pa.Array:
        """Strings ``"w1@suffix"`` or, where ``second`` ≥ 0, ``"w1 w2@suffix"`` of token ids."""
        suffix = np.frombuffer(suffix.encode(), np.uint8)
        offsets = np.empty(len(first) + 1, dtype=np.int64)
        data = gram_bytes(self.arena, self.token_ends, first, second, suffix, offsets)
        if offsets[-1] < 2**31:
            return pa.StringArray.from_buffers(len(first), pa.py_buffer(offsets.astype(np.int32)), pa.py_buffer(data))
        return pa.LargeStringArray.from_buffers(len(first), pa.py_buffer(offsets), pa.py_buffer(data))


def string_buffers(strings) -> tuple[np.ndarray, np.ndarray]:
    """(bytes, offsets as int64) of an Arrow string array without nulls: a view of just the bytes its strings
    span, offsets from 0, so that a slice of a large array (and the buffers sized by its bytes) stays a slice."""
    if isinstance(strings, pa.ChunkedArray):
        strings = strings.combine_chunks()
    if strings.null_count:
        raise RuntimeError("string_buffers: nulls must be filled first")
    width = np.int64 if pa.types.is_large_string(strings.type) else np.int32
    _, off_buf, data_buf = strings.buffers()
    offsets = np.frombuffer(off_buf, dtype=width)[strings.offset:strings.offset + len(strings) + 1].astype(np.int64)
    data = np.frombuffer(data_buf, dtype=np.uint8) if data_buf is not None else np.empty(0, np.uint8)
    data = data[offsets[0]:offsets[-1]] if len(offsets) else data[:0]
    return data, offsets - (offsets[0] if len(offsets) else 0)


class ByteScanner:
    """``scan_ascii`` with its work buffers kept from batch to batch (fresh large arrays would
    page-fault on every batch)."""

    def __init__(self):
        self.out = np.empty(0, dtype=np.uint8)
        self.spans = np.empty((0, 3), dtype=np.int64)   # start, end, row of each token
        self.hashes = np.empty(0, dtype=np.uint64)

    @property
    def nbytes(self) -> int:
        """Memory held by the work buffers."""
        return self.out.nbytes + self.spans.nbytes + self.hashes.nbytes

    def scan(self, data: np.ndarray, offsets: np.ndarray, skip: np.ndarray, options: TokenizerOptions
             ) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
        """(lowercased bytes, token starts, ends, hashes, rows); the rows are a copy, the rest
        are views of the buffers, valid until the next scan."""
        most = int(offsets[-1] - offsets[0])   # ≥ 1 byte a token
        self.out = _grown(self.out, len(data))
        self.spans, self.hashes = _grown(self.spans, most), _grown(self.hashes, most)
        starts, ends, rows = self.spans[:, 0], self.spans[:, 1], self.spans[:, 2]
        n = scan_ascii(data, offsets, skip, options.lowercase, not options.remove_punctuation, BYTE_CLASS,
                       (self.out, starts, ends, rows, self.hashes))
        return self.out, starts[:n], ends[:n], self.hashes[:n], rows[:n].copy()


def _ascii_split(texts) -> tuple[pa.Array, np.ndarray, np.ndarray, np.ndarray]:
    """(texts with nulls as "", their bytes, offsets, which rows are not ASCII): the byte scanner reads the
    ASCII rows, the Arrow tokenizer the others."""
    texts = pc.fill_null(texts.combine_chunks() if isinstance(texts, pa.ChunkedArray) else texts, "")
    data, offsets = string_buffers(texts)
    used = data[offsets[0]:offsets[-1]]
    other = pc.invert(pc.string_is_ascii(texts)).to_numpy(zero_copy_only=False) \
        if len(used) > 0 and used.max() >= 128 else np.zeros(len(texts), dtype=bool)
    return texts, data, offsets, other


def token_ids(texts, options: TokenizerOptions, vocab: TokenIds, stopword_ids: int = 0,
              scanner: ByteScanner | None = None) -> tuple[np.ndarray, np.ndarray]:
    """(token ids, row of each token) of ``texts`` as ``options.tokenize`` splits them.

    ASCII rows go through the byte scanner, the others (if any) through the Arrow tokenizer,
    merged back in row order. With stopword removal the vocabulary is seeded with the
    stopwords, so ids below ``stopword_ids`` are stopwords and are dropped here.
    """
    texts, data, offsets, other = _ascii_split(texts)
    mixed = bool(other.any())
    out, starts, ends, hashes, parents = (scanner or ByteScanner()).scan(data, offsets, other, options)
    ids = vocab.intern(out, starts, ends, hashes)
    if mixed:
        rows = np.flatnonzero(other)
        tokens = options.tokenize(texts.take(pa.array(rows)))
        ids = np.concatenate([ids, vocab.ids(pc.list_flatten(tokens))])
        parents = np.concatenate([parents, rows[pc.list_parent_indices(tokens).to_numpy()]])
        order = np.argsort(parents, kind="stable")   # each row's tokens come from one side, in order
        ids, parents = ids[order], parents[order]
    if stopword_ids:
        keep = ids >= stopword_ids
        ids, parents = ids[keep], parents[keep]
    return ids, parents



def token_hashes(texts, options: TokenizerOptions, scanner: ByteScanner | None = None
                 ) -> tuple[np.ndarray, np.ndarray]:
    """(FNV-1a hash of each token, row of each token) of ``texts`` as ``options.tokenize`` splits them, in row
    order: ``token_ids`` without a vocabulary, for hashed features."""
    texts, data, offsets, other = _ascii_split(texts)
    mixed = bool(other.any())
    _, _, _, hashes, rows = (scanner or ByteScanner()).scan(data, offsets, other, options)
    hashes = hashes.copy()
    if mixed:
        tokens = options.tokenize(texts.take(pa.array(np.flatnonzero(other))))
        token_data, token_offsets = string_buffers(pc.list_flatten(tokens))
        hashes = np.concatenate([hashes, fnv(token_data, token_offsets[:-1], token_offsets[1:])])
        rows = np.concatenate([rows, np.flatnonzero(other)[pc.list_parent_indices(tokens).to_numpy()]])
        order = np.argsort(rows, kind="stable")
        hashes, rows = hashes[order], rows[order]
    if options.remove_stopwords:
        raise RuntimeError("token_hashes keeps stopwords (hashed features have no vocabulary to seed)")
    return hashes, rows
