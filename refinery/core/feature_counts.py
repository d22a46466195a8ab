"""Exact feature × label counts of whole corpora on integer ids (the audit's hot path, METHODS §1).

Unigram and bigram presence per field is counted without materializing ``(row, "w1 w2@field")``
strings. Per field, each batch is tokenized to dense token ids (``vocabulary``) and a bigram packed
into the key ``id1 << 32 | id2``. Keys are counted in a table (``key_counts.KeyCounts``) whose int32
rows are ``[key high, key low, stamp, count per label…]``: a key counts for a row only when its stamp is not
already that row, so presence counts once per row. Feature strings (``"w1 w2@hypothesis"``) are built
once per distinct feature, at the end.

The kernels (``kernels``) are numba-compiled and release the GIL, so the fields of a pair corpus are
tokenized and counted in parallel, on a thread pool of this module's (a forked child starts its own).
Row-level families count in a dense table of their own: ``null`` directly, length, ratio and overlap
from ``features.extract``.
"""
from __future__ import annotations

import os
from concurrent.futures import ThreadPoolExecutor
from typing import Iterable, Iterator

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from refinery.core.features import STOPWORD_LIST, FeatureConfig, dictionary_ids, extract, text_fields
from refinery.core.kernels import SUFFIX_BITS, WORD_BITS, WORD_MASK, fnv
from refinery.core.key_counts import KeyCounts
from refinery.core.stats import matrix_to_long, row_totals
from refinery.core.vocabulary import ByteScanner, TokenIds, string_buffers, token_ids
from refinery.io.read_options import DEFAULT_BATCH_ROWS


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
    SLICE_ROWS = DEFAULT_BATCH_ROWS   # rows tokenized and counted at a time, whatever the table added

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
        """Count the rows of ``table``, ``SLICE_ROWS`` at a time (zero-copy slices): the work buffers of a slice
        (the byte scanner's ~33 bytes per byte of text, the token ids and rows) are sized by the slice, so a
        caller may add a whole corpus as one table (``ShortcutGuard``, ``audit_table``) and memory follows its
        distinct features, not its size. The counts are those of one batch: rows are numbered across slices."""
        for start in range(0, max(table.num_rows, 1), self.SLICE_ROWS):
            self._add(table.slice(start, self.SLICE_ROWS))
        return self

    def _add(self, table: pa.Table) -> None:
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
        """Memory held by the count tables, vocabularies and work buffers: a gauge read while the
        counting threads run (the tables listed at once, as a counting stage may add one)."""
        held = self.row_table.table.nbytes
        for f in list((self.fields or {}).values()):
            held += sum(t.table.nbytes for t in list(f.tables.values()))
            held += f.vocab.nbytes + f.scanner.nbytes
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
        dictionary, offsets, suffix_names, suffix_of = self.words()
        suffixes = pa.array(suffix_names, pa.string())
        for parts in partitions:
            total = sum(len(p[1]) for p in parts)
            first, second, suffix = (np.empty(total, np.int32) for _ in range(3))
            absent = np.empty(total, bool)
            counts = [np.zeros(total, np.int64) for _ in labels]
            at = 0
            for code, first_ids, second_ids, part_counts in parts:
                k, end = self._kind(code), at + len(first_ids)
                np.add(first_ids, offsets[k], out=first[at:end], casting="unsafe")
                np.add(second_ids, offsets[k], out=second[at:end], casting="unsafe")
                np.less(second_ids, 0, out=absent[at:end])
                suffix[at:end] = suffix_of[k]
                for j, col in enumerate(columns):
                    if 0 <= col < part_counts.shape[1]:
                        counts[j][at:end] = part_counts[:, col]
                at = end
            second[absent] = -1
            yield grams_table(dictionary, suffixes, (first, second, suffix), counts)

    def words(self) -> tuple[pa.Array, np.ndarray, list[str], list[int]]:
        """The strings features are made of: (each text field's vocabulary then the row features' names, one
        array; where each kind of table's strings start in it; the distinct suffixes; each kind's suffix). A
        kind is a text field, or the row features (``_kind``)."""
        fields = list((self.fields or {}).values())
        namers = [(f.vocab.grams(np.arange(len(f.vocab)), np.full(len(f.vocab), -1), ""), f.suffix) for f in fields]
        namers.append((pa.array(list(self.row_feature_ids), pa.string()), ""))
        offsets = np.cumsum([0] + [len(words) for words, _ in namers])
        suffixes = list(dict.fromkeys(suffix for _, suffix in namers))
        return (pa.concat_arrays([words for words, _ in namers]), offsets, suffixes,
                [suffixes.index(suffix) for _, suffix in namers])

    def _kind(self, code: int) -> int:
        """The kind of strings (``words``) the table ``code`` counts: its text field's index, or the row features'."""
        return min(code // 2, len(self.fields or {}))

    def packed(self) -> tuple[pa.Array, list[str], np.ndarray, np.ndarray, list]:
        """Every count, its feature as one uint64 of indices into ``words`` (``pack_keys``): (the strings, the
        suffixes, the keys, int32 counts per label, the labels in the counts' column order)."""
        counted = self._parts()   # every batch counted: the vocabularies are complete
        words, offsets, suffixes, suffix_of = self.words()
        if len(words) >= WORD_LIMIT or len(suffixes) > 1 << SUFFIX_BITS:
            raise OverflowError(f"{len(words):,} strings in features: packed keys hold fewer than {WORD_LIMIT:,}")
        labels = sorted(self.labels, key=self.labels.get)
        keys = np.empty(sum(len(first) for _, first, _, _ in counted), np.uint64)
        counts = np.zeros((len(keys), len(labels)), np.int32)
        at = 0
        for code, first, second, table_counts in counted:
            k, end = self._kind(code), at + len(first)
            keys[at:end] = pack_keys(suffix_of[k], first + offsets[k], np.where(second >= 0, second + offsets[k], -1))
            counts[at:end, :table_counts.shape[1]] = table_counts
            at = end
        return words, suffixes, keys, counts, labels

    def counts(self, schema: pa.Schema) -> pa.Table:
        """Long ``(feature, label, count)`` table of the nonzero counts."""
        return matrix_to_long(*self.matrix(), schema)


def grams_table(words: pa.Array, suffixes: pa.Array, indices: tuple, counts: list) -> pa.Table:
    """Features as dictionary-encoded parts (the state's compact ``grams`` layout): ``indices`` — (first, second
    or −1, suffix) — into ``words`` and ``suffixes``, and an int64 ``count_<j>`` column per array of ``counts``;
    the feature is ``first[ second]suffix`` (``gram_strings``)."""
    first, second, suffix = indices
    absent = second < 0

    def encoded(ids, values, mask=None):
        return pa.DictionaryArray.from_arrays(pa.array(ids, pa.int32(), mask=mask), values)

    return pa.table({"first": encoded(first, words), "second": encoded(np.where(absent, 0, second), words, absent),
                     "suffix": encoded(suffix, suffixes),
                     **{f"count_{j}": np.asarray(c, np.int64) for j, c in enumerate(counts)}})


WORD_LIMIT = int(WORD_MASK)   # strings a packed key can index: their indices stay below WORD_MASK


def pack_keys(suffix, first, second) -> np.ndarray:
    """Features as one uint64 each (the layout of ``kernels.SUFFIX_BITS``): indices of their ``suffix``, ``first``
    word and ``second`` word (−1: none) into one list of strings, each below ``WORD_LIMIT``."""
    return (np.uint64(suffix) << np.uint64(2 * WORD_BITS)) | (np.asarray(first, np.uint64) << np.uint64(WORD_BITS)) \
        | np.asarray(np.asarray(second, np.int64) + 1, np.uint64)


def unpack_keys(keys: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(suffix, first, second or −1) int32 indices of ``pack_keys``' keys."""
    suffix = (keys >> np.uint64(2 * WORD_BITS)).astype(np.int32)
    first = ((keys >> np.uint64(WORD_BITS)) & WORD_MASK).astype(np.int32)
    return suffix, first, (keys & WORD_MASK).astype(np.int32) - 1


def string_hashes(strings: pa.Array) -> np.ndarray:
    """The 64-bit FNV-1a hash of each string's UTF-8 bytes (the tokenizer's hash, ``kernels.fnv``)."""
    data, offsets = string_buffers(strings)
    return fnv(data, offsets[:-1], offsets[1:])


def gram_strings(table: pa.Table) -> pa.Array:
    """The feature strings of a ``FeatureCounts.gram_tables`` table: ``first[ second]suffix``."""
    def dense(name):
        return pc.cast(table[name], pa.string())

    words = pc.binary_join_element_wise(dense("first"), dense("second"), " ", null_handling="skip")
    return pc.binary_join_element_wise(words, dense("suffix"), "").combine_chunks()
