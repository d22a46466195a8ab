"""Typed records of what crosses modules: what a stage's report says that others read (its verdicts, its audit's
summary, a comparison's answer) and what a finished step records of itself (its accounting, headline, time).

Each record is the one place its keys are spelled: the stage that writes a report puts a record's ``to_json()``
in it, and a reader (the pipeline's report, the API, the CLI) gets the record back by ``from_json``, never by
reading another module's report with string keys (``tests/test_architecture.py`` holds to that). ``StageReport``
is what any reader gets of a report.json: the records it holds, each None where the stage wrote none.
"""
from __future__ import annotations

from dataclasses import asdict, dataclass, field


@dataclass(frozen=True)
class VerdictSummary:
    """A verdict as its readers show it (``core.verdict.Verdict`` writes it): ok when the stage kept its promise,
    its one line, its warnings with the remedy last, and each label's rows and share of the corpus before → after
    (``labels``; empty where the audits count no labels)."""

    ok: bool
    line: str
    warnings: tuple = ()
    labels: str = ""

    def to_json(self) -> dict:
        return {"ok": self.ok, "line": self.line, "warnings": list(self.warnings), "labels": self.labels}

    @classmethod
    def from_json(cls, data: dict) -> "VerdictSummary":
        return cls(bool(data["ok"]), data["line"], tuple(data.get("warnings") or ()), data.get("labels") or "")


@dataclass(frozen=True)
class AuditSummary:
    """What every audit's report says of it: rows per label, the Bonferroni threshold on z*, the prior p0's rule
    as shown and as a corpus's manifest records it (``core.stats.Prior.record``)."""

    labels: dict
    threshold: float
    prior: str
    prior_record: dict | None = None

    def to_json(self) -> dict:
        return {"labels": dict(self.labels), "threshold": self.threshold, "prior": self.prior,
                "prior_record": self.prior_record}

    @classmethod
    def from_json(cls, data: dict) -> "AuditSummary | None":
        """The summary in a report, or None where it holds none (a stage that audits nothing)."""
        if not {"labels", "threshold", "prior"} <= set(data):
            return None
        return cls(dict(data["labels"]), float(data["threshold"]), data["prior"], data.get("prior_record"))


@dataclass(frozen=True)
class AuditFigures(AuditSummary):
    """What a report shows of an audit (``core.audit_record.AuditRecord.figures``): its summary, each label's max
    z*, its count of significant features and top features ({feature, z, n, …} each), whether the counts were
    weighted, and (in the pipeline's report) the z* of the input's top features at this step."""

    rows: int = 0
    max_z: dict = field(default_factory=dict)
    significant: dict = field(default_factory=dict)
    top: dict = field(default_factory=dict)
    weighted: bool = False
    tracked: dict = field(default_factory=dict)

    def to_json(self) -> dict:
        """The figures; ``weighted`` only where the counts were."""
        data = asdict(self)
        if not self.weighted:
            del data["weighted"]
        return data


@dataclass(frozen=True)
class ComparisonRow:
    """One (evaluation set, training corpus) of a comparison: mean accuracy over seeds and its std (None for one
    seed), the gain on the baseline in accuracy with its paired-bootstrap 95% interval and significance (None for
    the baseline), and the evaluation set's majority-class accuracy."""

    eval: str
    train: str
    accuracy: float
    std: float | None
    gain: float | None
    ci95: list | None
    significant: bool | None
    majority: float


@dataclass(frozen=True)
class Comparison:
    """A compare report's answer (``methods.compare.statistics.summarize`` writes it): the baseline corpus, a row
    per (evaluation set, training corpus), its warnings (a label's collapse) and notes (a set that cannot
    separate)."""

    baseline: str
    rows: tuple
    warnings: tuple = ()
    notes: tuple = ()

    @classmethod
    def from_json(cls, report: dict) -> "Comparison | None":
        """The comparison in a report, or None where the report compares no training corpora."""
        if not {"accuracy", "baseline"} <= set(report):
            return None
        rows = []
        for name, by_corpus in report["accuracy"].items():
            majority = report["eval"][name]["majority"]["accuracy"]
            for corpus, acc in by_corpus.items():
                gain = acc.get("gain") or {}
                rows.append(ComparisonRow(name, corpus, acc["mean"], acc.get("std"), gain.get("delta"),
                                          gain.get("ci95"), gain.get("significant"), majority))
        return cls(report["baseline"], tuple(rows), tuple(report.get("warnings") or ()),
                   tuple(report.get("notes") or ()))


@dataclass(frozen=True)
class StageReport:
    """What a reader gets of a stage's report.json: its verdicts by part ("" for a stage's one verdict; a
    weights run's second verdict, under its input's p0, by that name), its audit's summary and its comparison."""

    verdicts: dict = field(default_factory=dict)
    audit: AuditSummary | None = None
    comparison: Comparison | None = None

    INPUT_P0 = "under the input's p0"

    @classmethod
    def from_json(cls, report: dict) -> "StageReport":
        found = {"": report["verdict"]} if "verdict" in report else dict(report.get("verdicts") or {})
        if "verdict_input_p0" in report and report["verdict_input_p0"]["line"] != found.get("", {}).get("line"):
            found[cls.INPUT_P0] = report["verdict_input_p0"]   # where the input's p0 is the output's, one verdict
        return cls({part: VerdictSummary.from_json(v) for part, v in found.items()}, AuditSummary.from_json(report),
                   Comparison.from_json(report))


@dataclass(frozen=True)
class StepRecord:
    """What a finished step records of itself in its ``_SUCCESS`` (the runner reads it back to reuse the step):
    its stage and fingerprint, the rows it read and where each went (``accounting``: sums to ``rows_in``), its
    headline, its report's file, its time, peak memory (and its Ray task's), its progress bars' phases and the memory
    budget of its run (``io.memory``)."""

    stage: str
    fingerprint: str
    rows_in: int
    accounting: dict
    headline: str = ""
    report_file: str = "report/report.html"
    seconds: float = 0.0
    peak_rss: int | None = None
    task_peak_rss: int | None = None
    phases: list = field(default_factory=list)
    memory_budget: int | None = None

    def to_json(self) -> dict:
        return asdict(self)

    @classmethod
    def from_json(cls, data: dict) -> "StepRecord | None":
        """The record in a ``_SUCCESS``, or None where it holds none (a folder a verb made, an older refinery)."""
        try:
            return cls(data["stage"], data["fingerprint"], int(data["rows_in"]), dict(data["accounting"]),
                       data.get("headline", ""), data.get("report_file", cls.report_file),
                       float(data.get("seconds", 0.0)), data.get("peak_rss"), data.get("task_peak_rss"),
                       list(data.get("phases") or ()), data.get("memory_budget"))
        except (KeyError, TypeError, ValueError):
            return None
