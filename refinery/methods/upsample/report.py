"""AUDAC's report (docs/upsample.md): report.json's figures of a ``Plan`` (``UpsampleReport``: the corrected tokens'
p̂ and z* before and after, what was left out or not fully corrected and why, the verdicts), its HTML page and
what the terminal shows of it."""
from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import TYPE_CHECKING

import pyarrow as pa

from refinery.core.report_record import ReportRecord
from refinery.messages import Message, Setting
from refinery.methods.upsample.config import wider_band
from refinery.methods.upsample.tokens import (IBADR, copies_needed, deficits, left_out, only, over_cap_reason,
                                              ranked_tokens, uncorrectable_reason)
from refinery.pipeline.output import StageOutput
from refinery.report.figures.zplot import zplot
from refinery.report import format as fmt
from refinery.report import verdict as verdict_page
from refinery.report.page import Report, config_table, fields, figure, note, table

if TYPE_CHECKING:   # the algorithm (DuckDB) loads when the stage runs
    from refinery.methods.upsample.algorithm import Plan

SHOWN = 20   # uncorrectable tokens listed in the HTML report (report.json has them all)


@dataclass(frozen=True, kw_only=True)
class UpsampleReport(ReportRecord):
    """AUDAC's report (docs/upsample.md): the rows before, the copies added and the rows after, their ``growth``
    (added / before); the corrected tokens S (``tokens``) and their p̂(l | s) before and after ({token: {label:
    p̂}}), each one's largest p̂ after and its z* in the output's audit (``z_after``); the ``uncorrectable`` tokens
    (a label never occurs with them), the ``selected`` tokens' entries (n, z*, label, counts) and the round robin's
    ``iterations_run``; the configuration and inputs; the prior rule, p0 and the audit's z* threshold; the count
    ``band`` [lo, hi] and whether it was widened, the input's rejected rows; the rows per label before and after,
    the most copies made of one row, the rows ``refused`` (a copy would have strengthened a shortcut: their count
    and the commonest features), the turns undone; the tokens ``not_corrected`` to p0 and why, those ``left_out``
    of S and why, the ``--band`` that would take in the significant ones outside it (``band_hint``, None if none);
    the verdict of the output's audit (``core.verdict.Verdict.to_dict``) under its own prior rule, and under the
    input's p0 (``verdict_input_p0``)."""

    rows_before: int
    rows_added: int
    rows_after: int
    growth: float
    tokens: list
    p_hat_before: dict
    p_hat_after: dict
    max_p_after: dict
    z_after: dict
    uncorrectable: list
    selected: list
    iterations_run: int
    config: dict
    inputs: list
    prior: str
    p0: dict
    threshold: float
    band: list
    band_widened: bool
    rejected: int
    labels_before: dict
    labels_after: dict
    most_copies_of_a_row: int
    refused: dict
    undone_turns: int
    not_corrected: list
    left_out: list
    band_hint: str | None
    verdict: dict
    verdict_input_p0: dict


def summary(plan: Plan, config, *, inputs: list, rejected: int) -> UpsampleReport:
    """report.json of ``plan`` under ``config`` (the stage's ``UpsampleConfig``), which read ``inputs`` and left
    ``rejected`` input rows aside."""
    labels, n_rows, n_added = plan.labels, plan.rows, len(plan.added)
    tokens = [c["token"] for c in plan.chosen]
    after = {e["token"]: e for e in ranked_tokens(only(plan.after, tokens), 0)}   # the output's audit's
    pb, pa_ = _p_hat(plan.chosen, labels), _p_hat(after.values(), labels)
    left, band_hint = left_out(plan.every_token, plan.fields, plan.chosen, config, n_rows, plan.threshold, plan.p0,
                               plan.band)
    uncorrectable = [{**u, "reason": uncorrectable_reason(u["token"], [l for l in labels if not u["counts"].get(l)])}
                     for u in plan.uncorrectable]
    listed = {u["token"] for u in uncorrectable}   # and the significant ones outside the band or the top k
    uncorrectable += [{k: e[k] for k in ("token", "n", "z", "label", "counts", "reason")}
                      for e in left if e["uncorrectable"] and e["token"] not in listed]
    return UpsampleReport(
        rows_before=n_rows, rows_added=n_added, rows_after=n_rows + n_added,
        growth=round(n_added / max(n_rows, 1), 4),
        tokens=tokens,
        p_hat_before=pb, p_hat_after=pa_,
        max_p_after={t: max(pa_[t].values()) for t in tokens},
        z_after={t: after[t]["z"] for t in tokens},
        uncorrectable=uncorrectable,
        selected=plan.chosen,
        iterations_run=max((t["iteration"] for t in plan.trace), default=0),
        config=asdict(config), inputs=inputs,
        prior=str(plan.prior), p0=plan.p0, threshold=round(plan.threshold, 4),
        band=[plan.band.lo, plan.band.hi], band_widened=plan.band.widened, rejected=rejected,
        labels_before={l: int(plan.totals.get(l, 0)) for l in labels},
        labels_after={l: int(plan.totals.get(l, 0) + plan.copies[l]) for l in labels},
        most_copies_of_a_row=most_copies(plan.added),
        refused={"rows": len(plan.refused), "features": tally(plan.refused.values())},
        undone_turns=plan.undone,
        not_corrected=not_corrected(plan.chosen, pa_, plan.supply, config, plan.p0, after),
        left_out=left, band_hint=band_hint,
        verdict=plan.verdict.to_dict(), verdict_input_p0=plan.verdict_input_p0.to_dict())


