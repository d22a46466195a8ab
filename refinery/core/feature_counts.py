"""Exact feature × label counts of whole corpora on integer ids (the audit's hot path, METHODS §1).

Unigram and bigram presence per field is counted without materializing ``(row, "w1 w2@field")``
strings. Per field, each batch is tokenized (a compiled byte scanner for ASCII text, the
reference Arrow tokenizer otherwise; both give the tokens of ``TokenizerOptions.tokenize``),
each token interned to a dense id, and a bigram packed into the key ``id1 << 32 | id2``. Keys
are counted in a table whose int32 rows are ``[key high, key low, stamp, count per label…]``: a
key counts for a row only when its stamp is not already that row, so presence counts once per
row. Feature strings (``"w1 w2@hypothesis"``) are built once per distinct feature, at the end.

The kernels are numba-compiled and release the GIL, so the fields of a pair corpus are counted
in parallel threads. Row-level families count in a dense table of their own: ``null`` directly,
length, ratio and overlap from ``features.extract``.
"""
from __future__ import annotations

import os
from concurrent.futures import ThreadPoolExecutor
from typing import Iterable, Iterator

import numba
import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from refinery.core.features import (
    STOPWORD_LIST,
    FeatureConfig,
    TokenizerOptions,
    dictionary_ids,
    extract,
    text_fields,
)
from refinery.core.stats import matrix_to_long, row_totals

_EMPTY = -1
_GOLDEN = np.uint64(0x9E3779B97F4A7C15)     # Fibonacci hashing multiplier
_FNV_OFFSET, _FNV_PRIME = np.uint64(0xCBF29CE484222325), np.uint64(0x100000001B3)

# ASCII byte classes of TokenizerOptions.tokenize: RE2's \w is a word byte; Arrow's
# utf8_split_whitespace splits on 9–13, 28–32; every other byte is a one-byte punctuation token.
WORD, SPACE, PUNCT = 0, 1, 2
BYTE_CLASS = np.full(128, PUNCT, dtype=np.uint8)
for _c in b"0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZ_abcdefghijklmnopqrstuvwxyz":
    BYTE_CLASS[_c] = WORD
BYTE_CLASS[[9, 10, 11, 12, 13, 28, 29, 30, 31, 32]] = SPACE


# ---------------------------------------------------------------- kernels

@numba.njit(nogil=True, cache=True)
def _shift(capacity):
    """64 − log2(capacity): Fibonacci hashing keeps the top bits of key × golden ratio."""
    bits = 0
    while (1 << bits) < capacity:
        bits += 1
    return np.uint64(64 - bits)


@numba.njit(nogil=True, cache=True)
def _find(table, key, shift):
    """Slot of ``key`` in a linear-probing table (or the empty slot where it goes); a row holds
    the key as two int32 halves."""
    mask = len(table) - 1
    hi, lo = np.int32(key >> 32), np.int32(key & 0xFFFFFFFF)
    slot = np.int64((np.uint64(key) * _GOLDEN) >> shift)
    while table[slot, 0] != _EMPTY and (table[slot, 0] != hi or table[slot, 1] != lo):
        slot = (slot + 1) & mask
    return slot


@numba.njit(nogil=True, cache=True)
def _count_present(values, rows, labels, first_row, table, dense, pairs, start, size, limit):
    """Count each key once for its row ``first_row + rows[i]`` under label ``labels[rows[i]]``.

    The key at position i (≥ ``start``) is ``values[i]``, or with ``pairs`` the bigram
    ``values[i-1] << 32 | values[i]`` when both are in the same row; keys are ≥ 0. ``table`` rows
    are int32 ``[key high, key low, stamp (last row counted), count per label…]`` (24 bytes for
    3 labels), so a probe touches one cache line; ``dense``: the key is its own slot. Stops before
    a new key would make the table hold more than ``limit`` keys; returns (keys held, position
    reached).
    """
    shift = _shift(len(table))
    for i in range(max(start, 1 if pairs else 0), len(values)):
        if pairs:
            if rows[i] != rows[i - 1]:
                continue
            key = (values[i - 1] << 32) | values[i]
        else:
            key = values[i]
        slot = key if dense else _find(table, key, shift)
        if table[slot, 0] == _EMPTY:
            if size >= limit:
                return size, i
            table[slot, 0], table[slot, 1] = key >> 32, key & 0xFFFFFFFF
            size += 1
        row = first_row + rows[i]
        if table[slot, 2] != row:
            table[slot, 2] = row
            table[slot, 3 + labels[rows[i]]] += 1
    return size, len(values)


