"""Averaged SGD of a one-vs-rest logistic regression on TF-IDF rows, compiled: scikit-learn's
``SGDClassifier(loss="log_loss", penalty="l2", learning_rate="optimal", average=True, shuffle=False)`` and its
``partial_fit``, operation for operation, so the models and their probabilities are bit for bit scikit-learn's
(its ``_plain_sgd32`` over a ``WeightVector32``; the test holds the two equal).

For each weight vector v (one per label against the rest; one for two labels, the second label's) and each row
x_t of a call, in the order given, with y = 1 for v's label and 0 otherwise:

    p = s·(w·x_t) + b,   η_t = 1 / (α (t₀ + t − 1)),   u = −η_t ∂ℓ/∂p   (ℓ the half binomial loss: p's sigmoid − y)
    s ← s·(1 − η_t α)                         the L2 decay, kept as the scale s of w (float32 factor)
    w ← w + (u / s) x_t,   b ← b + 0.01 u     (the sparse data's intercept decay)
    ā ← ā − A (u / s) x_t,   B ← B / (1 − 1/t),   A ← A + B s / t,   b̄ ← b̄ + (b − b̄) / t

where t₀ = 1 / (α·η₀) with η₀ = √(1/√α) (scikit-learn's "optimal" schedule), and the average weights are
(ā + A w) / B (Xu 2011's lazy averaging, as ``WeightVector.add_average``). At the end of each call the scales are
folded into w and ā by the same BLAS calls scikit-learn makes (``saxpy``, ``sscal`` of SciPy's BLAS, which may
fuse a multiply and an add), as when s falls under 10⁻⁶ in a call. Between calls the intercepts are kept as
``partial_fit`` keeps them: in float32; with three labels or more each call starts from the first call's b (its
``_standard_intercept`` is not written again) and hands on its last b as the averaged one; with two labels each
call starts from b = 0 and hands on b̄.

The TF-IDF rows (``ngram.tf_idf``: tf·idf, L2-normalized, float32) of a call are computed in the kernel from the
stacked sublinear tf rows, once for every weight vector.
"""
from __future__ import annotations

import ctypes
import functools
import math
from dataclasses import dataclass, field

import numba
import numpy as np

_INTERCEPT_DECAY = 0.01   # scikit-learn's SPARSE_INTERCEPT_DECAY
_MAX_DLOSS = 1e12
_RESET_SCALE = 1e-6       # WeightVector32's reset_wscale threshold


def _blas(name: str):
    """SciPy's BLAS routine ``name`` (the library scikit-learn's SGD calls) as a ctypes function of pointers."""
    from scipy.linalg import cython_blas

    api = ctypes.pythonapi
    api.PyCapsule_GetName.restype, api.PyCapsule_GetName.argtypes = ctypes.c_char_p, [ctypes.py_object]
    api.PyCapsule_GetPointer.restype = ctypes.c_void_p
    api.PyCapsule_GetPointer.argtypes = [ctypes.py_object, ctypes.c_char_p]
    capsule = cython_blas.__pyx_capi__[name]
    pointer = api.PyCapsule_GetPointer(capsule, api.PyCapsule_GetName(capsule))
    arguments = {"saxpy": 6, "sscal": 4}[name]
    return ctypes.CFUNCTYPE(None, *[ctypes.c_void_p] * arguments)(pointer)


@functools.cache
def _blas_routines() -> tuple:
    return _blas("saxpy"), _blas("sscal")


