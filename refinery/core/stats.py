"""z-statistics over feature–label counts (Gardner et al. 2021; METHODS §1).

For feature x in n rows and label l among C labels:
    p̂(l|x) = count(x,l) / n,     z*(x,l) = (p̂(l|x) − p0) / sqrt(p0 (1 − p0) / n),
with p0 = 1/C (uniform) or the label's empirical share. AUDAC's p*(x) = max_l p̂(l|x).
The significance threshold is Bonferroni-corrected: Φ⁻¹(1 − α/m), m = hypotheses tested.
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from statistics import NormalDist

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

OTHER = "__other__"  # sketch mode: mass of n(x) not attributed to a tracked label


@dataclass
class ZStats:
    features: pa.Array          # F feature keys
    labels: list                # C label names
    counts: np.ndarray          # F×C counts
    n: np.ndarray               # F
    p0: np.ndarray              # C
    threshold: float
    min_count: int
    alpha: float = 0.01         # the family-wise error rate the threshold is corrected for

    @property
    def p_hat(self) -> np.ndarray:
        return self.counts / np.maximum(self.n, 1)[:, None]

    @property
    def z(self) -> np.ndarray:
        return z_score(self.p_hat, self.n[:, None], self.p0[None, :])

    @property
    def p_star(self) -> np.ndarray:
        return self.p_hat.max(axis=1)

    def eligible(self, min_count: int | None = None) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """(rows with n ≥ min_count, their p̂, their z*): most features of a large corpus are rarer than
        min_count, so the report's statistics are computed for these rows only."""
        rows = np.flatnonzero(self.n >= (self.min_count if min_count is None else min_count))
        n = np.maximum(self.n[rows], 1)[:, None]
        p = self.counts[rows] / n
        return rows, p, z_score(p, n, self.p0[None, :])

    def to_table(self, min_count: int | None = None) -> pa.Table:
        """Long table: feature, label, n, count, p_hat, z (one row per feature and label); with
        ``min_count`` only the features in at least that many rows."""
        rows, p, z = self.eligible(min_count if min_count is not None else -1)
        C = len(self.labels)
        label = pa.DictionaryArray.from_arrays(np.tile(np.arange(C, dtype=np.int32), len(rows)),
                                               pa.array(self.labels, pa.string()))
        return pa.table({
            "feature": pc.take(self.features, pa.array(np.repeat(rows, C))),
            "label": label.cast(pa.string()),
            "n": np.repeat(self.n[rows], C).astype(np.int64),
            "count": self.counts[rows].reshape(-1).astype(np.int64),
            "p_hat": p.reshape(-1),
            "z": z.reshape(-1),
        })

    def top_k(self, k: int, min_count: int | None = None) -> dict[str, list[dict]]:
        """The k largest z*(x,l) per label among features with n ≥ min_count (ties by feature name,
        so the answer does not depend on the order features were counted in)."""
        rows, p, z = self.eligible(min_count)
        out = {}
        for j, label in enumerate(self.labels):
            zj = z[:, j]
            finite = np.flatnonzero(np.isfinite(zj))
            if len(finite) > k:  # the k-th largest z, then every feature at least that large (ties included)
                kth = np.partition(zj[finite], len(finite) - k)[len(finite) - k]
                finite = finite[zj[finite] >= kth]
            names = self.features.take(pa.array(rows[finite])).to_pylist()
            idx = [i for _, _, i in sorted(zip(-zj[finite], names, finite))][:k]
            out[label] = [{"feature": self.features[rows[i]].as_py(), "z": round(float(z[i, j]), 4),
                           "n": int(self.n[rows[i]]), "p": round(float(p[i, j]), 4)} for i in idx]
        return out

    def biased_sets(self, k: int, min_count: int | None = None) -> dict[str, set]:
        return {label: {e["feature"] for e in entries} for label, entries in self.top_k(k, min_count).items()}

    def significant(self) -> np.ndarray:
        """F×C mask of z*(x,l) above the Bonferroni threshold (n ≥ min_count)."""
        rows, _, z = self.eligible()
        mask = np.zeros(self.counts.shape, dtype=bool)
        mask[rows] = z > self.threshold
        return mask


def z_score(p_hat, n, p0):
    return (p_hat - p0) / np.sqrt(p0 * (1 - p0) / np.maximum(n, 1))


def bonferroni_threshold(alpha: float, m: int) -> float:
    """Φ⁻¹(1 − α/m), the one-sided normal quantile for m tests, as −Φ⁻¹(α/m): exact in the far tail,
    where 1 − α/m would round. (The standard library's quantile: scipy.stats costs a second to import.)"""
    p = alpha / max(m, 1)
    return math.inf if p <= 0 else -math.inf if p >= 1 else -NormalDist().inv_cdf(p)


