"""Exact feature × label counts of whole corpora on integer ids (the audit's hot path, METHODS §1).

Unigram and bigram presence per field is counted without materializing ``(row, "w1 w2@field")``
strings. Per field, each batch is tokenized (a compiled byte scanner for ASCII text, the
reference Arrow tokenizer otherwise; both give the tokens of ``TokenizerOptions.tokenize``),
each token interned to a dense id, and a bigram packed into the key ``id1 << 32 | id2``. Keys
are counted in a table whose rows are ``[key, stamp, count per label…]``: a key counts for a
row only when its stamp is not already that row, so presence counts once per row. Feature
strings (``"w1 w2@hypothesis"``) are built once per distinct feature, at the end.

The kernels are numba-compiled and release the GIL, so the fields of a pair corpus are counted
in parallel threads. Row-level families (length, ratio, overlap, ``null``) come from
``features.extract`` and count in a dense table of their own.
"""
from __future__ import annotations

import os
from concurrent.futures import ThreadPoolExecutor

import numba
import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from .features import STOPWORD_LIST, FeatureConfig, TokenizerOptions, extract, text_fields

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
    """Slot of ``key`` in a linear-probing table (or the empty slot where it goes)."""
    mask = len(table) - 1
    slot = np.int64((np.uint64(key) * _GOLDEN) >> shift)
    while table[slot, 0] != key and table[slot, 0] != _EMPTY:
        slot = (slot + 1) & mask
    return slot


@numba.njit(nogil=True, cache=True)
def _count_present(keys, rows, labels, first_row, table, dense, start, size, limit):
    """Count each ``keys[i]`` (i ≥ ``start``) once for row ``first_row + rows[i]`` under label
    ``labels[rows[i]]``.

    ``table`` rows are ``[key, stamp (last row counted), count per label…]``, so a probe touches
    one cache line; ``dense``: the key is its own slot. Stops before a new key would make the
    table hold more than ``limit`` keys; returns (keys held, position reached).
    """
    shift = _shift(len(table))
    for i in range(start, len(keys)):
        key = keys[i]
        slot = key if dense else _find(table, key, shift)
        if table[slot, 0] != key:
            if size >= limit:
                return size, i
            table[slot, 0] = key
            size += 1
        row = first_row + rows[i]
        if table[slot, 1] != row:
            table[slot, 1] = row
            table[slot, 2 + labels[rows[i]]] += 1
    return size, len(keys)


@numba.njit(nogil=True, cache=True)
def _rehash(table, new_table):
    shift = _shift(len(new_table))
    for s in range(len(table)):
        if table[s, 0] != _EMPTY:
            new_table[_find(new_table, table[s, 0], shift)] = table[s]


@numba.njit(nogil=True, cache=True)
def _scan_ascii(data, offsets, lowercase, keep_punct, byte_class, out, starts, ends, parents):
    """Tokenize ASCII strings ``data[offsets[r]:offsets[r+1]]``: runs of word bytes are tokens,
    punctuation bytes one-byte tokens (dropped unless ``keep_punct``), space bytes separators.
    Writes the (lowercased) bytes to ``out`` and each token's span and row; returns the count."""
    n = 0
    for r in range(len(offsets) - 1):
        start = -1
        for i in range(offsets[r], offsets[r + 1]):
            b = data[i]
            if lowercase and 65 <= b <= 90:
                b += 32
            out[i] = b
            cls = byte_class[b]
            if cls == 0:
                if start < 0:
                    start = i
                continue
            if start >= 0:
                starts[n], ends[n], parents[n] = start, i, r
                n += 1
                start = -1
            if cls == 2 and keep_punct:
                starts[n], ends[n], parents[n] = i, i + 1, r
                n += 1
        if start >= 0:
            starts[n], ends[n], parents[n] = start, offsets[r + 1], r
            n += 1
    return n


@numba.njit(nogil=True, cache=True)
def _intern(data, starts, ends, arena, arena_used, spans, hashes, n_ids, table):
    """Dense id of each token ``data[starts[i]:ends[i]]``, adding unseen tokens to the arena.

    ``table``: linear-probing slots holding ids (FNV-1a hashes); ``spans[id]`` locates the
    token's bytes in ``arena``. Returns (ids, arena_used, n_ids)."""
    mask = len(table) - 1
    ids = np.empty(len(starts), dtype=np.int64)
    for i in range(len(starts)):
        h = _FNV_OFFSET
        for j in range(starts[i], ends[i]):
            h = (h ^ np.uint64(data[j])) * _FNV_PRIME
        slot = np.int64(h & np.uint64(mask))
        length = ends[i] - starts[i]
        while True:
            t = table[slot]
            if t == _EMPTY:
                arena[arena_used:arena_used + length] = data[starts[i]:ends[i]]
                spans[n_ids, 0], spans[n_ids, 1] = arena_used, arena_used + length
                hashes[n_ids] = h
                table[slot] = n_ids
                ids[i] = n_ids
                arena_used += length
                n_ids += 1
                break
            if hashes[t] == h and spans[t, 1] - spans[t, 0] == length:
                a = spans[t, 0]
                same = True
                for j in range(length):
                    if arena[a + j] != data[starts[i] + j]:
                        same = False
                        break
                if same:
                    ids[i] = t
                    break
            slot = (slot + 1) & mask
    return ids, arena_used, n_ids


