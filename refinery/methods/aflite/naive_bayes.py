"""AFLite's linear classifiers on Φ = hashed word n-grams: multinomial naive Bayes, the m partitions of an iteration
fit together (Le Bras et al. 2020, Algorithm 1; METHODS §7).

Partition j's model, counted on its training rows T_j (sublinear tf x_{i,d}):

    N_{l,d} = Σ_{i ∈ T_j, y_i = l} x_{i,d},   N_l = Σ_d N_{l,d},   θ_{l,d} = (N_{l,d} + 1) / (N_l + D),
    log p(l | x) = log π_l + Σ_d x_d log θ_{l,d} + const,   π_l = |{i ∈ T_j : y_i = l}| / |T_j|,

and each held-out row is predicted by the argmax. The partitions are taken a block at a time: two compiled kernels
read Φ's rows (``io.stacked_rows.RowBlocks``: from disk, a block of rows at a time; the rows left by their numbers),
one summing every N_{l,d} of the partitions (in row order, in float32; the partitions shared among the threads) and
one scoring each held-out row under their models (the rows shared among the threads). Memory: the partitions'
counts (D × block × labels floats), their membership (rows × block bytes) and one block of Φ's rows (``BLOCK_ROWS``).
"""
from __future__ import annotations

import numba
import numpy as np

from refinery.methods.aflite.partitions import membership

BLOCK = 16            # partitions fit and scored together
BLOCK_ROWS = 1 << 20   # Φ's rows read at a time (120 MB of hypotheses' n-grams, 360 MB of pairs'): few kernel calls


def naive_bayes_predictability(X, alive: np.ndarray, y: np.ndarray, num_labels: int, partitions
                               ) -> tuple[np.ndarray, np.ndarray]:
    """(right, held out): per row of S (``alive``, the numbers of its rows in ``X``, Φ of the input as
    ``io.stacked_rows.RowBlocks`` in the input's order, ascending; ``y`` the input's label codes), how many of the
    classifiers that held it out predicted its label, and how many held it out. ``partitions``: the m partitions of
    S in order, each the positions in ``alive`` of T_j."""
    from concurrent.futures import ThreadPoolExecutor

    rows = len(alive)
    right, held = np.zeros(rows, np.int32), np.zeros(rows, np.int32)
    labels = y[alive]
    # the positions in S of each block's rows: S's rows are ascending, so a block's are a run of them
    bounds = np.searchsorted(alive, [X.span(b)[0] for b in range(len(X))] + [X.shape[0]])
    drawn = iter(partitions)

    def next_block() -> np.ndarray | None:
        """The next block's membership (rows × b, True where the row trains partition j), drawn in order."""
        train = membership(rows, drawn, BLOCK)
        return train if train.shape[1] else None

    with ThreadPoolExecutor(1) as drawing:   # the next block drawn (memory-bound shuffles) while this one is fit
        upcoming = drawing.submit(next_block)
        while (train := upcoming.result()) is not None:
            upcoming = drawing.submit(next_block)
            _score_block(X, (alive, labels, bounds), num_labels, train, right, held)
    return right, held


def _score_block(X, rows: tuple, num_labels: int, train: np.ndarray, right: np.ndarray, held: np.ndarray) -> None:
    """Fit the block's models (``train``: its membership) on S (``rows``: the rows left, their labels, the bounds
    of each of Φ's blocks among them) and add their held-out predictions to ``right`` and ``held``: Φ read a
    block of rows at a time, twice (the counts, then the scores)."""
    alive, labels, bounds = rows
    b, columns = train.shape[1], X.shape[1]
    threads = min(b, numba.get_num_threads())
    share = (b + threads - 1) // threads
    partial = np.zeros((threads, columns, num_labels, share), np.float32)
    for block, start, in_block in _blocks_of_s(X, bounds):
        _label_counts(X.block(block), alive[in_block] - start, labels[in_block], train[in_block], partial)
    counts = _by_partition(partial, b).reshape(columns, b * num_labels).astype(np.float64)
    del partial
    per_label = counts.sum(axis=0)                                                              # N_l
    log_theta = (np.log(counts + 1.0) - np.log(per_label + counts.shape[0])[None, :]).astype(np.float32)
    priors = np.zeros((b, num_labels), np.float32)   # training rows per label
    for j in range(b):
        priors[j] = np.bincount(labels[train[:, j]], minlength=num_labels)
    log_prior = np.log(np.maximum(priors, 1e-12) / priors.sum(axis=1, keepdims=True)).astype(np.float32)
    for block, start, in_block in _blocks_of_s(X, bounds):
        _held_out_right(X.block(block), alive[in_block] - start, labels[in_block], train[in_block],
                        (log_theta, log_prior.ravel()), (right[in_block], held[in_block]))


