"""Incremental feature–label counts (``IncrementalCounts``): z-filter's Z, whose z-statistics follow each row added."""
from __future__ import annotations

import numpy as np
import pyarrow as pa

from refinery.core import stats as zstats
from refinery.core.row_kernels import add_cells
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
        self._tested = np.zeros(1024, dtype=bool)   # n ≥ the min_count ``retest`` was last given, per feature
        self._marks = np.full(1024, -1, dtype=np.int32)   # the last ``add``/``subtract`` that listed each feature
        self._calls = 0
        self.tested = 0                              # how many: the features an audit of these counts tests

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
        F, C = self.num_features, len(self.labels)
        if F > self.matrix.shape[0]:  # grown by half: the copy briefly holds both
            grown = np.zeros((max(F, self.matrix.shape[0] * 3 // 2), C), dtype=self.matrix.dtype)
            grown[: self.matrix.shape[0]] = self.matrix
            self.matrix = grown
        self._count_rows(row_label_ids, 1)
        return self._counted(feature_ids, label_ids, 1)

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
        if len(self._marks) < self.matrix.shape[0]:
            self._marks = np.concatenate([self._marks, np.full(self.matrix.shape[0] - len(self._marks), -1, np.int32)])
        self._calls += 1
        return add_cells(self.matrix, np.asarray(feature_ids, np.int64), np.asarray(label_ids, np.int64), step,
                         self._marks, self._calls)

    def retest(self, ids: np.ndarray, min_count: int) -> None:
        """Update ``tested`` for the features ``ids`` whose counts changed (distinct): each is tested where
        n ≥ ``min_count``. O(len(ids)), so that Z's significance threshold follows it batch by batch."""
        if len(self._tested) < self.matrix.shape[0]:
            grown = np.zeros(self.matrix.shape[0], dtype=bool)
            grown[: len(self._tested)] = self._tested
            self._tested = grown
        now = zstats.row_totals(self.matrix[ids]) >= min_count
        self.tested += int(now.sum()) - int(self._tested[ids].sum())
        self._tested[ids] = now

    def freeze(self) -> None:
        """Counting is over: the per-feature working arrays of ``add``, ``subtract`` and ``retest`` are let go (at 49M
        features, 0.4 GB); the counts, the names, ``tested`` and the statistics stay."""
        self._marks, self._tested = np.zeros(0, np.int32), np.zeros(0, bool)

    @property
    def rows(self) -> int:
        return sum(self.label_totals.values())

    def stats(self, prior: str = "uniform", min_count: int = 10, alpha: float = 0.01):
        """z-statistics of the features with n ≥ ``min_count`` (the only ones z* is defined for)."""
        counts = self.matrix[: self.num_features]
        keep = np.flatnonzero(zstats.row_totals(counts) >= min_count)
        return zstats.from_matrix(self.names(keep), self.labels, counts[keep].astype(np.float64),
                                  zstats.prior_vector(self.labels, self.label_totals, prior), min_count, alpha)