def _p_hat(entries, labels: list) -> dict:
    """{token: {label: p̂(l|s)}} of ``ranked_tokens``' ``entries``."""
    return {e["token"]: {l: round(e["counts"].get(l, 0) / max(e["n"], 1), 4) for l in labels} for e in entries}


def trace_table(trace: list) -> pa.Table:
    """trace.parquet: a row per turn of the round robin (an empty table of iterations if none was run)."""
    return pa.Table.from_pylist(trace) if trace else pa.table({"iteration": pa.array([], pa.int64())})


def page(out: StageOutput, report: UpsampleReport, plan: Plan, config) -> Report:
    """The HTML report of an up-sampling (``report``, ``plan`` under ``config``), on ``out``'s report page."""
    trace, labels, before, after, verdict = plan.trace, plan.labels, plan.before, plan.after, plan.verdict
    page = out.report_page("AUDAC up-sampling: rows of biased tokens copied until their labels even out "
                           "(arXiv 2401.13907)")
    corpus = page.corpus
    lo, hi = report.band
    p0 = report.p0
    selected = {c["token"]: c for c in report.selected}
    pb, pa_ = report.p_hat_before, report.p_hat_after
    change = lambda pair: f"{fmt.number(pair[0])} → {fmt.number(pair[1])}"  # noqa: E731
    p_rows = [{"token": t, "rows with it": selected[t]["n"], "z* before": selected[t]["z"],
               "z* after": report.z_after[t],
               **{l: (pb[t][l], pa_[t][l]) for l in labels},
               "largest p̂": (max(pb[t].values()), report.max_p_after[t])} for t in report.tokens]
    p_rows.append({"token": "target p0", **{l: fmt.number(p0[l]) for l in labels}})
    short = [{"token": e["token"], "label": e["label"], "p̂(label)": (e["p_hat_before"], e["p_hat_after"]),
             "p0": e["p0"], "why": e["reason"]} for e in report.not_corrected]
    uncorrectable = [{"token": u["token"], "rows with it": u["n"], "z*": u["z"],
                      **{f"rows labelled {l}": u["counts"].get(l, 0) for l in labels}} for u in report.uncorrectable]
    left = [{"token": e["token"], "label": e["label"], "z*": e["z"], "rows with it": e["n"],
             "copies per row it needs": e["copies_needed"], "why left out": e["reason"]} for e in report.left_out]
    iterations = sorted({t["iteration"] for t in trace})
    drawn = {}
    for t in trace:
        if not t["undone"]:
            drawn.setdefault(t["token"], {"token": t["token"]})[str(t["iteration"])] = t["drawn"]
    for row in drawn.values():
        row["total"] = sum(row.get(str(i), 0) for i in iterations)
    plot = lambda stats, what: zplot(stats, 6, f"{corpus}: tokens {what}" if corpus else f"tokens {what}")  # noqa: E731
    refused = report.refused
    return (page
            .section(verdict_page.HEADING, verdict_page.section(verdict),
                     note("The audit of the output (unigrams and bigrams per field, as `refinery audit`) against "
                          "the audit of the input. Up-sampling promises to make nothing worse: copies that would "
                          "take a feature over the threshold or strengthen a shortcut are refused."))
            .section("Rows", fields({
                "rows before": report.rows_before, "up-sampled copies added": report.rows_added,
                "growth": report.growth, "rows after": report.rows_after, "input rejects": report.rejected,
                "prior p0": report.prior,
                f"tokens corrected (k = {config.k:,})": len(report.tokens),
                f"iterations run (at most {config.iterations:,})": report.iterations_run,
                f"most copies of one row (at most {config.max_copies:,})": report.most_copies_of_a_row,
                "rows refused (a copy would strengthen a shortcut)": refused["rows"],
                "turns undone": report.undone_turns,
                "count band": f"tokens in {lo:,} to {hi:,} rows"}, {"growth": fmt.percent}))
            .section("Label shares, before → after", table(
                [{"label": l, "rows before": report.labels_before[l], "rows after": report.labels_after[l],
                  "share before": report.labels_before[l] / max(report.rows_before, 1),
                  "share after": report.labels_after[l] / max(report.rows_after, 1), "target p0": p0[l]}
                 for l in labels], formats={"share before": fmt.percent, "share after": fmt.percent,
                                            "target p0": fmt.number}))
            .section("p̂(label | token) of the corrected tokens, before → after", table(
                p_rows, formats={"z* before": fmt.z, "z* after": fmt.z, **{l: _pair_or_text(change) for l in labels},
                                 "largest p̂": _pair_or_text(change)}),
                note(f"The share of each label among the rows with the token, before up-sampling → after. Copies "
                     f"of those rows are drawn until every label's share nears its prior p0 ({report.prior}), "
                     f"for {config.iterations:,} iterations at most."))
            .section("Tokens not fully corrected",
                     table(short, formats={"p̂(label)": change, "p0": fmt.number}),
                     note(str(Message(f"A row is copied at most {config.max_copies:,} times (", Setting("max_copies"),
                                      "): a token whose short labels have too few rows is corrected as far as they "
                                      "go."))))
            .section("Token z-statistics before", figure(plot(before, "before")))
            .section("Token z-statistics after", figure(plot(after, "after"), (
                "The same statistics after up-sampling: the corrected tokens (the table above) fall towards the "
                "prior; tokens left out or uncorrectable stay where they were.")))
            .section("Uncorrectable tokens", table(uncorrectable[:SHOWN], formats={"z*": fmt.z}),
                     note("A label never occurs with these tokens: copying rows cannot even their labels out, so "
                          f"the next token was taken; {IBADR}."
                          + (f" The first {SHOWN} of {len(uncorrectable):,}; report.json lists them all."
                             if len(uncorrectable) > SHOWN else "")))
            .section("Tokens left out: the significant ones, and every negation and quantifier",
                     table(left, formats={"z*": fmt.z}),
                     note(str(_band_note(report, lo, hi))))
            .section("Copies drawn per token and iteration", table(
                list(drawn.values()), ["token", *map(str, iterations), "total"]),
                note("trace.parquet holds each turn's deficit, the copies of each label, the rows refused and the "
                     "turns undone."))
            .section("Configuration", config_table(report.config)))


