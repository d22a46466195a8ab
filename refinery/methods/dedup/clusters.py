"""The duplicate graph of a corpus, its clusters, their labels and each row's fate.

Edges: rows whose normalized texts are equal in every field (``minhash.normalized``: exact duplicates among them),
and near-duplicates: pairs of distinct normalized rows that MinHash-LSH makes candidates and whose true Jaccard
reaches the threshold t in every field, min_f J(S_k(x_f), S_k(y_f)) ≥ t (``minhash``; a premise shared by two
hypotheses is not enough). Clusters are the graph's connected components. Each cluster keeps one row, its
representative: its first row in input order, or its first of ``prefer_split`` where it has one; every other row is
a duplicate of the representative, named with its kind (exact: equal texts; normalized: equal once normalized;
near: the least Jaccard of its fields against the representative's, which in a chain of near-duplicates may fall
under t). A cluster whose rows carry more than one label is a label conflict: its rows are kept all, dropped all,
or reduced to one as any cluster (``DedupConfig.conflicts``).
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from refinery.methods.dedup import minhash
from refinery.methods.dedup.config import DedupConfig

KINDS = ("", "exact duplicate", "normalized duplicate", "near-duplicate", "label conflict")
NONE, EXACT, NORMALIZED, NEAR, CONFLICT = range(len(KINDS))


@dataclass
class Rows:
    """What dedup reads of each input row, in input order: the texts of its fields, its label and split."""

    ids: pa.Array
    fields: list          # string arrays: text_a (and text_b)
    labels: pa.Array
    splits: pa.Array | None

    def __len__(self) -> int:
        return len(self.ids)


@dataclass
class Duplicates:
    """Each input row's place in the duplicate graph: its cluster (−1: none), the row it duplicates (its cluster's
    representative; −1 for a representative or a row in no cluster), the kind (``KINDS``), its similarity to that
    row, whether it is dropped, and whether its cluster's labels conflict."""

    cluster: np.ndarray
    partner: np.ndarray
    kind: np.ndarray
    similarity: np.ndarray
    dropped: np.ndarray
    conflict: np.ndarray
    candidates: int = 0    # candidate pairs LSH proposed
    near_pairs: int = 0    # of them, verified near-duplicates

    @property
    def duplicate(self) -> np.ndarray:
        """Rows that duplicate another (their cluster's representative)."""
        return self.partner >= 0


def edges_of_equal(keys: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(rows, the first row of equal key for each, the first row of each distinct key) for rows of equal ``keys``."""
    _, first, inverse = np.unique(keys, return_index=True, return_inverse=True)
    rows = np.arange(len(keys))
    to = first[inverse.ravel()]
    mine = rows != to
    return rows[mine], to[mine], np.sort(first)


def near_edges(shingles: list, rows: np.ndarray, config: DedupConfig) -> tuple[np.ndarray, int]:
    """The verified near-duplicate pairs (k × 2) among ``rows`` (their fields' ``shingles``), and the candidates."""
    bands, r = minhash.bands_for(config.threshold, config.permutations)
    keys = minhash.band_keys([s.take(rows) for s in shingles], config.permutations, bands, r, config.seed)
    signed = np.flatnonzero(sum(s.take(rows).sizes() for s in shingles) > 0)   # an empty row has no signature
    pairs = minhash.candidate_pairs(keys, signed)
    left, right = rows[pairs[:, 0]], rows[pairs[:, 1]]
    similar = minhash.min_jaccard(shingles, shingles, left, right) >= config.threshold
    return np.stack([left[similar], right[similar]], axis=1), len(pairs)


def find_duplicates(rows: Rows, config: DedupConfig) -> Duplicates:
    """Every row's place in the duplicate graph of ``rows`` (see the module's docstring)."""
    from scipy.sparse import coo_matrix
    from scipy.sparse.csgraph import connected_components

    n = len(rows)
    normal = [minhash.normalized(f) for f in rows.fields]
    exact_key, normal_key = minhash.row_keys(rows.fields), minhash.row_keys(normal)
    a, b, distinct = edges_of_equal(normal_key)
    shingles = [minhash.shingles(t, config.shingle_size, f) for f, t in enumerate(normal)]
    candidates, near = 0, np.zeros((0, 2), np.int64)
    if config.threshold < 1 and len(distinct) > 1:
        near, candidates = near_edges(shingles, distinct, config)
    left, right = np.concatenate([a, near[:, 0]]), np.concatenate([b, near[:, 1]])
    graph = coo_matrix((np.ones(len(left), np.int8), (left, right)), shape=(n, n))
    _, component = connected_components(graph, directed=False)
    size = np.bincount(component)
    in_cluster = size[component] > 1
    # the representative: the least priority in its component (rows of prefer_split first, then input order)
    order = np.arange(n, dtype=np.int64)
    if config.prefer_split is not None and rows.splits is not None:
        preferred = pc.equal(rows.splits, config.prefer_split).to_numpy(zero_copy_only=False)
        order = order + np.where(preferred, 0, n)
    best = np.full(len(size), 2 * n, np.int64)
    np.minimum.at(best, component, order)
    rep = best[component] % n
    codes = pc.fill_null(pc.dictionary_encode(pc.cast(rows.labels, pa.string())).indices, -1).to_numpy(
        zero_copy_only=False).astype(np.int64)
    low, high = np.full(len(size), np.iinfo(np.int64).max), np.full(len(size), -1)
    np.minimum.at(low, component, codes)
    np.maximum.at(high, component, codes)
    conflict = in_cluster & (low[component] != high[component])
    dup = in_cluster & (rep != np.arange(n))
    partner = np.where(dup, rep, -1)
    kind = np.zeros(n, np.int8)
    kind[dup & (exact_key == exact_key[rep])] = EXACT
    kind[dup & (kind == NONE) & (normal_key == normal_key[rep])] = NORMALIZED
    kind[dup & (kind == NONE)] = NEAR
    similarity = np.zeros(n, np.float32)
    similarity[dup] = 1.0
    at = np.flatnonzero(kind == NEAR)
    similarity[at] = minhash.min_jaccard(shingles, shingles, at, rep[at])
    dropped = dup.copy()
    if config.conflicts == "keep":
        dropped &= ~conflict
    elif config.conflicts == "drop":
        dropped |= conflict
        reps = np.flatnonzero(conflict & ~dup)   # a representative dropped: named with its cluster's next row
        first_dup = np.full(len(size), -1, np.int64)
        dups = np.flatnonzero(dup & conflict)[::-1]
        first_dup[component[dups]] = dups
        partner[reps] = first_dup[component[reps]]
        kind[conflict] = CONFLICT
        similarity[reps] = minhash.min_jaccard(shingles, shingles, reps, partner[reps])
    return Duplicates(np.where(in_cluster, component, -1), partner, kind, similarity, dropped, conflict,
                      candidates, len(near))