@numba.njit(nogil=True, cache=True)
def _by_region(values, rows, pairs, shift, region_bits):
    """The keys of ``values`` (with ``pairs``: bigrams of adjacent ids of a row, as ``_count_present``
    forms them) and their rows, stably sorted by the region of the table their slot falls in (the
    top ``region_bits`` of the slot): counted in this order, the probes of a region stay in cache
    instead of missing it on nearly every key of a table larger than the caches. Stable, so each
    key's rows stay in order (presence is counted once per row)."""
    n = len(values)
    regions = np.zeros((1 << region_bits) + 1, dtype=np.int64)
    drop = np.uint64(64) - shift - np.uint64(region_bits)   # slot >> drop: its region
    region = np.empty(n, dtype=np.int64)
    for i in range(n):
        if pairs and (i == 0 or rows[i] != rows[i - 1]):
            region[i] = -1
            continue
        key = (values[i - 1] << 32) | values[i] if pairs else values[i]
        region[i] = np.int64((np.uint64(key) * _GOLDEN) >> shift >> drop)
        regions[region[i] + 1] += 1
    for r in range(1, len(regions)):
        regions[r] += regions[r - 1]
    keys = np.empty(regions[-1], dtype=np.int64)
    key_rows = np.empty(regions[-1], dtype=rows.dtype)
    for i in range(n):
        r = region[i]
        if r < 0:
            continue
        at = regions[r]
        keys[at] = (values[i - 1] << 32) | values[i] if pairs else values[i]
        key_rows[at] = rows[i]
        regions[r] = at + 1
    return keys, key_rows


@numba.njit(nogil=True, cache=True)
def _rehash(table, new_table):
    shift = _shift(len(new_table))
    for s in range(len(table)):
        if table[s, 0] != _EMPTY:
            key = (np.int64(table[s, 0]) << 32) | (np.int64(table[s, 1]) & 0xFFFFFFFF)
            new_table[_find(new_table, key, shift)] = table[s]


@numba.njit(nogil=True, cache=True)
def _used_slots(table, start, end, keys, counts):
    """Copy the key and counts of each used slot in [start, end) of a ``_count_present`` table, in slot
    order (one sequential pass: a boolean mask and a gather would read the table three times); the
    number copied."""
    i = 0
    for s in range(start, end):
        if table[s, 0] != _EMPTY:
            keys[i] = (np.int64(table[s, 0]) << 32) | (np.int64(table[s, 1]) & 0xFFFFFFFF)
            for j in range(counts.shape[1]):
                counts[i, j] = table[s, 3 + j]
            i += 1
    return i


@numba.njit(nogil=True, cache=True)
def _scan_ascii(data, offsets, skip, lowercase, keep_punct, byte_class, out, starts, ends, parents, hashes):
    """Tokenize the ASCII strings ``data[offsets[r]:offsets[r+1]]`` (rows with ``skip[r]`` left
    out): runs of word bytes are tokens, punctuation bytes one-byte tokens (dropped unless
    ``keep_punct``), space bytes separators. Writes the (lowercased) bytes to ``out`` and each
    token's span, row and FNV-1a hash (computed as the bytes go by); returns the number of tokens."""
    n = 0
    for r in range(len(offsets) - 1):
        if skip[r]:
            continue
        start = -1
        h = _FNV_OFFSET
        for i in range(offsets[r], offsets[r + 1]):
            b = data[i]
            if lowercase and 65 <= b <= 90:
                b += 32
            out[i] = b
            cls = byte_class[b]
            if cls == WORD:
                if start < 0:
                    start = i
                    h = _FNV_OFFSET
                h = (h ^ np.uint64(b)) * _FNV_PRIME
                continue
            if start >= 0:
                starts[n], ends[n], parents[n], hashes[n] = start, i, r, h
                n += 1
                start = -1
            if cls == PUNCT and keep_punct:
                starts[n], ends[n], parents[n], hashes[n] = i, i + 1, r, (_FNV_OFFSET ^ np.uint64(b)) * _FNV_PRIME
                n += 1
        if start >= 0:
            starts[n], ends[n], parents[n], hashes[n] = start, offsets[r + 1], r, h
            n += 1
    return n


@numba.njit(nogil=True, cache=True)
def _fnv(data, starts, ends):
    """FNV-1a hash of each token ``data[starts[i]:ends[i]]``."""
    hashes = np.empty(len(starts), dtype=np.uint64)
    for i in range(len(starts)):
        h = _FNV_OFFSET
        for j in range(starts[i], ends[i]):
            h = (h ^ np.uint64(data[j])) * _FNV_PRIME
        hashes[i] = h
    return hashes


@numba.njit(nogil=True, cache=True)
def _token_start(token_ends, t):
    return token_ends[t - 1] if t > 0 else 0


