"""Exact counts summed by workers (the audit on Ray, METHODS §1): a hash-partitioned reduce of compact hashed
count arrays, whose result the driver holds without building a string per feature.

A worker counts its share of the rows in a ``FeatureCounts`` and hands its counts on as ``HashedCounts``
(``hashed_partials``): per feature, the 64-bit FNV-1a hashes of its parts (a feature is ``first[ second]suffix``,
the layout of the saved state) and its counts per label, sorted by a key mixed from the three hashes and cut into
``partitions`` key ranges; beside them the strings it hashed (a ``Dictionary``). The p-th ranges of every worker
are summed by one reducer (``sum_partials``), on a worker too. The driver joins the dictionaries (two strings of
one hash: an error, never a wrong count) and the summed ranges into ``MergedCounts``: each feature's parts as
indices into the one dictionary and its counts, strings built only for the features a caller asks for.
"""
from __future__ import annotations

import json
from dataclasses import dataclass

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from refinery.core import stats as zstats
from refinery.core.feature_counts import FeatureCounts, gram_strings, string_hashes

_MIX = (np.uint64(0x9E3779B97F4A7C15), np.uint64(0xC2B2AE3D27D4EB4F), np.uint64(0x165667B19E3779F9))


def feature_keys(suffix: np.ndarray, first: np.ndarray, second: np.ndarray) -> np.ndarray:
    """A 64-bit key per feature mixed from its parts' hashes (order and partition; equal keys of different
    features are told apart by their parts)."""
    with np.errstate(over="ignore"):
        key = first * _MIX[0] ^ (second * _MIX[1] + (second >> np.uint64(29))) ^ suffix * _MIX[2]
        return key ^ (key >> np.uint64(31))


@dataclass
class Dictionary:
    """Strings by their 64-bit hash: ``hashes`` sorted and distinct, ``strings`` in the same order."""

    hashes: np.ndarray
    strings: pa.Array

    @classmethod
    def joined(cls, dictionaries: list["Dictionary"]) -> "Dictionary":
        """Every string of ``dictionaries`` once; two different strings of one hash end it with an error."""
        hashes = np.concatenate([d.hashes for d in dictionaries] or [np.empty(0, np.uint64)])
        strings = pa.concat_arrays([d.strings for d in dictionaries] or [pa.array([], pa.large_string())])
        order = np.argsort(hashes, kind="stable")
        hashes = hashes[order]
        first = np.concatenate([[True], hashes[1:] != hashes[:-1]])
        index = np.cumsum(first) - 1
        strings = strings.take(pa.array(order))
        distinct = strings.filter(pa.array(first))
        clash = pc.not_equal(strings, distinct.take(pa.array(index))).to_numpy(zero_copy_only=False)
        if clash.any() or (len(hashes) and hashes[0] == 0):   # hash 0 stands for "no second word"
            i = int(np.flatnonzero(clash)[0]) if clash.any() else 0
            raise ValueError(f"feature strings {strings[i].as_py()!r} and {distinct[index[i]].as_py()!r} share the "
                             "64-bit hash their counts are merged by; count them with --engine local")
        return cls(hashes[first], distinct)

    def index(self, hashes: np.ndarray) -> np.ndarray:
        """The position of each of ``hashes`` (present) in the dictionary, int32."""
        return np.searchsorted(self.hashes, hashes).astype(np.int32)


@dataclass
class HashedCounts:
    """Features as hashes of their parts, sorted by ``feature_keys``, with int64 counts per label of ``labels``."""

    keys: np.ndarray
    suffix: np.ndarray
    first: np.ndarray
    second: np.ndarray     # 0: a unigram or a row feature
    counts: np.ndarray     # F × len(labels)
    labels: list

    def columns(self, labels: list) -> np.ndarray:
        """The counts in the column order of ``labels`` (zeros for a label this part never saw)."""
        out = np.zeros((len(self.keys), len(labels)), dtype=np.int64)
        for j, label in enumerate(self.labels):
            out[:, labels.index(label)] = self.counts[:, j]
        return out


