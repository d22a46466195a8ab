"""AFLite's linear classifiers on dense Φ (sentence embeddings): the paper's logistic regression, the m partitions of
an iteration fit together (Le Bras et al. 2020, Algorithm 1; METHODS §7).

Partition j fits a multinomial logistic regression on its training rows T_j,

    min_{W_j, b_j}  (1/t) Σ_{i ∈ T_j} −log softmax(Φ(x_i) W_j + b_j)_{y_i}  +  (λ/2) ‖W_j‖²,   λ = 1/t

(scikit-learn's ``LogisticRegression(C=1)`` divided by t), from zero by L-BFGS (at most ``MAX_ITER`` iterations, strong
Wolfe line search). The objective is a sum over partitions with no shared parameter, so a block of partitions is one
problem: one product Φ(S) [W_1 … W_b] scores every row under every model, and each row's loss counts only in the
partitions that train on it. Φ is centred on S's mean first: the bias absorbs the shift, so the models are the same,
and L-BFGS converges about 4× sooner (sentence embeddings share a large common direction). Held-out rows are then
predicted by the argmax of their scores. Deterministic on a given machine: the same rows, partitions and start give
the same models.
"""
from __future__ import annotations

import numpy as np

MAX_ITER = 100             # L-BFGS iterations per block (scikit-learn's default)
BLOCK_FLOATS = 1 << 25     # rows × partitions × labels scored at a time (128 MiB of float32)


def logistic_predictability(X: np.ndarray, y: np.ndarray, num_labels: int, train: np.ndarray
                            ) -> tuple[np.ndarray, np.ndarray]:
    """(right, held out) per row of ``X`` (Φ of S, rows × dim) and ``y`` (label codes): how many of the partitions
    that held the row out (``train``: rows × m, True where the row is in T_j) predicted its label, and how many held
    it out."""
    import torch

    rows, m = train.shape
    centred = np.asarray(X, np.float32) - X.mean(axis=0, dtype=np.float64).astype(np.float32)
    features = torch.cat([torch.from_numpy(np.ascontiguousarray(centred)), torch.ones(rows, 1)], dim=1)
    labels = torch.from_numpy(y)
    right, held = np.zeros(rows, np.int32), np.zeros(rows, np.int32)
    block = max(1, min(m, BLOCK_FLOATS // max(1, rows * num_labels)))
    for start in range(0, m, block):
        mask = torch.from_numpy(train[:, start:start + block].astype(np.float32))
        scores = _fit_block(features, labels, mask, num_labels)
        predicted = scores.argmax(dim=2).numpy()
        out = ~train[:, start:start + block]
        right += ((predicted == y[:, None]) & out).sum(axis=1, dtype=np.int32)
        held += out.sum(axis=1, dtype=np.int32)
    return right, held


def _fit_block(features, labels, mask, num_labels: int):
    """Every row's scores (rows × b × labels) under the b partitions' models fit on their training rows (``mask``)."""
    import torch

    rows, b = mask.shape
    dim = features.shape[1]
    sizes = mask.sum(dim=0).clamp(min=1)                             # t of each partition
    W = torch.zeros(dim, b * num_labels, requires_grad=True)
    penalized = torch.ones(dim, 1)
    penalized[-1] = 0.0                                              # the bias is not penalized
    optimizer = torch.optim.LBFGS([W], lr=1, max_iter=MAX_ITER, tolerance_grad=1e-6, tolerance_change=1e-9,
                                  history_size=10, line_search_fn="strong_wolfe")

    def objective():
        optimizer.zero_grad()
        logits = (features @ W).view(rows, b, num_labels)
        nll = -torch.log_softmax(logits, dim=2).gather(2, labels.view(rows, 1, 1).expand(rows, b, 1)).squeeze(2)
        loss = ((nll * mask).sum(dim=0) / sizes).sum()
        ridge = ((W * penalized) ** 2).view(dim, b, num_labels).sum(dim=(0, 2)) / (2 * sizes)
        total = loss + ridge.sum()
        total.backward()
        return total

    optimizer.step(objective)
    with torch.no_grad():
        return (features @ W).view(rows, b, num_labels)
