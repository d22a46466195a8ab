"""The audit: which surface features leak the label, and how strongly (METHODS §1): its config, its stage and its
report. Light to import (the verb's options are its config's fields, in ``config``): the counting is in
``counting`` (and ``on_ray``), imported when the stage runs.
"""
from __future__ import annotations

import json
from dataclasses import dataclass, replace

from refinery.core.audit_config import UNWEIGHTED
from refinery.core.records import AuditSummary
from refinery.core.report_record import ReportRecord
from refinery.core.stats import WEIGHT_COLUMN
from refinery.messages import Message
from refinery.methods.audit.config import STATE_FILE, STATE_META, AuditConfig
from refinery.pipeline.output import StageOutput
from refinery.pipeline.stage import Output, StageResult
from refinery.pipeline.stage_input import StageInput
from refinery.pipeline.table_stage import CorpusPart, TableInput, TableStage


@dataclass(frozen=True, kw_only=True)
class AuditReport(ReportRecord):
    """The audit's report (report.json and summary.json): the rows counted and the input's rejects; the audit's summary
    (``core.records.AuditSummary``: rows per label, the Bonferroni threshold on z*, the prior p0 as shown and as
    recorded); the features counted and those in ≥ min_count rows (z* is defined for those); each label's prior
    and share (``label_prior``), its count of significant features and its max z*; the counting's error bounds; the
    runs the counts spilled to disk in; the configuration, the inputs and the notes (the weighting's)."""

    rows: int
    rejected: int
    labels: dict
    threshold: float
    prior: str
    prior_record: dict | None
    features: int
    features_with_min_count: int
    label_prior: dict
    significant: dict
    max_z: dict
    error_bounds: dict
    spilled_runs: int
    config: dict
    inputs: list
    notes: list


def write_outputs(result, out: StageOutput, title: str = "Audit: which features leak the label",
                  notes: list | None = None) -> AuditReport:
    """Publish ``out``'s report/: the report (report.json and summary.json, with ``notes``), stats.parquet (features
    with n ≥ min_count), topk.json, zplot.svg, report.html and the mergeable state (every feature's counts)."""
    from refinery.report import figures
    from refinery.report.page import corpus_name

    st, cfg, inputs = result.stats, result.config, out.inputs
    topk = result.top_k()
    report = AuditReport(
        rows=result.rows, rejected=result.rejected,
        **AuditSummary({l: int(result.label_rows.get(l, 0)) for l in st.labels}, st.threshold,
                       str(result.prior), result.prior.record()).to_json(),
        features=result.features, features_with_min_count=int((st.effective_n >= cfg.min_count).sum()),
        label_prior=result.label_prior(), significant=st.significant_per_label(),
        max_z={l: (topk[l][0]["z"] if topk[l] else None) for l in st.labels}, error_bounds=result.error_bounds(),
        spilled_runs=result.counter.spilled_runs, config=cfg.to_dict(), inputs=list(inputs), notes=list(notes or ()))
    corpus = corpus_name(inputs, out.storage_options)
    svg = figures.zplot(st, k=min(cfg.k, 8), title=f"z-statistics of {corpus}" if corpus else "z-statistics")
    out.publish_report(report, _html(report, svg, topk, title, corpus), files={
        "stats.parquet": st.to_table(cfg.min_count, result.weighted),   # the features z* is defined for
        "topk.json": json.dumps(topk, indent=1),
        "zplot.svg": svg,
        STATE_FILE: result.counter.write_state,
        STATE_META: json.dumps({"config": cfg.to_dict(), "rows": result.rows, "inputs": list(inputs),
                                "weighted": result.weighted}, indent=1),
        "summary.json": json.dumps(report.to_json(), indent=1, default=str)})
    return report


def published(counted, rejects_at: str, out: StageOutput, notes: list) -> tuple[AuditReport, dict]:
    """The z-statistics of ``counted`` (``counting.Counted.finish``; ``rejects_at``: where its rejects are, named
    where every row was rejected) published through ``out`` (``write_outputs``): the report and the top features
    per label. On Ray, a task's work (``on_ray.in_a_task``)."""
    result = counted.finish(counted.source.prior, rejects_at)
    try:
        return write_outputs(result, out, notes=notes), result.top_k()
    finally:
        result.counter.close()


