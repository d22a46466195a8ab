"""Confidence filter (Wu et al. 2022 §2.2.2; IBADR step 4): keep a row only if p_M(label | text) > τ."""
from __future__ import annotations

import os

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from .readers import ReadOptions
from .schema import Mapping
from .storage import publishes_run


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


@publishes_run
def run(inputs, out: str, mapping: Mapping | None = None, opts: ReadOptions = ReadOptions(), tau: float = 0.95,
        model=None, proba_column: str | None = None, mode: str = "overwrite") -> dict:
    """``confidence_filter`` over ``inputs`` into ``out/kept`` (with the input's rejects) and ``out/rejected``."""
    from .corpus import load, write_table

    table, rejects = load(inputs, mapping, opts)
    kept, rejected = confidence_filter(table, tau, model=model, proba_column=proba_column)
    config = {"confidence": {"tau": tau, "proba_column": proba_column, "model": getattr(model, "kind", None)}}
    written = {part: write_table(rows, os.path.join(out, part), rejects=carried, mode=mode, config=config,
                                 storage_options=opts.storage_options, inputs=inputs)
               for part, rows, carried in (("kept", kept, rejects), ("rejected", rejected, None))}
    return {"rows_in": table.num_rows + rejects.num_rows, "kept": written["kept"]["rows"],
            "rejected": written["rejected"]["rows"], "input_rejected": written["kept"]["rejected"], "tau": tau}
