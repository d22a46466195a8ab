"""Inverse-propensity weights of the leakage-neutral reweighting (Zhang et al. 2019, Algorithm 1; METHODS §4): the
arithmetic on P̂(y | l), light to import (the ``weights`` stage's module docstring tells the method).

    P(S=y | l) = [P̂(y|l) / π_y] / Σ_y′ [P̂(y′|l) / π_y′]      (paper Eq. 1 for two labels),   w = 1 / P(S=y | l)

normalized to mean 1, the prior π fitted so that the weighted label shares equal the observed ones; the effective
sample size (Σw)²/Σw², its warning, and the debiased ("Debiased Eva") accuracy Σ w·[ŷ = y] / Σ w.
"""
from __future__ import annotations

from dataclasses import asdict, dataclass

import numpy as np

from refinery.messages import Message, Refusal
from refinery.methods.weights.config import AUTO_CLIP, MIN_ESS_SHARE, NO_CLIP, clip_setting
from refinery.models.forest import distinct_rows

LOW_ESS_SHARE = 0.1              # an effective sample size under this share of the rows is warned about
SUGGESTED_CLIPS = (10.0, 5.0, 2.0)  # the clips a warning may suggest, gentlest first


@dataclass(frozen=True)
class Cap:
    """The cap the weights were written under: ``setting`` as given (``auto``, ``none`` or a number), ``clip`` the cap
    in effect in units of the mean weight (None: no cap), and the effective sample size it leaves of ``rows``."""

    setting: float | str
    clip: float | None
    effective_sample_size: float
    rows: int

    @property
    def share(self) -> float:
        """The effective sample size's share of the rows."""
        return self.effective_sample_size / max(self.rows, 1)

    def to_json(self) -> dict:
        return {**asdict(self), "share": self.share}

    @classmethod
    def from_json(cls, data: dict) -> Cap:
        """The cap of its ``to_json`` (whose ``share`` it works out again)."""
        return cls(**{k: v for k, v in data.items() if k != "share"})


def cap_in_effect(setting: float | str, cells: tuple, tolerance: float = 1e-9) -> float | None:
    """The cap ``setting`` (a ``WeightsConfig.clip``) puts on the weights: ``none`` none, ``auto`` ``auto_clip``'s,
    a number itself."""
    if setting == NO_CLIP:
        return None
    return auto_clip(cells, tolerance) if setting == AUTO_CLIP else float(setting)


def selection_probability(proba: np.ndarray, prior: np.ndarray) -> np.ndarray:
    """P(S=y | l) for every row and label y: [P̂(y|l)/π_y] / Σ_y′ [P̂(y′|l)/π_y′] (METHODS §4)."""
    odds = proba / prior[None, :]
    return odds / odds.sum(axis=1, keepdims=True)


def ips_weights(proba: np.ndarray, y: np.ndarray, prior: np.ndarray, clip: float | None = None,
                counts: np.ndarray | None = None) -> np.ndarray:
    """w = 1 / P(S=y | l), mean 1; with ``clip`` capped at that many times the mean weight. With ``counts``, row i
    stands for counts[i] rows (the mean is taken over them)."""
    w = 1.0 / selection_probability(proba, prior)[np.arange(len(y)), y]
    return capped(w / np.average(w, weights=counts), clip, counts)


def capped(w: np.ndarray, clip: float | None, counts: np.ndarray | None = None) -> np.ndarray:
    """Mean-1 weights ``w`` (of rows standing for ``counts`` rows each, if given) capped at ``clip`` times the
    mean: capping lowers the mean, so cap and renormalize until the largest weight is within the cap."""
    if clip is None:
        return w
    if clip <= 1:
        raise Refusal(f"clip must be a number > 1 (a multiple of the mean weight), got {clip!r}",
                      code="invalid-setting")
    while w.max() > clip * (1 + 1e-12):
        w = np.minimum(w, clip)
        w /= np.average(w, weights=counts)
    return w


def label_shares(w: np.ndarray, y: np.ndarray, num_labels: int, counts: np.ndarray | None = None) -> np.ndarray:
    mass = w if counts is None else w * counts
    return np.bincount(y, weights=mass, minlength=num_labels) / mass.sum()


