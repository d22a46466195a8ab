"""Debiased evaluation (Zhang et al. 2019; METHODS §4): a predictions table's accuracy and its leakage-neutral
accuracy under the ``weights`` stage's weights, overall and per split (``refinery evaluate``)."""
from __future__ import annotations

import numpy as np
import pyarrow as pa

from refinery.messages import Refusal
from refinery.methods.weights.ips import weighted_accuracy


def evaluate(predictions: pa.Table, weights: pa.Table | None = None, prediction_column: str = "prediction") -> dict:
    """Accuracy and leakage-neutral accuracy of a predictions table, overall and per split.

    ``predictions`` holds id, label and the prediction column (and ``weight``, unless a
    ``weights`` table of id[, split], weight is given and joined on them).
    """
    for col in ("label", prediction_column):
        if col not in predictions.column_names:
            raise Refusal(f"predictions have no column {col!r}; columns: {predictions.column_names}",
                          code="missing-columns")
    if weights is not None:
        keys = ["id"] + (["split"] if "split" in predictions.column_names and "split" in weights.column_names else [])
        joined = predictions.drop_columns([c for c in ("weight",) if c in predictions.column_names]).join(
            weights.select(keys + ["weight"]), keys, join_type="left outer")
        missing = joined["weight"].null_count
        if missing:
            raise Refusal(f"{missing:,} predictions have no weight (joined on {', '.join(keys)})", code="bad-input")
        predictions = joined
    y = predictions["label"].to_numpy(zero_copy_only=False)
    pred = predictions[prediction_column].cast(pa.string()).to_numpy(zero_copy_only=False)
    w = predictions["weight"].to_numpy() if "weight" in predictions.column_names else None
    groups = {"all": np.ones(len(y), bool)}
    if "split" in predictions.column_names:
        split = predictions["split"].to_numpy(zero_copy_only=False)
        groups.update({str(s): split == s for s in sorted(set(split))})
    out = {}
    for name, m in groups.items():
        correct = pred[m] == y[m]
        values, counts = np.unique(y[m], return_counts=True)
        res = {"rows": int(m.sum()), "accuracy": float(correct.mean()),
               "majority_accuracy": float(counts.max() / counts.sum())}
        if w is not None:
            wl = {v: float(w[m][y[m] == v].sum()) for v in values}
            res.update(weighted_accuracy=weighted_accuracy(correct, w[m]),
                       weighted_majority_accuracy=max(wl.values()) / float(w[m].sum()))
        out[name] = res
    return out
