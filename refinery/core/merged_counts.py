"""Exact counts summed by workers (the audit on Ray, METHODS §1): a hash-partitioned reduce of compact count
arrays, whose result the driver holds as the reducers' parts, each with its own strings, building a string only
for the features a caller asks for.

A worker counts its unit of rows in a ``FeatureCounts`` and hands its counts on as ``UnitCounts``
(``unit_partials``): per feature one uint64 of indices into the unit's own strings (``feature_counts.pack_keys``)
and int32 counts per label, cut into ``partitions`` parts by a hash of the feature's strings, so that part p of
every unit holds the same features whatever their indices there. Reducer p, on a worker too, is handed part p and
the strings of every unit; it joins the strings its part's keys index into a dictionary of its own (by string
equality: two features never merge by a hash), translates the part's keys into it and sums their counts in a hash
table (``sum_partials``). ``MergedCounts`` is the view over the reducers' ``SummedPart``s: a feature lives in one
part only, as its part is a function of its strings.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from refinery.core import stats as zstats
from refinery.core.exact_counts import SavedState, write_counts_file
from refinery.core.feature_counts import (WORD_LIMIT, FeatureCounts, gram_strings, grams_table, pack_keys,
                                          string_hashes, unpack_keys)
from refinery.core.kernels import EMPTY_KEY, add_translated, scatter_by_part

MAX_LOAD = 0.5   # of a reducer's table


@dataclass
class UnitCounts:
    """Features as packed keys (``feature_counts.pack_keys``) with counts per label of ``labels``: a unit's part
    (int32 counts, indices into the unit's strings) or a reducer's sum (indices into its own strings)."""

    keys: np.ndarray
    counts: np.ndarray     # F × len(labels)
    labels: list


@dataclass
class SummedPart:
    """A reducer's features, once each: ``summed``'s keys index ``words`` and ``suffixes``."""

    words: pa.Array        # large_string
    suffixes: list[str]
    summed: UnitCounts


def unit_partials(counts: FeatureCounts, partitions: int) -> tuple[tuple[pa.Array, list], list[UnitCounts]]:
    """A counter's counts cut into ``partitions`` parts (part p of every counter holds the same features), and the
    strings their keys index: (words, suffixes)."""
    words, suffixes, keys, matrix, labels = counts.packed()
    keys, matrix, starts = scatter_by_part(keys, matrix, string_hashes(words),
                                           string_hashes(pa.array(suffixes, pa.string())), partitions)
    return (words, suffixes), [UnitCounts(keys[a:b], matrix[a:b], labels) for a, b in zip(starts[:-1], starts[1:])]


def joined_strings(parts: list[UnitCounts], strings: list[tuple[pa.Array, list[str]]]
                   ) -> tuple[pa.Array, list[str], list[tuple[np.ndarray, np.ndarray]]]:
    """The strings that ``parts``' keys index (part i's into ``strings[i]``, its unit's), joined once each by string
    equality in the order met: (words, suffixes, per part the int32 maps from its unit's word and suffix indices to
    the joined ones, defined where its keys use them)."""
    used, taken, suffixes = [], [], {}
    for part, (words, unit_suffixes) in zip(parts, strings):
        suffix, first, second = unpack_keys(part.keys)
        ids = np.unique(np.concatenate([first, second[second >= 0]]))
        used.append((ids, np.unique(suffix)))
        taken.append(words.take(pa.array(ids)).cast(pa.large_string()))
        for s in used[-1][1]:
            suffixes.setdefault(unit_suffixes[s], len(suffixes))
    encoded = pc.dictionary_encode(pa.concat_arrays(taken) if taken else pa.array([], pa.large_string()))
    if len(encoded.dictionary) >= WORD_LIMIT:
        raise OverflowError(f"{len(encoded.dictionary):,} strings in a reducer's features: packed keys hold fewer "
                            f"than {WORD_LIMIT:,}")
    codes, at, maps = encoded.indices.to_numpy(zero_copy_only=False), 0, []
    for (ids, suffix_ids), (words, unit_suffixes) in zip(used, strings):
        word_map, suffix_map = np.zeros(len(words), np.int32), np.zeros(len(unit_suffixes), np.int32)
        word_map[ids] = codes[at:at + len(ids)]
        suffix_map[suffix_ids] = [suffixes[unit_suffixes[s]] for s in suffix_ids]
        maps.append((word_map, suffix_map))
        at += len(ids)
    return encoded.dictionary, list(suffixes), maps


def sum_partials(parts: list[UnitCounts], strings: list[tuple[pa.Array, list[str]]]) -> SummedPart:
    """In reducer p: the features of part p of every unit (``parts``, with ``strings``, each unit's strings) once
    each, their counts summed: the keys translated into the strings joined here (``joined_strings``) and added up in
    a hash table."""
    words, suffixes, maps = joined_strings(parts, strings)
    labels = sorted({label for p in parts for label in p.labels})
    rows = sum(len(p.keys) for p in parts)
    slots = 1 << max(4, int(np.ceil(rows / MAX_LOAD)).bit_length())
    keys = np.full(slots, EMPTY_KEY, np.uint64)
    counts = np.zeros((slots, len(labels)), np.int64)
    for part, (word_map, suffix_map) in zip(parts, maps):
        columns = np.array([labels.index(label) for label in part.labels], np.int64)
        add_translated(part.keys, part.counts, columns, word_map, suffix_map, keys, counts)
    used = keys != EMPTY_KEY
    counts = counts[used]
    return SummedPart(words, suffixes, UnitCounts(keys[used], counts.astype(np.int32) if counts.max(initial=0)
                                                  <= np.iinfo(np.int32).max else counts, labels))


def counted_part(counts: pa.Table) -> SummedPart:
    """A long ``(feature, label, count)`` table as a part whose features are each one word with no suffix (the
    hypothesis-only probe's ``hypo-only-pred=<label>``), their counts summed."""
    features = pc.dictionary_encode(counts["feature"].combine_chunks().cast(pa.large_string()))
    labels = sorted(set(counts["label"].to_pylist()))
    matrix = np.zeros((len(features.dictionary), len(labels)), np.int64)
    np.add.at(matrix, (features.indices.to_numpy(), [labels.index(l) for l in counts["label"].to_pylist()]),
              counts["count"].to_numpy())
    first = np.arange(len(features.dictionary))
    return SummedPart(features.dictionary, [""], UnitCounts(pack_keys(0, first, np.full(len(first), -1)), matrix,
                                                            labels))


class MergedCounts(SavedState):
    """Exact counts as the reducers' parts (``SummedPart``: a feature in one part only): the ``ExactCounts``
    interface the audit reads, strings built only for the features ``matrix`` keeps."""

    mode = "exact"
    spilled_runs = 0   # held in memory: partial states are summed by the reducers, never here

    def __init__(self, parts: list[SummedPart], label_totals: dict):
        self.label_totals = dict(label_totals)
        self.parts = list(parts)
        self._labels = sorted(set(self.label_totals) | {label for p in parts for label in p.summed.labels})

    @property
    def rows(self) -> int:
        return sum(self.label_totals.values())

    @property
    def num_features(self) -> int:
        return sum(len(p.summed.keys) for p in self.parts)

    def labels(self) -> list:
        return list(self._labels)

    def add_counts(self, counts: pa.Table) -> None:
        """Add the long counts of features no part holds, as a part of their own: the hypothesis-only probe's
        predictions (``counters.probe_counts``), which no ``FeatureCounts`` family makes."""
        part = counted_part(counts)
        self.parts.append(part)
        self._labels = sorted(set(self._labels) | set(part.summed.labels))

    @staticmethod
    def _strings(part: SummedPart, rows: np.ndarray | None = None) -> pa.Array:
        """The feature strings of ``part``'s ``rows`` (default: all)."""
        suffix, first, second = unpack_keys(part.summed.keys if rows is None else part.summed.keys[rows])
        return gram_strings(grams_table(part.words, pa.array(part.suffixes, pa.large_string()),
                                        (first, second, suffix), []))

    @staticmethod
    def _columns(part: SummedPart, labels: list) -> np.ndarray:
        """``part``'s counts in the order of ``labels`` (0 for a label it never met), int64."""
        out = np.zeros((len(part.summed.keys), len(labels)), dtype=np.int64)
        for j, label in enumerate(part.summed.labels):
            if label in labels:
                out[:, labels.index(label)] = part.summed.counts[:, j]
        return out

    def matrix(self, labels: list, min_count: int = 0) -> tuple[pa.Array, np.ndarray, np.ndarray]:
        """(features in at least ``min_count`` rows, sorted, their counts in the order of ``labels``, n)."""
        features, counts = [pa.array([], pa.string())], [np.zeros((0, len(labels)), np.int64)]
        for part in self.parts:
            columns = self._columns(part, labels)
            rows = np.flatnonzero(zstats.row_totals(columns) >= min_count)
            features.append(self._strings(part, rows))
            counts.append(columns[rows])
        features, counts = pa.concat_arrays(features), np.concatenate(counts)
        order = pc.sort_indices(features).to_numpy()
        counts = counts[order]
        return features.take(pa.array(order)), counts, zstats.row_totals(counts)

    def counts(self) -> pa.Table:
        """Every (feature, label, count), sorted by feature and label."""
        tables = [zstats.matrix_to_long(self._strings(p), self._labels, self._columns(p, self._labels),
                                        zstats.COUNTS_SCHEMA) for p in self.parts]
        table = pa.concat_tables(tables) if tables else pa.Table.from_batches([], zstats.COUNTS_SCHEMA)
        return table.sort_by([("feature", "ascending"), ("label", "ascending")])

    def error_bounds(self) -> dict:
        return {"mode": "exact", "count_error": 0}

    def close(self) -> None:
        """Nothing on disk to remove (the interface of ``ExactCounts.close``)."""

    def write_state(self, sink) -> None:
        """The state in ``ExactCounts``' compact ``grams`` layout (read back by ``counts.counter_from_bytes``): a
        table per part, their dictionaries unified (an Arrow IPC file holds one dictionary per column)."""
        meta = {"mode": "exact", "labels": self._labels, "label_totals": self.label_totals, "layout": "grams"}
        parts = self.parts or [SummedPart(pa.array([], pa.large_string()), [],
                                          UnitCounts(np.empty(0, np.uint64), np.zeros((0, 0)), []))]
        tables = []
        for part in parts:
            suffix, first, second = unpack_keys(part.summed.keys)
            tables.append(grams_table(part.words, pa.array(part.suffixes, pa.large_string()), (first, second, suffix),
                                      list(self._columns(part, self._labels).T)))
        write_counts_file(sink, meta, [pa.concat_tables(tables).unify_dictionaries()])