@numba.njit(nogil=True, cache=True)
def _intern(data, starts, ends, token_hashes, ids, start, arena, arena_used, token_ends, hashes, n_ids, table, limit):
    """Set ``ids[i]`` (i ≥ ``start``) to the dense id of token ``data[starts[i]:ends[i]]`` (FNV-1a
    hash ``token_hashes[i]``), adding unseen tokens to the arena; stops before the vocabulary
    would pass ``limit`` tokens.

    ``table``: linear-probing slots holding ids (int32) by hash; token ``id`` is
    ``arena[token_ends[id - 1]:token_ends[id]]`` (the arena grows in id order, so one end per
    token locates it); ``hashes[id]`` keeps the low 32 bits of its hash, all a table of at most
    2³¹ slots places by. Returns (arena_used, n_ids, position reached)."""
    mask = len(table) - 1
    for i in range(start, len(starts)):
        h = np.uint32(token_hashes[i] & np.uint64(0xFFFFFFFF))
        slot = np.int64(h) & mask
        length = ends[i] - starts[i]
        while True:
            t = table[slot]
            if t == _EMPTY:
                if n_ids >= limit:
                    return arena_used, n_ids, i
                arena[arena_used:arena_used + length] = data[starts[i]:ends[i]]
                token_ends[n_ids] = arena_used + length
                hashes[n_ids] = h
                table[slot] = n_ids
                ids[i] = n_ids
                arena_used += length
                n_ids += 1
                break
            a = _token_start(token_ends, t)
            if hashes[t] == h and token_ends[t] - a == length:
                same = True
                for j in range(length):
                    if arena[a + j] != data[starts[i] + j]:
                        same = False
                        break
                if same:
                    ids[i] = t
                    break
            slot = (slot + 1) & mask
    return arena_used, n_ids, len(starts)


@numba.njit(nogil=True, cache=True)
def _reinsert(hashes, table):
    """Place ids ``0..len(hashes)-1`` by their hashes in a new (larger) ``_intern`` table."""
    mask = len(table) - 1
    for t in range(len(hashes)):
        slot = np.int64(hashes[t]) & mask
        while table[slot] != _EMPTY:
            slot = (slot + 1) & mask
        table[slot] = t


@numba.njit(nogil=True, cache=True)
def _copy(src, start, end, dst, pos):
    for j in range(start, end):
        dst[pos] = src[j]
        pos += 1
    return pos


@numba.njit(nogil=True, cache=True)
def _gram_strings(arena, token_ends, first, second, suffix, offsets):
    """Bytes of ``"w1@suffix"`` (``second[i] < 0``) or ``"w1 w2@suffix"`` per gram, the words
    being the arena bytes of token ids; fills ``offsets`` (n + 1)."""
    n = len(first)
    offsets[0] = 0
    for i in range(n):
        size = token_ends[first[i]] - _token_start(token_ends, first[i]) + len(suffix)
        if second[i] >= 0:
            size += 1 + token_ends[second[i]] - _token_start(token_ends, second[i])
        offsets[i + 1] = offsets[i] + size
    out = np.empty(offsets[n], dtype=np.uint8)
    for i in range(n):
        pos = _copy(arena, _token_start(token_ends, first[i]), token_ends[first[i]], out, offsets[i])
        if second[i] >= 0:
            out[pos] = 32
            pos = _copy(arena, _token_start(token_ends, second[i]), token_ends[second[i]], out, pos + 1)
        _copy(suffix, 0, len(suffix), out, pos)
    return out


