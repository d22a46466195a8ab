"""Exact counts summed by workers (the audit on Ray, METHODS §1): a hash-partitioned reduce of compact count
arrays, whose result the driver holds without building a string per feature.

A worker counts its unit of rows in a ``FeatureCounts`` and hands its counts on as ``UnitCounts``
(``unit_partials``): per feature one uint64 of indices into the unit's own strings (``feature_counts.pack_keys``)
and int32 counts per label, cut into ``partitions`` parts by a hash of the feature's strings, so that part p of
every unit holds the same features whatever their indices there. The driver joins each unit's strings into one
``Dictionary`` as the unit ends (by string equality: two features never merge by a hash). Reducer p, on a worker
too, translates part p of every unit into the dictionary's indices and sums its counts in a hash table
(``sum_partials``); ``MergedCounts`` holds the summed parts: each feature's indices into the one dictionary and
its counts, strings built only for the features a caller asks for.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from refinery.core import stats as zstats
from refinery.core.exact_counts import SavedState, write_counts_file
from refinery.core.feature_counts import (WORD_LIMIT, FeatureCounts, gram_strings, grams_table, string_hashes,
                                          unpack_keys)
from refinery.core.kernels import EMPTY_KEY, add_translated, scatter_by_part

MAX_LOAD = 0.5   # of a reducer's table


@dataclass
class UnitCounts:
    """Features as packed keys (``feature_counts.pack_keys``) with counts per label of ``labels``: a unit's part
    (int32 counts, indices into the unit's strings) or a reducer's sum (indices into the ``Dictionary``)."""

    keys: np.ndarray
    counts: np.ndarray     # F × len(labels)
    labels: list


def unit_partials(counts: FeatureCounts, partitions: int) -> tuple[tuple[pa.Array, list], list[UnitCounts]]:
    """A counter's counts cut into ``partitions`` parts (part p of every counter holds the same features), and the
    strings their keys index: (words, suffixes)."""
    words, suffixes, keys, matrix, labels = counts.packed()
    keys, matrix, starts = scatter_by_part(keys, matrix, string_hashes(words),
                                           string_hashes(pa.array(suffixes, pa.string())), partitions)
    return (words, suffixes), [UnitCounts(keys[a:b], matrix[a:b], labels) for a, b in zip(starts[:-1], starts[1:])]


class Dictionary:
    """Every string of the units joined, once each, in the order met: the words features are made of and their
    suffixes. ``add`` gives a unit's indices into it, which only grow."""

    def __init__(self):
        self.words = pa.array([], pa.large_string())
        self.suffixes: list[str] = []

    def add(self, words: pa.Array, suffixes: list[str]) -> tuple[np.ndarray, np.ndarray]:
        """Join a unit's strings; (its words' indices here, its suffixes' indices here), int32."""
        words = words.cast(pa.large_string())
        new = pc.unique(words.filter(pc.invert(pc.is_in(words, value_set=self.words))))
        self.words = pa.concat_arrays([self.words, new])
        if len(self.words) >= WORD_LIMIT:
            raise OverflowError(f"{len(self.words):,} strings in features: packed keys hold fewer than {WORD_LIMIT:,}")
        self.suffixes += [s for s in dict.fromkeys(suffixes) if s not in self.suffixes]
        return (pc.index_in(words, value_set=self.words).to_numpy(zero_copy_only=False).astype(np.int32),
                np.array([self.suffixes.index(s) for s in suffixes], np.int32))


def sum_partials(parts: list[UnitCounts], indices: list[tuple[np.ndarray, np.ndarray]]) -> UnitCounts:
    """The features of ``parts`` once each, their counts summed: part i's keys translated by ``indices[i]`` (its
    unit's ``Dictionary.add``) into the dictionary's, added up in a hash table."""
    labels = sorted({label for p in parts for label in p.labels})
    rows = sum(len(p.keys) for p in parts)
    slots = 1 << max(4, int(np.ceil(rows / MAX_LOAD)).bit_length())
    keys = np.full(slots, EMPTY_KEY, np.uint64)
    counts = np.zeros((slots, len(labels)), np.int64)
    for part, (word_index, suffix_index) in zip(parts, indices):
        columns = np.array([labels.index(label) for label in part.labels], np.int64)
        add_translated(part.keys, part.counts, columns, word_index, suffix_index, keys, counts)
    used = keys != EMPTY_KEY
    counts = counts[used]
    return UnitCounts(keys[used], counts.astype(np.int32) if counts.max(initial=0) <= np.iinfo(np.int32).max
                      else counts, labels)


class MergedCounts(SavedState):
    """Exact counts whose features are (first, second or −1, suffix) indices into one dictionary (the
    ``HashedCounts`` of the reducers joined): the ``ExactCounts`` interface the audit reads, strings built only
    for the features ``matrix`` keeps."""

    mode = "exact"
    spilled_runs = 0   # held in memory: partial states are summed by the reducers, never here

    def __init__(self, dictionary: Dictionary, summed: list[UnitCounts], label_totals: dict):
        self.label_totals = dict(label_totals)
        self._labels = sorted(set(self.label_totals) | {label for p in summed for label in p.labels})
        self.strings, self.suffixes = dictionary.words, pa.array(dictionary.suffixes, pa.large_string())
        self.suffix, self.first, self.second = unpack_keys(np.concatenate([p.keys for p in summed]
                                                                          or [np.empty(0, np.uint64)]))
        self.counts_matrix = np.zeros((len(self.first), len(self._labels)), np.int64)
        at = 0
        for part in summed:
            for j, label in enumerate(part.labels):
                self.counts_matrix[at:at + len(part.keys), self._labels.index(label)] = part.counts[:, j]
            at += len(part.keys)

    @property
    def rows(self) -> int:
        return sum(self.label_totals.values())

    @property
    def num_features(self) -> int:
        return len(self.first)

    def labels(self) -> list:
        return list(self._labels)

    def _strings(self, rows: np.ndarray | None = None) -> pa.Array:
        """The feature strings of ``rows`` (default: all)."""
        take = (lambda a: a) if rows is None else (lambda a: a[rows])
        return gram_strings(grams_table(self.strings, self.suffixes,
                                        (take(self.first), take(self.second), take(self.suffix)), []))

    def matrix(self, labels: list, min_count: int = 0) -> tuple[pa.Array, np.ndarray, np.ndarray]:
        """(features in at least ``min_count`` rows, sorted, their counts in the order of ``labels``, n)."""
        counts = self._columns(labels)
        n = zstats.row_totals(counts)
        rows = np.flatnonzero(n >= min_count)
        features = self._strings(rows)
        order = pc.sort_indices(features).to_numpy()
        return features.take(pa.array(order)), counts[rows[order]], n[rows[order]]

    def _columns(self, labels: list) -> np.ndarray:
        out = np.zeros((self.num_features, len(labels)), dtype=np.int64)
        for j, label in enumerate(labels):
            if label in self._labels:
                out[:, j] = self.counts_matrix[:, self._labels.index(label)]
        return out

    def counts(self) -> pa.Table:
        """Every (feature, label, count), sorted by feature and label."""
        table = zstats.matrix_to_long(self._strings(), self._labels, self.counts_matrix, zstats.COUNTS_SCHEMA)
        return table.sort_by([("feature", "ascending"), ("label", "ascending")])

    def error_bounds(self) -> dict:
        return {"mode": "exact", "count_error": 0}

    def close(self) -> None:
        """Nothing on disk to remove (the interface of ``ExactCounts.close``)."""

    def write_state(self, sink) -> None:
        """The state in ``ExactCounts``' compact ``grams`` layout (read back by ``counts.counter_from_bytes``)."""
        meta = {"mode": "exact", "labels": self._labels, "label_totals": self.label_totals, "layout": "grams"}
        write_counts_file(sink, meta, [grams_table(self.strings, self.suffixes, (self.first, self.second, self.suffix),
                                                   list(self.counts_matrix.T))])