@dataclass
class OneVsRestSGD:
    """The model ``partial_fit`` holds: per weight vector its weights and their average (float32), its standard and
    averaged intercept (float32), and t, the rows seen plus one. ``positive[v]``: the label code vector v scores."""

    labels: int
    features: int
    alpha: float
    weights: np.ndarray = field(init=False)
    averages: np.ndarray = field(init=False)
    intercepts: np.ndarray = field(init=False)
    average_intercepts: np.ndarray = field(init=False)
    t: float = 1.0
    calls: int = 0

    def __post_init__(self):
        vectors = 1 if self.labels == 2 else self.labels
        self.weights = np.zeros((vectors, self.features), np.float32)
        self.averages = np.zeros((vectors, self.features), np.float32)
        self.intercepts = np.zeros(vectors, np.float32)
        self.average_intercepts = np.zeros(vectors, np.float32)
        self.positive = np.array([1] if self.labels == 2 else range(self.labels), np.int64)
        typw = np.sqrt(1.0 / np.sqrt(self.alpha))
        self.optimal_init = 1.0 / (typw / max(1.0, _gradient(1.0, -typw)) * self.alpha)

    def partial_fit(self, rows: tuple, order: np.ndarray, y: np.ndarray, idf: np.ndarray) -> None:
        """One call of ``partial_fit`` on the rows ``order`` (positions in ``rows``, the stacked sublinear tf as
        (indptr, indices, data)) in that order, their label codes ``y``, TF-IDF by ``idf``."""
        if not len(order):
            return
        vectors = len(self.positive)
        start = self.intercepts.astype(np.float64) if self.labels > 2 else np.zeros(vectors)
        scalars = np.array([self.t, self.alpha, self.optimal_init])
        state = np.zeros((5, vectors))   # intercept, average intercept, scale, A, B
        state[0], state[1], state[2], state[4] = start, self.average_intercepts, 1.0, 1.0
        _fit_rows(rows, (order, y, self.positive), idf, (self.weights, self.averages), scalars, state,
                  _blas_routines())
        if self.labels > 2 and self.calls == 0:
            self.intercepts[:] = state[0]
        self.average_intercepts[:] = state[0] if self.labels > 2 and self.calls else state[1]
        self.t += len(order)
        self.calls += 1

    def predict_proba(self, X) -> np.ndarray:
        """p(l | x) of the rows of ``X`` (``ovr_proba`` of the averaged model; every vector fit)."""
        return ovr_proba(X, self.averages, self.average_intercepts, self.labels)


def ovr_proba(X, averages: np.ndarray, intercepts: np.ndarray, labels: int) -> np.ndarray:
    """p(l | x) of the rows of ``X`` (TF-IDF, CSR float32) by a one-vs-rest model's averaged weights and intercepts,
    as ``SGDClassifier.predict_proba``: each vector's sigmoid, normalized over the labels (two labels: 1 − p, p)."""
    from scipy.special import expit

    prob = X @ averages.T + intercepts
    expit(prob, out=prob)
    if labels == 2:
        prob = prob.ravel()
        return np.stack([1 - prob, prob], axis=1)
    total = prob.sum(axis=1)
    zero = total == 0
    if zero.any():
        prob[zero, :] = 1
        total[zero] = prob.shape[1]
    prob /= total.reshape((prob.shape[0], -1))
    return prob


@numba.njit(nogil=True, cache=True)
def _gradient(y, p):
    """∂ℓ/∂p of the half binomial loss at label y ∈ {0, 1} and raw prediction p (scikit-learn's
    ``cgradient_half_binomial``)."""
    if p > -37.0:
        e = math.exp(-p)
        return ((1.0 - y) - y * e) / (1.0 + e)
    return math.exp(p) - y


@numba.njit(nogil=True, cache=True)
def _fold_scale(v, vectors, state, blas):
    """WeightVector.reset_wscale of vector v: ā ← (ā + A w) / B and w ← s w by SciPy's saxpy and sscal."""
    weights, averages = vectors
    saxpy, sscal = blas
    n, one = np.array([weights.shape[1]], np.int32), np.array([1], np.int32)
    a = np.array([state[3, v]], np.float32)
    inverse_b = np.array([1.0 / state[4, v]], np.float32)
    scale = np.array([state[2, v]], np.float32)
    w, aw = weights[v], averages[v]
    saxpy(n.ctypes.data, a.ctypes.data, w.ctypes.data, one.ctypes.data, aw.ctypes.data, one.ctypes.data)
    sscal(n.ctypes.data, inverse_b.ctypes.data, aw.ctypes.data, one.ctypes.data)
    state[3, v], state[4, v] = 0.0, 1.0
    sscal(n.ctypes.data, scale.ctypes.data, w.ctypes.data, one.ctypes.data)
    state[2, v] = 1.0