def significance_curve(n: np.ndarray, p0: float, threshold: float) -> np.ndarray:
    """p̂ a feature must exceed at count n to be significant: p0 + z·sqrt(p0(1−p0)/n)."""
    return p0 + threshold * np.sqrt(p0 * (1 - p0) / n)


def compute(counts: pa.Table, label_totals: dict, prior: str = "uniform", min_count: int = 10,
            alpha: float = 0.01, labels: list | None = None) -> ZStats:
    """z-statistics from ``(feature, label, count)`` and the rows per label."""
    labels = sorted(labels or label_totals)
    features, matrix, n = long_to_matrix(counts, labels)
    return from_matrix(features, labels, matrix, prior_vector(labels, label_totals, prior), min_count, alpha, n=n)


def long_to_matrix(counts: pa.Table, labels: list) -> tuple[pa.Array, np.ndarray, np.ndarray]:
    """(F features, F×C counts, n) of a ``(feature, label, count)`` table; n includes the mass of
    labels outside ``labels`` (sketch mode's ``__other__``)."""
    C = len(labels)
    encoded = pc.dictionary_encode(counts["feature"]).combine_chunks() if counts.num_rows else None
    features = encoded.dictionary if encoded is not None else pa.array([], pa.string())
    fi = encoded.indices.to_numpy(zero_copy_only=False) if encoded is not None else np.empty(0, np.int64)
    li = pc.fill_null(pc.index_in(counts["label"], value_set=pa.array(labels, pa.string())), -1)
    li = li.to_numpy(zero_copy_only=False).astype(np.int64)
    c = counts["count"].to_numpy(zero_copy_only=False).astype(np.float64)
    matrix = np.zeros((len(features), C))
    known = li >= 0
    np.add.at(matrix, (fi[known], li[known]), c[known])
    n = np.bincount(fi, weights=c, minlength=len(features))
    return features, matrix, n


def at_least(features: pa.Array, matrix: np.ndarray, n: np.ndarray, min_count: int
             ) -> tuple[pa.Array, np.ndarray, np.ndarray]:
    """The rows of (features, F×C counts, n) with n ≥ ``min_count``."""
    keep = np.flatnonzero(n >= min_count)
    return features.take(pa.array(keep)), matrix[keep], n[keep]


def matrix_to_long(features: pa.Array, labels: list, matrix: np.ndarray, schema: pa.Schema | None = None) -> pa.Table:
    """The nonzero cells of an F×C count matrix as ``(feature, label, count)`` rows (``long_to_matrix``'s inverse)."""
    row, col = np.nonzero(matrix)
    return pa.table({"feature": pc.take(features, pa.array(row)),
                     "label": pc.take(pa.array(labels, pa.string()), pa.array(col)),
                     "count": pa.array(matrix[row, col], pa.int64())}, schema=schema)


def prior_vector(labels: list, label_totals: dict, prior: str) -> np.ndarray:
    """p0 per label: 1/C, or the label's empirical share."""
    if prior not in ("uniform", "empirical"):
        raise ValueError(f"prior must be uniform or empirical, not {prior!r}")
    total = sum(label_totals.get(l, 0) for l in labels)
    if prior == "uniform" or total == 0:
        return np.full(len(labels), 1.0 / len(labels))
    return np.array([label_totals.get(l, 0) / total for l in labels])


def row_totals(counts: np.ndarray, columns: list[int] | None = None) -> np.ndarray:
    """n(x) = Σ_y count(x, y) over ``columns`` (default: all) of an F×C count matrix, as int64 (float64 for
    float counts): added a column at a time, ~5× faster than numpy's sum along a narrow second axis."""
    columns = range(counts.shape[1]) if columns is None else columns
    total = np.zeros(len(counts), np.float64 if counts.dtype.kind == "f" else np.int64)
    for j in columns:
        total += counts[:, j]
    return total


def from_matrix(features, labels, matrix, p0, min_count=10, alpha=0.01, n=None) -> ZStats:
    """ZStats from an F×C count matrix (n defaults to the row sums)."""
    n = row_totals(matrix) if n is None else n
    m = int((n >= min_count).sum()) * len(labels)
    features = features if isinstance(features, pa.Array) else pa.array(features, pa.string()) \
        if isinstance(features, list) else features.combine_chunks()
    return ZStats(features=features, labels=list(labels), counts=matrix, n=n, p0=p0,
                  threshold=bonferroni_threshold(alpha, m), min_count=min_count, alpha=alpha)