def _blocks_of_s(X, bounds: np.ndarray):
    """(block of Φ, its first row, the slice of S's positions in it) of each block holding rows of S, in order."""
    for block in range(len(X)):
        if bounds[block + 1] > bounds[block]:
            yield block, X.span(block)[0], slice(int(bounds[block]), int(bounds[block + 1]))


@numba.njit(parallel=True, nogil=True, cache=True)
def _label_counts(csr, alive, labels, train, counts):
    """Add to ``counts`` (threads × D × labels × share, float32: thread t's partitions t·share, t·share + 1, … side
    by side per feature and label) N_{l,d} of each partition of the block from Φ's rows (``csr``: indptr, indices,
    values; ``alive``: S's rows among them), in row order: each thread reads every row once and adds its values to
    the counts of its partitions (a partition not training on the row adds 0, which changes no sum). Called on Φ's
    blocks in order, the sums are added in the rows' order as over the whole of Φ at once."""
    indptr, indices, data = csr
    threads, share = counts.shape[0], counts.shape[3]
    b = train.shape[1]
    for t in numba.prange(threads):
        first, last = t * share, min(b, (t + 1) * share)
        mine = counts[t]
        member = np.zeros(share, np.float32)
        for k in range(len(alive)):
            i, label = alive[k], labels[k]
            for j in range(first, last):
                member[j - first] = train[k, j]
            for p in range(indptr[i], indptr[i + 1]):
                value, slab = data[p], mine[indices[p], label]
                for j in range(share):
                    slab[j] += value * member[j]


@numba.njit(nogil=True, cache=True)
def _by_partition(partial, b):
    """The counts of ``_label_counts`` (threads × D × labels × share) as D × b × labels, partition j at j."""
    threads, columns, num_labels, share = partial.shape
    out = np.empty((columns, b, num_labels), np.float32)
    for t in range(threads):
        for j in range(t * share, min(b, (t + 1) * share)):
            out[:, j, :] = partial[t, :, :, j - t * share]
    return out


@numba.njit(parallel=True, nogil=True, cache=True)
def _held_out_right(csr, alive, labels, train, model, counts):
    """Score each row under the block's models that held it out (``model``: log θ, log π; Σ_d x_d log θ in float32,
    in the row's order, then log π) and count in ``counts`` (right, held out) the models whose argmax (the first on a
    tie) is its label."""
    indptr, indices, data = csr
    log_theta, log_prior = model
    right, held = counts
    rows, b = train.shape
    width = log_theta.shape[1]
    num_labels = width // b
    chunk = 4096
    for c in numba.prange((rows + chunk - 1) // chunk):
        score = np.empty(width, np.float32)
        for k in range(c * chunk, min(rows, (c + 1) * chunk)):
            i = alive[k]
            score[:] = 0.0
            for p in range(indptr[i], indptr[i + 1]):
                theta, value = log_theta[indices[p]], data[p]
                for q in range(width):
                    score[q] += value * theta[q]
            for j in range(b):
                if train[k, j]:
                    continue
                best, arg = score[j * num_labels] + log_prior[j * num_labels], 0
                for label in range(1, num_labels):
                    s = score[j * num_labels + label] + log_prior[j * num_labels + label]
                    if s > best:
                        best, arg = s, label
                held[k] += 1
                if arg == labels[k]:
                    right[k] += 1