def _significant_left_out(r: UpsampleReport) -> list:
    """The tokens left out of the correction whose z* is over the threshold (in the report's order)."""
    return [e for e in r.left_out if e["z"] > r.threshold]


def untouched(r: UpsampleReport) -> tuple:
    """A warning where significant tokens were left as they were (a verdict of 'nothing got worse' says nothing of
    them): the largest by z*, each with why, and whether any row was added at all."""
    shown = sorted(_significant_left_out(r), key=lambda e: -e["z"])
    if not shown:
        return ()
    top = "; ".join(f"{e['token']} (z* {e['z']:.1f}, {e['label']}): {e['reason']}" for e in shown[:3])
    more = f"; +{len(shown) - 3} more" if len(shown) > 3 else ""
    added = "it added no row, so " if not r.rows_added else ""
    return (f"{added}{len(shown):,} significant token(s) stay as they were: {top}{more}",)


def console_lines(r: UpsampleReport, config) -> list[str]:
    """What the terminal shows of an up-sampling under ``config`` (the stage's ``UpsampleConfig``): the prior, each
    token's largest p̂ before and after, what was not corrected and why, what was left out."""
    lines = [f"  prior p0: {r.prior}; at most {config.max_copies} copies of a row "
             f"(most made: {r.most_copies_of_a_row})"]
    width = max((len(c["token"]) for c in r.selected), default=0)
    for c in r.selected:
        tok, label = c["token"], c["label"]
        lines.append(f"  {tok:<{width}} z* {c['z']:5.1f} -> {r.z_after[tok]:5.1f}   p̂({label}) "
                     f"{r.p_hat_before[tok][label]:.3f} -> {r.p_hat_after[tok][label]:.3f} "
                     f"(p0 {r.p0[label]:.3f})")
    for e in r.not_corrected:
        lines.append(f"  not fully corrected: {e['token']}: {e['reason']}")
    for u in r.uncorrectable:
        lines.append(f"  uncorrectable: {u['token']}: {u['reason']}")
    if r.refused["rows"]:
        feats = ", ".join(r.refused["features"])
        lines.append(f"  {r.refused['rows']:,} rows not copied: a copy would have strengthened a shortcut ({feats})")
    if r.undone_turns:
        lines.append(f"  {r.undone_turns} turn(s) undone: the output's label shares moved its prior")
    shown = _significant_left_out(r)
    if shown:
        lo, hi = r.band
        widened = ", widened: the configured band held none" if r.band_widened else ""
        lines.append(f"  left out of the top {config.k} tokens by z*, with the negations and quantifiers (band: n from "
                     f"{lo:,} to {hi:,}{widened}; significant: z* > {r.threshold:.2f}, the audit's):")
        width = max(len(e["token"]) for e in shown)
        lines += [f"    {e['token']:<{width}} z* {e['z']:6.1f} {e['label']}, n {e['n']:,}: {e['reason']}"
                  for e in shown]
    calm = [e for e in r.left_out if e["z"] <= r.threshold]
    if calm:
        lines.append("  negations and quantifiers under the threshold, nothing to correct: "
                     + ", ".join(f"{e['token']} {e['z']:.1f}" for e in calm))
        if r.band_hint:
            lines.append(f"  {wider_band(r.band_hint)} would take in those outside the band")
    return lines


