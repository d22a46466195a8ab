"""zfilter's report (Wu et al. 2022): the input's z-statistics against those of Z, the rows kept (the seed's
included), with the verdict of ``core.verdict`` (``ZFilterReport``); and what a z-filter's and a composition's
reports share: their accounting, their remedies, the top-k of an audit."""
from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from refinery.core import stats as zstats
from refinery.core.report_record import ReportRecord
from refinery.core.verdict import Verdict, judge
from refinery.messages import Command, Message, Setting
from refinery.methods.zfilter.config import ZFilterConfig
from refinery.pipeline.executor import FilterWritten
from refinery.pipeline.filter import verdict_headline
from refinery.pipeline.output import StageOutput
from refinery.pipeline.stage import StageResult
from refinery.report import figures
from refinery.report import format as fmt
from refinery.report import verdict as verdict_html
from refinery.report.page import Report, config_table, fields, figure, table, top_features

if TYPE_CHECKING:   # the stream loads when a stage runs: the stage's module imports the record without it
    from refinery.methods.zfilter.stream import Filtering


@dataclass(frozen=True, kw_only=True)
class ZFilterReport(ReportRecord):
    """zfilter's report.json: the prior p0 and the kept rows' threshold t (rounded) with the input's; the verdict
    (``core.verdict.Verdict.to_dict``: the input's z* against those of Z); the rows kept (the seed's included),
    filtered out, of the seed, taken back by the settle pass, read from the input and rejected on input; the rows
    per label kept (the seed's included), filtered out and of the seed; each label's largest z* (Wu et al. 2022,
    eq. 1) before and after (None: no feature tested); the 30 features that filtered out most rows, with their
    rows; the top-k features before and after (``ZStats.top_k``); the configuration."""

    prior: str
    threshold: float
    threshold_input: float
    verdict: dict
    kept: int
    rejected: int
    seed: int
    settled_out: int
    input: int
    input_rejected: int
    kept_by_label: dict
    rejected_by_label: dict
    seed_by_label: dict
    max_z_before: dict
    max_z_after: dict
    top_rejecting_features: dict
    topk_before: dict
    topk_after: dict
    config: dict


def audit_summary(stats: zstats.ZStats, config: ZFilterConfig, title: str) -> tuple[dict, str]:
    """Top-k and the z-plot of one audit."""
    return stats.top_k(config.k), figures.zplot(stats, 6, title)


def remedies(config: ZFilterConfig, seeded: bool, where: str = "OUT/kept", settle_exhausted: bool = False) -> Message:
    """What removes the features a z-filtering left over the threshold, with the setting that applies."""
    if settle_exhausted:
        return Message("settle took back its most (", Setting("settle_limit"), f", now {config.settle_limit:g} of the "
                       "rows the stream kept) before every feature was under the threshold: raise ",
                       Setting("settle_limit"), " (1: no bound, at the cost of rows) or ", Setting("k"),
                       f" (now {config.k}).")
    if not config.settle:
        return Message("drop ", Setting("settle", False), " (settle: true): after the stream it takes back the "
                       "fewest earliest-admitted rows that bring these under the threshold; or raise ", Setting("k"),
                       f" (now {config.k}).")
    if seeded:
        return Message("the seed's rows are kept as they are, so its own shortcuts stay: filter the seed corpus first "
                       "(", Command("compose", (Setting("composition", "seqz"),)), ").")
    return Message("raise ", Setting("k"), f" (now {config.k}), or run ", Command("zfilter"), f" on {where} again.")


