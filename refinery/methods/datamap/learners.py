"""The data map's task models (``backend``), each trained one epoch at a time and asked, after each, for every training
row's probabilities (Swayamdipta et al. 2020; METHODS §8). A learner is resumable: ``state()`` after an epoch and
``restore(state)`` give back the model to go on from.

- ``SoftmaxHead`` (``ngram``, ``embeddings``): a multinomial logistic regression trained from zero by minibatch SGD on
  the log-loss, p(l | x) = softmax(xW)_l,  W ← W − (η/|B|) Σ_{i∈B} x_iᵀ (p(·|x_i) − e_{y_i}),  batches of 32 in a seeded
  order per epoch, on unit-length TF-IDF hashed n-grams (sparse, read from disk a block of 65,536 rows at a time) or
  on a frozen encoder's sentence embeddings centred on their mean and scaled to unit mean length (dense).
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
    """Multinomial logistic regression by minibatch SGD from zero on ``features`` and ``y`` (each row's label code):
    dense rows in the input's order, or sparse rows laid out in blocks on disk (``io.stacked_rows.RowBlocks``; row i
    of the layout is the input's row ``order[i]``, ``models.ngram.HashedCorpus``). Each epoch takes the rows in a
    seeded order: dense rows, and a corpus of one block, in one permutation of them all; blocks in a fresh order,
    each block's rows in a fresh order within it, so that a step reads one block (its rows a random draw of the
    corpus) and the process holds one block, not the corpus's rows."""

    def __init__(self, features, y: np.ndarray, num_labels: int, lr: float, seed: int, order: np.ndarray | None = None):
        self.features, self.lr, self.seed, self.order = features, lr, seed, order
        self.y = y if order is None else y[order]   # in the features' order
        self.W = np.zeros((features.shape[1], num_labels), np.float32)

    def train_epoch(self, epoch: int) -> None:
        rng = np.random.default_rng([self.seed, epoch])
        if self.order is None:
            order = np.arange(len(self.y), dtype=np.int32 if len(self.y) < 2 ** 31 else np.int64)
            rng.shuffle(order)   # the permutation of arange(n), in half the memory
            for start in range(0, len(self.y), BATCH):
                rows = order[start:start + BATCH]
                self._dense_step(self.features[rows], self.y[rows])
            return
        blocks = self.features
        longest = int(np.diff(blocks.indptr).max()) if len(self.y) else 0
        table = _BatchGradient(1 << max(6, (2 * BATCH * longest).bit_length()), self.W.shape[1])
        scratch = (table.features, table.gradient, table.used)
        for b in rng.permutation(len(blocks)) if len(blocks) > 1 else range(len(blocks)):
            start, stop = blocks.span(b)
            order = np.arange(stop - start, dtype=np.int32)
            rng.shuffle(order)
            csr, y = blocks.block(b), self.y[start:stop]
            for first in range(0, len(order), BATCH):
                rows = order[first:first + BATCH]
                e = np.exp(_shifted_logits(csr, rows, self.W))   # NumPy's exp and sum: the softmax of ``proba``
                _sparse_step(csr, rows, y, (e, e.sum(axis=1, keepdims=True)), self.W,
                             np.float32(self.lr / len(rows)), scratch)

    def _dense_step(self, batch: np.ndarray, y: np.ndarray) -> None:
        """One SGD step on the batch's mean log-loss."""
        residual = softmax(batch @ self.W)
        residual[np.arange(len(y)), y] -= 1.0
        self.W -= (self.lr / len(y)) * (batch.T @ residual).astype(np.float32)

    def gold(self, y: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """(p(y_i | x_i), whether argmax p(· | x_i) = y_i) of every training row (``y``: their label codes, in the
        input's order) under the current W, a block of rows at a time (no rows × labels matrix of the whole)."""
        p_gold, right = np.empty(len(y), np.float32), np.empty(len(y), bool)
        if self.order is None:
            for s in range(0, len(y), BLOCK_ROWS):
                proba = softmax(np.asarray(self.features[s:s + BLOCK_ROWS] @ self.W))
                p_gold[s:s + BLOCK_ROWS], right[s:s + BLOCK_ROWS] = _gold_of(proba, y[s:s + BLOCK_ROWS])
            return p_gold, right
        for b in range(len(self.features)):
            start, stop = self.features.span(b)
            rows = self.order[start:stop]
            proba = softmax(np.asarray(self.features.matrix(b) @ self.W))
            p_gold[rows], right[rows] = _gold_of(proba, y[rows])
        return p_gold, right

    def state(self) -> bytes:
        return pickle.dumps(self.W)

    def restore(self, state: bytes) -> None:
        self.W = pickle.loads(state)


@numba.njit(nogil=True, cache=True)
def _shifted_logits(csr, rows, W):
    """z − max z of each row of the batch (``csr``: the rows' indptr, indices, values): z = x W summed in float32 in
    the row's order (as SciPy's product)."""
    indptr, indices, data = csr
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


class _BatchGradient:
    """A step's gradient rows, keyed by feature in a small open-addressing table (``slots`` a power of 2 over twice
    a batch's nonzeros): the step touches it, not a gradient the size of W, so W stays in the CPU's cache."""

    def __init__(self, slots: int, num_labels: int):
        self.features = np.full(slots, -1, np.int64)           # the feature in each slot, −1 where none
        self.gradient = np.zeros((slots, num_labels), np.float32)
        self.used = np.zeros(slots, np.int64)                  # the slots taken, in the order taken


@numba.njit(nogil=True, cache=True)
def _sparse_step(csr, rows, y, softmax_parts, W, scale, table):
    """One SGD step on the batch's mean log-loss, touching only the rows of W its features use: the residual
    softmax − e_y (``softmax_parts``: e, its row sums), each feature's gradient xᵀ·residual summed in float32 over the
    rows in order, then W_d ← W_d − (η/|B|)·gradient_d; ``table`` (a ``_BatchGradient``'s features, gradient, used) is
    left empty."""
    indptr, indices, data = csr
    e, total = softmax_parts
    features, gradient, used = table
    num_labels, mask, taken = W.shape[1], len(features) - 1, 0
    for r in range(len(rows)):
        i = rows[r]
        residual = e[r] / total[r]
        residual[y[i]] -= 1.0
        for p in range(indptr[i], indptr[i + 1]):
            d, value = indices[p], data[p]
            slot = (np.uint64(d) * np.uint64(0x9E3779B97F4A7C15)) >> np.uint64(32)
            slot = np.int64(slot) & mask
            while features[slot] != d and features[slot] != -1:
                slot = (slot + 1) & mask
            if features[slot] == -1:
                features[slot], used[taken] = d, slot
                taken += 1
            for label in range(num_labels):
                gradient[slot, label] += value * residual[label]
    for k in range(taken):
        slot = used[k]
        d = features[slot]
        for label in range(num_labels):
            W[d, label] -= scale * gradient[slot, label]
            gradient[slot, label] = 0.0
        features[slot] = -1


def _gold_of(proba: np.ndarray, y: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(p(y_i | x_i) as float32, whether argmax_l p(l | x_i) = y_i) of rows' probabilities ``proba``."""
    return proba[np.arange(len(y)), y].astype(np.float32), proba.argmax(axis=1) == y


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

    def gold(self, y: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """(p(y_i | x_i), whether the argmax is y_i) of every training row under the fine-tuned model."""
        proba = self.classifier.predict_proba(self.table)
        order = [self.classifier.classes_.index(c) for c in self.classes]
        return _gold_of(proba[:, order], y)

    def state(self) -> bytes:
        import torch

        buffer = io.BytesIO()
        torch.save(self.classifier.model.state_dict(), buffer)
        return buffer.getvalue()

    def restore(self, state: bytes) -> None:
        import torch

        self.classifier.build(self.classes)
        self.classifier.model.load_state_dict(torch.load(io.BytesIO(state), weights_only=True))
