"""Training dynamics (Swayamdipta et al. 2020; METHODS §8): the task model trained on the corpus for E epochs and,
after each, every training row's probability of its gold label p_e(i) and whether the model's argmax is right.

    confidence μ(i) = (1/E) Σ_e p_e(i),   variability σ(i) = sqrt((1/E) Σ_e (p_e(i) − μ(i))²),
    correctness = (1/E) Σ_e [argmax_e(i) = y_i],   forgetfulness = #{e : right_{e−1}(i) ∧ ¬right_e(i)}.

The task model is a ``learners`` backend trained one epoch at a time on the rows themselves: the dynamics of
learning, not held-out predictions. Each epoch's record and the model's state after it can be kept (``on_epoch``),
so a killed run resumes after its last.
"""
from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from refinery.methods.datamap.config import DataMapConfig


@dataclass
class Epoch:
    """One epoch's record: every row's p(gold) and whether the model was right, and the model's state after it."""

    epoch: int
    p_gold: np.ndarray
    right: np.ndarray
    state: bytes | None


@dataclass
class Dynamics:
    """Per row: confidence, variability, correctness, forgetfulness; per epoch: accuracy and mean p(gold)."""

    confidence: np.ndarray
    variability: np.ndarray
    correctness: np.ndarray
    forgetfulness: np.ndarray
    epochs: list = field(default_factory=list)   # [{"epoch", "accuracy", "mean_p_gold"}]
    resumed: int = 0


def train_epochs(learner, y: np.ndarray, epochs: int, done: list | None = None, on_epoch=None, bar=None) -> list:
    """The ``Epoch`` records of ``epochs`` epochs of ``learner`` (a ``learners`` backend over the rows whose label
    codes are ``y``); ``done``: a killed run's records, in order, the last with its state (training goes on from
    it). Only the last record keeps its model's state."""
    records = list(done or [])
    if records:
        learner.restore(records[-1].state)
    for epoch in range(len(records) + 1, epochs + 1):
        learner.train_epoch(epoch)
        p_gold, right = learner.gold(y)
        records.append(Epoch(epoch, p_gold, right, learner.state()))
        if on_epoch is not None:
            on_epoch(records[-1])
        if len(records) > 1:
            records[-2].state = None
        if bar is not None:
            bar.update(1)
    return records


def dynamics_of(records: list, rows: int, resumed: int = 0) -> Dynamics:
    """Confidence, variability, correctness and forgetfulness of every row from the epochs' ``records``."""
    p = np.stack([r.p_gold for r in records], axis=1) if records else np.zeros((rows, 0), np.float32)
    right = np.stack([r.right for r in records], axis=1) if records else np.zeros((rows, 0), bool)
    forgotten = (right[:, :-1] & ~right[:, 1:]).sum(axis=1) if right.shape[1] > 1 else np.zeros(rows, np.int64)
    return Dynamics(p.mean(axis=1), p.std(axis=1), right.mean(axis=1), forgotten.astype(np.int32),
                    [{"epoch": r.epoch, "accuracy": float(r.right.mean()) if rows else None,
                      "mean_p_gold": float(r.p_gold.mean()) if rows else None} for r in records],
                    resumed=resumed)


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
