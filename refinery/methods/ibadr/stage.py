"""The ``ibadr`` stage: iterative bias-aware generation of low-bias pseudo samples (Wang et al. 2023).

Light to import (the verb's options are its config's fields): the loop, an iteration, the audit and the report are in
the sibling modules, imported when the stage runs.
"""
from __future__ import annotations

from refinery.core.features import FeatureConfig
from refinery.methods.ibadr.config import PROFILES, RESOURCES, IbadrConfig
from refinery.methods.ibadr.report import IbadrReport
from refinery.pipeline.output import StageOutput
from refinery.pipeline.stage import Output, StageResult
from refinery.pipeline.table_stage import CorpusPart, PartAudit, TableInput, TableStage


def accounting(grown, input_rejected: int) -> tuple[int, dict]:
    """(rows in, where they went) of a run (``grown``: ``pool.Grown``): every input row is in the pool, not sampled,
    or rejected."""
    return grown.table.num_rows + grown.not_sampled + input_rejected, {
        "in the pool": grown.table.num_rows, "not sampled": grown.not_sampled, "input rejects": input_rejected}


class IbadrStage(TableStage):
    """IBADR: iterative bias-aware generation of low-bias pseudo samples (Wang et al. 2023).

    Writes ``pool/`` (the corpus and the accepted pseudo samples: what a pipeline's next stage reads),
    ``generated/`` (every pseudo sample, its status and reason), ``report/`` and ``checkpoints/``. A table stage:
    the loop trains on the whole pool (on Ray one task, its generator's actors that task's).
    """

    report_type = IbadrReport

    name, Config = "ibadr", IbadrConfig
    needs = ("id", "text_a", "label")
    adds = ("source", "iteration", "indicator", "confidence")
    resources = RESOURCES
    output = Output.POOL
    profiles = PROFILES
    version = 2   # 2: the verdict on the pool and the original's top features measured under its p0 in report/

    def compute(self, rows: TableInput) -> list[CorpusPart]:
        """IBADR over the input (or its ``sample_rows``): the pool, with the input's rejects, judged against the
        original's shortcuts (the audit's features: the input's preset's names)."""
        from refinery.methods.ibadr.pool import grow_pool

        source = rows.source
        table = rows.table()
        grown = self.grown = grow_pool(table, self.config, rows.checkpoints, engine=source.engine,
                                       features=FeatureConfig().named(source.field_names, source.single_text),
                                       carried=source.prior)
        self.verdict, record = grown.audit.judge_pool(grown.accepted(), self.config)
        return [CorpusPart("pool", [grown.pool], rows.rejects, settings={"ibadr": self.config.to_dict()},
                           audit=lambda labels: PartAudit(grown.audit.prior, record))]

    def result(self, manifests: dict, out: StageOutput) -> StageResult:
        """``generated/`` and the report published once the pool is."""
        from refinery.methods.ibadr.pool import report_of
        from refinery.methods.ibadr.report import TITLE, console_lines, report_page
        from refinery.pipeline.filter import verdict_headline

        grown, verdict, rejected = self.grown, self.verdict, manifests["pool"].rejected
        generated = grown.generated()
        r = report_of(grown, verdict, generated, self.config, rejected)
        out.publish_files("generated", {"generated.parquet": generated})
        out.publish_report(r, report_page(r, verdict, out.report_page(TITLE)))
        return StageResult(*accounting(grown, rejected), r, f"{generated.num_rows:,} pseudo samples, "
                           f"{grown.accepted().num_rows:,} accepted -> pool {grown.pool.num_rows:,}; "
                           f"{verdict_headline(verdict)}", console_lines(r), tuple(verdict.warnings()))
