"""Weighted feature–label counts by feature name (``NamedCounts``): the counts of rows counted apart — a filter's
units on Ray workers, each its own ``WeightedCounts`` — summed into those of one pass over all of them.

A unit's counts are named (``NamedCounts.of``: every feature it holds, with its n of every label under every
weighting), so that units whose vocabularies gave the same feature other ids add up by the feature itself:

    count_w(x, l) = Σ_units count_w,unit(x, l),      total_w(l) = Σ_units total_w,unit(l).

``NamedSum`` adds units as they come, the pending ones compacted by a group-by once they outgrow the sum, so the
memory held follows the distinct features, not the rows or the units. The result reads as a ``WeightedCounts``
reads for ``weighted_counts.audit_weightings`` (``label_totals``, ``tested``, ``names``, ``stats``): a filter's
verdict on Ray is the same two audits as in-process.

On Ray the sum is cut by feature (``parts``: a hash of each feature's string, so part p of every unit holds the
same features) and each part summed by a reducer on a worker (``summed_part``), which hands on only the features
some weighting can test (n ≥ min_count, ``pruned``: the audit's z* and min_count read no other); ``joined`` puts the
reducers' disjoint sums together. The driver never holds a unit's counts, nor a feature too rare to be tested.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from refinery.core import stats as zstats
from refinery.core.feature_counts import string_hashes
from refinery.core.features import FeatureConfig

FEATURE = "feature"
_SEPARATOR = "\x1f"   # between a label and its weighting in a sum's column name


@dataclass
class NamedCounts:
    """``sums[f, l, w]``: Σ weights of weighting w over the rows of label ``labels[l]`` holding feature
    ``features[f]``; ``totals[l, w]``: Σ weights of label l; ``rows`` counted; the features' ``config`` and the
    families it could not count (``left_out``)."""

    features: pa.Array
    labels: list
    sums: np.ndarray
    totals: np.ndarray
    rows: int
    config: FeatureConfig
    left_out: tuple = ()

    @classmethod
    def of(cls, counts) -> "NamedCounts":
        """Every feature of a ``WeightedCounts`` with its sums under each of its weightings (labels sorted)."""
        weightings = range(counts.weightings)
        matrices = [counts.matrix(w) for w in weightings]
        names = matrices[0][0] if matrices else pa.array([], pa.string())
        sums = np.stack([m for _, m in matrices], axis=-1) if matrices else np.zeros((0, 0, 0))
        totals = np.array([list(counts.label_totals(w).values()) for w in weightings]).T.reshape(-1, len(weightings))
        return cls(names, sorted(counts.labels), sums, totals, counts.rows, counts.config, tuple(counts.left_out))

    def parts(self, partitions: int) -> list["NamedCounts"]:
        """The counts cut into ``partitions`` by a hash of each feature's string (``feature_counts.string_hashes``:
        part p of every unit holds the same features), each with the unit's totals and rows."""
        part = (string_hashes(self.features) % np.uint64(partitions)).astype(np.int64)
        return [self._rows_at(np.flatnonzero(part == p)) for p in range(partitions)]

    def pruned(self, min_count: int) -> "NamedCounts":
        """Only the features some weighting can test (n ≥ ``min_count``): all the audit's z* and min_count read."""
        return self._rows_at(self.tested(range(self.sums.shape[2]), min_count))

    def _rows_at(self, rows: np.ndarray) -> "NamedCounts":
        return NamedCounts(self.features.take(pa.array(rows, pa.int64())), self.labels, self.sums[rows], self.totals,
                           self.rows, self.config, self.left_out)

    @classmethod
    def joined(cls, parts: list["NamedCounts"]) -> "NamedCounts":
        """Sums of disjoint features (``summed_part`` of each part), each carrying every unit's totals, as one, its
        features in name order."""
        first = parts[0]
        features = pa.concat_arrays([p.features.cast(pa.large_string()) for p in parts])
        order = pc.sort_indices(features).to_numpy()
        sums = np.concatenate([p.sums for p in parts])[order]
        return cls(features.take(pa.array(order)).cast(pa.string()), first.labels, sums, first.totals, first.rows,
                   first.config, first.left_out)

    def _table(self) -> pa.Table:
        S = self.sums.shape[2]
        columns = {FEATURE: self.features}
        for l, label in enumerate(self.labels):
            for w in range(S):
                columns[f"{label}{_SEPARATOR}{w}"] = pa.array(self.sums[:, l, w])
        return pa.table(columns)

    def label_totals(self, weighting: int = 0) -> dict:
        """Σ w per label under ``weighting`` (labels sorted)."""
        return {label: float(self.totals[l, weighting]) for l, label in enumerate(self.labels)}

    def tested(self, weightings, min_count: int = 10) -> np.ndarray:
        """Features in at least ``min_count`` (weighted) rows under one of ``weightings`` (``WeightedCounts.tested``)."""
        n = self.sums.sum(axis=1)
        return np.flatnonzero(np.logical_or.reduce([n[:, w] >= min_count for w in weightings]))

    def names(self, rows: np.ndarray | None = None) -> pa.Array:
        return self.features if rows is None else self.features.take(pa.array(rows, pa.int64()))

    def stats(self, weighting: int, p0: np.ndarray, min_count: int = 10, alpha: float = 0.01,
              rows: np.ndarray | None = None, names: pa.Array | None = None) -> zstats.ZStats:
        """z-statistics of ``weighting`` on its weighted n and counts (``WeightedCounts.stats``)."""
        matrix = self.sums[:, :, weighting] if rows is None else self.sums[rows, :, weighting]
        return zstats.from_matrix(self.names(rows) if names is None else names, self.labels,
                                  np.ascontiguousarray(matrix, np.float64), np.asarray(p0, np.float64), min_count,
                                  alpha)