@numba.njit(nogil=True, cache=True)
def _fit_rows(rows, labelled, idf, vectors, scalars, state, blas):
    """The rows of one ``partial_fit`` call for every vector (the module's equations), in scikit-learn's float32
    and float64 operations; ``state`` rows: intercept, average intercept, scale s, A, B per vector. The call's
    TF-IDF rows are computed once, then each vector passes over them (as scikit-learn's one-vs-rest does: one
    vector's weights at a time in the CPU's cache)."""
    indptr, indices, data = rows
    order, y, positive = labelled
    start = np.zeros(len(order) + 1, np.int64)
    for k in range(len(order)):
        start[k + 1] = start[k] + indptr[order[k] + 1] - indptr[order[k]]
    x = np.empty(start[-1], np.float32)
    columns = np.empty(start[-1], indices.dtype)
    for k in range(len(order)):
        lo, at, squares = indptr[order[k]], start[k], 0.0
        for j in range(start[k + 1] - at):
            columns[at + j] = indices[lo + j]
            x[at + j] = data[lo + j] * idf[indices[lo + j]]
            squares += np.float64(x[at + j] * x[at + j])
        norm = np.float32(np.sqrt(squares) if squares > 0 else 1.0)
        for j in range(at, start[k + 1]):
            x[j] = x[j] / norm
    for v in range(len(positive)):
        _fit_vector(v, (start, columns, x), (y, positive[v]), vectors, scalars, state, blas)
        _fold_scale(v, vectors, state, blas)


@numba.njit(nogil=True, cache=True)
def _fit_vector(v, tf_idf, labelled, vectors, scalars, state, blas):
    """Vector v's steps over the call's TF-IDF rows (``tf_idf``: row starts, columns, values)."""
    start, columns, x = tf_idf
    y, positive = labelled
    w, aw = vectors[0][v], vectors[1][v]
    t, alpha, optimal_init = scalars[0], scalars[1], scalars[2]
    for k in range(len(start) - 1):
        lo, hi = start[k], start[k + 1]
        eta = 1.0 / (alpha * (optimal_init + t - 1.0))
        target = 1.0 if y[k] == positive else 0.0
        inner = 0.0
        for j in range(lo, hi):
            inner += np.float64(w[columns[j]] * x[j])
        inner *= state[2, v]
        p = np.float64(np.float32(inner)) + state[0, v]
        update = -eta * min(max(_gradient(target, p), -_MAX_DLOSS), _MAX_DLOSS)
        state[2, v] *= np.float64(np.float32(max(0.0, 1.0 - eta * alpha)))
        if state[2, v] < _RESET_SCALE:
            _fold_scale(v, vectors, state, blas)
        c = np.float32(update)
        scale, a = state[2, v], state[3, v]
        step_a = np.float64(-c) / scale
        if update != 0.0:   # w and ā of a column updated side by side: one pass over the row's columns
            step = np.float64(c / np.float32(scale))
            for j in range(lo, hi):
                column, value = columns[j], np.float64(x[j])
                w[column] = np.float32(np.float64(w[column]) + value * step)
                aw[column] = np.float32(np.float64(aw[column]) + a * value * step_a)
            state[0, v] += update * _INTERCEPT_DECAY
        else:
            for j in range(lo, hi):
                aw[columns[j]] = np.float32(np.float64(aw[columns[j]]) + a * np.float64(x[j]) * step_a)
        steps = np.float32(t)
        mu = 1.0 / np.float64(steps)
        if steps > 1:
            state[4, v] /= (1.0 - mu)
        state[3, v] += mu * state[4, v] * scale
        state[1, v] += (state[0, v] - state[1, v]) / t
        t += 1.0
