"""The compiled parts of B_Z's upkeep in Algorithm 1 (Wu et al. 2022; METHODS §2): the rescoring of its shortlists as
Z's counts change (``eligible_scores``, ``shortlist_after``), so that a batch costs a few passes over the features it
touched, not a dozen array operations each. Which rows hit B_Z is decided as Z counts the others
(``core.row_kernels.add_rows_missing``)."""
from __future__ import annotations

import numba
import numpy as np


@numba.njit(nogil=True, cache=True)
def eligible_scores(counts, ids, p0, min_count):
    """(the features of ``ids`` with n ≥ ``min_count``, in their order; each one's z*(x, l) for every label) from
    the F×C ``counts``: z* = (p̂(l|x) − p0(l)) / sqrt(p0(l)(1 − p0(l)) / n) (METHODS §1), each operation as
    ``stats.z_score`` does it, so that the scores are its to the bit."""
    C = counts.shape[1]
    out = np.empty(len(ids), np.int64)
    z = np.empty((len(ids), C), np.float64)
    k = 0
    for f in ids:
        total = 0
        for j in range(C):
            total += counts[f, j]
        if total < min_count:
            continue
        n = max(np.float64(total), 1.0)
        for j in range(C):
            z[k, j] = (counts[f, j] / n - p0[j]) / np.sqrt(p0[j] * (1 - p0[j]) / n)
        out[k] = f
        k += 1
    return out[:k], z[:k]


@numba.njit(nogil=True, cache=True)
def shortlist_after(members, scores, rescored, ids, label_scores, bound):
    """A label's shortlist S_l once the features ``ids`` were rescored (``rescored[f]`` true for each): its members
    that were not, then those of ``ids`` whose ``label_scores`` reach ``bound`` (θ_l), with their scores."""
    out = np.empty(len(members) + len(ids), np.int64)
    out_scores = np.empty(len(members) + len(ids), np.float64)
    k = 0
    for i in range(len(members)):
        if not rescored[members[i]]:
            out[k], out_scores[k] = members[i], scores[i]
            k += 1
    for i in range(len(ids)):
        if label_scores[i] >= bound:
            out[k], out_scores[k] = ids[i], label_scores[i]
            k += 1
    return out[:k], out_scores[:k]
