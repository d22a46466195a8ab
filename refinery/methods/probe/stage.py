"""The ``probe`` stage: train a classifier on one corpus and score others (hypothesis-only probes, task models).

Publishes ``report.json`` (per evaluation corpus: accuracy against its majority class, its rows and rejects), its
page ``report.html`` and ``predictions.parquet`` (id, split, label, prediction, p_label; what ``refinery evaluate`` and the confidence
filter read) in its folder and, with ``save_model``, the fitted classifier. Every evaluation corpus is read, and
the saved model's folder checked, before the model is fit.
"""
from __future__ import annotations

import dataclasses
import time
from dataclasses import dataclass
from typing import TYPE_CHECKING

from refinery.core.report_record import ReportRecord, optional
from refinery.messages import Refusal
from refinery.models.evaluation import EvalSet
from refinery.models.task_model import READS, model_reads, overlap_rows, text_keys, training_rows
from refinery.methods.probe.config import ProbeConfig
from refinery.pipeline.stage import Output, StageResult
from refinery.pipeline.stage_input import SideInput
from refinery.pipeline.table_stage import CorpusPart, TableInput, TableStage

if TYPE_CHECKING:
    from refinery.pipeline.output import StageOutput


@dataclass(frozen=True, kw_only=True)
class ProbeReport(ReportRecord):
    """A probe's report: the classifier's settings (``TaskModel.model_key``: the backend and what it reads; the
    transformer's encoder and training too, its ``train_precision`` the precision it was fine-tuned in, a
    ``Precision.to_dict``), the training corpus, its rows trained on, of other splits left out and rejected, the
    fit's seconds, each evaluation corpus ({name: rows, accuracy, majority_accuracy, preset, rejected,
    overlap_rows}) and the first one's accuracy (none without one)."""

    backend: str
    inputs: str
    model: str | None = optional()
    epochs: int | None = optional()
    lr: float | None = optional()
    batch_size: int | None = optional()
    max_length: int | None = optional()
    train_precision: dict | str | None = optional()
    train: list
    train_rows: int
    other_splits_left_out: int
    train_rejected: int
    fit_seconds: float
    eval: dict
    accuracy: float | None = optional()