def publish_report(filtering: Filtering, written: FilterWritten, out: StageOutput, config: ZFilterConfig,
                   after: zstats.ZStats) -> StageResult:
    """zfilter's report.json and page under ``out``'s report/, and the stage's result: ``written`` is
    ``FilterStage``'s count of what it wrote (kept/ with the seed's rows that lead it, rejected/, the input's rejects;
    rows per label); ``after``: the z-statistics of Z (the kept rows), computed once for the audit kept with kept/."""
    zf, seed_by_label = filtering.zf, filtering.seed_by_label
    page = out.report_page("z-filter: rows whose features leak the label, filtered out (Wu et al. 2022)")
    before = zf.seen.stats(zf.prior.name, config.min_count, config.alpha)
    remedy = remedies(config, bool(seed_by_label), out.url("kept"), filtering.settle_exhausted)
    verdict = judge(before, after, stage="zfilter", remedy_remaining=remedy, remedy_worsened=remedy,
                    prior=str(zf.prior))
    if filtering.passed_through:
        verdict.notes.append(str(Message(   # a verdict's notes are text: its page escapes them
            "the input's audit finds no feature over the threshold: every row passes through (",
            Setting("biased_set", "top-k"), " filters each label's top-k features whatever their z*)")))
    top_before, plot_before = audit_summary(before, config, f"{page.corpus}: input")
    top_after, plot_after = audit_summary(after, config, f"{page.corpus}: kept rows")
    input_threshold = before.threshold
    del before, after
    seed = sum(seed_by_label.values())
    labels = zf.Z.labels
    report = ZFilterReport(
        prior=str(zf.prior), threshold=round(verdict.threshold, 4), threshold_input=round(input_threshold, 4),
        verdict=verdict.to_dict(), kept=written.kept, rejected=written.filtered_out, seed=seed,
        settled_out=filtering.settled_out, input=written.kept + written.filtered_out - seed,
        input_rejected=written.input_rejects,
        kept_by_label={l: written.kept_by_label.get(l, 0) + seed_by_label.get(l, 0) for l in labels},
        rejected_by_label={l: written.filtered_by_label.get(l, 0) for l in labels},
        seed_by_label={l: seed_by_label.get(l, 0) for l in labels},
        max_z_before={l: (v[0]["z"] if v else None) for l, v in top_before.items()},
        max_z_after={l: (v[0]["z"] if v else None) for l, v in top_after.items()},
        top_rejecting_features=dict(list(filtering.rejections_by_feature.items())[:30]),
        topk_before=top_before, topk_after=top_after, config=config.to_dict())
    out.publish_report(report, _page(page, report, verdict, plot_before, plot_after))
    seeded = f" ({seed:,} seed rows)" if seed else ""
    settled = f" ({report.settled_out:,} of them taken back after the stream)" if report.settled_out else ""
    rows_line = f"kept {report.kept:,}, filtered out {report.rejected:,}{settled}; prior {report.prior}"
    return StageResult(*accounting(report), report, f"kept {report.kept:,}{seeded}, filtered out "
                       f"{report.rejected:,}; {verdict_headline(verdict)}", (rows_line, *verdict.lines()),
                       () if verdict.ok else tuple(verdict.warnings()))


def accounting(report) -> tuple[int, dict]:
    """(rows in, where they went) of a z-filter's or a composition's report (a ``ZFilterReport``, a
    ``compose_report.ComposeReport``): the seed's rows (a composition's D0) lead kept/, and its input rejects are
    D0's and G's."""
    return report.input + report.seed + report.input_rejected, {
        "kept": report.kept, "filtered out": report.rejected, "input rejects": report.input_rejected}


def _page(page: Report, report: ZFilterReport, verdict: Verdict, plot_before: str, plot_after: str) -> Report:
    seeds = report.seed_by_label
    by_label = [{"label": l, **({"seed rows": seeds[l]} if report.seed else {}),
                 "kept": kept - seeds[l], "filtered out": report.rejected_by_label[l],   # of the input's rows
                 "rows kept": (kept - seeds[l]) / max(kept - seeds[l] + report.rejected_by_label[l], 1),
                 "max z* before": report.max_z_before.get(l), "max z* after": report.max_z_after.get(l)}
                for l, kept in report.kept_by_label.items()]
    rows = {"input rows": report.input, "input rejects": report.input_rejected}
    if report.seed:
        rows["seed rows (kept as they are)"] = report.seed
    rows |= {"kept (seed rows included)" if report.seed else "kept": report.kept,
             "filtered out": report.rejected}
    if report.settled_out:
        rows["of them, taken back after the stream (settle)"] = report.settled_out
    rows["prior p0"] = report.prior
    return (page
            .section(verdict_html.HEADING, verdict_html.section(verdict))
            .section("Rows", fields(rows))
            .section("Per label", table(by_label, formats={"rows kept": fmt.percent, "max z* before": fmt.z,
                                                            "max z* after": fmt.z}))
            .section("z-statistics of the input", figure(plot_before))
            .section("z-statistics of the kept rows", figure(plot_after, _after_caption(report)))
            .section("Features that caused most rows to be filtered out", table(
                [{"feature": f, "rows filtered out": n} for f, n in report.top_rejecting_features.items()]))
            .section("Top features of the input", top_features(report.topk_before, report.threshold_input))
            .section("Top features of the kept rows", top_features(report.topk_after, report.threshold))
            .section("Configuration", config_table(report.config)))


def _after_caption(report: ZFilterReport) -> str:
    """What the kept rows' statistics show, as the figures have it."""
    before, after = report.max_z_before, report.max_z_after
    stuck = [l for l, z in after.items() if z is not None and before.get(l) is not None and z >= before[l] - 0.01]
    if not stuck:
        return "The same statistics over the rows the filter kept: every label's largest z* fell."
    return (f"The same statistics over the rows the filter kept. The largest z* of {', '.join(stuck)} did not fall. "
            "z-filtering reads the rows in order and decides each batch on the counts so far, so an input sorted by "
            "class or template keeps whole groups before their bias shows: shuffle_seed reads it in a seeded "
            "random order.")
