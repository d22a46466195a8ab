"""z-statistics over feature–label counts (Gardner et al. 2021; METHODS §1).

For feature x in n rows and label l among C labels:
    p̂(l|x) = count(x,l) / n,     z*(x,l) = (p̂(l|x) − p0) / sqrt(p0 (1 − p0) / n),
with p0 = 1/C (uniform) or the label's empirical share (``auto``: uniform when the labels are
balanced, see ``choose_prior``). AUDAC's p*(x) = max_l p̂(l|x). The significance threshold is
Bonferroni-corrected: Φ⁻¹(1 − α/m), m = hypotheses tested. The ``null`` feature (in every row) has
p̂(l|null) = the label's share: it is the label prior, reported apart from the biases.

Weighted rows (a ``weight`` column, ``core.weighted_counts``): count(x, l) and n(x) are sums of weights, so that
p̂_w(l|x) = Σ_{i∈x, l_i=l} w_i / Σ_{i∈x} w_i, and the test's size is Kish's effective size (Kish 1965, §11.7)

    n_eff(x) = (Σ_{i∈x} w_i)² / Σ_{i∈x} w_i²,

since under H0 (labels independent of the weights, each label l with probability p0) the weighted mean has
Var(p̂_w) = p0 (1 − p0) · Σ w_i² / (Σ w_i)² = p0 (1 − p0) / n_eff(x): z*(x, l) = (p̂_w(l|x) − p0) /
sqrt(p0 (1 − p0) / n_eff(x)), and min_count applies to n_eff(x). Weighting cannot make rows more informative:
n_eff ≤ the rows of x, equal where their weights are equal (rows of weight 1: n_eff = n, the unweighted z*).
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from statistics import NormalDist

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from refinery.core.features import NULL_FEATURE, null_row
from refinery.core.prior_drift import prior_drift
from refinery.messages import Refusal

COUNTS_SCHEMA = pa.schema([("feature", pa.string()), ("label", pa.string()), ("count", pa.int64())])
OTHER = "__other__"  # sketch mode: mass of n(x) not attributed to a tracked label
WEIGHT_COLUMN = "weight"   # a weighted corpus's column (``refinery weights``): its rows count as their weight
PRIORS = ("auto", "uniform", "empirical")
BALANCE_RATIO = 1.5  # auto: labels are balanced when every share lies within this factor of 1/C
PRIOR_HELP = ("p0 of z*: uniform (1/C), empirical (each label's share of the rows), or auto: uniform when "
              f"every label's share is within {BALANCE_RATIO:g}x of 1/C, else empirical.")


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
    n_eff: np.ndarray | None = None   # F: Kish's effective size of weighted rows (module docstring); None: n

    @property
    def effective_n(self) -> np.ndarray:
        """The size each feature is tested at: n_eff(x) = (Σw)²/Σw² for weighted rows, else n(x) (rows)."""
        return self.n if self.n_eff is None else self.n_eff

    @property
    def p_hat(self) -> np.ndarray:
        return self.counts / np.maximum(self.n, 1)[:, None]

    @property
    def z(self) -> np.ndarray:
        return z_score(self.p_hat, self.effective_n[:, None], self.p0[None, :])

    @property
    def p_star(self) -> np.ndarray:
        return self.p_hat.max(axis=1)

    def eligible(self, min_count: int | None = None) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """(rows with n ≥ min_count, their p̂, their z*): most features of a large corpus are rarer than
        min_count, so the report's statistics are computed for these rows only. Weighted: n_eff ≥ min_count, p̂ on
        the sums of weights, z* at n_eff (the module's equation)."""
        size = self.effective_n
        rows = np.flatnonzero(size >= (self.min_count if min_count is None else min_count))
        p = self.counts[rows] / np.maximum(self.n[rows], 1)[:, None]
        return rows, p, z_score(p, size[rows][:, None], self.p0[None, :])

    def to_table(self, min_count: int | None = None, weighted: bool = False) -> pa.Table:
        """Long table: feature, label, n, count, p_hat, z (one row per feature and label); with
        ``min_count`` only the features in at least that many rows; ``weighted``: n and count are sums of weights,
        kept as float64 (else counts of rows, int64), and ``n_eff`` (Kish's effective size, what z* and min_count
        take) follows n."""
        rows, p, z = self.eligible(min_count if min_count is not None else -1)
        C, kind = len(self.labels), np.float64 if weighted else np.int64
        label = pa.DictionaryArray.from_arrays(np.tile(np.arange(C, dtype=np.int32), len(rows)),
                                               pa.array(self.labels, pa.string()))
        return pa.table({
            "feature": pc.take(self.features, pa.array(np.repeat(rows, C))),
            "label": label.cast(pa.string()),
            "n": np.repeat(self.n[rows], C).astype(kind),
            **({"n_eff": np.repeat(self.effective_n[rows], C).astype(np.float64)} if weighted else {}),
            "count": self.counts[rows].reshape(-1).astype(kind),
            "p_hat": p.reshape(-1),
            "z": z.reshape(-1),
        })

    def top_k(self, k: int, min_count: int | None = None, with_null: bool = False) -> dict[str, list[dict]]:
        """The k largest z*(x,l) per label among features with n ≥ min_count (ties by feature name,
        so the answer does not depend on the order features were counted in). ``null`` is the label
        prior, not a bias: ranked only ``with_null`` (z-filtering's B_Z, where it keeps Z's label
        shares from drifting; Wu et al. 2022, Table 9), as are the cells over the threshold by the prior's drift
        alone (``core.prior_drift``)."""
        rows, p, z = self.eligible(min_count)
        ranked = np.ones(z.shape, dtype=bool)
        if not with_null:
            ranked = pc.not_equal(self.features.take(pa.array(rows)), NULL_FEATURE).to_numpy(zero_copy_only=False)
            ranked = ranked[:, None] & ~prior_drift(self, p, z)
        out = {}
        for j, label in enumerate(self.labels):
            zj = z[:, j]
            finite = np.flatnonzero(np.isfinite(zj) & ranked[:, j])
            if len(finite) > k:  # the k-th largest z, then every feature at least that large (ties included)
                kth = np.partition(zj[finite], len(finite) - k)[len(finite) - k]
                finite = finite[zj[finite] >= kth]
            names = self.features.take(pa.array(rows[finite])).to_pylist()
            idx = [i for _, _, i in sorted(zip(-zj[finite], names, finite))][:k]
            out[label] = [{"feature": self.features[rows[i]].as_py(), "z": round(float(z[i, j]), 4),
                           "n": int(self.n[rows[i]]), "p": round(float(p[i, j]), 4),
                           **({} if self.n_eff is None else {"n_eff": round(float(self.n_eff[rows[i]]), 2)})}
                          for i in idx]
        return out

    def biased_sets(self, k: int, min_count: int | None = None) -> dict[str, set]:
        """B(l) of z-filtering: the top-k per label, ``null`` included."""
        return {label: {e["feature"] for e in entries}
                for label, entries in self.top_k(k, min_count, with_null=True).items()}

    def significant(self) -> np.ndarray:
        """F×C mask of z*(x,l) above the Bonferroni threshold (n ≥ min_count)."""
        rows, _, z = self.eligible()
        mask = np.zeros(self.counts.shape, dtype=bool)
        mask[rows] = z > self.threshold
        return mask

    def significant_per_label(self) -> dict:
        """Per label, the features over the threshold, ``null`` (the label prior, not a bias) and the cells over it by
        the prior's drift alone (``core.prior_drift``) aside: what the audit and every verdict count."""
        rows, p, z = self.eligible()
        mask = np.zeros(self.counts.shape, dtype=bool)
        mask[rows] = (z > self.threshold) & ~prior_drift(self, p, z)
        null = null_row(self.features)
        if null >= 0:
            mask[null] = False
        return {label: int(v) for label, v in zip(self.labels, mask.sum(axis=0))}


def z_score(p_hat, n, p0):
    """z* = (p̂ − p0) / sqrt(p0 (1 − p0) / n), n the test's size (n_eff for weighted rows)."""
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


def effective_size(sums: np.ndarray, squares: np.ndarray) -> np.ndarray:
    """Kish's (1965) effective size n_eff = (Σw)² / Σw² of rows with weights w, from Σw (``sums``) and Σw²
    (``squares``); 0 where no weight is positive. Rows of weights 0 or 1 have n_eff = Σw, the rows kept."""
    sums = np.asarray(sums, np.float64)
    return np.divide(sums * sums, squares, out=np.zeros(len(sums)), where=np.asarray(squares) > 0)


def matrix_to_long(features: pa.Array, labels: list, matrix: np.ndarray, schema: pa.Schema | None = None) -> pa.Table:
    """The nonzero cells of an F×C count matrix as ``(feature, label, count)`` rows (``long_to_matrix``'s inverse)."""
    row, col = np.nonzero(matrix)
    return pa.table({"feature": pc.take(features, pa.array(row)),
                     "label": pc.take(pa.array(labels, pa.string()), pa.array(col)),
                     "count": pa.array(matrix[row, col], pa.int64())}, schema=schema)


# a prior rule carried from the first audit of a corpus's lineage: its reason speaks of that corpus, not this one
RECORDED = "recorded with the corpus, as decided on the corpus it was refined from"


@dataclass(frozen=True)
class Prior:
    """The p0 rule a z-statistic was computed with, ``uniform`` or ``empirical``, and why; ``carried``: the rule
    was decided on an earlier corpus of the lineage (a stage's input) and recorded with this one's manifest."""

    name: str
    reason: str = "as configured"
    carried: bool = False

    def __str__(self) -> str:
        return f"{self.name} ({RECORDED}: {self.reason})" if self.carried else f"{self.name} ({self.reason})"

    def record(self) -> dict:
        """What a manifest keeps of the rule (``audit_prior``): its name and the reason it was decided."""
        return {"name": self.name, "reason": self.reason}

    @classmethod
    def recorded(cls, record) -> "Prior | None":
        """The rule a manifest's ``audit_prior`` names (None where it names none, or not one of the rules)."""
        if not (isinstance(record, dict) and record.get("name") in ("uniform", "empirical")):
            return None
        return cls(record["name"], str(record.get("reason", ""))[:300], carried=True)


def choose_prior(prior: str, label_totals: dict, carried: Prior | None = None) -> Prior:
    """``uniform`` or ``empirical`` as given; ``auto``: the rule ``carried`` with the corpus where one is (decided
    once, on the first corpus of its lineage audited, so that a stage's output is audited as its input was and a
    filter's kept rows do not flip the rule by moving the label shares across the band), else uniform when every
    label's share s_l of the rows has 1/(1.5·C) ≤ s_l ≤ 1.5/C, else empirical. Under p0 = 1/C an imbalanced
    corpus's commonest words (and ``null``) rank as biases toward its majority label merely for being common."""
    if prior not in PRIORS:
        raise Refusal(f"prior must be one of {', '.join(PRIORS)}, got {prior!r}", code="invalid-setting")
    if prior != "auto":
        return Prior(prior)
    if carried is not None:
        return carried
    total, C = sum(label_totals.values()), len(label_totals)
    if not total:
        return Prior("uniform", "auto: no labelled rows to judge the balance by")
    shares = [c / total for c in label_totals.values()]
    balanced = min(shares) >= 1 / (BALANCE_RATIO * C) and max(shares) <= BALANCE_RATIO / C
    return Prior("uniform" if balanced else "empirical",
                 f"auto: label shares {max(shares):.2f}–{min(shares):.2f} are {'' if balanced else 'not '}"
                 f"within {BALANCE_RATIO:g}× of 1/{C}")


def prior_vector(labels: list, label_totals: dict, prior: str) -> np.ndarray:
    """p0 per label: 1/C, or the label's empirical share (``auto``: as ``choose_prior`` picks)."""
    totals = np.array([label_totals.get(l, 0) for l in labels], dtype=np.float64)
    if choose_prior(prior, dict(zip(labels, totals))).name == "uniform" or not totals.sum():
        return np.full(len(labels), 1.0 / len(labels))
    return totals / totals.sum()


def label_prior(labels: list, label_totals: dict, p0: np.ndarray, size: float | None = None) -> dict:
    """Per label: its share of the rows, p0, and z*(null, l) = (share − p0) / sqrt(p0 (1 − p0) / rows)
    (what the ``null`` feature, present in every row, measures); ``size``: the rows' effective size where they
    carry weights (n_eff, the module's equation; default: the sum of ``label_totals``)."""
    rows = sum(label_totals.get(l, 0) for l in labels)
    share = np.array([label_totals.get(l, 0) for l in labels]) / max(rows, 1)
    z = z_score(share, rows if size is None else size, p0)
    return {l: {"share": round(float(s), 4), "p0": round(float(q), 4), "z": round(float(x), 4)}
            for l, s, q, x in zip(labels, share, p0, z)}


def rows_per_label(labels) -> dict:
    """Rows per label of a label column."""
    vc = pc.value_counts(labels)
    return dict(zip(vc.field("values").to_pylist(), vc.field("counts").to_pylist()))


def add_totals(into: dict, more: dict | None) -> None:
    """Add the rows per label of ``more`` to ``into``."""
    for label, rows in (more or {}).items():
        into[label] = into.get(label, 0) + rows


def row_totals(counts: np.ndarray, columns: list[int] | None = None) -> np.ndarray:
    """n(x) = Σ_y count(x, y) over ``columns`` (default: all) of an F×C count matrix, as int64 (float64 for
    float counts): added a column at a time, ~5× faster than numpy's sum along a narrow second axis."""
    columns = range(counts.shape[1]) if columns is None else columns
    total = np.zeros(len(counts), np.float64 if counts.dtype.kind == "f" else np.int64)
    for j in columns:
        total += counts[:, j]
    return total


def from_matrix(features, labels, matrix, p0, min_count=10, alpha=0.01, n=None, n_eff=None) -> ZStats:
    """ZStats from an F×C count matrix (n defaults to the row sums; ``n_eff``: weighted rows' effective sizes, which
    z*, min_count and the threshold's m take)."""
    n = row_totals(matrix) if n is None else n
    m = int(((n if n_eff is None else n_eff) >= min_count).sum()) * len(labels)
    features = features if isinstance(features, pa.Array) else pa.array(features, pa.string()) \
        if isinstance(features, list) else features.combine_chunks()
    return ZStats(features=features, labels=list(labels), counts=matrix, n=n, p0=p0,
                  threshold=bonferroni_threshold(alpha, m), min_count=min_count, alpha=alpha, n_eff=n_eff)