class NamedSum:
    """The sum of ``NamedCounts`` added one at a time (``add``), as one ``NamedCounts`` (``result``), its features in
    name order whatever order the units came in."""

    def __init__(self):
        self._sum: pa.Table | None = None
        self._pending: list[pa.Table] = []
        self._pending_rows = 0
        self._totals: dict[str, np.ndarray] = {}
        self._first: NamedCounts | None = None
        self.rows = 0

    def add(self, counts: NamedCounts) -> None:
        self._first = self._first or counts
        for l, label in enumerate(counts.labels):
            self._totals[label] = self._totals.get(label, 0) + counts.totals[l]
        self.rows += counts.rows
        self._pending.append(counts._table())
        self._pending_rows += len(counts.features)
        if self._pending_rows > max(self._sum.num_rows if self._sum is not None else 0, 1 << 20):
            self._compact()

    def _compact(self) -> None:
        tables = ([self._sum] if self._sum is not None else []) + self._pending
        self._pending, self._pending_rows = [], 0
        if not tables:
            return
        together = pa.concat_tables(tables, promote_options="permissive")
        sums = [c for c in together.column_names if c != FEATURE]
        grouped = together.group_by(FEATURE).aggregate([(c, "sum") for c in sums])
        self._sum = grouped.rename_columns([c.removesuffix("_sum") for c in grouped.column_names])

    def result(self) -> NamedCounts | None:
        """The summed counts (None where nothing was added)."""
        if self._first is None:
            return None
        self._compact()
        table = self._sum.sort_by(FEATURE)
        labels = sorted(self._totals)
        S = self._first.sums.shape[2]
        sums = np.zeros((table.num_rows, len(labels), S))
        for l, label in enumerate(labels):
            for w in range(S):
                name = f"{label}{_SEPARATOR}{w}"
                if name in table.column_names:
                    sums[:, l, w] = pc.fill_null(table[name], 0).to_numpy()
        totals = np.stack([self._totals[label] for label in labels]) if labels else np.zeros((0, S))
        return NamedCounts(table[FEATURE].combine_chunks(), labels, sums, totals, self.rows, self._first.config,
                           self._first.left_out)


def summed_part(parts: list[NamedCounts], common: list | None = None, *, min_count: int = 10) -> NamedCounts | None:
    """In a reducer: part p of every unit (``NamedCounts.parts``) summed, only the features some weighting can test
    kept (``pruned``; ``common``, the units' ``None``, unread). None where no unit was counted."""
    total = NamedSum()
    for part in parts:
        total.add(part)
    result = total.result()
    return result.pruned(min_count) if result is not None else None
