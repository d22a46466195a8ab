"""The audit's counter of a weighted corpus (``WeightedAuditCounts``): ``refinery audit`` of rows that carry a
``weight`` column, counted by a ``weighted_counts.WeightedCounts`` and answering as the audit's exact counter does.

count(x, l) = Σ_{rows of x with label l} w and n(x) = Σ_{rows of x} w give p̂_w(l|x); Σ w² is kept beside them, so
that z* and min_count take Kish's effective size (Kish 1965; ``core.stats``)

    n_eff(x) = (Σ_{rows of x} w)² / Σ_{rows of x} w²,     Var(p̂_w) = p0 (1 − p0) / n_eff(x) under H0.

Counts made elsewhere (the audit's Ray workers, the hypothesis-only probe) merge as long tables
``(feature, label, count = Σ w, square = Σ w²)``: sums, so parts of units add up to the counts of one pass.
"""
from __future__ import annotations

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from refinery.core import stats as zstats
from refinery.core.audit_config import UNWEIGHTED
from refinery.core.exact_counts import write_counts_file
from refinery.core.feature_counts import string_hashes
from refinery.core.features import FeatureConfig
from refinery.core.weighted_counts import WeightedCounts, effective_of
from refinery.messages import Refusal

WEIGHT_COLUMN = zstats.WEIGHT_COLUMN
WEIGHTED_COUNTS_SCHEMA = pa.schema([("feature", pa.string()), ("label", pa.string()), ("count", pa.float64()),
                                    ("square", pa.float64())])


class BadWeights(Refusal):
    """A ``weight`` column the weighted audit cannot count (missing, negative, not finite, not numbers)."""

    code = "bad-weights"


def row_weights(table: pa.Table) -> np.ndarray:
    """The ``weight`` column of a batch as float64; ``BadWeights`` where one is missing, negative or not finite."""
    column = table[WEIGHT_COLUMN]
    if not (pa.types.is_floating(column.type) or pa.types.is_integer(column.type)):
        raise BadWeights(f"column {WEIGHT_COLUMN!r} holds {column.type}, not numbers: give every row a number ≥ 0, "
                         "or count rows with ", UNWEIGHTED)
    w = column.to_numpy(zero_copy_only=False).astype(np.float64)   # nulls become NaN
    bad = np.flatnonzero(~(np.isfinite(w) & (w >= 0)))
    if len(bad):
        raise BadWeights(f"column {WEIGHT_COLUMN!r}: {len(bad):,} row(s) with a missing, negative or infinite weight "
                         f"(the first at row {bad[0]:,} of its batch: {column[int(bad[0])].as_py()!r}): give every "
                         "row a number ≥ 0, or count rows with ", UNWEIGHTED)
    return w


def _long(features: pa.Array, labels: list, sums: np.ndarray, squares: np.ndarray) -> pa.Table:
    """The nonzero cells of F×C ``sums`` (Σ w) with their ``squares`` (Σ w²), as long rows."""
    row, col = np.nonzero(sums)
    return pa.table({"feature": features.take(pa.array(row)),
                     "label": pa.array(labels, pa.string()).take(pa.array(col)),
                     "count": sums[row, col], "square": squares[row, col]}, schema=WEIGHTED_COUNTS_SCHEMA)


