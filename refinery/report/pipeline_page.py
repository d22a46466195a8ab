"""The pipeline's report page (``OUT/pipeline/report.html``) and the records it is made from.

For the input and after each stage that changes the rows the page gives the label distribution, where every row
went (kept, filtered out, added, re-weighted, rejected), max z* per label and the input's top features' z*
followed through every stage against the Bonferroni threshold (Gardner et al. 2021), each stage's verdict, time
and peak memory, and links to the stages' own reports. ``pipeline.step_audits`` measures what it shows into a
``PipelineFigures`` (``receipt.json`` is its ``to_json``).
"""
from __future__ import annotations

import html
from dataclasses import asdict, dataclass, field

from refinery.core.records import AuditFigures, Comparison
from refinery.core.weighted_counts import WEIGHTED_NOTE
from refinery.report import figures
from refinery.report import format as fmt
from refinery.report.page import Report, code, figure, link, note, table


@dataclass
class StepEntry:
    """One step as the report shows it: its run (``StepRecord``'s figures), the rows of the corpus it passes on,
    its verdicts and comparison read from its report, and the audit of what it passes on (or why there is none)."""

    step: str
    stage: str
    status: str                 # ran | skipped | failed | interrupted
    seconds: float
    peak_rss: int | None
    task_peak_rss: int | None
    rows_in: int
    parts: dict
    balanced: bool
    headline: str
    report: str | None          # its own report, relative to the pipeline's page
    change: str                 # input | unchanged | filtered | augmented | rewritten
    passes_on: str
    phases: list
    rows: int | None = None     # rows of the corpus it passes on
    verdicts: dict = field(default_factory=dict)   # {part: core.records.VerdictSummary}
    comparison: Comparison | None = None
    audit: AuditFigures | None = None
    audit_skipped: str | None = None
    memory_budget: int | None = None   # bytes: the run's budget (``io.memory``)

    def to_json(self) -> dict:
        """``receipt.json``'s step: the optional entries only where the step has them."""
        data = {**asdict(self), "audit": self.audit and self.audit.to_json()}
        for name in ("rows", "verdicts", "comparison", "audit", "audit_skipped", "memory_budget"):
            if data[name] is None or data[name] == {}:
                del data[name]
        return data


@dataclass
class PipelineFigures:
    """Everything the page shows, exact: each step; the input's top features followed through the steps
    ("feature → label"); the top features of the last corpus audited against the input's z*; the report's
    settings; and the step whose corpus could not be audited at the end (``final_unaudited``: {step, why})."""

    out: str
    engine: str
    steps: list
    tracked: list
    final_top: list
    report: dict
    final_unaudited: dict | None = None

    def to_json(self) -> dict:
        return {**asdict(self), "steps": [s.to_json() for s in self.steps]}


