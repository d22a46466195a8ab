"""``FilterStage``: a stage that keeps or drops each row, with the writers, rejects and accounting done once.

A filter implements ``decide(batch) -> (keep, reasons)`` (datatrove's filter and exclusion writer are the
model) and, when it must see the whole input first (a cross-fitted model), ``prepare(source, out)``. The base
streams the input's batches through it into ``kept/`` (the input's rejects carried in its rejects) and
``rejected/`` (each row with its ``reason``), and writes ``report/`` with the rows kept and dropped per label
and the commonest reasons. Rows in = kept + filtered out + input rejects.

Where it runs: ``prepare`` in the driver, or, for a filter whose ``prepare`` reads the whole input
(``prepare_as_task``: confidence, AFLite, data maps), as a Ray task that reads it itself (``executor.prepared``);
``decide`` and ``annotate`` where the executor puts them (``pipeline.executor``: in this process on the local engine; on Ray workers under ``--engine ray``,
each reading an input shard and writing its kept and rejected rows itself, each task asking for the stage's
``resources``, the filter with its state shipped to the object store once). A filter that decided every row in
``prepare`` looks each row's decision up by its number in the input (``executor.row_numbers(batch)``: the order
``prepare`` read the rows in, which the executor hands with every batch wherever it is read). Once kept/ and
rejected/ are published, ``result`` publishes the report and gives the stage's result (a filter with a report of
its own overrides it).

Its verdict (``core.verdict``): as rows are decided, the audit's features are counted over the input and over
the kept rows (``core.weighted_counts``, weights 1 and keep ∈ {0, 1}: one tokenization), each side as ``refinery
audit`` measures it (the prior rule decided on the input, or carried with it, and recorded in both parts' manifests,
so the next audit of kept/ takes it too), and compared. A filter promises to make no shortcut stronger; where it did, the warning names the features
and ``remedy()``, the filter's own advice. The verdict is on the console, in report.json and on the report page.
"""
from __future__ import annotations

from abc import abstractmethod
from dataclasses import dataclass
from typing import TYPE_CHECKING, ClassVar, Iterable

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from refinery.core.report_record import ReportRecord, optional
from refinery.messages import Message
from refinery.pipeline.config import to_dict
from refinery.pipeline.executor import TOP_REASONS, FilterWritten
from refinery.pipeline.stage import Output, Stage, StageResult
from refinery.pipeline.stage_input import StageInput

if TYPE_CHECKING:
    from refinery.core.verdict import Verdict
    from refinery.pipeline.output import StageOutput

MIN_KEPT_SHARE = 0.1   # a filter keeping less warns: its settings likely do not suit the data
NOTHING_KEPT = "no verdict: nothing was kept, and an empty corpus is not judged"
TOO_FEW_KEPT = "no verdict: the {kept:,} kept rows are too few for any feature to be tested (min_count)"


def verdict_headline(verdict: Verdict) -> str:
    """A stage's verdict in a pipeline log's line: ok, or what went wrong and the remedy, in the words of its
    ``warnings`` (``Verdict.warnings``: the lines the verb prints under the verdict)."""
    return "verdict ok" if verdict.ok else "verdict WARNING: " + "; ".join(verdict.warnings())


@dataclass(frozen=True, kw_only=True)
class FilterReport(ReportRecord):
    """Every filter's report: the rows kept, filtered out and rejected on input, each label's rows kept and
    filtered out (``by_label``: {label: {"kept", "filtered out"}}), the commonest reasons with their rows, the
    configuration, the verdict (``core.verdict.Verdict.to_dict``), or why there is none (``not_judged``), a
    warning where it kept few rows, the warnings, and what a resumed run read back. A filter with entries of its
    own reports a subclass (``FilterStage.report_type``) that adds them."""

    kept: int
    filtered_out: int
    input_rejects: int
    by_label: dict
    reasons: dict
    config: dict
    not_judged: str | None = optional()
    verdict: dict | None = optional()
    few_kept: Message | str | None = optional()
    warnings: list = ()
    resumed: str | None = optional()


