"""Train a classifier on one corpus and score others: hypothesis-only probes and task models.

Publishes ``report.json`` (accuracy per evaluation corpus against its majority class) and
``predictions.parquet`` (id, split, label, prediction, p_label; what ``refinery evaluate`` and
the confidence filter read) in its folder and, with ``save_model``, the fitted classifier.
"""
from __future__ import annotations

import json
import time
from dataclasses import dataclass
from typing import TYPE_CHECKING

from refinery.core.validation import NOT_EMPTY, setting
from refinery.methods.compare.config import TaskModel
from refinery.pipeline.stage import Output, Stage, StageInput, StageResult

if TYPE_CHECKING:
    from refinery.pipeline.output import StageOutput


@dataclass
class ProbeConfig(TaskModel):
    """The classifier (``TaskModel``: the backend, what it reads, the transformer's training), the corpora it
    scores, and where the fitted classifier is saved (a folder or URL; none: not saved)."""

    evaluate: tuple = setting((), help="A corpus to score (repeat for more).", option="--eval", multiple=True)
    save_model: str | None = setting(None, NOT_EMPTY.or_none(), "Save the fitted classifier here (a folder or URL), "
                                                                "for --model of confidence and IBADR.")


class ProbeStage(Stage):
    """Train a classifier on the input and score the ``evaluate`` corpora with it (``refinery probe``)."""

    name, Config = "probe", ProbeConfig
    output = Output.INPUT
    verb = False   # ``refinery probe`` (cli/tools.py)

    def run(self, source: StageInput, out: "StageOutput") -> StageResult:
        import numpy as np
        import pyarrow as pa

        from refinery.io.corpus import load
        from refinery.io.splits import split_name
        from refinery.models.base import label_proba

        c = self.config
        train_table, rejects = source.load()
        model = c.classifier()
        t = time.perf_counter()
        model.fit(train_table)
        fit_seconds = time.perf_counter() - t
        report = {**c.model_key(), "train": source.paths,
                  "train_rows": train_table.num_rows, "fit_seconds": round(fit_seconds, 2), "eval": {}}
        if getattr(model, "precision_", None) is not None:
            report["train_precision"] = model.precision_.to_dict()
        predictions = []
        for path in c.evaluate:
            table, _ = load([path], source.mapping, source.opts)
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
        if c.evaluate:
            report["accuracy"] = report["eval"][split_name(c.evaluate[0])]["accuracy"]
        if c.save_model:
            out.save_folder(c.save_model, model.save)
        with out.files("") as d:
            d.write_parquet("predictions.parquet", pa.concat_tables(predictions) if predictions else pa.table({}))
            d.write_text("report.json", json.dumps(report, indent=1))
            d.commit()
        rows = train_table.num_rows
        return StageResult(rows + rejects.num_rows, {"trained on": rows, "input rejects": rejects.num_rows}, report,
                           report_file="report.json")
