"""The ``razor`` stage: RAZOR's shortcut scores γ and, unless --score-only, its rewrite loop and verdict.

Light to import (the verb's options are its config's fields): the scores, the loop and the verdict are in the
sibling modules, imported when the stage runs.
"""
from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np
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

        config = self.config
        if config.score_only:
            return self._score_only(source, out)
        table, rejects = source.load()
        before = score(table, config)
        scored = table.select(["id", "label"]).append_column("gamma", pa.array(before.gamma))
        r = {"rows": table.num_rows, "field": scored_field(table), "objective": before.objective,
             "gamma": gamma_summary(before.gamma), "config": config.to_dict()}
        r["input_rejected"] = out.write_corpus("scores", scored, rejects, settings={"razor": r})["rejected"]
        judged, checkpoints = self._rewrite(table, rejects, before, r, out, engine=source.engine,
                                            features=FeatureConfig().named(source.field_names, source.single_text))
        out.publish_report(r, report_page(r, out.report_page(TITLE), judged))
        checkpoints.clear()
        headline = (f"{r['rows']:,} rows scored on {r['field']}, {r['replaced_rows']:,} rows rewritten, "
                    f"objective {' → '.join(change(r['objective'], r['objective_after']))}; "
                    f"{verdict_headline(r['verdict'])}")
        warnings = () if r["verdict"]["ok"] else tuple(r["verdict"]["warnings"])
        return StageResult(r["rows"] + r["input_rejected"], {"scored": r["rows"], "input rejects": r["input_rejected"]},
                           r, headline, console_lines(r), warnings)

    def _score_only(self, source: StageInput, out: StageOutput) -> StageResult:
        """``scores/`` streamed: the vocabulary, the label sums and every row's γ in three passes over the input,
        re-cut into the blocks an in-memory table is scored in (the same sums, the same γ), then the rows with
        their γ written in a fourth; memory holds the vocabulary, one block and every row's γ."""
        from refinery.io.raw import rebatch
        from refinery.methods.razor.report import TITLE, console_lines, report_page
        from refinery.methods.razor.scores import SCORE_BLOCK_ROWS, fit, gamma_summary, gammas
        from refinery.report import format as fmt

        config, rejects, texts = self.config, [], {"rows": 0}

        def blocks(columns: list):
            def rows():
                rejects.clear()
                for batch in source.iter_batches():
                    if batch.rejects is not None and batch.rejects.num_rows:
                        rejects.append(batch.rejects)
                    if batch.rows.num_rows:
                        texts["rows"] += batch.rows.num_rows - batch.rows[columns[0]].null_count
                        yield batch.rows.select(columns)
            return lambda: rebatch(rows(), SCORE_BLOCK_ROWS)

        field = "text_b" if "text_b" in source.columns() else "text_a"
        vocab, sums = fit(blocks([field, "label"]), field, config)
        if field == "text_b" and not texts["rows"]:   # no row has a hypothesis: the single text is scored
            field = "text_a"
            vocab, sums = fit(blocks([field, "label"]), field, config)
        gamma = np.concatenate([np.zeros(0)] + [g for _, g in gammas(blocks([field, "label"]), field, vocab, sums,
                                                                       config)])
        r = {"rows": len(gamma), "field": field, "objective": sums.objective(), "gamma": gamma_summary(gamma),
             "config": config.to_dict()}
        with out.corpus("scores", settings={"razor": r}) as writer:
            start = 0
            for block in blocks(["id", "label"])():
                writer.write(block.append_column("gamma", pa.array(gamma[start:start + block.num_rows])))
                start += block.num_rows
            for table in rejects:
                writer.write(None, table)
            r["input_rejected"] = writer.commit()["rejected"]
        out.publish_report(r, report_page(r, out.report_page(TITLE), None))
        headline = f"{r['rows']:,} rows scored on {r['field']}: objective {fmt.number(r['objective'])}"
        return StageResult(r["rows"] + r["input_rejected"], {"scored": r["rows"], "input rejects": r["input_rejected"]},
                           r, headline, console_lines(r), ())

    def _rewrite(self, table: pa.Table, rejects: pa.Table | None, before, report: dict, out: StageOutput, *,
                 engine: str, features: FeatureConfig) -> tuple[Verdict, Checkpoints]:
        """The rewrite loop from the input's scores ``before``, checkpointed round by round (a killed run resumes
        after its last finished round): publishes ``corpus/``, adds the rounds and the verdict to ``report``; the
        verdict and the checkpoints, to clear once the report is published."""
        from refinery.io.checkpoints import CHECKPOINTS, table_digest
        from refinery.io.redaction import redact
        from refinery.methods.razor.rewrite import refine, resumed
        from refinery.methods.razor.scores import gamma_summary
        from refinery.core import stats as zstats
        from refinery.methods.razor.verdict import verdict
        from refinery.models import load_classifier
        from refinery.progress import announce

        config = self.config
        verifier = load_classifier(config.verifier_model) if config.verifier_model else None
        checkpoints = out.checkpoints("razor", {"config": redact(config.to_dict()), "rows": table_digest(table)})
        report["resumed_rounds"], report["resumed_shards"] = resumed(checkpoints)
        if report["resumed_rounds"] or report["resumed_shards"]:
            announce(f"razor: resuming after {report['resumed_rounds']} finished round(s) and "
                     f"{report['resumed_shards']} finished shard(s) of prompts of an interrupted run "
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