class ProbeStage(TableStage):
    """Train a classifier on the input (its train split where it has named splits; the pair, or the hypothesis
    alone: the hypothesis-only probe) and score the evaluation corpora with it (a report and the predictions; the
    rows pass on)."""

    report_type = ProbeReport

    # a table stage that writes no corpus: on Ray one task reads the corpora and writes the report

    name, Config = "probe", ProbeConfig
    output = Output.INPUT

    def also_reads(self) -> list[str]:
        """The evaluation corpora: part of its fingerprint (``--mode skip`` runs again when one changed)."""
        return [p for e in self.config.eval_sets() for p in e.paths]

    @classmethod
    def pipeline_step(cls, config: ProbeConfig, spec_in) -> ProbeConfig:
        """The step of the pipeline a verb's command line spells: each evaluation corpus that is not a refinery
        corpus carries the command line's preset, which a pipeline reads only its input through (``with_presets``)."""
        from refinery.models.evaluation import with_presets

        return dataclasses.replace(config, evaluate=with_presets(config.eval_sets(), spec_in))

    def compute(self, rows: TableInput) -> list[CorpusPart]:
        """Every evaluation corpus read and the saved model's folder checked, then the model fit on the input's rows
        and each corpus scored; no corpus written."""
        from refinery.io.ownership import claim_output

        c, source = self.config, rows.source
        if c.save_model:
            claim_output(c.save_model, source.opts.storage_options, "save_model")
        evals = {e.name: (e, *source.read_side(SideInput(tuple(e.paths), e.mapping(source.mapping))))
                 for e in c.eval_sets()}
        empty = [name for name, (_, table, _) in evals.items() if not table.num_rows]
        if empty:
            e, _, rejects = evals[empty[0]]
            raise Refusal(e.no_good_rows(rejects), code="all-rejected")
        train_table, left_out = training_rows("the input", rows.table(), None, "give that split alone as the input")
        self.model = model = c.classifier()
        t = time.perf_counter()
        model.fit(train_table)
        fit_seconds = round(time.perf_counter() - t, 2)
        key = c.model_key()
        if getattr(model, "precision_", None) is not None:
            key["train_precision"] = model.precision_.to_dict()   # the precision it was fine-tuned in
        self.predictions, self.warnings, scores = [], [], {}
        reads = model_reads({"the input": train_table}, c.inputs)
        trained = text_keys(train_table, reads)
        for name, (e, table, eval_rejects) in evals.items():
            scores[name], scored = _score(model, e, table)
            scores[name]["rejected"] = eval_rejects.num_rows
            overlap = scores[name]["overlap_rows"] = overlap_rows(text_keys(table, reads), trained)
            self.predictions.append(scored)
            if eval_rejects.num_rows:
                self.warnings.append(e.scored_on_part(table.num_rows, eval_rejects))
            if overlap:   # compare refuses it; a probe says it (a probe of its own training rows is a choice)
                self.warnings.append(f"evaluation corpus {name}: {overlap:,} of its {table.num_rows:,} rows are also "
                                     f"training rows (the same texts where the model reads {READS[reads]}): its "
                                     "accuracy is inflated; score rows the model was not trained on")
        self.summary = ProbeReport(**key, train=source.paths, train_rows=train_table.num_rows,
                                   other_splits_left_out=left_out, train_rejected=rows.rejects.num_rows,
                                   fit_seconds=fit_seconds, eval=scores,
                                   accuracy=scores[next(iter(evals))]["accuracy"] if evals else None)
        return []

    def result(self, manifests: dict, out: "StageOutput") -> StageResult:
        """``report.json``, ``report.html`` and ``predictions.parquet`` published in the stage's folder, the model
        saved where ``save_model`` says."""
        import pyarrow as pa

        from refinery.report import format as fmt
        from refinery.report.page import fields, table

        c, report = self.config, self.summary
        if c.save_model:
            out.save_folder(c.save_model, self.model.save)
        page = out.report_page(f"probe: {c.backend} on the {'hypothesis' if c.inputs == 'hypothesis' else 'input'}")
        page.section("Training", fields({"rows": report.train_rows, "rejected": report.train_rejected,
                                         "fit seconds": report.fit_seconds}))
        if report.eval:
            page.section("Accuracy on each evaluation corpus", table(
                [{"corpus": name, "accuracy": r["accuracy"], "majority class": r["majority_accuracy"],
                  "rows": r["rows"], "rejected": r["rejected"]} for name, r in report.eval.items()],
                formats={"accuracy": fmt.percent, "majority class": fmt.percent}))
        predictions = pa.concat_tables(self.predictions) if self.predictions else _predictions_schema().empty_table()
        out.publish_report(report, page, {"predictions.parquet": predictions}, part="")   # no --eval: the columns,
        #                                                                                  for evaluate to name
        trained, rejected, others = report.train_rows, report.train_rejected, report.other_splits_left_out
        headline = _headline(c, report)
        parts = {"trained on": trained, **({"other splits, not trained on": others} if others else {}),
                 "input rejects": rejected}
        return StageResult(trained + others + rejected, parts, report,
                           headline, (headline, *_lines(report)), tuple(self.warnings),
                           report_file="report.html")


def _headline(c: ProbeConfig, report: ProbeReport) -> str:
    """What was trained, on how many rows, in how long, and its accuracy on each evaluation corpus against that
    corpus's majority class."""
    reads = "hypothesis-only" if c.inputs == "hypothesis" else "full input"
    scored = "; ".join(f"{name} {r['accuracy']:.1%} (majority {r['majority_accuracy']:.1%})"
                       for name, r in report.eval.items())
    return (f"{c.backend} ({reads}) on {report.train_rows:,} rows in {report.fit_seconds:.0f}s"
            + (f": {scored}" if scored else ""))


def _lines(report: ProbeReport):
    """The rows of the input's other splits, not trained on; each evaluation corpus's accuracy against its majority
    class's."""
    if report.other_splits_left_out:
        yield (f"  trained on the input's train split (or its only one): {report.other_splits_left_out:,} rows of "
               "its other splits were not")
    for name, r in report.eval.items():
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

