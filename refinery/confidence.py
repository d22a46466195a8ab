"""Confidence filter (Wu et al. 2022 §2.2.2; IBADR step 4): keep a row only if p_M(label | text) > τ."""
from __future__ import annotations

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc


def label_confidence(table: pa.Table, model=None, proba_column: str | None = None) -> np.ndarray:
    """p_M(label | text) per row: from a fitted classifier, or from a column holding that probability."""
    if (model is None) == (proba_column is None):
        raise ValueError("give exactly one of a model or a probability column")
    if proba_column is not None:
        if proba_column not in table.column_names:
            raise KeyError(f"no column {proba_column!r}; columns: {table.column_names}")
        return pc.fill_null(table[proba_column], 0.0).to_numpy(zero_copy_only=False).astype(float)
    from .models.base import label_proba

    return label_proba(model.predict_proba(table), model.classes_, table["label"].to_pylist())


def confidence_filter(table: pa.Table, tau: float = 0.95, model=None, proba_column: str | None = None):
    """(kept rows, rejected rows with ``reason``): kept iff p_M(label | text) > τ."""
    conf = label_confidence(table, model, proba_column)
    keep = conf > tau
    kept = table.filter(pa.array(keep)).append_column("confidence", pa.array(conf[keep]))
    rejected = table.filter(pa.array(~keep)).append_column("confidence", pa.array(conf[~keep]))
    rejected = rejected.append_column("reason", pa.array(
        [f"p_M(label | text) = {c:.3f} <= tau {tau}" for c in conf[~keep]], pa.string()))
    return kept, rejected