def prior_cells(proba: np.ndarray, y: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(P̂ of each distinct (P̂, y) cell, its label, its rows): the few cells ``fit_prior`` searches over (found
    once for every cap fitted on the same P̂)."""
    C = proba.shape[1]
    cells, index = distinct_rows(proba, y)
    return cells[:, :C], cells[:, C].astype(np.int64), np.bincount(index).astype(np.float64)


def fit_prior(proba: np.ndarray, y: np.ndarray, clip: float | None = None, tolerance: float = 1e-9,
              max_rounds: int = 500, cells: tuple | None = None) -> np.ndarray:
    """The prior π (Σ π = 1) under which the weighted label proportions equal the observed ones.

    The weighted share of label c grows with π_c, so each coordinate is bracketed and found by
    safeguarded bisection (Brent) on log π_c with the others fixed, cycling over labels until every
    share is within ``tolerance`` (for two labels one search suffices; the reference code bisects).
    Rows with the same P̂ and label get the same weight, so the search runs over those distinct (P̂, y)
    cells weighted by their rows (a forest's out-of-fold P̂ takes a value per fold and feature vector:
    a few thousand cells for millions of rows; ``cells``: ``prior_cells(proba, y)`` found before).
    """
    from scipy.optimize import brentq

    C = proba.shape[1]
    proba, y, counts = prior_cells(proba, y) if cells is None else cells
    target = np.bincount(y, weights=counts, minlength=C) / counts.sum()
    if np.any(target == 0):
        raise Refusal("every label needs at least one row to fit the prior", code="too-few-rows")
    log_prior = np.log(target)

    def shares_at(lp: np.ndarray) -> np.ndarray:
        return label_shares(ips_weights(proba, y, np.exp(lp - lp.max()), clip, counts), y, C, counts)

    def share(c: int, t: float) -> float:
        lp = log_prior.copy()
        lp[c] = t
        return shares_at(lp)[c]

    for _ in range(max_rounds):
        if np.max(np.abs(shares_at(log_prior) - target)) <= tolerance:
            break
        for c in range(C if C > 2 else 1):
            lo, hi = log_prior[c] - 1.0, log_prior[c] + 1.0
            while share(c, lo) > target[c]:
                lo -= 2 * (hi - lo)
            while share(c, hi) < target[c]:
                hi += 2 * (hi - lo)
            log_prior[c] = brentq(lambda t: share(c, t) - target[c], lo, hi, xtol=1e-14, rtol=1e-15)
    else:
        raise RuntimeError(f"prior search did not reach tolerance {tolerance} in {max_rounds} rounds")
    prior = np.exp(log_prior - log_prior.max())
    return prior / prior.sum()


def effective_sample_size(w: np.ndarray, counts: np.ndarray | None = None) -> float:
    """(Σw)² / Σw² (Kish): the rows an unweighted sample of equal precision would hold; with ``counts``, row i
    stands for counts[i] rows."""
    c = np.ones(len(w)) if counts is None else counts
    return float(np.dot(c, w) ** 2 / np.dot(c, np.square(w)))


def auto_clip(cells: tuple, tolerance: float = 1e-9, share: float = MIN_ESS_SHARE,
              precision: float = 1e-3) -> float | None:
    """The largest cap c (× the mean weight) under which the effective sample size (Σw)²/Σw² is at least ``share``
    of the rows, w being the weights ``--clip c`` gives (the prior fitted again under the cap, ``fit_prior``, then
    capped and renormalized, ``ips_weights``); None where the uncapped weights keep that share (no cap needed).

    Capping pulls every weight toward the mean, and at c → 1 all weights are equal (ESS = n): the ESS falls as c
    grows, so c is bisected on log c between 1 and the largest uncapped weight until within ``precision``
    (relative), the lower end always one that keeps the share. ``cells``: ``prior_cells`` of P̂ and the labels
    (the search runs over the distinct (P̂, y) cells, each weighted by its rows).
    """
    proba, y, counts = cells

    def share_at(clip: float | None) -> tuple[float, float]:
        w = ips_weights(proba, y, fit_prior(proba, y, clip, tolerance, cells=cells), clip, counts)
        return effective_sample_size(w, counts) / counts.sum(), float(w.max())

    kept, largest = share_at(None)
    if kept >= share:
        return None
    lo, hi = 1.0, largest   # ESS ≥ share at lo (all weights equal), not at hi (the uncapped weights)
    while hi > lo * (1 + precision):
        mid = float(np.sqrt(lo * hi))
        lo, hi = (mid, hi) if share_at(mid)[0] >= share else (lo, mid)
    return lo


def diagnostics(w: np.ndarray) -> dict:
    """min, max, quantiles and effective sample size of the weights."""
    return {"min": float(w.min()), "max": float(w.max()), "mean": float(w.mean()),
            **{f"q{q}": float(np.quantile(w, q / 100)) for q in (1, 5, 25, 50, 75, 95, 99)},
            "effective_sample_size": effective_sample_size(w), "rows": int(len(w))}


def low_ess_warning(w: np.ndarray, clip: float | None, refit: dict | None = None) -> dict | None:
    """When the effective sample size is under ``LOW_ESS_SHARE`` of the rows: the warning, and the
    gentlest of ``SUGGESTED_CLIPS`` below ``clip`` that lifts it past that share (else the tightest), with
    the ESS it would give: exact from ``refit`` ({clip: the weights that --clip gives, prior fitted again})
    where it holds that clip, else ``w`` capped, the prior not fitted again, an estimate. None otherwise."""
    ess, floor = effective_sample_size(w), LOW_ESS_SHARE * len(w)
    if ess >= floor:
        return None
    refit = refit or {}
    options = [c for c in SUGGESTED_CLIPS if clip is None or c < clip]
    estimates = {c: effective_sample_size(refit[c] if c in refit else capped(w, c)) for c in options}
    suggestion = next((c for c in options if estimates[c] >= floor), options[-1] if options else None)
    message = Message(f"effective sample size {ess:,.0f} is under {LOW_ESS_SHARE:.0%} of the {len(w):,} rows: "
                      f"a few rows carry the weight (max {w.max():,.1f}× the mean)")
    if suggestion is not None:
        about = "" if suggestion in refit else "about "
        message += Message("; ", clip_setting(suggestion), f" gives {about}{estimates[suggestion]:,.0f}")
    return {"message": message, "effective_sample_size": ess, "clip": suggestion,
            "clipped_effective_sample_size": estimates.get(suggestion)}


def weighted_accuracy(correct: np.ndarray, w: np.ndarray) -> float:
    """Leakage-neutral ("Debiased Eva") accuracy: Σ w·[ŷ = y] / Σ w."""
    return float(np.sum(w * correct) / np.sum(w))


HISTOGRAM_BINS = 30


def weight_histogram(w: np.ndarray) -> dict:
    """Rows per bin of the weights over log-spaced edges from the least weight to the largest."""
    lo, hi = float(w.min()), float(w.max())
    edges = np.geomspace(lo, hi, HISTOGRAM_BINS + 1) if hi > lo * (1 + 1e-9) else np.array([lo, lo * 1.01 + 1e-12])
    rows, _ = np.histogram(w, edges)
    return {"edges": edges.tolist(), "rows": rows.tolist()}