class WeightedAuditCounts:
    """The audit's counter of rows that carry a ``weight`` (``refinery audit`` of a weighted corpus): count(x, l) =
    Σ w over the rows of x with label l, n(x) = Σ w and n_eff(x) = (Σ w)²/Σ w² (the module's equation), answering as
    the audit's exact counter does (``matrix``, ``label_totals`` = Σ w per label, ``num_features``, ``counts``,
    ``write_state``) and, apart, ``label_rows`` (rows per label).

    Batches are counted by a ``WeightedCounts`` (``add_table``): the audit's tokenizer, fields and families, a batch
    at a time, its memory the features' (12 + 16·C bytes a slot). ``view`` reads one weighting of a ``WeightedCounts``
    counted elsewhere (the ``weights`` stage's pass over its output: its verdict's two sides are audits of this
    counter). Counts of units counted elsewhere (the audit's Ray workers) merge in as long ``(feature, label,
    count, square)`` tables of float sums (``add_counts``)."""

    mode = "exact"
    spilled_runs = 0

    def __init__(self, counts: WeightedCounts | None = None, weighting: int = 0, label_rows: dict | None = None,
                 rows: tuple | None = None):
        self.batches, self.weighting = counts, weighting
        self._rows = rows   # (rows of ``counts.matrix``, their names): the features read (None: those tested here)
        self.merged: list[pa.Table] = []
        self._merged_totals: dict = {}
        self._label_rows: dict = dict(label_rows or {})
        self._matrix = None

    @classmethod
    def view(cls, counts: WeightedCounts, weighting: int, label_rows: dict, rows: tuple | None = None
             ) -> "WeightedAuditCounts":
        """Weighting ``weighting`` of ``counts`` (whose rows per label are ``label_rows``) as the audit's counter;
        ``rows``: (rows of ``counts.matrix``, their names) to read, a superset of those tested under ``weighting``
        (the features another weighting tests too: z* of the others is not computed, ``stats.from_matrix``)."""
        return cls(counts, weighting, label_rows, rows)

    @property
    def label_totals(self) -> dict:
        """Σ w per label (labels sorted)."""
        totals = dict(self.batches.label_totals(self.weighting)) if self.batches is not None else {}
        zstats.add_totals(totals, self._merged_totals)
        return dict(sorted(totals.items()))

    @property
    def label_rows(self) -> dict:
        """Rows per label."""
        return dict(sorted(self._label_rows.items()))

    @property
    def rows(self) -> int:
        return int(sum(self._label_rows.values()))

    def add_table(self, table: pa.Table, features: FeatureConfig) -> None:
        """Count one canonical batch, weighted by its ``weight`` column."""
        if self.batches is None:
            self.batches = WeightedCounts(None, features, 1)
        elif self.batches.config != features:
            raise RuntimeError("WeightedAuditCounts.add_table: every batch must be counted with the same features")
        self.batches.add(table, row_weights(table))
        zstats.add_totals(self._label_rows, zstats.rows_per_label(table["label"]))
        self._matrix = None

    def add_counts(self, counts: pa.Table, label_totals: dict | None = None, label_rows: dict | None = None) -> None:
        """Merge in long ``(feature, label, count, square)`` sums of weights and of their squares (``label_totals``:
        their Σ w per label)."""
        self.merged.append(counts.select(WEIGHTED_COUNTS_SCHEMA.names).cast(WEIGHTED_COUNTS_SCHEMA))
        zstats.add_totals(self._merged_totals, label_totals)
        zstats.add_totals(self._label_rows, label_rows)
        self._matrix = None

    def merge(self, other: "WeightedAuditCounts") -> "WeightedAuditCounts":
        self.add_counts(other.counts(), other.label_totals, other.label_rows)
        return self

    def matrix(self, labels: list, min_count: int = 0
               ) -> tuple[pa.Array, np.ndarray, np.ndarray, np.ndarray | None]:
        """(features with n_eff ≥ ``min_count``, F×C sums of weights in the order of ``labels``, n = their row sums,
        n_eff = (Σ w)²/Σ w² (None where it is n: weights 0 or 1, ``weighted_counts.effective_of``))."""
        key = (list(labels), min_count)
        if self._matrix is None or self._matrix[0] != key:
            if not self.merged and self.batches is not None and list(labels) == sorted(self.batches.labels):
                rows, names = self._rows or (self.batches.tested([self.weighting], min_count), None)
                features, matrix = self.batches.matrix(self.weighting, rows, names)   # names only for those kept
                n = zstats.row_totals(matrix)
                n_eff = self.batches.effective(self.weighting, n, rows)
            else:
                table = self.counts()
                features, matrix, n = zstats.long_to_matrix(table, labels)
                squares = zstats.long_to_matrix(table.drop_columns(["count"]).rename_columns(
                    ["feature", "label", "count"]), labels)[2]
                n_eff = effective_of(n, squares)
                keep = np.flatnonzero((n if n_eff is None else n_eff) >= min_count)
                features, matrix, n = features.take(pa.array(keep)), matrix[keep], n[keep]
                n_eff = None if n_eff is None else n_eff[keep]
            self._matrix = key, (features, matrix, n, n_eff)
        return self._matrix[1]

    @property
    def num_features(self) -> int:
        """Distinct features counted."""
        if not self.merged:
            return int(sum(len(part[2]) for part in self.batches._counted())) if self.batches is not None else 0
        return len(pc.unique(self.counts()["feature"]))

    def counts(self) -> pa.Table:
        """Every nonzero ``(feature, label, Σ w, Σ w²)``, sorted by feature and label; merged parts summed in their
        order."""
        parts = list(self.merged)
        if self.batches is not None and self.batches.rows:
            labels = sorted(self.batches.labels)
            features, sums = self.batches.matrix(self.weighting)
            parts.insert(0, _long(features, labels, sums, self.batches.matrix(self.weighting, names=features,
                                                                              squares=True)[1]))
        if not parts:
            return WEIGHTED_COUNTS_SCHEMA.empty_table()
        table = pa.concat_tables(parts)
        if len(parts) > 1:
            labels = sorted(set(pc.unique(table["label"]).to_pylist()))
            features, sums, _ = zstats.long_to_matrix(table, labels)
            squares = zstats.long_to_matrix(table.drop_columns(["count"]).rename_columns(
                ["feature", "label", "count"]), labels)[1]
            table = _long(features, labels, sums, squares)
        return table.sort_by([("feature", "ascending"), ("label", "ascending")])

    def parts(self, partitions: int) -> list[pa.Table]:
        """``counts()`` cut into ``partitions`` tables by a hash of the feature string (part p of every counter holds
        the same features: each is summed by one reducer, ``summed_part``)."""
        table = self.counts()
        part = (string_hashes(table["feature"].combine_chunks()) % np.uint64(partitions)).astype(np.int64)
        return [table.filter(pa.array(part == p)) for p in range(partitions)]

    def error_bounds(self) -> dict:
        return {"mode": "exact", "count_error": 0}

    def write_state(self, sink) -> None:
        """The counts (``counts``: sums of weights and of their squares) as an Arrow IPC file, the totals in its
        metadata."""
        write_counts_file(sink, {"weighted": True, "label_totals": self.label_totals, "label_rows": self.label_rows},
                          [self.counts()], WEIGHTED_COUNTS_SCHEMA.empty_table())

    def close(self) -> None:
        """Nothing spilled: nothing to remove."""


def summed_part(parts: list[pa.Table], common: list | None = None) -> pa.Table:
    """In a reducer: part p of every unit (``WeightedAuditCounts.parts``), each feature's sums added up in the order
    of the units (``common``, the units' ``None``, unread)."""
    counter = WeightedAuditCounts()
    for part in parts:
        counter.add_counts(part)
    return counter.counts()
