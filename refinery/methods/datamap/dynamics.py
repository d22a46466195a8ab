"""Training dynamics (Swayamdipta et al. 2020; METHODS §8): the task model trained on the corpus for E epochs and,
after each, every training row's probability of its gold label p_e(i) and whether the model's argmax is right.

    confidence μ(i) = (1/E) Σ_e p_e(i),   variability σ(i) = sqrt((1/E) Σ_e (p_e(i) − μ(i))²),
    correctness = (1/E) Σ_e [argmax_e(i) = y_i],   forgetfulness = #{e : right_{e−1}(i) ∧ ¬right_e(i)}.

The task model is a multinomial logistic regression on the rows' TF-IDF hashed word 1-2-grams (unit length;
``models.ngram``), trained from zero by minibatch SGD on the log-loss, p(l | x) = softmax(xW)_l,
W ← W − (η/|B|) Σ_{i∈B} x_iᵀ (p(·|x_i) − e_{y_i}), one epoch a pass over the rows in a seeded order: the
dynamics of learning on the rows themselves, not held-out predictions. η (``lr``) is large because the rows have unit
length: with the default the model fits SNLI dev's training rows over five epochs as the paper's fine-tuning
does (training accuracy 72% → 96%), where a well-regularized model converges in one and draws no map.
Each epoch's record and W after it can be kept (``on_epoch``), so a killed run resumes after its last.
"""
from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from refinery.methods.datamap.config import DataMapConfig

BLOCK_ROWS = 65_536   # rows scored at a time
BATCH = 32            # rows per SGD step


@dataclass
class Epoch:
    """One epoch's record: every row's p(gold) and whether the model was right, and the model after it."""

    epoch: int
    p_gold: np.ndarray
    right: np.ndarray
    model: object


@dataclass
class Dynamics:
    """Per row: confidence, variability, correctness, forgetfulness; per epoch: accuracy and mean p(gold)."""

    confidence: np.ndarray
    variability: np.ndarray
    correctness: np.ndarray
    forgetfulness: np.ndarray
    epochs: list = field(default_factory=list)   # [{"epoch", "accuracy", "mean_p_gold"}]
    resumed: int = 0


def train_dynamics(X, y: np.ndarray, num_labels: int, config: DataMapConfig, done: list | None = None,
                   on_epoch=None, bar=None) -> Dynamics:
    """The dynamics of ``config.epochs`` epochs over ``X`` (``sublinear_tf`` of every row) and ``y`` (label
    codes); ``done``: a killed run's ``Epoch`` records, in order (training goes on from the last one's W)."""
    from refinery.models.ngram import smooth_idf, tf_idf

    rows = X.shape[0]
    features = tf_idf(X, smooth_idf(np.bincount(X.indices, minlength=X.shape[1]), rows)).astype(np.float32)
    records = list(done or [])
    W = records[-1].model.copy() if records else np.zeros((X.shape[1], num_labels), np.float32)
    for epoch in range(len(records) + 1, config.epochs + 1):
        order = np.random.default_rng([config.seed, epoch]).permutation(rows)
        for start in range(0, rows, BATCH):
            _step(W, features[order[start:start + BATCH]], y[order[start:start + BATCH]], config.lr)
        p_gold, right = _scored(W, features, y)
        records.append(Epoch(epoch, p_gold, right, W.copy()))
        if on_epoch is not None:
            on_epoch(records[-1])
        if bar is not None:
            bar.update(1)
    p = np.stack([r.p_gold for r in records], axis=1) if records else np.zeros((rows, 0), np.float32)
    right = np.stack([r.right for r in records], axis=1) if records else np.zeros((rows, 0), bool)
    forgotten = (right[:, :-1] & ~right[:, 1:]).sum(axis=1) if right.shape[1] > 1 else np.zeros(rows, np.int64)
    return Dynamics(p.mean(axis=1), p.std(axis=1), right.mean(axis=1), forgotten.astype(np.int32),
                    [{"epoch": r.epoch, "accuracy": float(r.right.mean()) if rows else None,
                      "mean_p_gold": float(r.p_gold.mean()) if rows else None} for r in records],
                    resumed=len(done or []))


def _softmax(z: np.ndarray) -> np.ndarray:
    z = z - z.max(axis=1, keepdims=True)
    e = np.exp(z)
    return e / e.sum(axis=1, keepdims=True)


def _step(W: np.ndarray, batch, y: np.ndarray, lr: float) -> None:
    """One SGD step on the batch's mean log-loss, touching only the rows of W its features use."""
    used, local = np.unique(batch.indices, return_inverse=True)
    compact = batch.copy()
    compact.indices = local.astype(batch.indices.dtype)
    compact._shape = (batch.shape[0], len(used))
    residual = _softmax(np.asarray(compact @ W[used]))
    residual[np.arange(len(y)), y] -= 1.0
    W[used] -= (lr / len(y)) * np.asarray(compact.T @ residual, np.float32)


def _scored(W: np.ndarray, features, y: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(p(gold), argmax = gold) of every row under W, a block at a time."""
    p_gold, right = np.empty(len(y), np.float32), np.empty(len(y), bool)
    for start in range(0, len(y), BLOCK_ROWS):
        proba = _softmax(np.asarray(features[start:start + BLOCK_ROWS] @ W))
        gold = y[start:start + BLOCK_ROWS]
        p_gold[start:start + len(gold)] = proba[np.arange(len(gold)), gold]
        right[start:start + len(gold)] = proba.argmax(axis=1) == gold
    return p_gold, right


def select(dynamics: Dynamics, config: DataMapConfig) -> np.ndarray:
    """The rows ``config.keep`` keeps (a mask): the ``share`` of them highest in variability (ambiguous), lowest in
    confidence (hard-to-learn), highest in confidence (easy-to-learn), or drawn at random; ties by input order."""
    rows = len(dynamics.confidence)
    size = int(round(config.share * rows))
    position = np.arange(rows)
    if config.keep == "random":
        chosen = np.random.default_rng([config.seed, 1]).choice(rows, size, replace=False)
    else:
        key = {"ambiguous": -dynamics.variability, "hard": dynamics.confidence,
               "easy": -dynamics.confidence}[config.keep]
        chosen = np.lexsort((position, key))[:size]
    keep = np.zeros(rows, bool)
    keep[chosen] = True
    return keep


def regions_by_label(dynamics: Dynamics, y: np.ndarray, labels: list, share: float) -> list[dict]:
    """Per label: its rows and the share of them among the ``share`` most ambiguous, hardest and easiest rows."""
    out = []
    masks = {region: select(dynamics, DataMapConfig(keep=region, share=share)) for region in ("ambiguous", "hard",
                                                                                              "easy")}
    for code, label in enumerate(labels):
        mine = y == code
        n = int(mine.sum())
        out.append({"label": label, "rows": n, **{region: float(mask[mine].mean()) if n else None
                                                 for region, mask in masks.items()}})
    return out
