"""The weights stage's report, report.json's entries (``WeightsReport``), and its page: the verdict of the weighted
audit, the weights' histogram and effective sample size, the caps checked, the label shares and π, and the
leakage-only model's accuracy with and without the weights."""
from __future__ import annotations

import html
from dataclasses import dataclass

from refinery.core.report_record import ReportRecord
from refinery.core.verdict import Verdict
from refinery.messages import Message, Setting
from refinery.methods.weights.config import AUTO_CLIP, MIN_ESS_SHARE, NO_CLIP, clip_setting
from refinery.methods.weights.ips import LOW_ESS_SHARE, Cap
from refinery.pipeline.output import StageOutput
from refinery.report import format as fmt
from refinery.report import verdict as verdict_html
from refinery.report.figures.histogram import histogram
from refinery.report.page import Report, config_table, fields, figure, note, table


@dataclass(frozen=True, kw_only=True)
class WeightsReport(ReportRecord):
    """The weights stage's report: the ``labels``; the warning where the effective sample size (Σw)²/Σw² is under
    ``ips.LOW_ESS_SHARE`` of the rows (``ips.low_ess_warning``: its message, the ESS, the clip it suggests and the
    ESS that clip gives; None otherwise); the fitted prior π, the observed and the weighted label shares (equal by
    π's fit), the weights' ``diagnostics`` (``ips.diagnostics``), the ``cap`` they were written under, the
    leakage-only model's ``out_of_fold`` accuracy and majority rate, plain and weighted (Debiased Eva: Σ w·[ŷ = y] /
    Σ w); the inputs by split, the configuration; the rows weighted and the input's rejected rows, the weights'
    ``histogram`` (``ips.weight_histogram``); the verdict of the weighted audit against the plain one
    (``core.verdict.Verdict.to_dict``) and the caps checked where it warns (``leakage_neutral._caps_checked``)."""

    labels: list
    low_ess_warning: dict | None
    prior: dict
    observed_shares: dict
    weighted_shares: dict
    diagnostics: dict
    cap: Cap
    out_of_fold: dict
    inputs: dict
    config: dict
    rows: int
    rejected: int
    histogram: dict
    verdict: dict
    clips_checked: list


def cap_text(cap: Cap) -> Message:
    """The cap the weights were written under, and why."""
    if cap.clip is None:
        return (Message("no cap (", clip_setting(NO_CLIP), ", the paper's letter)") if cap.setting == NO_CLIP else
                Message("no cap (", clip_setting(AUTO_CLIP), ": the uncapped weights keep the effective sample size ≥ "
                        f"{MIN_ESS_SHARE:.0%} of the rows)"))
    why = Message(clip_setting(AUTO_CLIP), ": the largest cap that keeps the effective sample size ≥ "
                  f"{MIN_ESS_SHARE:.0%} of the rows") if cap.setting == AUTO_CLIP else clip_setting(cap.clip)
    return Message(f"cap {cap.clip:.3g}× the mean weight (", why, "); effective sample size "
                   f"{cap.effective_sample_size:,.0f} of {cap.rows:,} rows ({fmt.percent(cap.share)})")


def page(out: StageOutput, report: WeightsReport, verdict: Verdict) -> Report:
    """The weights' report of ``report`` and its ``verdict``, on ``out``'s report page."""
    page = out.report_page("weights: leakage-neutral inverse-propensity weights (Zhang et al. 2019)")
    corpus = page.corpus
    d, oof, warning = report.diagnostics, report.out_of_fold, report.low_ess_warning
    labels = report.labels
    ess_share = d["effective_sample_size"] / max(d["rows"], 1)
    hist = report.histogram
    marks = [(1.0, "mean weight 1")]
    if report.cap.clip is not None:
        marks.append((report.cap.clip, f"cap {report.cap.clip:.3g}"))
    weights_block = [
        f'<p class="bad">{html.escape(str(warning["message"]))}</p>' if warning else "",
        fields({"rows weighted": d["rows"], "cap": cap_text(report.cap),
                "effective sample size (Σw)² / Σw²": f"{d['effective_sample_size']:,.0f} ({fmt.percent(ess_share)} of "
                                                     f"the rows)",
                "least weight": d["min"], "largest weight (× the mean)": d["max"],
                "quantiles 1% · 50% · 99%": f"{fmt.number(d['q1'])} · {fmt.number(d['q50'])} · {fmt.number(d['q99'])}"}),
        figure(histogram(hist["edges"], hist["rows"], title=f"{corpus}: rows per weight",
                         x_label="weight, in units of the mean (log scale)", log_x=True, marks=tuple(marks)),
               "Rows per weight bin; the count axis starts at zero and a bar too short to see carries its count. "
               "The effective sample size is the number of unweighted rows that would estimate as precisely: "
               f"under {LOW_ESS_SHARE:.0%} of the rows, a few rows carry the weight."),
    ]
    shares = [{"label": l, "share of rows": report.observed_shares[l],
               "weighted share": report.weighted_shares[l], "prior π": report.prior[l]} for l in labels]
    clips = [{"clip": c["clip"], "effective sample size": c["effective_sample_size"],
              "verdict": "ok" if c["ok"] else "WARNING", "features worsened": c["worsened"]}
             for c in report.clips_checked]
    return (page
            .section(verdict_html.HEADING, verdict_html.section(verdict))
            .section("The weights", *weights_block)
            .section("Caps checked", table(clips, formats={"effective sample size": fmt.count}) if clips
                     else note("No cap needed checking: the verdict holds." if verdict.ok else
                               "No cap below the largest weight to check."),
                     note(str(Message("Where the verdict warns: the weights each ", Setting("clip"), " would give "
                                      "(the prior fitted again under the cap), judged as these weights were on the "
                                      "features over the threshold with or without these weights: the verdict each "
                                      "would get."))))
            .section("Labels", table(shares, formats={"share of rows": fmt.percent, "weighted share": fmt.percent,
                                                      "prior π": fmt.number}),
                     note("π is fitted so that the weighted label shares equal the observed ones."))
            .section("The leakage-only model", fields({
                "out-of-fold accuracy": fmt.percent(oof["accuracy"]),
                "weighted accuracy": fmt.percent(oof["weighted_accuracy"]),
                "majority class": fmt.percent(oof["majority_accuracy"]),
                "weighted majority class": fmt.percent(oof["weighted_majority_accuracy"])}),
                note("A random forest on the sentence-graph features alone, cross-predicted. Under the weights its "
                     "accuracy should fall to the weighted majority rate: the label no longer depends on them."))
            .section("Configuration", config_table(report.config)))
