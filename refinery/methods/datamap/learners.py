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
        order = np.random.default_rng([self.seed, epoch]).permutation(len(self.y))
        for start in range(0, len(self.y), BATCH):
            rows = order[start:start + BATCH]
            self._step(self.features[rows], self.y[rows])

    def _step(self, batch, y: np.ndarray) -> None:
        """One SGD step on the batch's mean log-loss; on sparse rows, touching only the rows of W their features use."""
        import scipy.sparse as sp

        if not sp.issparse(batch):
            residual = softmax(batch @ self.W)
            residual[np.arange(len(y)), y] -= 1.0
            self.W -= (self.lr / len(y)) * (batch.T @ residual).astype(np.float32)
            return
        used, local = np.unique(batch.indices, return_inverse=True)
        compact = batch.copy()
        compact.indices = local.astype(batch.indices.dtype)
        compact._shape = (batch.shape[0], len(used))
        residual = softmax(np.asarray(compact @ self.W[used]))
        residual[np.arange(len(y)), y] -= 1.0
        self.W[used] -= (self.lr / len(y)) * np.asarray(compact.T @ residual, np.float32)

    def proba(self) -> np.ndarray:
        """p(· | x_i) of every training row under the current W, a block at a time."""
        return np.vstack([softmax(np.asarray(self.features[s:s + BLOCK_ROWS] @ self.W))
                          for s in range(0, len(self.y), BLOCK_ROWS)]) if len(self.y) else \
            np.zeros((0, self.W.shape[1]), np.float32)

    def state(self) -> bytes:
        return pickle.dumps(self.W)

    def restore(self, state: bytes) -> None:
        self.W = pickle.loads(state)


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
