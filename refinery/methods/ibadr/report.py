"""IBADR's report (``IbadrReport``), its page and what the terminal shows of a run."""
from __future__ import annotations

from dataclasses import dataclass

from refinery.core.report_record import ReportRecord
from refinery.core.verdict import Verdict
from refinery.report import format as fmt
from refinery.report import verdict as verdict_html
from refinery.report.page import Report, config_table, fields, note, table

TITLE = "IBADR: iterative bias-aware dataset refinement (Wang et al. 2023)"


@dataclass(frozen=True, kw_only=True)
class IbadrReport(ReportRecord):
    """An IBADR run's report (``pool.report_of``): the original rows, the pool's rows, the pseudo samples accepted
    and generated, the generated ones by status, each iteration's figures (``iteration.run_iteration``'s, with the
    pool after it and the original's top features in its accepted samples), the original's top features in all the
    accepted samples ({label: [feature, z_original, z_generated]}, ``audit.ShortcutAudit.in_rows``) and their mean
    z* (``audit.top_z``), the verdict on the pool (``Verdict.to_dict``), the precision the generator was last
    fine-tuned in (None before any iteration), the input's rejects, the generation backend, the configuration and
    the rows not sampled (``sample_rows``)."""

    original_rows: int
    pool_rows: int
    accepted: int
    generated: int
    by_status: dict
    iterations: list
    original_top_features_in_accepted: dict
    mean_top_z: dict
    verdict: dict
    train_precision: dict | None
    input_rejected: int
    backend: str
    config: dict
    not_sampled: int


def top_z_text(m: dict) -> str:
    """``top_z``'s figures as the console and the report page say them."""
    if not m["features"]:
        return "The original has no feature in enough rows to rank its top features"
    head = f"Mean z* of the original's top features: {fmt.z(m['original'])} in the original"
    if not m["accepted_rows"]:
        return f"{head}; no pseudo sample accepted"
    absent = f" ({m['absent']} of these {m['features']} absent from them, counted as 0)" if m["absent"] else ""
    return f"{head}, {fmt.z(m['accepted'])} in the {m['accepted_rows']:,} accepted pseudo samples{absent}"


def report_page(report: IbadrReport, verdict: Verdict, page: Report) -> Report:
    """The run's page on ``page`` (the output's, headed by the corpus read): the verdict, the pool, the pseudo
    samples by status, the iterations, the original's top features in the accepted samples, the configuration."""
    precision = report.train_precision
    facts = {"original rows": report.original_rows, "pseudo samples generated": report.generated,
             "accepted into the pool": report.accepted, "pool rows": report.pool_rows,
             "input rejects": report.input_rejected, "generator backend": report.backend}
    if precision:
        facts["generator fine-tuned in"] = (f"{precision['dtype']} on {precision['device']} "
                                            f"({precision['requested']}: {precision['reason']})")
    generated = max(report.generated, 1)
    statuses = [{"status": s, "pseudo samples": n, "share": n / generated} for s, n in report.by_status.items()]
    history = report.iterations
    columns = {f"iteration {h['iteration']}": h for h in history}   # one column per iteration, a row per measure
    measures = [("pool before", lambda h: h["pool_before"]), ("generated", lambda h: h["generated"]),
                ("malformed", lambda h: h["malformed"]), ("low confidence", lambda h: h["low_confidence"]),
                ("accepted", lambda h: h["accepted"]), ("acceptance rate", lambda h: fmt.percent(h["acceptance_rate"])),
                ("distinct-1", lambda h: h["distinct_1"]), ("distinct-2", lambda h: h["distinct_2"])]
    measures += [(f"prompts with indicator {b}", lambda h, b=b: h["indicators"].get(b, 0))
                 for b in sorted({b for h in history for b in h["indicators"]})]
    measures.append(("pool after", lambda h: h.get("pool_after")))
    iterations = [{"": name, **{c: get(h) for c, h in columns.items()}} for name, get in measures]
    as_text = lambda v: v if isinstance(v, str) else fmt.value(v)  # noqa: E731
    top = [{"label": label, "feature": e["feature"], "z* in the original": e["z_original"],
            "significant": "yes" if e["z_original"] > verdict.threshold else "no",
            "z* in the accepted": e["z_generated"] if e["z_generated"] is not None else "absent"}
           for label, entries in report.original_top_features_in_accepted.items() for e in entries]
    return (page.section(verdict_html.HEADING, verdict_html.section(verdict))
            .section("Pool", fields(facts))
            .section("Pseudo samples by status", table(statuses, formats={"share": fmt.percent}),
                     note("generated/ holds every pseudo sample with its status and the reason it was set aside."))
            .section("Iterations", table(iterations, ["", *columns], {c: as_text for c in columns}),
                     note("distinct-n: the share of distinct n-grams among the well-formed pseudo samples."))
            .section("The original's top features in the accepted pseudo samples", table(
                top, formats={"z* in the original": fmt.z, "z* in the accepted": lambda v: v if isinstance(v, str)
                              else fmt.z(v)}),
                note(f"{top_z_text(report.mean_top_z)}. The ten largest z* per label of the original; "
                     f"significant: over its threshold {fmt.z(verdict.threshold)}. z* in the accepted samples is "
                     "computed with the original's p0; absent: no accepted sample has the feature."))
            .section("Configuration", config_table(report.config)))


def console_lines(r: IbadrReport) -> tuple:
    """What the terminal shows of a run's report: each iteration, the original's top features in the accepted
    samples (the report page's sentence), the precision the generator was tuned in, and the verdict."""
    used = r.iterations[-1]["train_precision"] if r.iterations else None
    v = r.verdict
    return (*(f"iteration {h['iteration']}: generated {h['generated']:,}, malformed {h['malformed']:,}, "
              f"low confidence {h['low_confidence']:,}, accepted {h['accepted']:,} -> pool {h['pool_after']:,}"
              for h in r.iterations),
            top_z_text(r.mean_top_z),
            *([f"generator fine-tuned in {used['dtype']} ({used['requested']}: {used['reason']})"] if used else []),
            v["line"], *(f"  {w}" for w in v["warnings"]), *(f"  note: {n}" for n in v["notes"]))
