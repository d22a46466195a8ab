"""Which cells over an audit's threshold are its label prior's drift, not shortcuts.

An audit's z* measures p̂(l|x) against p0 (Gardner et al. 2021; METHODS §1). Where the rows' label shares s(l)
are not p0 (a uniform prior over unbalanced shares, or a stage's output judged with p0 decided on its input), z*
splits in two:

    z*(x, l) = (p̂(l|x) − s(l)) / se0  +  (s(l) − p0(l)) / se0,     se0 = sqrt(p0 (1 − p0) / n(x)),

the feature's own pull toward l beyond the label's share, and the shares' departure from p0, which every feature
carries in proportion to √n(x): the ``null`` feature (in every row, p̂(l|null) = s(l)) holds only the second, and
a feature in nearly every row (a claim's closing full stop) holds little else. A cell over the threshold t is the
prior's drift when the feature has no pull of its own: its p̂(l|x) is within sampling error of the label's
share, the one-sided test of p(l|x) = s(l) not rejected at the audit's own level α, uncorrected (c = Φ⁻¹(1 − α),
2.33 at α = 0.01; the curve Gardner et al. draw, at p0 = s and c):

    drift(x, l)  ⇔  z*(x, l) > t  and  p̂(l|x) ≤ s(l) + c · sqrt(s(l) (1 − s(l)) / n(x)),

n(x) the size z* is tested at (Kish's effective size for weighted rows).

c, not t: a feature that leans to l beyond its share, even short of the Bonferroni threshold, keeps its z* (its
crossing is its own, the shares' drift only adding to it: twelve rows of twelve with the label are a shortcut
whether the label's share is 33.3% or 34.7%); only one that follows the shares is set aside.

Such a cell is the label shares' change, reported by the label prior (``null``'s z*), as ``null`` is: not a
shortcut, not counted as significant, not ranked. Under the empirical prior (p0 = s) no cell is drift, and none
is where the shares are p0. s(l) is read from ``null``'s counts (sums of weights for weighted rows); an audit
without the ``null`` feature has no drift cells. The one rule the audit (``ZStats.significant``, ``top_k``) and
every verdict (``core.verdict.judge``) apply.
"""
from __future__ import annotations

from statistics import NormalDist

import numpy as np

from refinery.core.features import null_row


def label_shares(stats) -> np.ndarray | None:
    """s(l) of a ``core.stats.ZStats``, in ``stats.labels``' order: p̂(l|null), each label's share of the rows (of
    the sums of weights); None where the audit holds no ``null`` feature or it is in no row."""
    at = null_row(stats.features)
    if at < 0 or not stats.n[at]:
        return None
    return stats.counts[at] / stats.n[at]


def prior_drift(stats, p: np.ndarray, z: np.ndarray, threshold: float | None = None) -> np.ndarray:
    """The mask of the cells of ``stats`` (a ``core.stats.ZStats``) whose p̂ and z* are ``p`` and ``z`` (as
    ``ZStats.eligible`` gives them, rows × C) that are over ``threshold`` (default: the audit's own) by the label
    prior's drift alone: z* > t and p̂(l|x) − s(l) ≤ c·se_s, c = Φ⁻¹(1 − α) (the module's rule). se_s is the standard
    error at p0 = s of the test size z* was computed at (n(x) rows, or Kish's effective size of weighted rows):
    se_s = se0 · sqrt(s (1 − s) / (p0 (1 − p0))), se0 = (p̂ − p0) / z*."""
    t = stats.threshold if threshold is None else threshold
    shares = label_shares(stats)
    over = z > t
    if shares is None or not over.any():
        return np.zeros(z.shape, bool)
    with np.errstate(divide="ignore", invalid="ignore"):
        se0 = np.divide(p - stats.p0, z, out=np.zeros(z.shape), where=over)
        se = se0 * np.sqrt(shares * (1 - shares) / (stats.p0 * (1 - stats.p0)))
    return over & (p - shares <= -NormalDist().inv_cdf(stats.alpha) * se)