@numba.njit(nogil=True, cache=True)
def _reinsert(hashes, table):
    """Place ids ``0..len(hashes)-1`` by their hashes in a new (larger) ``_intern`` table."""
    mask = len(table) - 1
    for t in range(len(hashes)):
        slot = np.int64(hashes[t] & np.uint64(mask))
        while table[slot] != _EMPTY:
            slot = (slot + 1) & mask
        table[slot] = t


@numba.njit(nogil=True, cache=True)
def _gram_strings(arena, spans, first, second, suffix):
    """Bytes and offsets of ``"w1@suffix"`` (``second[i] < 0``) or ``"w1 w2@suffix"`` per gram,
    the words being arena spans of token ids."""
    n = len(first)
    offsets = np.empty(n + 1, dtype=np.int64)
    offsets[0] = 0
    for i in range(n):
        size = spans[first[i], 1] - spans[first[i], 0] + len(suffix)
        if second[i] >= 0:
            size += 1 + spans[second[i], 1] - spans[second[i], 0]
        offsets[i + 1] = offsets[i] + size
    out = np.empty(offsets[n], dtype=np.uint8)
    for i in range(n):
        pos = offsets[i]
        a, b = spans[first[i], 0], spans[first[i], 1]
        out[pos:pos + b - a] = arena[a:b]
        pos += b - a
        if second[i] >= 0:
            out[pos] = 32
            a, b = spans[second[i], 0], spans[second[i], 1]
            out[pos + 1:pos + 1 + b - a] = arena[a:b]
            pos += 1 + b - a
        out[pos:pos + len(suffix)] = suffix
    return out, offsets


# ---------------------------------------------------------------- containers

def _grown(array: np.ndarray, size: int, fill) -> np.ndarray:
    """``array`` with at least ``size`` rows (capacity doubled), new rows set to ``fill``."""
    if len(array) >= size:
        return array
    capacity = max(len(array), 1)
    while capacity < size:
        capacity *= 2
    out = np.full((capacity,) + array.shape[1:], fill, dtype=array.dtype)
    out[:len(array)] = array
    return out


class TokenIds:
    """Interned tokens: byte strings → dense ids, in a compiled hash table (see ``_intern``)."""

    def __init__(self, seed: tuple = ()):
        self.arena = np.empty(1 << 20, dtype=np.uint8)
        self.used = 0
        self.spans = np.empty((1 << 14, 2), dtype=np.int64)
        self.hashes = np.empty(1 << 14, dtype=np.uint64)
        self.table = np.full(1 << 15, _EMPTY, dtype=np.int64)
        self.size = 0
        if seed:
            self.ids(pa.array(seed, pa.string()))

    def __len__(self) -> int:
        return self.size

    def intern(self, data: np.ndarray, starts: np.ndarray, ends: np.ndarray) -> np.ndarray:
        n = len(starts)
        self.arena = _grown(self.arena, self.used + int((ends - starts).sum()), 0)
        self.spans = _grown(self.spans, self.size + n, 0)
        self.hashes = _grown(self.hashes, self.size + n, 0)
        if 2 * (self.size + n) > len(self.table):
            self._resize(2 * (self.size + n))
        ids, self.used, self.size = _intern(data, starts, ends, self.arena, self.used, self.spans, self.hashes,
                                            self.size, self.table)
        return ids

    def _resize(self, minimum: int) -> None:
        capacity = len(self.table)
        while capacity < minimum:
            capacity *= 2
        self.table = np.full(capacity, _EMPTY, dtype=np.int64)
        _reinsert(self.hashes[:self.size], self.table)

    def ids(self, strings: pa.Array) -> np.ndarray:
        """Ids of the strings of an Arrow string array (no nulls)."""
        data, offsets = string_buffers(strings)
        return self.intern(data, offsets[:-1], offsets[1:])

    def grams(self, first: np.ndarray, second: np.ndarray, suffix: str) -> pa.Array:
        """Strings ``"w1@suffix"`` or, where ``second`` ≥ 0, ``"w1 w2@suffix"`` of token ids."""
        data, offsets = _gram_strings(self.arena, self.spans, first, second, np.frombuffer(suffix.encode(), np.uint8))
        return pa.LargeStringArray.from_buffers(len(first), pa.py_buffer(offsets), pa.py_buffer(data)).cast(pa.string())


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