class FilterStage(Stage):
    output = Output.KEPT
    report_type: ClassVar[type[ReportRecord]] = FilterReport   # a subclass adds its own entries; zfilter reports its own
    checkpoints = None   # a filter's ``Checkpoints`` of a long ``prepare``: removed once the rows are published
    resumed = ""         # what ``prepare`` read back from a killed run's checkpoints, said on the console
    judges_itself: ClassVar[bool] = False   # its report carries a verdict of its own (zfilter's, against the
    #                                         input's z-statistics): the base's audit of kept/ is not made
    prepare_as_task: ClassVar[bool] = False   # its ``prepare`` is one process (NumPy, torch) that reads the whole
    #                                           input: under --engine ray it runs as a Ray task, not in the driver

    def prepare(self, source: StageInput, out: StageOutput) -> None:
        """Look at the whole input before the first ``decide`` (nothing by default); long work may keep
        checkpoints through ``out.checkpoints``."""

    @abstractmethod
    def decide(self, batch: pa.Table) -> tuple[np.ndarray, list]:
        """(keep: one bool per row, reasons: why each row would be dropped; read for dropped rows only).

        Runs where the engine puts it (a Ray worker, on a copy of the filter): what it needs from ``prepare``
        is in the filter's attributes, indexed by each row's number in the input (``row_numbers(batch)``); nothing
        it changes there comes back."""

    def reason_kind(self, reason: str) -> str:
        """The group a reason is counted under in the report (the reason itself by default; a filter whose
        reasons carry a per-row value groups them)."""
        return reason

    def remedy(self) -> str:
        """What to do when the filter made a shortcut stronger, naming the option that applies."""
        return ("the rows this filter keeps carry the shortcut more often than those it drops: change its settings ("
                + ", ".join(f"{k} {v}" for k, v in to_dict(self.config).items() if v is not None) + ").")

    def annotate(self, batch: pa.Table, keep: np.ndarray) -> tuple[pa.Table, pa.Table]:
        """(the kept rows, the dropped rows) of a batch as written to kept/ and rejected/, after ``decide`` saw it
        (``split(batch, keep)`` by default; a filter may add its score first, with ``set_column``: a column of the
        same name from an earlier stage is replaced, or give the two parts columns of their own)."""
        return split(batch, keep)

    def leading_rows(self, part: str) -> Iterable[tuple]:
        """(rows, input rejects) the filter publishes itself at the head of the corpus ``part`` (kept or
        rejected), ahead of the rows it decides, once ``prepare`` has run: zfilter's seed rows, a composition's
        D0 (none by default)."""
        return ()

    def run(self, source: StageInput, out: StageOutput) -> StageResult:
        """``prepare``, then every batch decided where the engine puts it and written to kept/ and rejected/
        (the input's rejects with kept/), then ``result``."""
        from refinery.pipeline.executor import prepared, write_filtered

        stage = prepared(self, source, out)
        return stage.result(*write_filtered(stage, source, out), out)

    def kept_record(self, audits, kept_labels: dict):
        """The audit of kept/ as ``refinery audit`` makes it with its defaults (an ``AuditRecord``), kept with it:
        the verdict's "after" side (``audits``: the input's and the kept rows'); None where there is none. A filter
        that ``judges_itself`` gives its own."""
        return None if audits is None else audits.record_of(1, kept_labels)

    def result(self, written: FilterWritten, audits, out: StageOutput) -> StageResult:
        """The report published and the stage's result, once kept/ and rejected/ are: ``written`` (rows kept and
        filtered out, per label, the commonest reasons, the input's rejects) and the verdict on ``audits`` (the
        input's and the kept rows'): do the kept rows carry the shortcuts less than the dropped ones? A filter with a
        report of its own overrides it."""
        from refinery.core.weighted_counts import judge_audits

        details, sections = self.report_details()
        kept, dropped, input_rejects = written.kept, written.filtered_out, written.input_rejects
        verdict = judge_audits(audits, stage=self.name, under_threshold=False, remedy_worsened=self.remedy()) \
            if audits is not None and kept else None
        not_judged = None
        if verdict is not None and all(m.after is None for m in verdict.max_z.values()):
            verdict = None   # no feature of the kept rows reaches min_count: nothing to judge them by
            not_judged = TOO_FEW_KEPT.format(kept=kept)
        elif verdict is None and audits is not None and not kept:   # an empty corpus: no shortcut, and no signal
            not_judged = NOTHING_KEPT
        share = kept / max(kept + dropped, 1)
        settings = ", ".join(f"{k} {v}" for k, v in self.settings_in_effect().items())
        few_kept = (f"kept {share:.1%} of the rows ({kept:,} of {kept + dropped:,}){self.few_kept_hint()}"
                    f"; check the settings ({settings})") if share < MIN_KEPT_SHARE else None
        warnings = (few_kept,) if few_kept is not None else ()
        if verdict is not None and not verdict.ok:
            warnings += tuple(verdict.warnings())
        # the report is the whole run's; ``resumed`` says that part of it was read back
        report = self.report_type(**written.to_json(), **details, config=to_dict(self.config), not_judged=not_judged,
                                  verdict=None if verdict is None else verdict.to_dict(), few_kept=few_kept,
                                  warnings=list(warnings), resumed=self.resumed or None)
        self._write_report(report, out, verdict, sections)
        rows_line = f"kept {kept:,}, filtered out {dropped:,}"
        headline = rows_line + (f"; {verdict_headline(verdict)}" if verdict is not None else
                                f"; {not_judged}" if not_judged else "")
        if self.checkpoints is not None:
            self.checkpoints.clear()
        lines = (rows_line, *(verdict.lines() if verdict else [not_judged] if not_judged else ()),
                 *((self.resumed,) if self.resumed else ()))
        return StageResult(kept + dropped + input_rejects,
                           {"kept": kept, "filtered out": dropped, "input rejects": input_rejects},
                           report, headline, lines, warnings)

    def settings_in_effect(self) -> dict:
        """The settings that shaped the decisions (named where the filter kept few rows): every one given."""
        return {k: v for k, v in to_dict(self.config).items() if v is not None}

    def few_kept_hint(self) -> str:
        """What the filter knows of why it kept few rows (``"; …"``), or nothing."""
        return ""

    def report_details(self) -> tuple[dict, list]:
        """What the filter adds to its report: (its ``report_type``'s own fields, [(heading, HTML)] sections of its
        page)."""
        return {}, []

    def _write_report(self, report: FilterReport, out: StageOutput, verdict, sections: list) -> None:
        from refinery.report import format as fmt
        from refinery.report import verdict as verdict_html
        from refinery.report.page import config_table, fields, note, table

        doc = (type(self).__doc__ or self.name).strip().split("\n")[0]
        by_label = [{"label": l, **c, "rows kept": c["kept"] / max(c["kept"] + c["filtered out"], 1)}
                    for l, c in report.by_label.items()]
        page = out.report_page(f"{self.name}: {doc.rstrip('.')}")
        if verdict is not None:
            page.section(verdict_html.HEADING, verdict_html.section(verdict))
        elif report.not_judged:
            page.section(verdict_html.HEADING, note(report.not_judged.capitalize() + "."))
        if report.few_kept:
            few_kept = str(report.few_kept)
            page.section("Few rows kept", note(few_kept[0].upper() + few_kept[1:] + "."))
        if report.resumed:
            page.section("Resumed", note(f"This run was {report.resumed.removeprefix('resumed')} after a kill, "
                                         "and this report is the whole run's: its figures are those of an "
                                         "uninterrupted run."))
        page = (page
                .section("Rows", fields({"kept": report.kept, "filtered out": report.filtered_out,
                                         "input rejects": report.input_rejects}))
                .section("Rows per label", table(by_label, formats={"rows kept": fmt.percent}))
                .section("Why rows were filtered out", table(
                    [{"reason": r, "rows": n} for r, n in report.reasons.items()]),
                    note(f"The {TOP_REASONS} commonest reasons; each filtered-out row carries its own in "
                         "rejected/.") if len(report.reasons) >= TOP_REASONS else ""))
        for heading, html in sections:
            page = page.section(heading, html)
        page = page.section("Configuration", config_table(report.config))
        out.publish_report(report, page)


def split(rows: pa.Table, keep: np.ndarray) -> tuple[pa.Table, pa.Table]:
    """(the rows ``keep`` marks, the others)."""
    mask = pa.array(keep)
    return rows.filter(mask), rows.filter(pc.invert(mask))