# ---------------------------------------------------------------- containers

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
    """Interned tokens: byte strings → dense ids, in a compiled hash table (see ``_intern``)."""

    def __init__(self, seed: tuple = ()):
        self.arena = np.empty(1 << 20, dtype=np.uint8)
        self.used = 0
        self.token_ends = np.empty(1 << 14, dtype=np.int64)
        self.hashes = np.empty(1 << 14, dtype=np.uint32)  # low halves: placement and a quick reject
        self.table = np.full(1 << 15, _EMPTY, dtype=np.int32)
        self.size = 0
        if seed:
            self.ids(pa.array(seed, pa.string()))

    def __len__(self) -> int:
        return self.size

    def intern(self, data: np.ndarray, starts: np.ndarray, ends: np.ndarray, hashes: np.ndarray | None = None
               ) -> np.ndarray:
        """Ids of the tokens ``data[starts[i]:ends[i]]`` (``hashes``: their FNV-1a hashes, computed
        if not given); the table doubles whenever it would pass half full (sized by the
        vocabulary, not the batch, so it stays in cache)."""
        hashes = _fnv(data, starts, ends) if hashes is None else hashes
        ids = np.empty(len(starts), dtype=np.int64)
        self.arena = _grown(self.arena, self.used + int((ends - starts).sum()))
        done = 0
        while done < len(starts):
            limit = len(self.table) // 2
            self.token_ends = _grown(self.token_ends, limit)
            self.hashes = _grown(self.hashes, limit)
            self.used, self.size, done = _intern(data, starts, ends, hashes, ids, done, self.arena, self.used,
                                                 self.token_ends, self.hashes, self.size, self.table, limit)
            if done < len(starts):
                size, self.table = 2 * len(self.table), None  # free the old table before the new one
                self.table = np.full(size, _EMPTY, dtype=np.int32)
                _reinsert(self.hashes[:self.size], self.table)
        return ids

    def ids(self, strings: pa.Array) -> np.ndarray:
        """Ids of the strings of an Arrow string array (no nulls)."""
        data, offsets = string_buffers(strings)
        return self.intern(data, offsets[:-1], offsets[1:])

    def grams(self, first: np.ndarray, second: np.ndarray, suffix: str) -> pa.Array:
        """Strings ``"w1@suffix"`` or, where ``second`` ≥ 0, ``"w1 w2@suffix"`` of token ids."""
        suffix = np.frombuffer(suffix.encode(), np.uint8)
        offsets = np.empty(len(first) + 1, dtype=np.int64)
        data = _gram_strings(self.arena, self.token_ends, first, second, suffix, offsets)
        if offsets[-1] < 2**31:
            return pa.StringArray.from_buffers(len(first), pa.py_buffer(offsets.astype(np.int32)), pa.py_buffer(data))
        return pa.LargeStringArray.from_buffers(len(first), pa.py_buffer(offsets), pa.py_buffer(data))


def string_buffers(strings) -> tuple[np.ndarray, np.ndarray]:
    """(bytes, offsets as int64) of an Arrow string array without nulls."""
    if isinstance(strings, pa.ChunkedArray):
        strings = strings.combine_chunks()
    if strings.null_count:
        raise ValueError("string_buffers: nulls must be filled first")
    width = np.int64 if pa.types.is_large_string(strings.type) else np.int32
    _, off_buf, data_buf = strings.buffers()
    offsets = np.frombuffer(off_buf, dtype=width)[strings.offset:strings.offset + len(strings) + 1]
    data = np.frombuffer(data_buf, dtype=np.uint8) if data_buf is not None else np.empty(0, np.uint8)
    return data, offsets.astype(np.int64)


class ByteScanner:
    """``_scan_ascii`` with its work buffers kept from batch to batch (fresh large arrays would
    page-fault on every batch)."""

    def __init__(self):
        self.out = np.empty(0, dtype=np.uint8)
        self.spans = np.empty((0, 3), dtype=np.int64)   # start, end, row of each token
        self.hashes = np.empty(0, dtype=np.uint64)

    def scan(self, data: np.ndarray, offsets: np.ndarray, skip: np.ndarray, options: TokenizerOptions
             ) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
        """(lowercased bytes, token starts, ends, hashes, rows); the rows are a copy, the rest
        are views of the buffers, valid until the next scan."""
        most = int(offsets[-1] - offsets[0])   # ≥ 1 byte a token
        self.out = _grown(self.out, len(data))
        self.spans, self.hashes = _grown(self.spans, most), _grown(self.hashes, most)
        starts, ends, rows = self.spans[:, 0], self.spans[:, 1], self.spans[:, 2]
        n = _scan_ascii(data, offsets, skip, options.lowercase, not options.remove_punctuation, BYTE_CLASS,
                        self.out, starts, ends, rows, self.hashes)
        return self.out, starts[:n], ends[:n], self.hashes[:n], rows[:n].copy()


def token_ids(texts, options: TokenizerOptions, vocab: TokenIds, stopword_ids: int = 0,
              scanner: ByteScanner | None = None) -> tuple[np.ndarray, np.ndarray]:
    """(token ids, row of each token) of ``texts`` as ``options.tokenize`` splits them.

    ASCII rows go through the byte scanner, the others (if any) through the Arrow tokenizer,
    merged back in row order. With stopword removal the vocabulary is seeded with the
    stopwords, so ids below ``stopword_ids`` are stopwords and are dropped here.
    """
    texts = pc.fill_null(texts.combine_chunks() if isinstance(texts, pa.ChunkedArray) else texts, "")
    data, offsets = string_buffers(texts)
    used = data[offsets[0]:offsets[-1]]
    mixed = len(used) > 0 and used.max() >= 128
    other = pc.invert(pc.string_is_ascii(texts)).to_numpy(zero_copy_only=False) if mixed \
        else np.zeros(len(texts), dtype=bool)
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