def token_ids(texts, options: TokenizerOptions, vocab: TokenIds, stopword_ids: int = 0
              ) -> tuple[np.ndarray, np.ndarray]:
    """(token ids, row of each token) of ``texts`` as ``options.tokenize`` splits them.

    ASCII batches go through the byte scanner, others through the Arrow tokenizer. With
    stopword removal the vocabulary is seeded with the stopwords, so ids below ``stopword_ids``
    are stopwords and are dropped here.
    """
    texts = pc.fill_null(texts.combine_chunks() if isinstance(texts, pa.ChunkedArray) else texts, "")
    data, offsets = string_buffers(texts)
    used = data[offsets[0]:offsets[-1]]
    if not len(used) or used.max() < 128:
        out = np.empty_like(data)
        most = len(used)   # a token has at least one byte
        starts, ends, parents = (np.empty(most, dtype=np.int64) for _ in range(3))
        n = _scan_ascii(data, offsets, options.lowercase, not options.remove_punctuation, BYTE_CLASS,
                        out, starts, ends, parents)
        ids = vocab.intern(out, starts[:n], ends[:n])
        parents = parents[:n]
    else:
        tokens = options.tokenize(texts)
        ids = vocab.ids(pc.list_flatten(tokens))
        parents = pc.list_parent_indices(tokens).to_numpy().astype(np.int64)
    if stopword_ids:
        keep = ids >= stopword_ids
        ids, parents = ids[keep], parents[keep]
    return ids, parents


class KeyCounts:
    """Counts per label of int64 keys, each counted at most once per row (see ``_count_present``).

    ``dense``: keys are small ids stored at their own index; otherwise a linear-probing hash
    table, doubled whenever it would be more than ``MAX_LOAD`` full.
    """

    MAX_LOAD = 0.7

    def __init__(self, dense: bool, labels: int, capacity: int = 1 << 12):
        self.dense = dense
        self.size = 0
        self.table = self._empty(capacity, labels)

    @staticmethod
    def _empty(capacity: int, labels: int) -> np.ndarray:
        table = np.zeros((capacity, 2 + labels), dtype=np.int64)
        table[:, :2] = _EMPTY
        return table

    def _resize(self, capacity: int, labels: int) -> None:
        old = self.table
        widened = self._empty(len(old), max(labels, old.shape[1] - 2))
        widened[:, :old.shape[1]] = old
        self.table = self._empty(capacity, widened.shape[1] - 2)
        if self.dense:
            self.table[:len(old)] = widened
        else:
            _rehash(widened, self.table)

    def add(self, keys: np.ndarray, rows: np.ndarray, labels: np.ndarray, first_row: int, n_labels: int) -> None:
        capacity = len(self.table)
        if self.dense:
            while capacity <= keys.max(initial=0):
                capacity *= 2
        if capacity > len(self.table) or 2 + n_labels > self.table.shape[1]:
            self._resize(capacity, n_labels)
        done = 0
        while True:
            limit = len(self.table) if self.dense else int(self.MAX_LOAD * len(self.table))
            self.size, done = _count_present(keys, rows, labels, first_row, self.table, self.dense, done,
                                             self.size, limit)
            if done == len(keys):
                return
            self._resize(2 * len(self.table), n_labels)

    def items(self) -> tuple[np.ndarray, np.ndarray]:
        """(keys, counts[key, label]) of the used slots."""
        used = self.table[self.table[:, 0] != _EMPTY]
        return used[:, 0], used[:, 2:]


