"""Incremental feature–label counts (``IncrementalCounts``): z-filter's Z, whose z-statistics follow each row added."""
from __future__ import annotations

import numpy as np
import pyarrow as pa

from refinery.core import stats as zstats
from refinery.core.row_kernels import add_cells, add_row_cells, add_rows_missing, add_rows_passing
from refinery.core.vocabulary import TokenIds


class IncrementalCounts:
    """Feature × label counts that grow row by row (z-filter's Z): a feature index and an F×C matrix.

    Adding accepted rows is O(their features); z-statistics are recomputed from the matrix
    without recounting Z (Wu et al. 2022, Algorithm 1, incremental). ``vocabulary`` shares
    another counter's feature index, so ids mean the same features in both. The index is the
    compiled interning table of the audit (about 60 bytes a feature, against 200 for a Python
    dict and list) and counts are int32: tens of millions of features fit in a few GB.
    """

    def __init__(self, labels: list, vocabulary: "IncrementalCounts | None" = None):
        self.labels = list(labels)
        self.label_index = {l: j for j, l in enumerate(self.labels)}
        self.vocabulary = vocabulary.vocabulary if vocabulary else TokenIds()
        self.matrix = np.zeros((1024, len(self.labels)), dtype=np.int32)
        self.label_totals = {l: 0 for l in self.labels}
        self._marks = np.full(1024, -1, dtype=np.int32)   # the last ``add``/``subtract`` that listed each feature
        self._calls = 0
        self.tested = 0              # the features an audit of these counts tests (n ≥ min_count: ``add_all_rows``)

    @property
    def num_features(self) -> int:
        return len(self.vocabulary)

    def ids(self, features: pa.Array) -> np.ndarray:
        """Feature ids of an Arrow string array, registering unseen features."""
        return self.vocabulary.ids(features)

    def names(self, ids) -> pa.Array:
        """The feature strings of ``ids``."""
        ids = np.asarray(ids, dtype=np.int64)
        return self.vocabulary.grams(ids, np.full(len(ids), -1, dtype=np.int64), "")

    def add(self, feature_ids, label_ids, row_label_ids=None) -> np.ndarray:
        """Count pairs (feature id, label id); ``row_label_ids`` are the label ids of the rows added. Returns the
        distinct feature ids counted, in the order of their first pair."""
        self._grow()
        self._count_rows(row_label_ids, 1)
        return self._counted(feature_ids, label_ids, 1)

    def add_rows(self, feature_ids: np.ndarray, offsets: np.ndarray, row_label_ids: np.ndarray,
                 keep: np.ndarray | None = None) -> np.ndarray:
        """Count the rows ``keep`` selects (default: all): row r's features are ``feature_ids[offsets[r]:offsets[r +
        1]]``, its label ``row_label_ids[r]``. Returns the distinct feature ids counted, as ``add``."""
        keep = np.ones(len(row_label_ids), dtype=bool) if keep is None else keep
        self._grow()
        self._count_rows(row_label_ids[keep], 1)
        self._calls += 1
        return add_row_cells(self.matrix, feature_ids, offsets, row_label_ids, keep, self._marks, self._calls)

    def add_rows_missing(self, feature_ids: np.ndarray, offsets: np.ndarray, row_label_ids: np.ndarray,
                         flagged: np.ndarray, cells: np.ndarray) -> tuple:
        """Count the rows (as ``add_rows``) that hit none of ``cells`` (sorted ``feature · C + label``; ``flagged``
        per feature: in some cell): Algorithm 1's batch (``row_kernels.add_rows_missing``). Returns (keep, hit rows,
        hit features, the distinct features counted, the kept rows' features)."""
        self._grow()
        self._calls += 1
        decided = add_rows_missing(self.matrix, feature_ids, offsets, row_label_ids, flagged, cells, self._marks,
                                   self._calls)
        self._count_rows(row_label_ids[decided[0]], 1)
        return decided

    def _grow(self) -> None:
        """Room for every feature of the vocabulary, in the counts and ``_marks`` (grown by half: the copy briefly
        holds both)."""
        F, C = self.num_features, len(self.labels)
        if F > self.matrix.shape[0]:
            grown = np.zeros((max(F, self.matrix.shape[0] * 3 // 2), C), dtype=self.matrix.dtype)
            grown[: self.matrix.shape[0]] = self.matrix
            self.matrix = grown
        if len(self._marks) < self.matrix.shape[0]:
            self._marks = np.concatenate([self._marks, np.full(self.matrix.shape[0] - len(self._marks), -1, np.int32)])

    def subtract(self, feature_ids, label_ids, row_label_ids) -> np.ndarray:
        """Take back rows counted by ``add`` (their pairs, and ``row_label_ids`` one per row); the distinct feature
        ids."""
        self._count_rows(row_label_ids, -1)
        return self._counted(feature_ids, label_ids, -1)

    def _count_rows(self, row_label_ids, step: int) -> None:
        if row_label_ids is None or not len(row_label_ids):
            return
        rows = np.bincount(np.asarray(row_label_ids, np.int64), minlength=len(self.labels))
        for label, n in zip(self.labels, rows.tolist()):
            self.label_totals[label] += step * n

    def _counted(self, feature_ids, label_ids, step: int) -> np.ndarray:
        self._calls += 1
        return add_cells(self.matrix, np.asarray(feature_ids, np.int64), np.asarray(label_ids, np.int64), step,
                         self._marks, self._calls)

    def add_all_rows(self, feature_ids: np.ndarray, offsets: np.ndarray, row_label_ids: np.ndarray,
                     min_count: int) -> np.ndarray:
        """Count every row (as ``add_rows``) of counts that only grow (no ``subtract``: the input's, streamed), and
        ``tested``, the features with n ≥ ``min_count``, with them; returns ``tested`` after each row (Z's
        significance threshold follows it batch by batch). One pass over the pairs; the distinct features are not
        listed."""
        self._grow()
        self._count_rows(row_label_ids, 1)
        reached = np.empty(len(row_label_ids), np.int64)
        add_rows_passing(self.matrix, feature_ids, offsets, row_label_ids, min_count, reached)
        reached += self.tested
        self.tested = int(reached[-1]) if len(reached) else self.tested
        return reached

    def freeze(self) -> None:
        """Counting is over: the per-feature working array of ``add`` and ``subtract`` is let go (at 49M features,
        0.2 GB); the counts, the names, ``tested`` and the statistics stay."""
        self._marks = np.zeros(0, np.int32)

    @property
    def rows(self) -> int:
        return sum(self.label_totals.values())

    def stats(self, prior: str = "uniform", min_count: int = 10, alpha: float = 0.01):
        """z-statistics of the features with n ≥ ``min_count`` (the only ones z* is defined for)."""
        counts = self.matrix[: self.num_features]
        keep = np.flatnonzero(zstats.row_totals(counts) >= min_count)
        return zstats.from_matrix(self.names(keep), self.labels, counts[keep].astype(np.float64),
                                  zstats.prior_vector(self.labels, self.label_totals, prior), min_count, alpha)