def render(data: PipelineFigures, final_stats, pipeline_yaml: str, alpha: float, corpus: str, inputs: list) -> str:
    """The page: ``final_stats`` the z-statistics of the last corpus audited, ``pipeline_yaml`` the resolved file,
    ``alpha`` the audit's significance level."""
    steps = data.steps
    audited = [s for s in steps if s.audit is not None]
    page = Report("Pipeline report: what each stage did to the rows and the shortcuts", corpus, inputs)
    stopped = next((s for s in steps if s.status in ("failed", "interrupted")), None)
    if stopped:
        page.section(f"The run {'was interrupted' if stopped.status == 'interrupted' else 'failed'}",
                     f'<p class="bad">{html.escape(stopped.step)} {html.escape(stopped.headline)}</p>',
                     note(f"The steps before it finished and are shown below; a rerun reuses them and starts again at "
                          f"the {stopped.status} step. Folders of the steps after it, if any, are an earlier run's, "
                          "made again by the next run."))
    if len(audited) >= 2:
        first, last = audited[0].audit, audited[-1].audit
        page.section("Before and after", _worse(first, last), table([
            {"label": l, "rows before": first.labels.get(l), "rows after": last.labels.get(l),
             "max z* before": first.max_z.get(l), "max z* after": last.max_z.get(l),
             "significant before": first.significant.get(l),
             "significant after": last.significant.get(l)} for l in first.labels],
            formats={"max z* before": fmt.z, "max z* after": fmt.z}),
            note(f"Significant: the features whose z* is above the Bonferroni threshold (α = {alpha:g}), "
                 f"{fmt.z(first.threshold)} for the input and {fmt.z(last.threshold)} after "
                 f"{audited[-1].step} (it depends on how many features are counted). Prior p0: "
                 f"{first.prior}, the same at every step." + _weighted_note(audited)))
    if any(s.verdicts for s in steps):
        page.section("Each stage's verdict", _verdicts(steps),
                     note("Each refining stage audits its output with its input's features and prior and compares "
                          "(its own report shows the tables): ok when it kept its promise."))
    for s in (s for s in steps if s.comparison is not None):
        page.section(f"Does it help? ({s.step})", *_comparison(s.comparison))
    if data.tracked and audited:
        series = {name: [s.audit.tracked[name] for s in audited] for name in data.tracked}
        page.section("The input's top features, stage by stage", figure(
            figures.small_multiples(series, [s.step for s in audited], [s.audit.threshold for s in audited],
                                    title=f"z* of {corpus}'s top features after each stage"),
            "The red dashed line is the Bonferroni threshold: below it a feature no longer predicts its label "
            "more than chance allows. A hollow marker: the feature is in fewer rows than the audit's min_count."
            + _weighted_note(audited)))
    page.section("Where the rows went", figure(figures.row_flow(_flow_steps(steps))),
                 note("Every input line is in one part: rows in = the parts' sum at every step. Rejected input "
                      "rows are in 00-input/rejects with their reasons; a filter's rows in its rejected/ folder."))
    if audited:
        page.section("Labels at each step", figure(figures.shares({s.step: s.audit.labels for s in audited})))
    page.section("Steps", table(_step_rows(steps), formats={"time": fmt.seconds,
                                                            "peak memory": fmt.binary_size,
                                                            "its Ray task's peak": fmt.binary_size,
                                                            "memory budget": fmt.binary_size}),
                 note("Peak memory: this process's resident memory while the stage ran (the driver's, on Ray; a "
                      "stage whose work is one process runs there as one Ray task, whose peak has a column of its "
                      "own). Memory budget: the run's, for each of its processes: the audits' exact counts spill to "
                      "disk past it, dedup holds fewer bands within it, DuckDB takes at most half of it; the "
                      "process's libraries and the rest of a stage's memory come on top. A reused stage was unchanged since an earlier run, whose time and memory are shown."))
    if any(s.phases for s in steps):
        page.section("Where the time went", table(_phase_rows(steps), formats={"time": fmt.seconds,
                                                                               "per second": fmt.number}),
                     note("The progress bars each step showed on the terminal, as counted when they finished "
                          "(work done on Ray workers is counted in the step's total time only, except a stage "
                          "run as one task, whose bars the driver drew as they advanced)."))
    page.section("Stage reports", _links(steps))
    if data.final_top and len(audited) >= 2:
        page.section(f"The top features after {audited[-1].step}", table(
            data.final_top, formats={"z* of the input": fmt.z, "z* after": fmt.z}),
            note("The corpus the pipeline made, ranked again: a feature the input's ranking did not lead with can "
                 "lead now (— : in fewer rows than min_count at the input)."))
    if data.final_unaudited:
        made = data.final_unaudited
        page.section(f"The corpus the pipeline made ({made['step']})",
                     note(f"Not audited: {made['why']}. The figures above end at the last step whose rows were."))
    elif final_stats is not None:
        last = audited[-1].step
        page.section(f"z-statistics of the corpus the pipeline made ({last})",
                     figure(figures.zplot(final_stats, 6, f"{corpus}: after {last}")))
    page.section("Pipeline", code(pipeline_yaml))
    return page.html()


def _comparison(c: Comparison) -> tuple[str, str]:
    """A compare step's answer: each refined corpus's accuracy and gain over the baseline per evaluation set
    (points, 95% interval, significance), its warnings (a label's collapse) and notes (a set that cannot
    separate)."""
    warned = "".join(f'<p class="bad">{html.escape(w)}</p>' for w in c.warnings)
    rows = [{"evaluation set": r.eval, "corpus": r.train, "accuracy": r.accuracy, "gain": fmt.points(r.gain),
             "95% interval of the gain": fmt.interval(r.ci95), "significant": "yes" if r.significant else "no"}
            for r in c.rows if r.train != c.baseline and r.gain is not None]
    return (warned + table(rows, formats={"accuracy": fmt.percent}),
            note(f"The same model trained on each corpus and on the baseline, {c.baseline}; the gain is in points "
                 "of accuracy with its paired-bootstrap 95% interval. " + " ".join(c.notes)))


