"""The compiled parts of Algorithm 1's batch (Wu et al. 2022; METHODS §2): which rows hit B_Z (``rows_hitting``) and
the rescoring of B_Z's shortlists as Z's counts change (``eligible_scores``, ``shortlist_after``), so that a batch
costs a few passes over its (row, feature) pairs, not a dozen array operations each."""
from __future__ import annotations

import numba
import numpy as np


@numba.njit(nogil=True, cache=True)
def rows_hitting(feature_ids, offsets, row_labels, flagged, cells, num_labels):
    """(keep, hit rows, hit features) of a batch against B_Z: row r (features ``feature_ids[offsets[r]:offsets[r +
    1]]``, label ``row_labels[r]``) hits where one of its features f has the cell ``f · C + label`` among ``cells``
    (sorted; ``flagged[f]``: f is in some cell, so that most pairs cost one lookup); each hit as a pair (row,
    feature) in row order, and ``keep`` false for the rows with one."""
    rows = len(offsets) - 1
    keep = np.ones(rows, dtype=np.bool_)
    hit_rows = np.empty(offsets[rows] - offsets[0], np.int64)
    hit_features = np.empty(offsets[rows] - offsets[0], np.int64)
    n = 0
    for r in range(rows):
        for i in range(offsets[r], offsets[r + 1]):
            f = feature_ids[i]
            if not flagged[f]:
                continue
            cell = f * num_labels + row_labels[r]
            at = np.searchsorted(cells, cell)
            if at < len(cells) and cells[at] == cell:
                keep[r] = False
                hit_rows[n] = r
                hit_features[n] = f
                n += 1
    return keep, hit_rows[:n], hit_features[:n]


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
