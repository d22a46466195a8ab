"""Train a classifier on one corpus and score others: hypothesis-only probes and task models.

Writes ``report.json`` (accuracy per evaluation corpus against its majority class),
``predictions.parquet`` (id, split, label, prediction, p_label; what ``refinery evaluate`` and
the confidence filter read) and, with ``save_model``, the fitted classifier.
"""
from __future__ import annotations

import json
import time

import numpy as np
import pyarrow as pa

from refinery.io.corpus import load
from refinery.io.readers import ReadOptions
from refinery.io.schema import Mapping
from refinery.io.splits import split_name
from refinery.io.publishing import AtomicDir
from refinery.models.base import label_proba, make_classifier


def run(train: list[str], evaluate: list[str], out: str, mapping: Mapping | None = None,
        opts: ReadOptions = ReadOptions(), backend: str = "ngram", inputs: str = "pair", params: dict | None = None,
        save_model: str | None = None) -> dict:
    train_table, _ = load(train, mapping, opts)
    model = make_classifier(backend, inputs, **(params or {}))
    t = time.perf_counter()
    model.fit(train_table)
    fit_seconds = time.perf_counter() - t
    report = {"backend": backend, "inputs": inputs, "params": params or {}, "train": list(train),
              "train_rows": train_table.num_rows, "fit_seconds": round(fit_seconds, 2), "eval": {}}
    if getattr(model, "precision_", None) is not None:
        report["train_precision"] = model.precision_.to_dict()
    predictions = []
    for path in evaluate:
        table, _ = load([path], mapping, opts)
        proba = model.predict_proba(table)
        pred = np.array(model.classes_, dtype=object)[proba.argmax(axis=1)]
        labels = np.array(table["label"].to_pylist(), dtype=object)
        p_label = label_proba(proba, model.classes_, labels)
        values, counts = np.unique(labels, return_counts=True)
        name = split_name(path)
        report["eval"][name] = {"rows": table.num_rows, "accuracy": float((pred == labels).mean()),
                                "majority_accuracy": float(counts.max() / counts.sum())}
        predictions.append(pa.table({"id": table["id"], "split": pa.array([name] * table.num_rows, pa.string()),
                                     "label": table["label"], "prediction": pa.array(pred.tolist(), pa.string()),
                                     "p_label": pa.array(p_label)}))
    if evaluate:
        report["accuracy"] = report["eval"][split_name(evaluate[0])]["accuracy"]
    if save_model:
        model.save(save_model)
    with AtomicDir(out, opts.storage_options) as d:
        d.write_parquet("predictions.parquet", pa.concat_tables(predictions) if predictions else pa.table({}))
        d.write_text("report.json", json.dumps(report, indent=1))
        d.commit()
    return report
