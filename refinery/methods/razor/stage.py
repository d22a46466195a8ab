"""The ``razor`` stage: RAZOR's shortcut scores γ and, unless --score-only, its rewrite loop and verdict.

Light to import (the verb's options are its config's fields): the scores, the loop and the verdict are in the
sibling modules, imported when the stage runs.
"""
from __future__ import annotations

from typing import TYPE_CHECKING

import pyarrow as pa

from refinery.core.features import FeatureConfig
from refinery.core.verdict import Verdict
from refinery.methods.razor.config import RESOURCES, RazorConfig
from refinery.pipeline.output import StageOutput
from refinery.pipeline.stage import Output, Stage, StageInput, StageResult

if TYPE_CHECKING:
    from refinery.io.checkpoints import Checkpoints


class RazorStage(Stage):
    """RAZOR: shortcut scores γ and the LLM rewrite/verify loop (Yang et al. 2024).

    Writes ``scores/`` (γ per row) and, unless --score-only, ``corpus/`` (rewritten, the same size as the
    input: what a pipeline's next stage reads) and ``report/`` (with the verdict on the rewritten corpus).
    """

    name, Config = "razor", RazorConfig
    needs = ("id", "text_a", "label")
    adds = ("source",)
    resources = RESOURCES
    version = 2   # 2: the verdict on the rewritten corpus in report/
    one_task = True   # the scores and the loop over the whole corpus: on Ray one task reads and writes it

    @property
    def output(self) -> Output:
        return Output.INPUT if self.config.score_only else Output.CORPUS

    def run(self, source: StageInput, out: StageOutput) -> StageResult:
        """``scores/`` (γ per row) and with rewriting ``corpus/`` (same size); each corpus also holds the input's
        rejects, so each accounts for every input row. The verdict compares the audit's features (the input's
        preset's names) before and after."""
        from refinery.methods.razor.report import TITLE, change, console_lines, report_page
        from refinery.methods.razor.scores import gamma_summary, score, scored_field
        from refinery.pipeline.filter import verdict_headline
        from refinery.report import format as fmt

        table, rejects = source.load()
        config = self.config
        before = score(table, config)
        scored = table.select(["id", "label"]).append_column("gamma", pa.array(before.gamma))
        r = {"rows": table.num_rows, "field": scored_field(table), "objective": before.objective,
             "gamma": gamma_summary(before.gamma), "config": config.to_dict()}
        r["input_rejected"] = out.write_corpus("scores", scored, rejects, settings={"razor": r})["rejected"]
        judged = checkpoints = None
        if not config.score_only:
            judged, checkpoints = self._rewrite(table, rejects, before, r, out, engine=source.engine,
                                                features=FeatureConfig().named(source.field_names, source.single_text))
        out.publish_report(r, report_page(r, out.report_page(TITLE), judged))
        if checkpoints is not None:
            checkpoints.clear()
        headline = f"{r['rows']:,} rows scored on {r['field']}: objective {fmt.number(r['objective'])}"
        if not config.score_only:
            headline = (f"{r['rows']:,} rows scored on {r['field']}, {r['replaced_rows']:,} rows rewritten, "
                        f"objective {' → '.join(change(r['objective'], r['objective_after']))}; "
                        f"{verdict_headline(r['verdict'])}")
        warnings = () if config.score_only or r["verdict"]["ok"] else tuple(r["verdict"]["warnings"])
        return StageResult(r["rows"] + r["input_rejected"], {"scored": r["rows"], "input rejects": r["input_rejected"]},
                           r, headline, console_lines(r), warnings)

    def _rewrite(self, table: pa.Table, rejects: pa.Table | None, before, report: dict, out: StageOutput, *,
                 engine: str, features: FeatureConfig) -> tuple[Verdict, Checkpoints]:
        """The rewrite loop from the input's scores ``before``, checkpointed round by round (a killed run resumes
        after its last finished round): publishes ``corpus/``, adds the rounds and the verdict to ``report``; the
        verdict and the checkpoints, to clear once the report is published."""
        from refinery.io.checkpoints import CHECKPOINTS, table_digest
        from refinery.io.redaction import redact
        from refinery.methods.razor.rewrite import refine
        from refinery.methods.razor.scores import gamma_summary
        from refinery.core import stats as zstats
        from refinery.methods.razor.verdict import verdict
        from refinery.models import load_classifier
        from refinery.progress import announce

        config = self.config
        verifier = load_classifier(config.verifier_model) if config.verifier_model else None
        checkpoints = out.checkpoints("razor", {"config": redact(config.to_dict()), "rows": table_digest(table)})
        report["resumed_rounds"] = len(checkpoints.done())
        if report["resumed_rounds"]:
            announce(f"razor: resuming after {report['resumed_rounds']} finished round(s) of an interrupted run "
                     f"(checkpoints in {out.url(CHECKPOINTS)})")
        refined, after, history = refine(table, config, engine=engine, verifier=verifier, scores=before,
                                         checkpoints=checkpoints)
        out.prior = zstats.choose_prior("auto", zstats.rows_per_label(table["label"]), out.prior)   # recorded
        judged, record = verdict(table, refined, features, config, out.prior)
        out.write_corpus(Output.CORPUS.value, refined, rejects, settings={"razor": report}, audit=record)
        report.update(rounds=history, objective_after=after.objective, gamma_after=gamma_summary(after.gamma),
                      replaced_rows=sum(s == "rewritten" for s in refined["source"].to_pylist())
                      if "source" in refined.column_names else 0,
                      backend=config.backend.name, verdict=judged.to_dict())
        return judged, checkpoints
