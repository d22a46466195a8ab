"""The ``leakage`` stage: leakage features of the sentence graph and their predictability (Zhang et al. 2019;
METHODS §4).

A node per distinct sentence, an edge per pair; the features of a pair are computed in DuckDB SQL
(``models.sentence_graph``) over the graph of all splits together (transductive, the paper's setting) or of each split
apart. A random forest on these features alone, with no text, fit on the training split(s) and scored on the test
split, measures how much the way the pairs were sampled gives the label away (paper Table 1, ablations as Table 2).
"""
from __future__ import annotations

from dataclasses import asdict

import pyarrow as pa

from refinery.methods.leakage.config import LeakageConfig
from refinery.methods.leakage.report import LeakageReport, accuracy_interval, beats_majority, degree_heatmaps, page
from refinery.models.leakage_settings import GRAPH_MEMORY
from refinery.pipeline.output import StageOutput
from refinery.pipeline.stage import Output, StageResult
from refinery.pipeline.table_stage import CorpusPart, TableInput, TableStage


class LeakageStage(TableStage):
    """How well the sentence graph alone predicts the label (leakage features, random forest; Zhang et al. 2019).

    The input needs two splits or more (``--input train=… --input test=…``, or a ``split`` column). Writes
    ``report/``: the report, features.parquet and predictions.parquet; in a pipeline the rows pass on unchanged.
    """

    name, Config = "leakage", LeakageConfig
    needs = ("id", "text_a", "text_b", "label", "split")
    output = Output.INPUT
    version = 2   # 2: the report and its tables in report/ (were in the stage folder itself)
    unnamed_split = "all"   # an unnamed input is scored as the splits of its own ``split`` column
    rows_memory = GRAPH_MEMORY
    report_type = LeakageReport

    def compute(self, rows: TableInput) -> list[CorpusPart]:
        """The input's sentence graph, its features' predictability (a corpus's own ``split`` column wins, so one
        corpus of several splits is scored as those splits), and with ``identical_label`` the identical-pair probe
        corpus ``identical/``."""
        from refinery.models.sentence_graph import feature_summary, graph_of, identical_pairs, predictability

        config = self.config
        graph = self.graph = graph_of(rows.con, rows.rejects, config.graph)
        found = predictability(graph, graph.splits(), config.test_split, config.forest)
        self.predictions = found.predictions
        tested = found.rows.get(found.test_split, 0)
        interval = accuracy_interval(found.leakage_accuracy, tested)
        self.summary = LeakageReport(
            **found.to_json(), rejected=graph.rejects.num_rows, graph=asdict(config.graph),
            forest=asdict(config.forest), inputs=rows.splits, nodes=graph.nodes, edges=graph.num_rows,
            feature_summary=feature_summary(graph), leakage_ci95=[round(v, 4) for v in interval],
            leakage_beats_majority=beats_majority(found.leakage_accuracy, found.majority_accuracy, tested))
        if config.identical_label is None:
            return []
        return [CorpusPart("identical", [identical_pairs(graph, config.identical_label)])]

    def result(self, manifests: dict, out: StageOutput) -> StageResult:
        """The report published in ``report/``: report.json, report.html, features.parquet (every pair's),
        predictions.parquet (the test split's)."""
        r, graph = self.summary, self.graph
        html = page(out, r, degree_heatmaps(graph))
        # the features are read as they are written: no other query on the graph until they are
        features = graph.batches("SELECT f.*, r.id FROM features f POSITIONAL JOIN (SELECT id FROM rows) r")
        out.publish_report(r, html, files={
            "features.parquet": _shown("features.parquet", r.edges, features),
            "predictions.parquet": _shown("predictions.parquet", self.predictions.num_rows,
                                          self.predictions.to_reader())})
        pairs = sum(r.rows.values())
        lo, hi = r.leakage_ci95
        beyond = "above it beyond chance" if r.leakage_beats_majority else \
            "not above it beyond chance: the graph gives the label away no more than its shares do"
        lines = (f"{r.edges:,} pairs, {r.nodes:,} sentences; test split {r.test_split!r}",
                 f"  leakage accuracy  {r.leakage_accuracy:.4f}  (95% interval {lo:.4f} to {hi:.4f}; advanced "
                 f"{r.advanced_accuracy:.4f})",
                 f"  majority accuracy {r.majority_accuracy:.4f}  ({r.majority_label}): the leakage forest is "
                 f"{beyond}",
                 *(f"  {name:<22} {acc:.4f}" for name, acc in r.ablations.items()))
        return StageResult(pairs + r.rejected, {"pairs": pairs, "input rejects": r.rejected}, r,
                           f"leakage accuracy {r.leakage_accuracy:.4f} against majority "
                           f"{r.majority_accuracy:.4f} (test split {r.test_split!r})", lines)


def _shown(name: str, rows: int, batches: pa.RecordBatchReader) -> pa.RecordBatchReader:
    """``batches`` read with a progress bar (``leakage: NAME``) as they are written."""
    from refinery.progress import progress

    def counted():
        with progress(total=rows, desc=f"leakage: {name}", unit=" rows") as bar:
            for batch in batches:
                bar.update(batch.num_rows)
                yield batch

    return pa.RecordBatchReader.from_batches(batches.schema, counted())
