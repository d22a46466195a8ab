"""AFLite's loop (Le Bras et al. 2020, Algorithm 1; METHODS §7) over a fixed representation Φ of every row.

    S ← D. While |S| > n: for j = 1..m, split S at random into T_j (t rows) and V_j = S \\ T_j, fit a linear
    classifier on Φ(T_j) and predict V_j; predictability p(i) = (held-out models right about i) / (models that
    held i out). Remove the k rows of highest p among those with p ≥ τ; fewer than k such rows: remove them, stop.

On Φ = hashed word n-grams (``representation: ngrams``) the linear classifier is multinomial naive Bayes (below);
on Φ = sentence embeddings of a frozen encoder (``embeddings``) it is the paper's logistic regression
(``logistic``). Either way the m partitions of an iteration are drawn first (``draw_partitions``) and fit together.

Naive Bayes on Φ = hashed word n-grams (sublinear tf): log p(l | x) =
log π_l + Σ_d x_d log θ_{l,d} + const, θ_{l,d} = (N_{l,d} + 1) / (N_l + D) with N counted on T_j. It is fit
by counting, so the m classifiers of an iteration are fit together: for a block of partitions, one sparse
product Φ(S)ᵀ Z (Z[i, (j, l)] = 1 where row i is in T_j with label l) gives every N_{l,d}, and one product
Φ(S) log θ scores every row under every model of the block. Rows never held out get no score that round.
Each iteration draws its partitions from ``seed`` and its number alone, so a resumed run removes the same rows.
"""
from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from refinery.methods.aflite.config import AFLiteConfig
from refinery.methods.aflite.logistic import logistic_predictability

BLOCK = 8   # partitions fit and scored together (Z and the scores hold rows × BLOCK × labels floats)


@dataclass
class Round:
    """One iteration's figures for the report."""

    iteration: int
    rows: int                   # |S| at its start
    scored: int                 # rows held out by at least one partition
    reaching_tau: int           # scored rows with p ≥ τ
    removed: int
    mean_predictability: float
    removed_by_label: dict
    mean_by_label: dict


@dataclass
class Removal:
    """The rows one iteration removed (positions in the input) and their predictability; the iteration's figures
    (``Round``) and, where the loop ended after it, why: what a resumed run replays to report the whole run."""

    iteration: int
    rows: np.ndarray
    predictability: np.ndarray
    round: Round | None = None
    stopped: str = ""


@dataclass
class Filtering:
    """Every input row's fate: ``removed_at`` (0: kept; else the iteration that removed it), its predictability
    when removed (``predictability``; for a kept row, in the last round that scored it; NaN where none did)."""

    removed_at: np.ndarray
    predictability: np.ndarray
    rounds: list = field(default_factory=list)
    stopped: str = ""           # why the loop ended
    resumed: int = 0            # iterations read back from a killed run's checkpoints


def draw_partitions(rows: int, config: AFLiteConfig, rng: np.random.Generator) -> np.ndarray:
    """The m partitions of S (rows × m, True where the row is in T_j): each a random t of the rows."""
    t = min(max(1, round(config.train_share * rows)), rows - 1)
    train = np.zeros((rows, config.partitions), bool)
    for j in range(config.partitions):
        train[rng.permutation(rows)[:t], j] = True
    return train


def naive_bayes_predictability(X, y: np.ndarray, num_labels: int, partitions: np.ndarray
                               ) -> tuple[np.ndarray, np.ndarray]:
    """(right, held out): per row of ``X`` (CSR, Φ of S) and ``y`` (label codes), how many of the classifiers that
    held it out (``partitions``: rows × m, True where in T_j) predicted its label, and how many held it out."""
    rows, m = partitions.shape
    right, held = np.zeros(rows, np.int32), np.zeros(rows, np.int32)
    XT = X.T.tocsr()
    for start in range(0, m, BLOCK):
        train = partitions[:, start:start + BLOCK]
        b = train.shape[1]
        Z = np.zeros((rows, b * num_labels), np.float32)
        Z[np.repeat(np.arange(rows), b), (np.arange(b)[None, :] * num_labels + y[:, None]).ravel()] = train.ravel()
        counts = np.asarray(XT @ Z, np.float64)                              # N_{l,d} per partition: D × (b·C)
        per_label = counts.sum(axis=0)                                       # N_l
        log_theta = np.log(counts + 1.0) - np.log(per_label + counts.shape[0])[None, :]
        priors = Z.sum(axis=0).reshape(b, num_labels)                        # training rows per label
        log_prior = np.log(np.maximum(priors, 1e-12) / priors.sum(axis=1, keepdims=True)).ravel()
        scores = np.asarray(X @ log_theta.astype(np.float32)) + log_prior.astype(np.float32)
        predicted = scores.reshape(rows, b, num_labels).argmax(axis=2)
        out = ~train
        right += ((predicted == y[:, None]) & out).sum(axis=1, dtype=np.int32)
        held += out.sum(axis=1, dtype=np.int32)
    return right, held


