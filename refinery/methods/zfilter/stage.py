"""The zfilter and compose stages (Wu et al. 2022): their ``FilterStage`` classes (their configs: ``config``).

Algorithm 1 is stateful: each row is decided against the Z that the rows before it built. So ``prepare`` runs
it once over the whole input, in order (``stream.filter_stream``: the seed's rows, Z, the settle pass), and
records each rejected row's id, reason and hit features; ``decide`` then looks each batch's rows up
(``decisions.Decisions``: stateless, so it may run on any worker). ``FilterStage`` writes kept/ (led by the
seed's rows), rejected/ and the rows' accounting; the report is zfilter's own (``report.ZFilterReport``, which
``report.publish_report`` writes: the input's z-statistics against those of Z, the verdict, the settle and the
plots). A composition (``ComposeStage``, §4.2) runs its filterings first, each a ``ZFilterStage`` under stages/,
and writes the composition whole (its report a ``compose_report.ComposeReport``).

This module is what the registry imports for a verb's options, so it holds no heavy import: the algorithm
(``algorithm``, ``biased_set``), the stream and the composition load when a stage runs (the reports' modules,
which name them in annotations only, load with it for their records).
"""
from __future__ import annotations

import pyarrow as pa

from refinery.core import stats as zstats
from refinery.methods.zfilter.compose_report import ComposeReport, compose_report
from refinery.methods.zfilter.config import ComposeConfig, ZFilterConfig
from refinery.methods.zfilter.decisions import tag
from refinery.methods.zfilter.report import ZFilterReport, publish_report
from refinery.pipeline.executor import FilterWritten, row_numbers
from refinery.pipeline.filter import FilterStage, split
from refinery.pipeline.output import StageOutput
from refinery.pipeline.stage import StageResult, set_column
from refinery.pipeline.stage_input import StageInput


class _DecidedInPrepare(FilterStage):
    """A filter whose ``prepare`` decides every row (``self.decisions``, a ``decisions.Decisions``) and whose report
    carries its own verdict; ``decide`` looks a batch's rows up."""

    judges_itself = True

    def decide(self, batch: pa.Table) -> tuple:
        return self.decisions.decide(row_numbers(batch))

    def biased_features(self, batch: pa.Table, keep) -> pa.Array:
        """The features each dropped row of ``batch`` hit."""
        return self.decisions.biased_features(row_numbers(batch)[~keep])


class ZFilterStage(_DecidedInPrepare):
    """z-filtering (Wu et al. 2022, Algorithm 1): keep the rows that carry no top-k biased feature.

    Writes ``kept/`` (with the input's rejects), ``rejected/`` (with the features each row hit) and ``report/``.
    """

    name, Config = "zfilter", ZFilterConfig
    report_type = ZFilterReport
    needs = ("id", "text_a", "label")
    adds = ("source_stage",)   # on kept/, what the next step reads (biased_features is on rejected/ only)
    references = ("seed_corpus",)   # its verdict: the kept rows' z* against the input's threshold and prior

    def prepare(self, source: StageInput, out: StageOutput) -> None:
        """Algorithm 1 and the settle pass over the whole input (``stream.filter_stream``)."""
        from refinery.methods.zfilter.stream import filter_stream

        out.inputs += self.config.seed_corpus   # the seed is among the corpora the stage read
        self.named_config = self.config.named(source)
        self.filtering = filter_stream(source, self.named_config)
        self.decisions = self.filtering.decisions
        out.prior = self.filtering.zf.prior   # the input's audit's rule, recorded with kept/ and rejected/

    def annotate(self, batch: pa.Table, keep) -> tuple[pa.Table, pa.Table]:
        """Kept rows say ``source_stage`` filtered (the seed's rows: seed); a rejected row's ``biased_features`` are
        the features it hit."""
        kept, dropped = split(batch, keep)
        return tag(kept, "filtered"), set_column(dropped, "biased_features", self.biased_features(batch, keep))

    def leading_rows(self, part: str) -> list:
        """The seed's rows lead kept/."""
        seed = self.filtering.seed
        return [(tag(seed, "seed"), None)] if part == "kept" and seed is not None else []

    def kept_record(self, audits, kept_labels: dict):
        """kept/'s audit: that of Z (the kept rows, the seed's included), the "after" side of its verdict (kept for
        the report)."""
        from refinery.core.audit_record import AuditRecord

        config, zf = self.named_config, self.filtering.zf
        self.kept_stats = zf.Z.stats(zf.prior.name, config.min_count, config.alpha)
        return AuditRecord.of_output(self.kept_stats, zf.prior, kept_labels, config.features)

    def result(self, written: FilterWritten, audits, out: StageOutput) -> StageResult:
        """zfilter's own report and verdict (the input's z-statistics against those of Z)."""
        return publish_report(self.filtering, written, out, self.named_config, self.kept_stats)


class ComposeStage(_DecidedInPrepare):
    """z-filtered composition of original rows D0 (--original) and generated rows G (the input; Wu et al. §4.2).

    Writes ``kept/`` (each row's ``source``: original or generated, where it had none), ``rejected/``,
    ``report/`` (each part and the two together) and each filtering under ``stages/``.
    """

    name, Config = "compose", ComposeConfig
    report_type = ComposeReport
    version = 2   # kept/ and rejected/ hold the whole composition, rows carry source, report/ per part
    needs = ("id", "text_a", "label")
    adds = ("source",)
    references = ("original",)   # its verdicts: each part's and the whole's (compose_report.py)

    def prepare(self, source: StageInput, out: StageOutput) -> None:
        """Each filtering under stages/ (``composition.filterings``), and the composition's rows counted."""
        from refinery.methods.zfilter.composition import compose

        out.inputs[:0] = self.config.original   # D0, then G: the corpora the composition read
        self.named_config = self.config.zfilter.named(source)
        self.composition = compose(self.config.composition, list(self.config.original), source, out,
                                   self.named_config, ZFilterStage)
        self.decisions = self.composition.decisions
        out.prior = self.prior = zstats.choose_prior(
            self.named_config.prior, self.composition.audit.counts["input", "together"].label_totals, source.prior)

    def kept_record(self, audits, kept_labels: dict):
        """kept/'s audit: that of D0 and G kept together, as the composition's verdict judges it."""
        from refinery.core.audit_record import AuditRecord

        config = self.named_config
        return AuditRecord.of_output(self.composition.audit.stats("kept", "together", self.prior.name, config),
                                     self.prior, kept_labels, config.features)

    def leading_rows(self, part: str):
        """D0's rows (and input rejects) lead kept/ and rejected/."""
        return self.composition.leading(part)

    def annotate(self, batch: pa.Table, keep) -> tuple[pa.Table, pa.Table]:
        """The input's rows are G's: ``source`` generated where it has none; a rejected row's ``biased_features``."""
        from refinery.methods.zfilter.composition import with_source

        rows = with_source(batch.drop_columns([c for c in ("source_stage",) if c in batch.column_names]),
                           "generated")
        kept, dropped = split(rows, keep)
        return kept, set_column(dropped, "biased_features", self.biased_features(batch, keep))

    def result(self, written: FilterWritten, audits, out: StageOutput) -> StageResult:
        """The composition's report: each part's verdict and the two together's."""
        return compose_report(self.composition, out, self.named_config)