def _flow_steps(steps: list[StepEntry]) -> list[dict]:
    """``figures.row_flow``'s steps: where each step's rows went, rows added beyond what it read."""
    flow = []
    for s in steps:
        parts = dict(s.parts)
        passes = next(iter(parts)) if parts else None
        added = (s.rows or 0) - parts.get(passes, 0) if s.change in ("rewritten", "augmented") else 0
        if added > 0:
            parts["added"] = added
        flow.append({"name": s.step, "rows_in": s.rows_in, "parts": parts, "passes": passes})
    return flow


def _step_rows(steps: list[StepEntry]) -> list[dict]:
    return [{"step": s.step + {"skipped": " (reused)", "failed": " (failed)", "interrupted": " (interrupted)"}.get(
             s.status, ""),
             "what it did": (s.headline or s.change)
             + (f" (not audited for this report: {s.audit_skipped})" if s.audit_skipped else ""),
             "rows passed on": s.rows,
             "time": s.seconds, "peak memory": s.peak_rss,
             **({"its Ray task's peak": s.task_peak_rss} if any(t.task_peak_rss for t in steps) else {}),
             "memory budget": s.memory_budget}
            for s in steps]


def _phase_rows(steps: list[StepEntry]) -> list[dict]:
    """Where each step's time went: its progress bars' counts, times and rates."""
    return [{"step": s.step, "phase": p["what"],
             "done": f"{fmt.count(p['count'])} {_plural(p['unit'].strip(), p['count'])}".strip(),
             "time": p["seconds"], "per second": p["count"] / p["seconds"] if p["seconds"] else None}
            for s in steps for p in s.phases if p["count"]]


def _plural(unit: str, n: float) -> str:
    """A progress bar's unit (tqdm's, singular: task, batch, query) for ``n`` of it."""
    if n == 1 or not unit or unit.endswith("s"):
        return unit
    if unit.endswith("y"):
        return unit[:-1] + "ies"
    return unit + ("es" if unit.endswith(("ch", "sh", "x")) else "s")


def _links(steps: list[StepEntry]) -> str:
    items = "".join(f"<li>{link(s.report, s.step)}</li>" for s in steps if s.report)
    return f"<ul>{items}</ul>" if items else note("No stage wrote a report of its own.")


def _weighted_note(audited: list[StepEntry]) -> str:
    """Which steps' z* are weighted, and what that means ("" where none is)."""
    weighted = [s.step for s in audited if s.audit.weighted]
    return f" After {', '.join(weighted)} the rows carry weights: {WEIGHTED_NOTE}." if weighted else ""


def _verdicts(steps: list[StepEntry]) -> str:
    """Each step's verdicts: the line (red when the stage broke its promise) and its warnings with the remedy."""
    out = []
    for s in steps:
        for part, v in s.verdicts.items():
            css = "" if v.ok else ' class="bad"'
            name = s.step + (f" ({part})" if part else "")
            out.append(f"<p{css}><b>{html.escape(name)}</b>: {html.escape(v.line)}</p>")
            if v.warnings:
                out.append("<ul>" + "".join(f"<li>{html.escape(w)}</li>" for w in v.warnings) + "</ul>")
    return "".join(out)


def _worse(first: AuditFigures, last: AuditFigures) -> str:
    """A warning where the pipeline left a label with more significant features or a higher max z*."""
    worse = [f"{label}: {first.significant.get(label, 0):,} → {last.significant.get(label, 0):,} significant "
             f"features, max z* {fmt.z(first.max_z.get(label))} → {fmt.z(last.max_z.get(label))}"
             for label in first.labels
             if last.significant.get(label, 0) > first.significant.get(label, 0)
             or (last.max_z.get(label) or 0) > (first.max_z.get(label) or 0) + 0.5]
    return (f'<p class="bad">The pipeline made the shortcuts of {len(worse)} label(s) stronger: '
            f'{html.escape("; ".join(worse))}. See the top features after the last stage below.</p>' if worse else "")
