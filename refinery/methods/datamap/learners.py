"""The data map's task models (``backend``), each trained one epoch at a time and asked, after each, for every training
row's probabilities (Swayamdipta et al. 2020; METHODS §8). A learner is resumable: ``state()`` after an epoch and
``restore(state)`` give back the model to go on from.

- ``SoftmaxHead`` (``ngram``, ``embeddings``): a multinomial logistic regression trained from zero by minibatch SGD on
  the log-loss, p(l | x) = softmax(xW)_l,  W ← W − (η/|B|) Σ_{i∈B} x_iᵀ (p(·|x_i) − e_{y_i}),  batches of 32 in a seeded
  order per epoch, on unit-length TF-IDF hashed n-grams (sparse) or on a frozen encoder's sentence embeddings centred
  on their mean and scaled to unit mean length (dense).
- ``FineTuned`` (``transformer``): the encoder and a classification head fine-tuned (``models.transformer``,
  AdamW, batches of 32), one epoch per call from the weights after the last; each epoch has its own optimizer and
  linear decay, so a resumed run continues from the saved weights exactly as the uninterrupted one did.
"""
from __future__ import annotations

import io
import pickle

import numba
import numpy as np
import pyarrow as pa

BLOCK_ROWS = 65_536   # rows scored at a time
BATCH = 32            # rows per SGD step


def softmax(z: np.ndarray) -> np.ndarray:
    z = z - z.max(axis=1, keepdims=True)
    e = np.exp(z)
    return e / e.sum(axis=1, keepdims=True)


class SoftmaxHead:
    """Multinomial logistic regression by minibatch SGD from zero on ``features`` (CSR or dense rows) and ``y``."""

    def __init__(self, features, y: np.ndarray, num_labels: int, lr: float, seed: int):
        self.features, self.y, self.lr, self.seed = features, y, lr, seed
        self.W = np.zeros((features.shape[1], num_labels), np.float32)

    def train_epoch(self, epoch: int) -> None:
        import scipy.sparse as sp

        order = np.random.default_rng([self.seed, epoch]).permutation(len(self.y))
        if not sp.issparse(self.features):
            for start in range(0, len(self.y), BATCH):
                rows = order[start:start + BATCH]
                self._dense_step(self.features[rows], self.y[rows])
            return
        X = self.features
        indptr = X.indptr.astype(np.int64, copy=False)
        gradient = np.zeros_like(self.W)   # the step's gradient rows, zeroed again after each step
        for start in range(0, len(self.y), BATCH):
            rows = order[start:start + BATCH]
            shifted = _shifted_logits(indptr, X.indices, X.data, rows, self.W)
            e = np.exp(shifted)   # NumPy's exp and sum, as the softmax of the dense step and ``proba``
            _sparse_step(indptr, X.indices, X.data, rows, self.y, e, e.sum(axis=1, keepdims=True), self.W,
                         np.float32(self.lr / len(rows)), gradient)

    def _dense_step(self, batch: np.ndarray, y: np.ndarray) -> None:
        """One SGD step on the batch's mean log-loss."""
        residual = softmax(batch @ self.W)
        residual[np.arange(len(y)), y] -= 1.0
        self.W -= (self.lr / len(y)) * (batch.T @ residual).astype(np.float32)

    def proba(self) -> np.ndarray:
        """p(· | x_i) of every training row under the current W, a block at a time."""
        return np.vstack([softmax(np.asarray(self.features[s:s + BLOCK_ROWS] @ self.W))
                          for s in range(0, len(self.y), BLOCK_ROWS)]) if len(self.y) else \
            np.zeros((0, self.W.shape[1]), np.float32)

    def state(self) -> bytes:
        return pickle.dumps(self.W)

    def restore(self, state: bytes) -> None:
        self.W = pickle.loads(state)


@numba.njit(nogil=True, cache=True)
def _shifted_logits(indptr, indices, data, rows, W):
    """z − max z of each row of the batch: z = x W summed in float32 in the row's order (as SciPy's product)."""
    num_labels = W.shape[1]
    z = np.zeros((len(rows), num_labels), np.float32)
    for r in range(len(rows)):
        i = rows[r]
        for p in range(indptr[i], indptr[i + 1]):
            value, w = data[p], W[indices[p]]
            for label in range(num_labels):
                z[r, label] += value * w[label]
        top = z[r, 0]
        for label in range(1, num_labels):
            top = max(top, z[r, label])
        for label in range(num_labels):
            z[r, label] -= top
    return z


@numba.njit(nogil=True, cache=True)
def _sparse_step(indptr, indices, data, rows, y, e, total, W, scale, gradient):
    """One SGD step on the batch's mean log-loss, touching only the rows of W its features use: the residual
    softmax − e_y (``e / total``), the gradient xᵀ·residual summed in float32 over the rows in order, then
    W_d ← W_d − (η/|B|)·gradient_d for each feature d used (``gradient`` comes and goes back zero)."""
    num_labels = W.shape[1]
    for r in range(len(rows)):
        i = rows[r]
        residual = e[r] / total[r]
        residual[y[i]] -= 1.0
        for p in range(indptr[i], indptr[i + 1]):
            value, g = data[p], gradient[indices[p]]
            for label in range(num_labels):
                g[label] += value * residual[label]
    for r in range(len(rows)):
        i = rows[r]
        for p in range(indptr[i], indptr[i + 1]):
            d = indices[p]
            for label in range(num_labels):   # a feature's later rows of the batch subtract its zeroed gradient
                W[d, label] -= scale * gradient[d, label]
            gradient[d] = 0.0


def centred_unit(vectors: np.ndarray) -> np.ndarray:
    """Embeddings centred on their mean and scaled to unit mean length: SGD's step then means what it means on the
    unit-length TF-IDF rows (sentence embeddings share a large common direction, which would dominate every step)."""
    centred = vectors - vectors.mean(axis=0, dtype=np.float64).astype(np.float32)
    scale = float(np.linalg.norm(centred, axis=1).mean()) if len(centred) else 1.0
    return centred / max(scale, 1e-12)


class FineTuned:
    """The encoder fine-tuned on ``table`` (canonical rows) one epoch per ``train_epoch``."""

    def __init__(self, table: pa.Table, classes: list, config):
        from refinery.models.transformer import TransformerClassifier

        self.table, self.seed = table, config.seed
        self.classifier = TransformerClassifier(config.model, config.inputs, epochs=1, lr=config.step(),
                                                batch_size=BATCH, max_length=config.max_length, seed=config.seed)
        self.classes = classes

    def train_epoch(self, epoch: int) -> None:
        self.classifier.seed = self.seed * 1_000 + epoch   # each epoch's own order, whatever ran before it
        self.classifier.fit(self.table, warm_start=epoch > 1)

    def proba(self) -> np.ndarray:
        proba = self.classifier.predict_proba(self.table)
        order = [self.classifier.classes_.index(c) for c in self.classes]
        return proba[:, order]

    def state(self) -> bytes:
        import torch

        buffer = io.BytesIO()
        torch.save(self.classifier.model.state_dict(), buffer)
        return buffer.getvalue()

    def restore(self, state: bytes) -> None:
        import torch

        self.classifier.build(self.classes)
        self.classifier.model.load_state_dict(torch.load(io.BytesIO(state), weights_only=True))