class KeyCounts:
    """Counts per label of int64 keys ≥ 0, each counted at most once per row (see
    ``_count_present``); rows and counts are int32, so one table counts fewer than 2**31 rows.

    ``dense``: keys are small ids stored at their own index; otherwise a linear-probing hash
    table, doubled whenever it would be more than ``MAX_LOAD`` full.
    """

    MAX_LOAD = 0.7
    MAX_ROWS = 2**31 - 1
    CACHED_SLOTS = 1 << 14   # a region of a larger table counted at a time (~400 kB of slots: in L2)

    def __init__(self, dense: bool, labels: int, capacity: int = 1 << 12):
        self.dense = dense
        self.size = 0
        self.table = self._empty(capacity, labels)

    @staticmethod
    def _empty(capacity: int, labels: int) -> np.ndarray:
        table = np.zeros((capacity, 3 + labels), dtype=np.int32)
        table[:, [0, 2]] = _EMPTY
        return table

    def _resize(self, capacity: int, labels: int) -> None:
        old = self.table
        labels = max(labels, old.shape[1] - 3)
        if labels > old.shape[1] - 3:   # a label first seen: a zero column for it
            old = np.concatenate([old, np.zeros((len(old), 3 + labels - old.shape[1]), dtype=np.int32)], axis=1)
        self.table = self._empty(capacity, labels)
        if self.dense:
            self.table[:len(old)] = old
        else:
            _rehash(old, self.table)

    def add(self, keys: np.ndarray, rows: np.ndarray, labels: np.ndarray, first_row: int, n_labels: int,
            pairs: bool = False) -> None:
        """Count ``keys`` (with ``pairs``: the bigrams of adjacent ids of the same row) by row."""
        if len(rows) and first_row + int(rows[-1]) > self.MAX_ROWS:
            raise OverflowError(f"KeyCounts counts fewer than 2**31 rows (row {first_row + int(rows[-1])})")
        capacity = len(self.table)
        # dense: room for the largest key; hashed, first batch: room for as many keys as it has
        wanted = keys.max(initial=0) + 1 if self.dense else len(keys) / self.MAX_LOAD if self.size == 0 else 0
        while capacity < wanted:
            capacity *= 2
        if capacity > len(self.table) or 3 + n_labels > self.table.shape[1]:
            self._resize(capacity, n_labels)
        if not self.dense and len(self.table) > self.CACHED_SLOTS:
            bits = int(len(self.table)).bit_length() - int(self.CACHED_SLOTS).bit_length()
            keys, rows = _by_region(keys, rows, pairs, _shift(len(self.table)), bits)
            pairs = False
        done = 0
        while True:
            limit = len(self.table) if self.dense else int(self.MAX_LOAD * len(self.table))
            self.size, done = _count_present(keys, rows, labels, first_row, self.table, self.dense, pairs, done,
                                             self.size, limit)
            if done == len(keys):
                return
            self._resize(2 * len(self.table), n_labels)

    def items(self) -> tuple[np.ndarray, np.ndarray]:
        """(keys, counts[key, label]) of the used slots, in slot order."""
        keys = np.empty(self.size, dtype=np.int64)
        counts = np.empty((self.size, self.table.shape[1] - 3), dtype=np.int32)
        _used_slots(self.table, 0, len(self.table), keys, counts)
        return keys, counts

    def chunks(self, slots: int) -> Iterator[tuple[np.ndarray, np.ndarray]]:
        """``items`` a range of ``slots`` slots at a time (a bounded copy of a large table)."""
        keys = np.empty(min(slots, len(self.table)), dtype=np.int64)
        counts = np.empty((len(keys), self.table.shape[1] - 3), dtype=np.int32)
        for start in range(0, len(self.table), slots):
            used = _used_slots(self.table, start, min(start + slots, len(self.table)), keys, counts)
            if used:
                yield keys[:used], counts[:used]


class _FieldCounts:
    """One text field's token ids and unigram/bigram tables."""

    def __init__(self, name: str, config: FeatureConfig):
        self.name, self.options = name, config.tokenizer
        self.stopword_ids = len(STOPWORD_LIST) if self.options.remove_stopwords else 0
        self.vocab = TokenIds(seed=STOPWORD_LIST if self.stopword_ids else ())
        self.scanner = ByteScanner()
        self.orders = [n for n, family in ((1, "unigram"), (2, "bigram")) if family in config.families]
        self.tables: dict[int, KeyCounts] = {}

    def tokenize(self, texts) -> tuple[np.ndarray, np.ndarray]:
        return token_ids(texts, self.options, self.vocab, self.stopword_ids, self.scanner)

    def count(self, tokens: tuple[np.ndarray, np.ndarray], labels: np.ndarray, first_row: int, n_labels: int) -> None:
        ids, parents = tokens
        for n in self.orders:
            if n not in self.tables:
                self.tables[n] = KeyCounts(dense=n == 1, labels=n_labels)
            self.tables[n].add(ids, parents, labels, first_row, n_labels, pairs=n == 2)

    @property
    def suffix(self) -> str:
        return "@" + self.name


