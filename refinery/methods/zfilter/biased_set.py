"""B_Z(l), the biased set of Algorithm 1 (Wu et al. 2022), kept up to date as Z grows."""
from __future__ import annotations

import numpy as np

from refinery.core import stats as zstats
from refinery.core.incremental_counts import IncrementalCounts


class BiasedSet:
    """B_Z(l): the top-k features of each label by z*(x,l | Z) among features with n ≥ min_count (and, given a
    threshold, z* over it).

    Kept up to date as Z grows, at a cost that follows the batch rather than the vocabulary.
    Under the uniform prior z*(x,l) = (p̂(l|x) − p0) / sqrt(p0(1 − p0)/n) (METHODS §1) depends
    only on x's own counts, so an update changes the scores of only the features it touched.
    Each label keeps a shortlist S_l and a bound θ_l such that z(x,l) < θ_l for every x outside
    S_l and z(x,l) ≥ θ_l inside it: rescored features join or leave S_l by θ_l, and the top-k of
    S_l is exact while S_l holds at least k features; when it does not, S_l is rebuilt from all
    candidates. The empirical prior moves p0 with Z's label shares, so every candidate is
    rescored at each update.
    """

    def __init__(self, Z: IncrementalCounts, k: int, min_count: int, prior: str, shortlist: int = 4096):
        self.Z, self.k, self.min_count, self.prior = Z, k, min_count, prior
        self.shortlist = max(shortlist, k)
        self.members: list[np.ndarray] | None = None  # S_l, ids per label; None until the first build
        self.scores: list[np.ndarray] = []
        self.bounds = np.full(len(Z.labels), -np.inf)
        self._rescored = np.zeros(0, dtype=bool)   # per feature: rescored by the update under way

    def _z(self, ids: np.ndarray) -> np.ndarray:
        counts = self.Z.matrix[ids].astype(np.float64)
        n = np.maximum(counts.sum(axis=1), 1)[:, None]
        p0 = zstats.prior_vector(self.Z.labels, self.Z.label_totals, self.prior)
        return zstats.z_score(counts / n, n, p0[None, :])

    def _candidates(self, ids: np.ndarray | None = None) -> np.ndarray:
        """Of ``ids`` (default: every feature), those with n ≥ min_count."""
        counts = self.Z.matrix[: self.Z.num_features] if ids is None else self.Z.matrix[ids]
        eligible = np.flatnonzero(zstats.row_totals(counts) >= self.min_count)
        return eligible if ids is None else ids[eligible]

    def _cut(self, ids: np.ndarray, z: np.ndarray) -> tuple[np.ndarray, np.ndarray, float]:
        """The ``shortlist`` best of ``ids`` (all those tied with the last) and the bound below them."""
        if len(ids) <= self.shortlist or self.prior != "uniform":  # rescored in full at each update
            return ids, z, -np.inf
        theta = np.partition(z, -self.shortlist)[-self.shortlist]
        inside = z >= theta
        return ids[inside], z[inside], float(theta)

    def rebuild(self) -> None:
        ids = self._candidates()
        z = self._z(ids)
        self.members, self.scores = [], []
        for j in range(len(self.Z.labels)):
            m, s, self.bounds[j] = self._cut(ids, z[:, j])
            self.members.append(m)
            self.scores.append(s)

    def update(self, touched: np.ndarray) -> None:
        """Rescore the features whose counts changed (``touched``, distinct ids)."""
        if self.members is None or self.prior != "uniform":
            return self.rebuild()
        ids = self._candidates(touched)
        z = self._z(ids)
        if len(self._rescored) < self.Z.num_features:   # grown by half, as Z's vocabulary
            self._rescored = np.zeros(self.Z.num_features * 3 // 2, dtype=bool)
        self._rescored[ids] = True
        try:
            self._update(ids, z)
        finally:
            self._rescored[ids] = False

    def _update(self, ids: np.ndarray, z: np.ndarray) -> None:
        for j in range(len(self.Z.labels)):
            old = ~self._rescored[self.members[j]]
            enter = z[:, j] >= self.bounds[j]
            m = np.concatenate([self.members[j][old], ids[enter]])
            s = np.concatenate([self.scores[j][old], z[enter, j]])
            if len(m) < self.k:
                return self.rebuild()
            if len(m) > 2 * self.shortlist:
                m, s, theta = self._cut(m, s)
                self.bounds[j] = max(self.bounds[j], theta)
            self.members[j], self.scores[j] = m, s

    def cells(self, threshold: float = -np.inf) -> np.ndarray:
        """Sorted cells ``feature · C + label`` of B_Z: per label the k best of those with z* over ``threshold``
        (every feature: Algorithm 1 as written), ties broken by name."""
        C = len(self.Z.labels)
        return np.sort(np.concatenate([self._top(s[s > threshold], m[s > threshold]) * C + j
                                       for j, (m, s) in enumerate(zip(self.members, self.scores))]))

    def _top(self, zj: np.ndarray, ids: np.ndarray) -> np.ndarray:
        k = min(self.k, len(zj))
        if k == 0:
            return np.empty(0, dtype=np.int64)
        kth = np.partition(zj, -k)[-k]
        above = ids[zj > kth]
        tied_ids = ids[zj == kth]
        tied = tied_ids[np.argsort(self.Z.names(tied_ids).to_numpy(zero_copy_only=False), kind="stable")]
        return np.concatenate([above, tied[: k - len(above)]]).astype(np.int64)
