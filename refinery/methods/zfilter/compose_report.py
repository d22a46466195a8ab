"""compose's report (Wu et al. 2022 §4.2): each part of the composition (D0, G) and the two together, counted
and audited before and after under one prior, with a verdict where the composition promises one."""
from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from refinery.core.report_record import ReportRecord
from refinery.core.verdict import Verdict, judge
from refinery.messages import Message, Setting
from refinery.methods.zfilter.report import accounting, audit_summary, remedies
from refinery.methods.zfilter.config import PARTS, ZFilterConfig
from refinery.pipeline.output import StageOutput
from refinery.pipeline.stage import StageResult
from refinery.report import format as fmt
from refinery.report import verdict as verdict_html
from refinery.report.page import Report, config_table, figure, link, note, table, top_features

if TYPE_CHECKING:   # the composition loads when a stage runs: the stage's module imports the record without it
    from refinery.methods.zfilter.composition import Composition


@dataclass(frozen=True, kw_only=True)
class ComposeReport(ReportRecord):
    """compose's report.json: the kind of composition (zaug, parz, seqz); the rows of D0 and G together read, of a
    seed (none: D0 is a part), kept, filtered out and rejected on input; the prior p0 and the threshold t (rounded)
    of the kept rows together; each part's rows (``parts``: {original, generated, together: {"input",
    "input_rejected", "kept", "rejected", "kept_by_label", "rejected_by_label"}}); the verdict of each part the
    composition promises one for (``verdicts``: {part's name: ``core.verdict.Verdict.to_dict``}) and why the others
    have none (``notes``); each label's largest z* (Wu et al. 2022, eq. 1) of D0 ∪ G before and after; their top-k
    features before and after (``ZStats.top_k``); each filtering's report page under stages/ (``stages``: {name:
    path}); the configuration."""

    kind: str
    input: int
    seed: int
    kept: int
    rejected: int
    input_rejected: int
    prior: str
    threshold: float
    parts: dict
    verdicts: dict
    notes: list
    max_z_before: dict
    max_z_after: dict
    topk_before: dict
    topk_after: dict
    stages: dict
    config: dict


def compose_report(composition: Composition, out: StageOutput, config: ZFilterConfig) -> StageResult:
    """Each part of a composition and the two together: rows read, kept and filtered out per label, and a
    verdict (``core.verdict``) of its rows read against its rows kept, all under one prior rule (``out.prior``:
    ``auto`` decides it on the labels of D0 and G together); published as ``out``'s report (report.json, report.html),
    and the stage's result."""
    kind, audit, input_rejects = composition.kind, composition.audit, composition.input_rejects
    page = out.report_page(f"compose ({kind}): original and generated rows, z-filtered (Wu et al. 2022 §4.2)")
    prior = out.prior   # decided on D0 and G together (``ComposeStage.prepare``), or carried with the input
    remedy = remedies(config, False)   # OUT/kept: the same words for the verb and a pipeline step
    # A part filtered on its own, and a composition of filtered parts, promise every label under the threshold;
    # Z-Aug's composition (D0 whole) only that nothing got worse. D0 kept whole (Z-Aug) and G filtered against
    # the counts of D0 and G together (Seq-Z, Z-Aug) promise nothing of their own (None): such G rows lean
    # against D0's shortcuts on purpose. Every part is still counted and audited.
    promise = {"original": True if kind != "zaug" else None, "generated": True if kind == "parz" else None,
               "together": kind != "zaug"}
    verdicts, parts, summaries, notes = {}, {}, {}, []
    for part in PARTS:
        before = audit.stats("input", part, prior.name, config)
        after = audit.stats("kept", part, prior.name, config)
        verdicts[part] = judge(before, after, stage="compose", under_threshold=bool(promise[part]),
                               remedy_remaining=remedy, remedy_worsened=remedy, prior=str(prior))
        if promise[part] is None:
            notes.append(_unjudged(kind, part, verdicts[part]))
        if kind == "zaug" and part == "together":
            verdicts[part].notes.append(str(Message(   # a verdict's notes are text: its page escapes them
                "Z-Aug keeps D0 as it is, shortcuts included; ", Setting("composition", "seqz"), " filters D0 first.")))
        read = audit.counts["input", part].label_totals
        kept_by = audit.counts["kept", part].label_totals
        rejects = sum(input_rejects.values()) if part == "together" else input_rejects[part]
        parts[part] = {"input": sum(read.values()), "input_rejected": rejects, "kept": sum(kept_by.values()),
                       "rejected": sum(read.values()) - sum(kept_by.values()), "kept_by_label": dict(kept_by),
                       "rejected_by_label": {l: read[l] - kept_by[l] for l in read}}
        if part == "together":
            summaries = {"before": audit_summary(before, config, f"{page.corpus}: D0 ∪ G"),
                         "after": audit_summary(after, config, "kept rows")}
        del before, after
    together = parts["together"]
    report = ComposeReport(
        kind=kind, input=together["input"], seed=0, kept=together["kept"], rejected=together["rejected"],
        input_rejected=together["input_rejected"], prior=str(prior), threshold=round(verdicts["together"].threshold, 4),
        parts=parts, verdicts={PARTS[p]: v.to_dict() for p, v in verdicts.items() if promise[p] is not None},
        notes=notes, max_z_before={l: m.before for l, m in verdicts["together"].max_z.items()},
        max_z_after={l: m.after for l, m in verdicts["together"].max_z.items()},
        topk_before=summaries["before"][0], topk_after=summaries["after"][0],
        stages={name: f"stages/{name}/report/report.html" for name in ("z_original", "z_generated")
                if kind != "zaug" or name == "z_generated"},
        config=config.to_dict())
    out.publish_report(report, _page(page, report, verdicts, summaries["before"][1], summaries["after"][1]))
    judged = {p: v for p, v in verdicts.items() if promise[p] is not None}
    return StageResult(*accounting(report), report, f"{kind}: kept {together['kept']:,} of D0 and G, filtered out "
                       f"{together['rejected']:,}", _terminal_lines(report, judged),
                       tuple(f"{PARTS[p]}: {w}" for p, v in judged.items() if not v.ok for w in v.warnings()))


