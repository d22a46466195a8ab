"""RAZOR's report (``RazorReport``), its page and what the terminal shows of a run."""
from __future__ import annotations

from dataclasses import dataclass

from refinery.core.report_record import ReportRecord, optional
from refinery.report import format as fmt
from refinery.report import verdict as verdict_html
from refinery.core.verdict import Verdict
from refinery.report.page import Report, config_table, fields, note, table

TITLE = "RAZOR: shortcut scores γ and LLM rewriting (Yang, Prenkaj & Kasneci 2024)"


@dataclass(frozen=True, kw_only=True)
class RazorReport(ReportRecord):
    """RAZOR's report (METHODS §5): the rows scored, the text scored (``field``: text_b of pairs, else text_a), the
    objective Σ_{y<y′} U_y·U_y′ (the cosine of every two rows of different labels, summed), the percentiles of the
    shortcut score γ = 1 − a row's mean cosine to the other labels' rows (``gamma``: min, p25, median, p75, p90, p99,
    max) and the configuration. With rewriting (not --score-only): what a resumed run read back of a killed one
    (finished rounds, finished shards of prompts), each round's figures (``rewrite.refine``'s: rows tried,
    candidates, accepted, replaced, generation errors, the objective before and after, γ after, kept or undone, its
    examples), the objective and γ's percentiles after rewriting, the rows rewritten, the generator's backend and
    the verdict (``core.verdict.Verdict.to_dict``). Last, the input's rejects."""

    rows: int
    field: str
    objective: float
    gamma: dict
    config: dict
    resumed_rounds: int | None = optional()
    resumed_shards: int | None = optional()
    rounds: list | None = optional()
    objective_after: float | None = optional()
    gamma_after: dict | None = optional()
    replaced_rows: int | None = optional()
    backend: str | None = optional()
    verdict: dict | None = optional()
    input_rejected: int


def change(before: float, after: float) -> tuple[str, str]:
    """``before`` and ``after`` as ``fmt.number`` writes them, with the significant digits (3 to 15) that tell them
    apart: an objective of 31,782,330 → 31,782,265 (``:.6g`` printed 3.17823e+07 → 3.17823e+07)."""
    for digits in range(3, 16):
        a, b = fmt.number(before, digits), fmt.number(after, digits)
        if a != b:
            break
    return a, b


def report_page(report: RazorReport, page: Report, judged: Verdict | None = None) -> Report:
    """The run's page on ``page`` (the output's, headed by the corpus read): the verdict, the scores, γ, the rounds
    and examples, the configuration."""
    rewritten = report.rounds is not None
    field_name = {"text_b": "text_b (the hypothesis or claim of each pair)", "text_a": "text_a (the text)"}
    facts = {"rows scored": report.rows, "text scored": field_name.get(report.field, report.field),
             "objective": fmt.number(report.objective), "input rejects": report.input_rejected}
    if rewritten:
        facts["objective"], facts["objective after rewriting"] = change(report.objective, report.objective_after)
        facts |= {"rows rewritten": report.replaced_rows, "generator backend": report.backend}
    names = {"min": "min", "p25": "25%", "median": "median", "p75": "75%", "p90": "90%", "p99": "99%", "max": "max"}
    gamma = [{"": what, **{names.get(k, k): v for k, v in g.items()}}
             for what, g in (("input", report.gamma), ("rewritten", report.gamma_after)) if g]
    if judged is not None:
        page.section(verdict_html.HEADING, verdict_html.section(judged))
    page = (page.section("Scores", fields(facts),
                         note("The objective sums the cosine similarity of the surface embeddings of every two rows "
                              "of different labels; rewriting raises it (the labels' rows look alike)."))
            .section("Shortcut score γ over the rows", table(gamma, ["", *names.values()]),
                     note("Percentiles of γ = 1 − a row's mean cosine to the rows of the other labels: a high γ "
                          "sets the row apart by its surface features alone. scores/ holds each row's γ.")))
    if rewritten:
        columns = {f"round {r['round']}": r for r in report.rounds}   # one column per round, a row per measure
        measures = [("rows tried", "rows"), ("candidates", "candidates"), ("verified", "accepted"),
                    ("replaced", "replaced"), ("generation errors", "generation_errors")]
        rounds = [{"": name, **{c: r[key] for c, r in columns.items()}} for name, key in measures]
        objectives = {c: change(r["objective_before"], r["objective_after"]) for c, r in columns.items()}
        rounds += [{"": "objective before", **{c: o[0] for c, o in objectives.items()}},
                   {"": "objective after", **{c: o[1] for c, o in objectives.items()}},
                   {"": "median γ after", **{c: r["gamma"]["median"] for c, r in columns.items()}},
                   {"": "outcome", **{c: "kept" if r["kept"] else "undone" for c, r in columns.items()}}]
        examples = [{"round": r["round"], "label": e["label"], "before": e["before"], "after": e["after"],
                     "γ": (e["gamma_before"], e["gamma_after"])} for r in report.rounds for e in r["examples"][:5]]
        as_text = lambda v: v if isinstance(v, str) else fmt.value(v)  # noqa: E731
        page.section("Rounds", table(rounds, ["", *columns], {c: as_text for c in columns}),
                     note("A round whose objective does not increase is undone and ends the loop."))
        page.section("Before / after examples (five per round)", table(
            examples, formats={"γ": lambda g: f"{fmt.number(g[0])} → {fmt.number(g[1])}"}))
    return page.section("Configuration", config_table(report.config))


def console_lines(r: RazorReport) -> tuple:
    """What the terminal shows of a run's report: the scores, each round with its objective before → after (with
    the digits that show the change), and the verdict (one line when it holds, else the warning and remedy)."""
    def objective(x: dict) -> str:
        return " → ".join(change(x["objective_before"], x["objective_after"]))
    lines = [f"{r.rows:,} rows scored on {r.field}: objective {fmt.number(r.objective)}, "
             f"median γ {r.gamma['median']:.4g}",
             *(f"  round {x['round']}: {x['candidates']} candidates, {x['accepted']} accepted, {x['replaced']} "
               f"replaced, objective {objective(x)}" + ("" if x["kept"] else " (undone)") for x in r.rounds or ())]
    if r.resumed_rounds or r.resumed_shards:
        lines.append(f"resumed: {r.resumed_rounds} finished round(s) and {r.resumed_shards} shard(s) of "
                     f"prompts from the interrupted run before")
    if r.verdict is not None:
        v = r.verdict
        lines += [v["line"], *(f"  {w}" for w in v["warnings"]), *(f"  note: {n}" for n in v["notes"])]
    return tuple(lines)
