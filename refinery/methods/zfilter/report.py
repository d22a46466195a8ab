"""zfilter's report (Wu et al. 2022): the input's z-statistics against those of Z, the rows kept (the seed's
included), with the verdict of ``core.verdict``; and the lines the verb prints for a z-filter or a composition."""
from __future__ import annotations

from refinery.core import stats as zstats
from refinery.core.verdict import LabelRows, Verdict, judge
from refinery.messages import Command, Message, Setting
from refinery.methods.zfilter.config import PARTS, ZFilterConfig
from refinery.methods.zfilter.stream import Filtering
from refinery.pipeline.executor import FilterWritten
from refinery.pipeline.filter import verdict_headline
from refinery.pipeline.output import StageOutput
from refinery.pipeline.stage import StageResult
from refinery.report import figures
from refinery.report import format as fmt
from refinery.report import verdict as verdict_html
from refinery.report.page import Report, config_table, fields, figure, table, top_features


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
    report = {
        "prior": str(zf.prior), "threshold": round(verdict.threshold, 4),
        "threshold_input": round(input_threshold, 4), "verdict": verdict.to_dict(),
        "kept": written.kept, "rejected": written.filtered_out, "seed": seed,
        "settled_out": filtering.settled_out, "input": written.kept + written.filtered_out - seed,
        "input_rejected": written.input_rejects,
        "kept_by_label": {l: written.kept_by_label.get(l, 0) + seed_by_label.get(l, 0) for l in labels},
        "rejected_by_label": {l: written.filtered_by_label.get(l, 0) for l in labels},
        "seed_by_label": {l: seed_by_label.get(l, 0) for l in labels},
        "max_z_before": {l: (v[0]["z"] if v else None) for l, v in top_before.items()},
        "max_z_after": {l: (v[0]["z"] if v else None) for l, v in top_after.items()},
        "top_rejecting_features": dict(list(filtering.rejections_by_feature.items())[:30]),
        "topk_before": top_before, "topk_after": top_after, "config": config.to_dict(),
    }
    out.publish_report(report, _page(page, report, verdict, plot_before, plot_after))
    seeded = f" ({seed:,} seed rows)" if seed else ""
    return StageResult(*accounting(report), report, f"kept {report['kept']:,}{seeded}, filtered out "
                       f"{report['rejected']:,}; {verdict_headline(verdict)}", terminal_lines(report),
                       () if verdict.ok else tuple(verdict.warnings()))


def accounting(report: dict) -> tuple[int, dict]:
    """(rows in, where they went) of a z-filter or composition report: the seed's rows (a composition's D0) lead
    kept/, and its input rejects are D0's and G's."""
    return report["input"] + report["seed"] + report["input_rejected"], {
        "kept": report["kept"], "filtered out": report["rejected"], "input rejects": report["input_rejected"]}


def _page(page: Report, report: dict, verdict: Verdict, plot_before: str, plot_after: str) -> Report:
    seeds = report["seed_by_label"]
    by_label = [{"label": l, **({"seed rows": seeds[l]} if report["seed"] else {}),
                 "kept": kept - seeds[l], "filtered out": report["rejected_by_label"][l],   # of the input's rows
                 "rows kept": (kept - seeds[l]) / max(kept - seeds[l] + report["rejected_by_label"][l], 1),
                 "max z* before": report["max_z_before"].get(l), "max z* after": report["max_z_after"].get(l)}
                for l, kept in report["kept_by_label"].items()]
    rows = {"input rows": report["input"], "input rejects": report["input_rejected"]}
    if report["seed"]:
        rows["seed rows (kept as they are)"] = report["seed"]
    rows |= {"kept (seed rows included)" if report["seed"] else "kept": report["kept"],
             "filtered out": report["rejected"]}
    if report["settled_out"]:
        rows["of them, taken back after the stream (settle)"] = report["settled_out"]
    rows["prior p0"] = report["prior"]
    return (page
            .section(verdict_html.HEADING, verdict_html.section(verdict))
            .section("Rows", fields(rows))
            .section("Per label", table(by_label, formats={"rows kept": fmt.percent, "max z* before": fmt.z,
                                                            "max z* after": fmt.z}))
            .section("z-statistics of the input", figure(plot_before))
            .section("z-statistics of the kept rows", figure(plot_after, _after_caption(report)))
            .section("Features that caused most rows to be filtered out", table(
                [{"feature": f, "rows filtered out": n} for f, n in report["top_rejecting_features"].items()]))
            .section("Top features of the input", top_features(report["topk_before"], report["threshold_input"]))
            .section("Top features of the kept rows", top_features(report["topk_after"], report["threshold"]))
            .section("Configuration", config_table(report["config"])))


def _after_caption(report: dict) -> str:
    """What the kept rows' statistics show, as the figures have it."""
    before, after = report["max_z_before"], report["max_z_after"]
    stuck = [l for l, z in after.items() if z is not None and before.get(l) is not None and z >= before[l] - 0.01]
    if not stuck:
        return "The same statistics over the rows the filter kept: every label's largest z* fell."
    return (f"The same statistics over the rows the filter kept. The largest z* of {', '.join(stuck)} did not fall. "
            "z-filtering reads the rows in order and decides each batch on the counts so far, so an input sorted by "
            "class or template keeps whole groups before their bias shows: shuffle_seed reads it in a seeded "
            "random order.")


def terminal_lines(r: dict) -> tuple:
    """The terminal summary of a z-filter or composition report: the rows (a composition's per part), then each
    verdict."""
    settled = f" ({r['settled_out']:,} of them taken back after the stream)" if r.get("settled_out") else ""
    verdicts = {"": r["verdict"]} if "verdict" in r else {f"{part}: ": v for part, v in r["verdicts"].items()}
    rows = ([f"{PARTS[p]}: {v['input']:,} rows read, kept {v['kept']:,} ({fmt.percent(v['kept'] / max(v['input'], 1))}),"
             f" filtered out {v['rejected']:,}, input rejects {v['input_rejected']:,}" for p, v in r["parts"].items()]
            if "parts" in r else [])
    head = f"prior {r['prior']}" if rows else f"kept {r['kept']:,}, filtered out {r['rejected']:,}{settled}; prior {r['prior']}"
    return (*rows, head,
            *(line for part, v in verdicts.items()
              for line in (part + v["line"], *_labels(v), *(f"  {w}" for w in v["warnings"]),
                           *(f"  note: {n}" for n in v.get("notes", [])))),
            *(f"note: {n}" for n in r.get("notes", [])))


def _labels(verdict: dict) -> tuple:
    """The verdict's line of each label's rows before → after (none where it counted no labels)."""
    rows = verdict.get("label_rows") or {}
    return (f"  labels: {'; '.join(LabelRows(**r).text(l) for l, r in rows.items())}",) if rows else ()
