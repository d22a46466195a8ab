"""The ``probe`` stage: train a classifier on one corpus and score others (hypothesis-only probes, task models).

Publishes ``report.json`` (per evaluation corpus: accuracy against its majority class, its rows and rejects)
and ``predictions.parquet`` (id, split, label, prediction, p_label; what ``refinery evaluate`` and the confidence
filter read) in its folder and, with ``save_model``, the fitted classifier. Every evaluation corpus is read, and
the saved model's folder checked, before the model is fit.
"""
from __future__ import annotations

import json
import time
from typing import TYPE_CHECKING

from refinery.models.evaluation import EvalSet
from refinery.methods.probe.config import ProbeConfig
from refinery.pipeline.stage import Output, Stage, StageInput, StageResult

if TYPE_CHECKING:
    from refinery.pipeline.output import StageOutput


class ProbeStage(Stage):
    """Train a classifier on the input and score the ``evaluate`` corpora with it (``refinery probe``)."""

    name, Config = "probe", ProbeConfig
    output = Output.INPUT
    verb = False   # ``refinery probe --train`` (cli/tools.py)
    one_task = True   # one model trained and scored: on Ray one task reads the corpora and writes the report

    def also_reads(self) -> list[str]:
        """The evaluation corpora: part of its fingerprint (``--mode skip`` runs again when one changed)."""
        return [p for e in self.config.eval_sets() for p in e.paths]

    def run(self, source: StageInput, out: "StageOutput") -> StageResult:
        import pyarrow as pa

        from refinery.io.corpus import load
        from refinery.io.ownership import claim_output

        c = self.config
        if c.save_model:
            claim_output(c.save_model, source.opts.storage_options, "--save-model")
        train_table, rejects = source.load()
        evals = {e.name: (e, *load(list(e.paths), e.mapping(source.mapping), source.opts)) for e in c.eval_sets()}
        empty = [name for name, (_, table, _) in evals.items() if not table.num_rows]
        if empty:
            raise ValueError(f"evaluation corpus {empty[0]}: no good rows in {', '.join(evals[empty[0]][0].paths)}")
        model = c.classifier()
        t = time.perf_counter()
        model.fit(train_table)
        report = {**c.model_key(), "train": source.paths, "train_rows": train_table.num_rows,
                  "train_rejected": rejects.num_rows, "fit_seconds": round(time.perf_counter() - t, 2), "eval": {}}
        if getattr(model, "precision_", None) is not None:
            report["train_precision"] = model.precision_.to_dict()
        predictions, warnings = [], []
        for name, (e, table, eval_rejects) in evals.items():
            report["eval"][name], scored = _score(model, e, table)
            report["eval"][name]["rejected"] = eval_rejects.num_rows
            predictions.append(scored)
            if eval_rejects.num_rows:
                warnings.append(e.scored_on_part(table.num_rows, eval_rejects))
        if evals:
            report["accuracy"] = report["eval"][next(iter(evals))]["accuracy"]
        if c.save_model:
            out.save_folder(c.save_model, model.save)
        with out.files("") as d:
            d.write_parquet("predictions.parquet", pa.concat_tables(predictions) if predictions else
                            _predictions_schema().empty_table())   # no --eval: the columns, for evaluate to name
            d.write_text("report.json", json.dumps(report, indent=1))
            d.commit()
        rows = train_table.num_rows
        return StageResult(rows + rejects.num_rows, {"trained on": rows, "input rejects": rejects.num_rows}, report,
                           _headline(c, report), tuple(_lines(report)), tuple(warnings), report_file="report.json")


def _headline(c: ProbeConfig, report: dict) -> str:
    """What was trained, on how many rows, in how long, and its accuracy on each evaluation corpus against that
    corpus's majority class."""
    reads = "hypothesis-only" if c.inputs == "hypothesis" else "full input"
    scored = "; ".join(f"{name} {r['accuracy']:.1%} (majority {r['majority_accuracy']:.1%})"
                       for name, r in report["eval"].items())
    return (f"{c.backend} ({reads}) on {report['train_rows']:,} rows in {report['fit_seconds']:.0f}s"
            + (f": {scored}" if scored else ""))


def _lines(report: dict):
    """Each evaluation corpus's accuracy against its majority class's."""
    for name, r in report["eval"].items():
        rejected = f", {r['rejected']:,} rejected" if r["rejected"] else ""
        yield (f"  {name:<28} accuracy {r['accuracy']:.4f}  (majority {r['majority_accuracy']:.4f}, "
               f"{r['rows']:,} rows{rejected})")


def _score(model, e: EvalSet, table):
    """(accuracy, the majority class's and the rows; the predictions) of ``model`` on evaluation corpus ``e``: its
    probabilities summed onto the corpus's own labels through ``e``'s label map (HANS: neutral and contradiction
    are non-entailment), as ``compare`` scores."""
    import numpy as np
    import pyarrow as pa

    from refinery.models.evaluation import project, resolve_label_map

    labels = np.array(table["label"].to_pylist(), dtype=object)
    eval_labels = sorted(set(labels))
    label_map = resolve_label_map(list(model.classes_), eval_labels, e.full_label_map(), e.name)
    proba = project(model.predict_proba(table), list(model.classes_), label_map, eval_labels)
    pred = np.array(eval_labels, dtype=object)[proba.argmax(axis=1)]
    p_label = proba[np.arange(len(labels)), np.searchsorted(eval_labels, labels)]
    counts = np.unique(labels, return_counts=True)[1]
    scores = {"rows": table.num_rows, "accuracy": float((pred == labels).mean()),
              "majority_accuracy": float(counts.max() / counts.sum()), **({"preset": e.preset} if e.preset else {})}
    return scores, pa.table({"id": table["id"], "split": pa.array([e.name] * table.num_rows, pa.string()),
                             "label": table["label"], "prediction": pa.array(pred.tolist(), pa.string()),
                             "p_label": pa.array(p_label, pa.float64())})


def _predictions_schema():
    import pyarrow as pa

    return pa.schema([("id", pa.string()), ("split", pa.string()), ("label", pa.string()),
                      ("prediction", pa.string()), ("p_label", pa.float64())])