def _band_note(report: UpsampleReport, lo: int, hi: int) -> Message:
    """How the tokens were taken from the count band [``lo``, ``hi``], and the band that would take in the
    significant tokens outside it (``report.band_hint``)."""
    widened = (" (the configured band held none of them: widened to every token whose correction fits ",
               Setting("max_copies"), ")") if report.band_widened else ()
    hint = ("; ", wider_band(report.band_hint), " would take in those outside it that copies can correct.") \
        if report.band_hint else (".",)
    return Message(f"Tokens whose z* passes the input's audit's threshold {fmt.z(report.threshold)} are taken "
                   f"from the band of {lo:,} to {hi:,} rows", *widened, *hint)


def _pair_or_text(change):
    return lambda v: v if isinstance(v, str) else change(v)


def most_copies(added: list) -> int:
    counts: dict = {}
    for a in added:
        counts[a[3]] = counts.get(a[3], 0) + 1
    return max(counts.values(), default=0)


def tally(values) -> dict:
    """{value: how often}, most frequent first (at most 10)."""
    counts: dict = {}
    for v in values:
        counts[v] = counts.get(v, 0) + 1
    return dict(sorted(counts.items(), key=lambda kv: (-kv[1], kv[0]))[:10])


def not_corrected(chosen: list, p_after: dict, supply: list, config, p0: dict, after: dict) -> list:
    """The selected tokens whose labels did not reach p0 (D[s] > tolerance · n(s)), and why; ``after``: each
    token's ``ranked_tokens`` entry in the output's audit."""
    by = {(s["token"], s["label"]): s for s in supply}
    out = []
    for c in chosen:
        tok = c["token"]
        now = after[tok]["counts"]
        left = deficits(now, p0)
        if sum(left.values()) <= config.tolerance * c["n"]:
            continue
        need = copies_needed(c["counts"], p0)
        reasons = []
        if any(v > config.max_copies for v in need.values()):
            reasons.append(over_cap_reason(tok, c["counts"], need, config.max_copies))
        blocked = {l: by.get((tok, l), {}).get("refused", 0) for l in need}
        if any(blocked.values()):
            reasons.append(", ".join(f"{b:,} {l} rows" for l, b in blocked.items() if b)
                           + " not copied: a copy would have strengthened a shortcut")
        if not reasons:
            reasons.append(Message(f"stopped after {config.iterations} iterations (more with ", Setting("iterations"),
                                   ")"))
        out.append({"token": tok, "label": c["label"], "p_hat_before": c["counts"][c["label"]] / c["n"],
                    "p_hat_after": p_after[tok][c["label"]], "p0": p0[c["label"]],
                    "deficit_after": {l: d for l, d in left.items() if d}, "copies_needed": need,
                    "reason": Message.joined(reasons, "; ")})
    return out