def adversarial_filter(X, y: np.ndarray, labels: list, config: AFLiteConfig, done: list | None = None,
                       on_removal=None, bar=None, scores: np.ndarray | None = None) -> Filtering:
    """Algorithm 1 over ``X`` (Φ of every input row: CSR n-grams, or dense embeddings) and ``y`` (label codes into
    ``labels``): the rows' fates. ``done``: the ``Removal``s of a killed run's finished iterations, replayed with
    their figures and, after the last, ``scores`` (every row's predictability then; a kept row's is its last
    round's), not recomputed; a run that had ended resumes ended. ``on_removal(removal, predictability)``: called
    as each iteration ends (to checkpoint it); ``bar``: a progress bar advanced by one per iteration."""
    predictability_of = naive_bayes_predictability if config.representation == "ngrams" else logistic_predictability
    n_input = X.shape[0]
    target = int(np.floor(config.target_share * n_input))
    k = max(1, round(config.slice_share * n_input))
    removed_at = np.zeros(n_input, np.int32)
    predictability = np.full(n_input, np.nan, np.float32)
    result = Filtering(removed_at, predictability)
    for removal in done or ():
        removed_at[removal.rows] = removal.iteration
        predictability[removal.rows] = removal.predictability
        result.rounds += [removal.round] if removal.round is not None else []
        result.resumed, result.stopped = removal.iteration, removal.stopped
    if scores is not None:
        predictability[:] = scores
    iteration = result.resumed
    while not result.stopped:
        alive = np.flatnonzero(removed_at == 0)
        if len(alive) <= target:
            result.stopped = f"{len(alive):,} rows left, the target n ({config.target_share:g} of the input)"
            break
        if len(alive) < 2 or len(np.unique(y[alive])) < 2:
            result.stopped = "fewer than two labels left"
            break
        iteration += 1
        partitions = draw_partitions(len(alive), config, np.random.default_rng([config.seed, iteration]))
        right, held = predictability_of(X[alive], y[alive], len(labels), partitions)
        scored = held > 0
        p = np.where(scored, right / np.maximum(held, 1), np.nan)
        predictability[alive[scored]] = p[scored]
        reaching = np.flatnonzero(scored & (p >= config.tau))
        quota = min(k, len(alive) - target)
        order = reaching[np.lexsort((alive[reaching], -p[reaching]))]   # highest p first, ties by input order
        take = order[:quota]
        if len(reaching) < k:
            result.stopped = (f"iteration {iteration}: {len(reaching):,} rows reached τ {config.tau:g}, fewer than "
                              f"k = {k:,}")
        removal = Removal(iteration, alive[take], p[take].astype(np.float32),
                          _round(iteration, alive, y, labels, p, scored, reaching, take), result.stopped)
        removed_at[removal.rows] = iteration
        result.rounds.append(removal.round)
        if on_removal is not None:
            on_removal(removal, predictability)
        if bar is not None:
            bar.update(1)
    return result


def _round(iteration: int, alive: np.ndarray, y: np.ndarray, labels: list, p: np.ndarray, scored: np.ndarray,
           reaching: np.ndarray, take: np.ndarray) -> Round:
    codes = y[alive]
    removed = np.bincount(codes[take], minlength=len(labels))
    means = {}
    for code, label in enumerate(labels):
        mine = scored & (codes == code)
        means[label] = float(np.mean(p[mine])) if mine.any() else None
    return Round(iteration, len(alive), int(scored.sum()), len(reaching), len(take),
                 float(np.nanmean(p)) if scored.any() else float("nan"),
                 {label: int(removed[c]) for c, label in enumerate(labels)}, means)