def _html(report: AuditReport, svg: str, topk: dict, title: str, corpus: str) -> str:
    from refinery.report import format as fmt
    from refinery.report.page import Report, config_table, fields, figure, humanize, note, per_label, top_features

    cfg = report.config
    return (Report(title, corpus, report.inputs)
            .section("Summary", fields({
                "rows": report.rows, "input rejects": report.rejected,
                "features counted": report.features,
                f"features in ≥ {cfg['min_count']:,} rows": report.features_with_min_count,
                "significance threshold": f"z* > {fmt.z(report.threshold)} (Bonferroni, α = {cfg['alpha']:g})",
                "prior p0": report.prior,
                "counting": ", ".join(f"{humanize(k)} {fmt.value(v)}" for k, v in report.error_bounds.items()
                                      if not isinstance(v, dict))
                + (f"; spilled to disk in {report.spilled_runs:,} runs" if report.spilled_runs else "")}),
                     *(note(str(n)) for n in report.notes))
            .section("Labels", per_label(report.label_prior, **{
                "significant features": report.significant, "max z*": report.max_z}, formats={"max z*": fmt.z}))
            .section("z-statistics (Gardner et al. 2021)", figure(svg, (
                "Each dot is a feature: the share of its rows with the label against the number of rows it is in. "
                "Above the red curve a feature's z* exceeds the threshold: it predicts the label more often than "
                "the prior allows.")))
            .section(f"Top {cfg['k']} features per label", top_features(topk, report.threshold))
            .section("Configuration", config_table(cfg))
            .html())


WEIGHTED_NOTE = Message(f"counts the '{WEIGHT_COLUMN}' column: a row of weight w counts as w rows "
                        "(count(x, l) = Σ w), z* and min_count at each feature's effective rows (Σw)²/Σw², the audit "
                        "the `refinery weights` verdict makes of these rows; ", UNWEIGHTED, " counts rows")
UNWEIGHTED_NOTE = Message("counts rows (", UNWEIGHTED, f"): the '{WEIGHT_COLUMN}' column the rows carry is not read, "
                          "every row counts once")


class AuditStage(TableStage):
    """z-statistics of surface features against the label (Gardner et al. 2021).

    Writes ``report/`` (stats.parquet, topk.json, summary.json, report.html and the mergeable counts) and
    ``rejects/`` (the input's rejects, each with its reason); in a pipeline the rows pass on to the next stage
    unchanged. A table stage that reads its rows itself (``queries_rows`` false): its counting pass hands the
    rejects it meets to the table executor's writer as it goes; on Ray the driver hands units to workers.
    """

    name, Config = "audit", AuditConfig
    needs = ("text_a", "label")
    output = Output.INPUT
    report_type = AuditReport
    one_task = False   # its counting pass spreads over Ray's workers (``on_ray``): the driver hands out the units

    def also_reads(self) -> list[str]:
        """The saved counts of ``update`` (an earlier audit's folder): a changed state runs the step again."""
        from refinery.methods.audit.counting import state_files

        return list(state_files(self.config.update)) if self.config.update else []

    def queries_rows(self) -> bool:
        return False

    def _named(self, source: StageInput) -> AuditConfig:
        return replace(self.config, features=self.config.features.named(source.field_names, source.single_text))

    def _weighted(self, source: StageInput) -> bool:
        return self.config.weighted and WEIGHT_COLUMN in source.columns()

    def measure(self, source: StageInput):
        """The audit of ``source``, its rejects written nowhere (what a pipeline's report measures at each step): a
        ``core.table_audit.AuditResult``."""
        from refinery.methods.audit.counting import count

        return count(source, self._named(source), weighted=self._weighted(source)).finish(source.prior)

    def compute(self, rows: TableInput) -> list[CorpusPart]:
        """``rejects/``: the input's rejects, handed to the writer by the counting pass as it meets them."""
        from refinery.methods.audit.counting import count

        source, config = rows.source, self._named(rows.source)

        def counting(write_rejects) -> None:
            self.counted = count(source, config, on_rejects=write_rejects, weighted=self._weighted(source))

        return [CorpusPart("rejects", (), settings={self.name: config.to_dict()}, rejects_from=counting)]

    def result(self, manifests: dict, out: StageOutput) -> StageResult:
        from refinery.report import terminal

        source = self.counted.source
        weighting = WEIGHTED_NOTE if self.counted.weighted else UNWEIGHTED_NOTE
        notes = [weighting] if WEIGHT_COLUMN in source.columns() else []
        args = (self.counted, out.url("rejects"), out, notes)
        if self.counted.held:   # a task beside the counts the workers summed, which never reach the driver
            from refinery.methods.audit.on_ray import in_a_task

            report, top_k = in_a_task(published, args, out)
        else:
            report, top_k = published(*args)
        top = ", ".join(f"{l} {z:.1f}" for l, z in report.max_z.items() if z is not None)
        spilled = f"counts spilled to disk in {report.spilled_runs} runs (memory budget)"
        lines = [f"note: {n}" for n in notes] + ([spilled] if report.spilled_runs else []) + [
            f"{report.rows:,} rows ({report.rejected:,} rejected), {report.features:,} features, "
            f"threshold z > {report.threshold:.2f}", f"prior: {report.prior}",
            terminal.label_prior(report.label_prior), terminal.topk(top_k, threshold=report.threshold)]
        return StageResult(report.rows + report.rejected,
                           {"counted": report.rows, "input rejects": report.rejected}, report,
                           f"{report.rows:,} rows, {report.features:,} features; max z* {top}; "
                           f"prior {report.prior}", tuple(lines))