def split_key(keys: np.ndarray, order: int) -> tuple[np.ndarray, np.ndarray]:
    """(first, second or −1) token ids of n-gram table keys (a bigram is ``id1 << 32 | id2``)."""
    return (keys, np.full(len(keys), -1)) if order == 1 else (keys >> 32, keys & 0xFFFFFFFF)


_POOL: ThreadPoolExecutor | None = None


def _pool() -> ThreadPoolExecutor:
    global _POOL
    if _POOL is None:
        _POOL = ThreadPoolExecutor(max_workers=2, thread_name_prefix="refinery-count")
    return _POOL


def _forget_pool() -> None:
    """A forked child has none of the parent's threads: it starts a pool of its own."""
    global _POOL
    _POOL = None


os.register_at_fork(after_in_child=_forget_pool)


def _load_kernels() -> None:
    """Run every kernel once on a tiny batch: loading numba's cached machine code costs ~0.3 s a process."""
    counts = FeatureCounts(FeatureConfig(families=("unigram", "bigram", "null")))
    counts.add(pa.table({"text_a": ["a b"], "text_b": ["c d"], "label": ["x"]}))
    counts.matrix(min_count=1)


_KERNELS = None


def load_kernels_in_background() -> None:
    """Start ``_load_kernels`` on a thread of its own, so the loading overlaps a caller's reading of
    its first batch (once a process)."""
    global _KERNELS
    if _KERNELS is None:
        _KERNELS = ThreadPoolExecutor(1, thread_name_prefix="refinery-load").submit(_load_kernels)