def bigram_keys(ids: np.ndarray, parents: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(``id1 << 32 | id2``, row) of each pair of adjacent tokens of the same row."""
    same = parents[1:] == parents[:-1]
    return (ids[:-1][same] << 32) | ids[1:][same], parents[1:][same]


class _FieldCounts:
    """One text field's token ids and unigram/bigram tables."""

    def __init__(self, name: str, config: FeatureConfig):
        self.name, self.options = name, config.tokenizer
        self.stopword_ids = len(STOPWORD_LIST) if self.options.remove_stopwords else 0
        self.vocab = TokenIds(seed=STOPWORD_LIST if self.stopword_ids else ())
        self.orders = [n for n, family in ((1, "unigram"), (2, "bigram")) if family in config.families]
        self.tables: dict[int, KeyCounts] = {}

    def tokenize(self, texts) -> tuple[np.ndarray, np.ndarray]:
        return token_ids(texts, self.options, self.vocab, self.stopword_ids)

    def count(self, tokens: tuple[np.ndarray, np.ndarray], labels: np.ndarray, first_row: int, n_labels: int) -> None:
        ids, parents = tokens
        for n in self.orders:
            keys, rows = (ids, parents) if n == 1 else bigram_keys(ids, parents)
            table = self.tables.setdefault(n, KeyCounts(dense=n == 1, labels=n_labels))
            table.add(keys, rows, labels, first_row, n_labels)

    def features(self) -> list[tuple[pa.Array, np.ndarray]]:
        """(feature strings, counts per label) of each n-gram table."""
        out = []
        for n, table in sorted(self.tables.items()):
            keys, counts = table.items()
            first, second = (keys, np.full(len(keys), -1)) if n == 1 else (keys >> 32, keys & 0xFFFFFFFF)
            out.append((self.vocab.grams(first, second, "@" + self.name), counts))
        return out


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


class FeatureCounts:
    """Presence counts of every feature of ``config`` × label over the batches added.

    ``add(table)`` takes canonical batches; ``matrix()`` gives (features, labels, F×C counts),
    ``counts()`` the long ``(feature, label, count)`` table.

    Two-stage pipeline on two threads: ``add`` returns once it has queued the tokenization of
    its batch and the counting of the previous one (per field: both stages touch different
    state), so reading the next batch, tokenizing and counting overlap.
    """

    def __init__(self, config: FeatureConfig):
        self.config = config
        self.labels: dict[str, int] = {}
        self.fields: dict[str, _FieldCounts] | None = None
        self.row_families = tuple(f for f in config.families if f not in ("unigram", "bigram", "hypo-only"))
        self.row_feature_ids: dict[str, int] = {}
        self.row_table = KeyCounts(dense=True, labels=1)
        self.rows = 0
        self._in_flight: list = []     # futures of the last add
        self._pending = None           # (tokens per field, labels, first row) of a batch tokenized, not counted

    def _label_ids(self, labels) -> np.ndarray:
        encoded = pc.dictionary_encode(labels.combine_chunks() if isinstance(labels, pa.ChunkedArray) else labels)
        if encoded.null_count:
            raise ValueError("labels must not be null")
        local = np.array([self.labels.setdefault(l, len(self.labels)) for l in encoded.dictionary.to_pylist()],
                         dtype=np.int64)
        return local[encoded.indices.to_numpy()]

    def add(self, table: pa.Table) -> "FeatureCounts":
        tokenized = self._drain()
        labels = self._label_ids(table["label"])
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
        long = extract(table, FeatureConfig(self.row_families, self.config.tokenizer, self.config.field_names,
                                            self.config.single_field_name))
        feature = long["feature"].combine_chunks()
        local = np.array([self.row_feature_ids.setdefault(f, len(self.row_feature_ids))
                          for f in feature.dictionary.to_pylist()], dtype=np.int64)
        ids = local[feature.indices.to_numpy()] if len(local) else np.empty(0, np.int64)
        self.row_table.add(ids, long["row"].to_numpy(), labels, self.rows, len(self.labels))

    def matrix(self) -> tuple[pa.Array, list, np.ndarray]:
        """(F features, labels sorted, F×C counts) of every feature seen."""
        self.flush()
        labels = sorted(self.labels)
        columns = np.array([self.labels[l] for l in labels], dtype=np.int64)
        fields = list((self.fields or {}).values())
        parts = [f for done in _pool().map(_FieldCounts.features, fields) for f in done]
        if self.row_feature_ids:
            keys, counts = self.row_table.items()
            names = pa.array(list(self.row_feature_ids), pa.string())
            parts.append((pc.take(names, pa.array(keys)), counts))
        if not parts:
            return pa.array([], pa.string()), labels, np.zeros((0, len(labels)), dtype=np.int64)
        features = pa.concat_arrays([p[0] for p in parts])
        counts = np.concatenate([_widen(p[1], len(labels)) for p in parts])[:, columns]
        return features, labels, counts

    def counts(self, schema: pa.Schema) -> pa.Table:
        """Long ``(feature, label, count)`` table of the nonzero counts."""
        features, labels, matrix = self.matrix()
        row, col = np.nonzero(matrix)
        return pa.table({"feature": pc.take(features, pa.array(row)),
                         "label": pc.take(pa.array(labels, pa.string()), pa.array(col)),
                         "count": pa.array(matrix[row, col], pa.int64())}, schema=schema)


def _widen(counts: np.ndarray, labels: int) -> np.ndarray:
    """Counts with a column for every label (tables created before a label first appeared lack it)."""
    if counts.shape[1] >= labels:
        return counts
    return np.pad(counts, ((0, 0), (0, labels - counts.shape[1])))