def _terminal_lines(report: ComposeReport, verdicts: dict[str, Verdict]) -> tuple:
    """The terminal summary: each part's rows, the prior, each verdict (``verdicts``: those of the parts judged)
    under its part's name, then why the other parts have none."""
    rows = [f"{PARTS[p]}: {v['input']:,} rows read, kept {v['kept']:,} ({fmt.percent(v['kept'] / max(v['input'], 1))}),"
            f" filtered out {v['rejected']:,}, input rejects {v['input_rejected']:,}" for p, v in report.parts.items()]
    return (*rows, f"prior {report.prior}",
            *(line for p, v in verdicts.items() for line in (f"{PARTS[p]}: {v.line()}", *v.lines()[1:])),
            *(f"note: {n}" for n in report.notes))


def _unjudged(kind: str, part: str, verdict: Verdict) -> str:
    """Why a part of the composition has no verdict of its own, with what its rows alone show."""
    if part == "original":
        return f"{PARTS[part]}: kept as it is (Z-Aug), so no verdict of its own."
    over = sorted((c for cs in verdict.remaining.values() for c in cs), key=lambda c: -c.z_after)
    shown = "; ".join(f"{c.feature} ({c.label}) z* {c.z_after:.2f}" for c in over[:3])
    return (f"{PARTS[part]}: filtered against the counts of {'D0' if kind == 'zaug' else 'Z(D0)'} and G together, "
            "not on its own, so its rows alone may lean against D0's shortcuts on purpose"
            + (f" ({sum(verdict.remaining_total.values()):,} feature(s) over the threshold {verdict.threshold:.2f}: "
               f"{shown})" if over else "; none of their features is over the threshold")
            + "; the verdict on D0 ∪ G is the one that holds them to it.")


def _page(page: Report, report: ComposeReport, verdicts: dict, plot_before: str, plot_after: str) -> Report:
    parts = report.parts
    rows = [{"part": PARTS[p], "rows read": v["input"], "input rejects": v["input_rejected"], "kept": v["kept"],
             "filtered out": v["rejected"], "rows kept": v["kept"] / max(v["input"], 1)} for p, v in parts.items()]
    by_label = [{"label": l, "part": PARTS[p], "kept": v["kept_by_label"][l], "filtered out": v["rejected_by_label"][l],
                 "rows kept": v["kept_by_label"][l] / max(v["kept_by_label"][l] + v["rejected_by_label"][l], 1),
                 "max z* before": verdicts[p].max_z[l].before, "max z* after": verdicts[p].max_z[l].after}
                for l in parts["together"]["kept_by_label"] for p, v in parts.items()]
    page.section("Rows", table(rows, formats={"rows kept": fmt.percent}),
                 note(f"Every row read is kept or filtered out: kept/ holds {report.kept:,} rows, rejected/ "
                      f"{report.rejected:,}; each row's source column says its part. prior p0: {report.prior}."),
                 *(note(n) for n in report.notes))
    for p, v in verdicts.items():
        if PARTS[p] in report.verdicts:
            page.section(f"Verdict: {PARTS[p]}", verdict_html.section(v))
    page.section("Per label", table(by_label, formats={"rows kept": fmt.percent, "max z* before": fmt.z,
                                                       "max z* after": fmt.z}))
    page.section("z-statistics of D0 ∪ G", figure(plot_before))
    page.section("z-statistics of the kept rows", figure(plot_after))
    page.section("Top features of D0 ∪ G", top_features(report.topk_before, report.threshold))
    page.section("Top features of the kept rows", top_features(report.topk_after, report.threshold))
    page.section("Each filtering", note("Each filtering's own report (its input against the corpus it kept; Z "
                                        "includes the seed's rows): ")
                 + "".join(f"<p>{link('../' + path, path)}</p>" for path in report.stages.values()))
    return page.section("Configuration", config_table(report.config))