class FeatureCounts:
    """Presence counts of every feature of ``config`` × label over the batches added.

    ``add(table)`` takes canonical batches; ``matrix()`` gives (features, labels, F×C counts),
    ``counts()`` the long ``(feature, label, count)`` table.

    Two-stage pipeline on two threads: ``add`` returns once it has queued the tokenization of
    its batch and the counting of the previous one (per field: both stages touch different
    state), so reading the next batch, tokenizing and counting overlap.
    """

    MAX_ROWS = KeyCounts.MAX_ROWS

    def __init__(self, config: FeatureConfig):
        self.config = config
        self.labels: dict[str, int] = {}
        self.fields: dict[str, _FieldCounts] | None = None
        self.row_families = tuple(f for f in config.families if f not in ("unigram", "bigram", "hypo-only"))
        self.row_feature_ids: dict[str, int] = {}
        self.row_table = KeyCounts(dense=True, labels=1)
        self.rows = 0
        self._in_flight: list = []     # futures of the last add
        self._parts_cache: list | None = None
        self._pending = None           # (label ids, first row) of the batch being tokenized, not yet counted

    def add(self, table: pa.Table) -> "FeatureCounts":
        self._parts_cache = None
        tokenized = self._drain()
        labels = dictionary_ids(table["label"], self.labels)
        if self.fields is None:
            self.fields = {col: _FieldCounts(name, self.config) for col, name in text_fields(table, self.config)
                           if any(f in self.config.families for f in ("unigram", "bigram"))}
        self._queue_count(tokenized)
        self._in_flight += [(col, _pool().submit(f.tokenize, table[col])) for col, f in self.fields.items()]
        self._pending = (labels, self.rows)
        if self.row_families:
            self._add_row_features(table, labels)
        self.rows += table.num_rows
        return self

    def _drain(self) -> dict:
        """Wait for the last add's work; the tokens it produced, by field."""
        done = [(col, future.result()) for col, future in self._in_flight]   # col None: a counting stage
        self._in_flight = []
        return {col: tokens for col, tokens in done if col is not None}

    def _queue_count(self, tokenized: dict) -> None:
        if self._pending is None:
            return
        labels, first_row = self._pending
        self._pending = None
        self._in_flight += [(None, _pool().submit(self.fields[col].count, tokens, labels, first_row, len(self.labels)))
                            for col, tokens in tokenized.items()]

    def flush(self) -> "FeatureCounts":
        """Finish every queued stage (``matrix`` and ``counts`` call it)."""
        self._queue_count(self._drain())
        self._drain()
        return self

    def _add_row_features(self, table: pa.Table, labels: np.ndarray) -> None:
        """Row-level families: ``null`` (every row has it) directly, the others via ``extract``."""
        C, n = len(self.labels), table.num_rows
        if "null" in self.row_families:
            null = self.row_feature_ids.setdefault("null", len(self.row_feature_ids))
            self.row_table.add(np.full(n, null, dtype=np.int64), np.arange(n, dtype=np.int64), labels, self.rows, C)
        families = tuple(f for f in self.row_families if f != "null")
        if not families:
            return
        long = extract(table, FeatureConfig(families, self.config.tokenizer, self.config.field_names,
                                            self.config.single_field_name))
        ids = dictionary_ids(long["feature"], self.row_feature_ids)
        self.row_table.add(ids, long["row"].to_numpy(), labels, self.rows, C)

    def _tables(self) -> list[tuple[int, int, KeyCounts]]:
        """(code, order, table) of every count table. A code names a table for good: 2·i + order − 1 for
        the i-th text field's n-grams, 2·(number of fields) for the row features."""
        fields = list((self.fields or {}).values())
        tables = [(2 * i + n - 1, n, t) for i, f in enumerate(fields) for n, t in sorted(f.tables.items())]
        if self.row_feature_ids:
            tables.append((2 * len(fields), 1, self.row_table))
        return tables

    def _parts(self) -> list[tuple[int, np.ndarray, np.ndarray, np.ndarray]]:
        """(code, first ids, second ids or −1, counts per label id) of every table. Kept until the next add."""
        if self._parts_cache is None:
            self.flush()
            tables = self._tables()
            items = _pool().map(lambda table: table[2].items(), tables)
            self._parts_cache = [(code, *split_key(keys, order), counts)
                                 for (code, order, _), (keys, counts) in zip(tables, items)]
        return self._parts_cache

    def names(self, code: int, first: np.ndarray, second: np.ndarray) -> pa.Array:
        """The feature strings of ids ``first`` (and ``second``) of the table ``code``."""
        fields = list((self.fields or {}).values())
        if code < 2 * len(fields):
            field = fields[code // 2]
            return field.vocab.grams(first, second, field.suffix)
        return pc.take(pa.array(list(self.row_feature_ids), pa.string()), pa.array(first))

    def spill(self, runs, slots: int = 1 << 22) -> None:
        """Every count held into ``runs`` (``spill.KeyedRuns``: rows of table code, ids, label id and
        count), ``slots`` slots of a table at a time; then the tables start empty. The vocabularies
        stay, so the ids of every run name the same features (merged by ``names`` and ``gram_tables``)."""
        self.flush()
        for code, order, table in self._tables():
            for keys, counts in table.chunks(slots):
                runs.add(code, *split_key(keys, order), counts)
        runs.end_run()
        for field in (self.fields or {}).values():
            field.tables = {}
        self.row_table = KeyCounts(dense=True, labels=1)
        self.rows = 0   # row stamps restart with the tables
        self._parts_cache = None

    def _label_columns(self, counts: np.ndarray, labels: list) -> np.ndarray:
        """int64 counts in the column order of ``labels`` (zeros for a label never seen)."""
        out = np.zeros((len(counts), len(labels)), dtype=np.int64)
        for j, col in enumerate(self.label_ids(labels)):
            if 0 <= col < counts.shape[1]:
                out[:, j] = counts[:, col]
        return out

    def label_ids(self, labels: list) -> list[int]:
        """The id (a column of the tables' counts) of each of ``labels``; −1 for a label never seen."""
        return [self.labels.get(label, -1) for label in labels]

    @property
    def nbytes(self) -> int:
        """Memory held by the count tables, vocabularies and work buffers."""
        held = self.row_table.table.nbytes
        for f in (self.fields or {}).values():
            held += sum(t.table.nbytes for t in f.tables.values())
            held += f.vocab.arena.nbytes + f.vocab.token_ends.nbytes + f.vocab.hashes.nbytes + f.vocab.table.nbytes
            held += f.scanner.out.nbytes + f.scanner.spans.nbytes + f.scanner.hashes.nbytes
        return held

    @property
    def largest_table_nbytes(self) -> int:
        """The largest count table: doubling it takes twice that on top of what is held."""
        return max((t.table.nbytes for _, _, t in self._tables()), default=0)

    @property
    def held_features(self) -> int:
        """Features in the tables so far, without waiting for the batches still being counted (a cheap
        gauge for the callers that bound a chunk on every add)."""
        tables = [t for f in (self.fields or {}).values() for t in f.tables.values()]
        return sum(t.size for t in tables) + (self.row_table.size if self.row_feature_ids else 0)

    @property
    def num_features(self) -> int:
        """Distinct features of every batch added."""
        self.flush()
        return self.held_features

    def matrix(self, labels: list | None = None, min_count: int = 0) -> tuple[pa.Array, list, np.ndarray]:
        """(F features, labels, F×C counts) of every feature seen in at least ``min_count`` rows (all
        by default; feature strings are built only for those kept); ``labels`` (default: those
        seen, sorted) orders the columns, a label never seen gets zeros."""
        labels = sorted(self.labels) if labels is None else list(labels)
        parts = []
        for code, first, second, counts in self._parts():
            if min_count > 0:   # filtered on the int32 counts, so only the kept rows are widened
                columns = [c for c in self.label_ids(labels) if 0 <= c < counts.shape[1]]
                keep = np.flatnonzero(row_totals(counts, columns) >= min_count)
                first, second, counts = first[keep], second[keep], counts[keep]
            parts.append((code, first, second, self._label_columns(counts, labels)))
        features, matrix = self.named(parts, labels)
        return features, labels, matrix

    def named(self, parts: list, labels: list, min_count: int = 0) -> tuple[pa.Array, np.ndarray]:
        """(feature strings, F×C counts) of ``parts`` — (code, first, second, counts in the order of
        ``labels``) — whose features are in at least ``min_count`` rows."""
        kept = []
        for code, first, second, counts in parts:
            if min_count > 0:
                keep = np.flatnonzero(row_totals(counts) >= min_count)
                first, second, counts = first[keep], second[keep], counts[keep]
            kept.append((code, first, second, counts))
        arrays = list(_pool().map(lambda part: self.names(*part[:3]), kept))
        matrix = np.concatenate([p[3] for p in kept]) if kept else np.zeros((0, len(labels)), dtype=np.int64)
        if sum(a.nbytes for a in arrays) >= 2**31 or any(pa.types.is_large_string(a.type) for a in arrays):
            arrays = [a.cast(pa.large_string()) for a in arrays]   # past 32-bit string offsets
        return pa.concat_arrays(arrays) if arrays else pa.array([], pa.string()), matrix

    def gram_tables(self, labels: list, partitions: Iterable[list] | None = None) -> Iterator[pa.Table]:
        """Features as dictionary-encoded parts — ``first``, ``second`` (null for a unigram or a row
        feature) and ``suffix`` — with an int64 ``count_<j>`` per label of ``labels``: the feature is
        ``first[ second]suffix``. No string is built per feature (the state's compact layout). One
        table per partition of ``partitions`` (lists of (code, first, second, counts in the order of
        ``labels``); default: one partition of every count held), all with one dictionary; each column
        is written once, in place."""
        if partitions is None:
            partitions, columns = [self._parts()], self.label_ids(labels)
        else:
            columns = list(range(len(labels)))
        fields = list((self.fields or {}).values())
        namers = [(f.vocab.grams(np.arange(len(f.vocab)), np.full(len(f.vocab), -1), ""), f.suffix) for f in fields]
        namers.append((pa.array(list(self.row_feature_ids), pa.string()), ""))
        offsets = np.cumsum([0] + [len(words) for words, _ in namers])
        dictionary = pa.concat_arrays([words for words, _ in namers])
        suffix_names = list(dict.fromkeys(suffix for _, suffix in namers))
        suffixes = pa.array(suffix_names, pa.string())

        def encoded(indices, values, mask=None):
            return pa.DictionaryArray.from_arrays(pa.array(indices, pa.int32(), mask=mask), values)

        for parts in partitions:
            total = sum(len(p[1]) for p in parts)
            first, second, suffix = (np.empty(total, np.int32) for _ in range(3))
            absent = np.empty(total, bool)
            counts = [np.zeros(total, np.int64) for _ in labels]
            at = 0
            for code, first_ids, second_ids, part_counts in parts:
                k, end = min(code // 2, len(fields)), at + len(first_ids)
                np.add(first_ids, offsets[k], out=first[at:end], casting="unsafe")
                np.add(second_ids, offsets[k], out=second[at:end], casting="unsafe")
                np.less(second_ids, 0, out=absent[at:end])
                suffix[at:end] = suffix_names.index(namers[k][1])
                for j, col in enumerate(columns):
                    if 0 <= col < part_counts.shape[1]:
                        counts[j][at:end] = part_counts[:, col]
                at = end
            second[absent] = 0
            yield pa.table({
                "first": encoded(first, dictionary),
                "second": encoded(second, dictionary, absent),
                "suffix": encoded(suffix, suffixes),
                **{f"count_{j}": counts[j] for j in range(len(labels))},
            })

    def counts(self, schema: pa.Schema) -> pa.Table:
        """Long ``(feature, label, count)`` table of the nonzero counts."""
        return matrix_to_long(*self.matrix(), schema)


def gram_strings(table: pa.Table) -> pa.Array:
    """The feature strings of a ``FeatureCounts.gram_tables`` table: ``first[ second]suffix``."""
    def dense(name):
        return pc.cast(table[name], pa.string())

    words = pc.binary_join_element_wise(dense("first"), dense("second"), " ", null_handling="skip")
    return pc.binary_join_element_wise(words, dense("suffix"), "").combine_chunks()