def hashed_partials(counts: FeatureCounts, partitions: int) -> tuple[Dictionary, list[HashedCounts]]:
    """A counter's counts as ``partitions`` key ranges of ``HashedCounts`` (range p of every counter holds the
    same features), and the dictionary of the strings they hash."""
    labels = sorted(counts.labels)
    strings, parts = counts.hashed(labels)
    hashes = string_hashes(strings)
    order = np.argsort(hashes, kind="stable")
    dictionary = Dictionary.joined([Dictionary(hashes[order], strings.take(pa.array(order)))])
    suffix = np.concatenate([np.full(len(first), s, np.uint64) for s, first, _, _ in parts] or [np.empty(0, np.uint64)])
    first, second = (np.concatenate([p[i] for p in parts] or [np.empty(0, np.uint64)]) for i in (1, 2))
    matrix = np.concatenate([p[3] for p in parts]) if parts else np.zeros((0, len(labels)), np.int64)
    keys = feature_keys(suffix, first, second)
    order = np.argsort(keys)
    keys = keys[order]
    cuts = np.append(np.searchsorted(keys, _range_starts(partitions)), len(keys))
    return dictionary, [HashedCounts(keys[a:b], suffix[order[a:b]], first[order[a:b]], second[order[a:b]],
                                     matrix[order[a:b]], labels) for a, b in zip(cuts[:-1], cuts[1:])]


def _range_starts(partitions: int) -> np.ndarray:
    """The first key of each of ``partitions`` equal key ranges."""
    return np.array([p * (1 << 64) // partitions for p in range(partitions)], dtype=np.uint64)


def sum_partials(parts: list[HashedCounts]) -> HashedCounts:
    """The features of ``parts`` once each, their counts summed."""
    labels = sorted({label for p in parts for label in p.labels})
    keys, suffix, first, second = (np.concatenate([getattr(p, name) for p in parts])
                                   for name in ("keys", "suffix", "first", "second"))
    counts = np.concatenate([p.columns(labels) for p in parts])
    order = np.argsort(keys, kind="stable")   # runs sorted already: merged, not sorted again
    starts = _group_starts(keys[order], suffix[order], first[order], second[order])
    heads = keys[order[starts]]
    if (heads[1:] == heads[:-1]).any():   # two features of one key, perhaps interleaved: order them fully
        order = np.lexsort((second, first, suffix, keys))
        starts = _group_starts(keys[order], suffix[order], first[order], second[order])
    head = order[starts]
    summed = np.add.reduceat(counts[order], starts) if len(starts) else counts[:0]
    return HashedCounts(keys[head], suffix[head], first[head], second[head], summed, labels)


def _group_starts(*columns: np.ndarray) -> np.ndarray:
    """Where a run of equal rows of ``columns`` (sorted) starts."""
    n = len(columns[0])
    new = np.zeros(n, bool)
    if n:
        new[0] = True
        for c in columns:
            new[1:] |= c[1:] != c[:-1]
    return np.flatnonzero(new)


class MergedCounts:
    """Exact counts whose features are (first, second or −1, suffix) indices into one dictionary (the
    ``HashedCounts`` of the reducers joined): the ``ExactCounts`` interface the audit reads, strings built only
    for the features ``matrix`` keeps."""

    mode = "exact"
    spilled_runs = 0   # held in memory: partial states are summed by the reducers, never here

    def __init__(self, dictionary: Dictionary, summed: list[HashedCounts], label_totals: dict):
        self.label_totals = dict(label_totals)
        self._labels = sorted(set(self.label_totals) | {label for p in summed for label in p.labels})
        self.strings = dictionary.strings
        self.first, self.suffix = (np.concatenate([dictionary.index(getattr(p, name)) for p in summed]
                                                  or [np.empty(0, np.int32)]) for name in ("first", "suffix"))
        self.second = np.concatenate([np.where(p.second == 0, -1, dictionary.index(p.second)).astype(np.int32)
                                      for p in summed] or [np.empty(0, np.int32)])
        self.counts_matrix = np.concatenate([p.columns(self._labels) for p in summed]) if summed \
            else np.zeros((0, len(self._labels)), np.int64)

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
        return gram_strings(self._grams(take(self.first), take(self.second), take(self.suffix)))

    def _grams(self, first: np.ndarray, second: np.ndarray, suffix: np.ndarray, **counts) -> pa.Table:
        def encoded(indices, mask=None):
            return pa.DictionaryArray.from_arrays(pa.array(indices, pa.int32(), mask=mask), self.strings)

        absent = second < 0
        return pa.table({"first": encoded(first), "second": encoded(np.where(absent, 0, second), absent),
                         "suffix": encoded(suffix), **counts})

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
        table = self._grams(self.first, self.second, self.suffix, **{
            f"count_{j}": self.counts_matrix[:, j] for j in range(len(self._labels))})
        table = table.replace_schema_metadata({b"refinery": json.dumps(meta).encode()})
        with pa.ipc.new_file(sink, table.schema, options=pa.ipc.IpcWriteOptions(compression="lz4")) as writer:
            writer.write_table(table)

    def to_bytes(self) -> bytes:
        sink = pa.BufferOutputStream()
        self.write_state(sink)
        return sink.getvalue().to_pybytes()
