"""B_Z(l), the biased set of Algorithm 1 (Wu et al. 2022), kept up to date as Z grows."""
from __future__ import annotations

import numpy as np

from refinery.core import stats as zstats
from refinery.core.incremental_counts import IncrementalCounts
from refinery.methods.zfilter.kernels import eligible_scores, shortlist_after


class BiasedSet:
    """B_Z(l): the top-k features of each label by z*(x,l | Z) among features with n ≥ min_count (and, given a
    threshold, z* over it).

    Kept up to date as Z grows, at a cost that follows the batch rather than the vocabulary. z*(x,l) =
    (p̂(l|x) − p0) / sqrt(p0(1 − p0)/n) (METHODS §1) depends on x's own counts and on p0, so an update rescores the
    features it touched. Each label keeps a shortlist S_l, a reference prior q_l and a bound θ_l such that every
    feature outside S_l has z*(x,l) < θ_l under q_l: rescored features join S_l when their z* under q_l reaches
    θ_l, and S_l is cut back to its ``shortlist`` best (θ_l rising) when it doubles. Under the uniform prior p0 = q_l
    always, and the top-k of S_l is B_Z(l) while S_l holds k features over the threshold. The empirical prior moves
    p0 with Z's label shares: a feature outside then has, with n ≤ N (Z's rows),
    z*(x,l | p0) < θ'_l = (θ_l·s(q_l) + max(0, q_l − p0)·√N) / s(p0), s(p) = sqrt(p(1 − p)),
    so B_Z(l) is the top-k of S_l (rescored under p0) while the k-th of them is at least θ'_l, or θ'_l is under the
    threshold; else S_l is rebuilt from every candidate (q_l = p0). p0 drifts slowly, so rebuilds are rare under
    either prior (each is a pass over every feature: once per batch, it made a corpus of imbalanced labels cost time
    quadratic in its rows).
    """

    def __init__(self, Z: IncrementalCounts, k: int, min_count: int, prior: str, shortlist: int = 4096):
        self.Z, self.k, self.min_count, self.prior = Z, k, min_count, prior
        self.shortlist = max(shortlist, k)
        self.members: list[np.ndarray] | None = None  # S_l, ids per label; None until the first build
        self.scores: list[np.ndarray] = []            # their z* under q_l
        self.reference = np.zeros(len(Z.labels))     # q_l
        self.bounds = np.full(len(Z.labels), -np.inf)  # θ_l: z* under q_l of every feature outside S_l is below
        self._rescored = np.zeros(0, dtype=bool)   # per feature: rescored by the update under way

    def _p0(self) -> np.ndarray:
        return zstats.prior_vector(self.Z.labels, self.Z.label_totals, self.prior)

    def _z(self, ids: np.ndarray, p0: np.ndarray) -> np.ndarray:
        return eligible_scores(self.Z.matrix, ids, p0, 0)[1]

    def _scored_candidates(self, ids: np.ndarray, p0: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Of ``ids``, those with n ≥ min_count, and their z* under ``p0``."""
        return eligible_scores(self.Z.matrix, np.asarray(ids, np.int64), p0, self.min_count)

    def _cut(self, ids: np.ndarray, z: np.ndarray) -> tuple[np.ndarray, np.ndarray, float]:
        """The ``shortlist`` best of ``ids`` (all those tied with the last) and the bound below them."""
        if len(ids) <= self.shortlist:
            return ids, z, -np.inf
        theta = np.partition(z, -self.shortlist)[-self.shortlist]
        inside = z >= theta
        return ids[inside], z[inside], float(theta)

    def rebuild(self) -> None:
        """Every label's S_l from every candidate, under the prior of now."""
        self.reference = self._p0()
        counted = min(self.Z.num_features, len(self.Z.matrix))   # features interned but not yet counted have no row
        ids, z = self._scored_candidates(np.arange(counted), self.reference)
        self.members, self.scores = [], []
        for j in range(len(self.Z.labels)):
            m, s, self.bounds[j] = self._cut(ids, z[:, j])
            self.members.append(m)
            self.scores.append(s)

    def update(self, touched: np.ndarray) -> None:
        """Rescore the features whose counts changed (``touched``, distinct ids)."""
        if self.members is None:
            return self.rebuild()
        ids, z = self._scored_candidates(touched, self.reference)
        if len(self._rescored) < self.Z.num_features:   # grown by half, as Z's vocabulary
            self._rescored = np.zeros(self.Z.num_features * 3 // 2, dtype=bool)
        self._rescored[ids] = True
        try:
            for j in range(len(self.Z.labels)):
                m, s = shortlist_after(self.members[j], self.scores[j], self._rescored, ids, z[:, j], self.bounds[j])
                if len(m) > 2 * self.shortlist:
                    m, s, theta = self._cut(m, s)
                    self.bounds[j] = max(self.bounds[j], theta)
                self.members[j], self.scores[j] = m, s
        finally:
            self._rescored[ids] = False

    def _bound_now(self, j: int, p0: float) -> float:
        """θ'_l: z* under ``p0`` of every feature outside S_l is below it (with a margin for rounding where p0 moved)."""
        q, theta = self.reference[j], self.bounds[j]
        if q == p0 or theta == -np.inf:
            return theta
        bound = (theta * np.sqrt(q * (1 - q)) + max(0.0, q - p0) * np.sqrt(max(self.Z.rows, 1))) \
            / np.sqrt(p0 * (1 - p0))
        return bound + 1e-9 * max(1.0, abs(bound))

    def _ranked(self, threshold: float) -> list[tuple[np.ndarray, np.ndarray]] | None:
        """Per label (members with z* over ``threshold`` under the prior of now, their z*), or None where a
        feature outside S_l could be among the top-k."""
        p0 = self._p0()
        out = []
        for j, (m, s) in enumerate(zip(self.members, self.scores)):
            if self.reference[j] != p0[j]:
                s = self._z(m, p0)[:, j] if len(m) else s
            over = s > threshold
            m, s = m[over], s[over]
            bound = self._bound_now(j, p0[j])
            if bound > threshold and (len(s) < self.k or np.partition(s, -self.k)[-self.k] < bound):
                return None
            out.append((m, s))
        return out

    def cells(self, threshold: float = -np.inf) -> np.ndarray:
        """Sorted cells ``feature · C + label`` of B_Z: per label the k best of those with z* over ``threshold``
        (every feature: Algorithm 1 as written), ties broken by name."""
        C = len(self.Z.labels)
        ranked = self._ranked(threshold)
        if ranked is None:
            self.rebuild()
            ranked = self._ranked(threshold)
        return np.sort(np.concatenate([self._top(s, m) * C + j for j, (m, s) in enumerate(ranked)]))

    def _top(self, zj: np.ndarray, ids: np.ndarray) -> np.ndarray:
        k = min(self.k, len(zj))
        if k == 0:
            return np.empty(0, dtype=np.int64)
        kth = np.partition(zj, -k)[-k]
        above = ids[zj > kth]
        tied = ids[zj == kth]
        if len(tied) > k - len(above):   # some of the tied are left out: the first by name are taken
            tied = tied[np.argsort(self.Z.names(tied).to_numpy(zero_copy_only=False), kind="stable")]
        return np.concatenate([above, tied[: k - len(above)]]).astype(np.int64)
