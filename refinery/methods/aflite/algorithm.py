"""AFLite's loop (Le Bras et al. 2020, Algorithm 1; METHODS §7) over a fixed representation Φ of every row.

    S ← D. While |S| > n: for j = 1..m, split S at random into T_j (t rows) and V_j = S \\ T_j, fit a linear
    classifier on Φ(T_j) and predict V_j; predictability p(i) = (held-out models right about i) / (models that
    held i out). Remove the k rows of highest p among those with p ≥ τ; fewer than k such rows: remove them, stop.

On Φ = hashed word n-grams (``representation: ngrams``) the linear classifier is multinomial naive Bayes
(``naive_bayes``: fit by counting, the m classifiers of an iteration a block at a time, reading Φ's rows in place);
on Φ = sentence embeddings of a frozen encoder (``embeddings``) it is the paper's logistic regression
(``logistic``). Either way the m partitions of an iteration are drawn in order from ``seed`` and the iteration's
number alone (``draw_partitions``), so a resumed run removes the same rows. Rows never held out get no score that
round.
"""
from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from refinery.methods.aflite.config import AFLiteConfig
from refinery.methods.aflite.logistic import logistic_predictability
from refinery.methods.aflite.naive_bayes import naive_bayes_predictability
from refinery.methods.aflite.partitions import draw_partitions, membership


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


def logistic_of_rows(X, alive: np.ndarray, y: np.ndarray, num_labels: int, partitions) -> tuple[np.ndarray,
                                                                                                 np.ndarray]:
    """``logistic_predictability`` of S (``alive``, the numbers of its rows in ``X``), its partitions as one mask."""
    return logistic_predictability(X[alive], y[alive], num_labels, membership(len(alive), partitions))


def adversarial_filter(X, y: np.ndarray, labels: list, config: AFLiteConfig, done: list | None = None,
                       on_removal=None, bar=None, scores: np.ndarray | None = None) -> Filtering:
    """Algorithm 1 over ``X`` (Φ of every input row: CSR n-grams, or dense embeddings) and ``y`` (label codes into
    ``labels``): the rows' fates. ``done``: the ``Removal``s of a killed run's finished iterations, replayed with
    their figures and, after the last, ``scores`` (every row's predictability then; a kept row's is its last
    round's), not recomputed; a run that had ended resumes ended. ``on_removal(removal, predictability)``: called
    as each iteration ends (to checkpoint it); ``bar``: a progress bar advanced by one per iteration."""
    predictability_of = naive_bayes_predictability if config.representation == "ngrams" else logistic_of_rows
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
        partitions = draw_partitions(len(alive), config.train_share, config.partitions,
                                     np.random.default_rng([config.seed, iteration]))
        right, held = predictability_of(X, alive, y, len(labels), partitions)
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
