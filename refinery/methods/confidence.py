"""Confidence filter (Wu et al. 2022 §2.2.2; IBADR step 4): keep a row only if p_M(label | text) > τ.

p_M comes from a column, a saved classifier, or a classifier cross-fitted on the input itself
(``model: ngram`` or ``transformer``): each row is scored by a model fit on the other K−1 folds,
so no row is judged by a model that saw it.
"""
from __future__ import annotations

import os
from dataclasses import dataclass

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from refinery.core.validation import NOT_EMPTY, SEED, at_least, number_in, setting, validate
from refinery.io.readers import ReadOptions
from refinery.io.schema import Mapping
from refinery.io.storage import publishes_run
from refinery.pipeline.stage import Stage, StageInput, StageResult

CROSS_FIT = ("ngram", "transformer")


@dataclass
class ConfidenceConfig:
    tau: float = setting(0.95, number_in(0, 1, open_high=True), "τ: the least p_M(label | text) a kept row exceeds.")
    model: str | None = setting(None, NOT_EMPTY.or_none(), "ngram or transformer (cross-fitted on the input), or a "
                                                           "saved classifier's folder.")
    proba_column: str | None = setting(None, NOT_EMPTY.or_none(), "Or a column holding p_M(label | text).")
    folds: int = setting(5, at_least(2), "K of the cross-fitting.")
    seed: int = setting(0, SEED, "Seed of the folds.")

    def __post_init__(self):
        validate(self)
        if (self.model is None) == (self.proba_column is None):
            raise ValueError("give exactly one of model (ngram, transformer or a saved classifier) or proba_column")


def label_confidence(table: pa.Table, model=None, proba_column: str | None = None) -> np.ndarray:
    """p_M(label | text) per row: from a fitted classifier, or from a column holding that probability."""
    if (model is None) == (proba_column is None):
        raise ValueError("give exactly one of a model or a probability column")
    if proba_column is not None:
        if proba_column not in table.column_names:
            raise KeyError(f"no column {proba_column!r}; columns: {table.column_names}")
        return pc.fill_null(table[proba_column], 0.0).to_numpy(zero_copy_only=False).astype(float)
    from refinery.models.base import label_proba

    return label_proba(model.predict_proba(table), model.classes_, table["label"].to_pylist())


def config_confidence(table: pa.Table, config: ConfidenceConfig) -> np.ndarray:
    """p_M(label | text) as ``config`` says: a column, a saved classifier, or K-fold cross-fitting."""
    if config.proba_column is not None:
        return label_confidence(table, proba_column=config.proba_column)
    from refinery.models.base import (
        cross_fit_proba,
        label_proba,
        load_classifier,
        make_classifier,
    )

    if config.model in CROSS_FIT:
        proba, classes = cross_fit_proba(lambda: make_classifier(config.model), table, config.folds, config.seed)
        return label_proba(proba, classes, table["label"].to_pylist())
    return label_confidence(table, model=load_classifier(config.model))


def split_by_confidence(table: pa.Table, conf: np.ndarray, tau: float):
    """(kept rows, rejected rows with ``reason``): kept iff p_M(label | text) > τ; both get ``confidence``."""
    keep = conf > tau
    kept = table.filter(pa.array(keep)).append_column("confidence", pa.array(conf[keep]))
    rejected = table.filter(pa.array(~keep)).append_column("confidence", pa.array(conf[~keep]))
    rejected = rejected.append_column("reason", pa.array(
        [f"p_M(label | text) = {c:.3f} <= tau {tau}" for c in conf[~keep]], pa.string()))
    return kept, rejected


def confidence_filter(table: pa.Table, tau: float = 0.95, model=None, proba_column: str | None = None):
    """(kept rows, rejected rows with ``reason``) by a fitted model or a probability column."""
    return split_by_confidence(table, label_confidence(table, model, proba_column), tau)


@publishes_run
def run(inputs, out: str, mapping: Mapping | None = None, opts: ReadOptions = ReadOptions(),
        config: ConfidenceConfig = ConfidenceConfig(proba_column="p_label"), mode: str = "overwrite") -> dict:
    """The confidence filter over ``inputs`` into ``out/kept`` (with the input's rejects) and ``out/rejected``."""
    from refinery.io.corpus import load, write_table
    from refinery.pipeline.config import to_dict

    table, rejects = load(inputs, mapping, opts)
    kept, rejected = split_by_confidence(table, config_confidence(table, config), config.tau)
    settings = {"confidence": to_dict(config)}
    written = {part: write_table(rows, os.path.join(out, part), rejects=carried, mode=mode, config=settings,
                                 storage_options=opts.storage_options, inputs=inputs)
               for part, rows, carried in (("kept", kept, rejects), ("rejected", rejected, None))}
    return {"rows_in": table.num_rows + rejects.num_rows, "kept": written["kept"]["rows"],
            "rejected": written["rejected"]["rows"], "input_rejected": written["kept"]["rejected"],
            "tau": config.tau}


class ConfidenceStage(Stage):
    name, kind, Config = "confidence", "stream", ConfidenceConfig
    needs = ("id", "text_a", "label")
    adds = ("confidence",)

    def run(self, source: StageInput, out: str) -> StageResult:
        r = run(source.paths, out, source.mapping, source.opts, self.config)
        return StageResult(r["rows_in"], {"kept": r["kept"], "filtered out": r["rejected"],
                                          "input rejects": r["input_rejected"]}, r,
                           f"kept {r['kept']:,}, rejected {r['rejected']:,} (tau {r['tau']})")
