"""The ``razor`` stage: RAZOR's shortcut scores γ and, unless --score-only, its rewrite loop and verdict.

Light to import (the verb's options are its config's fields; its report's record and page, ``report``, are light
too): the scores, the loop and the verdict are in the sibling modules, imported when the stage runs.
"""
from __future__ import annotations

import numpy as np
import pyarrow as pa

from refinery.core.features import FeatureConfig
from refinery.methods.razor.config import RESOURCES, RazorConfig
from refinery.methods.razor.report import TITLE, RazorReport, change, console_lines, report_page
from refinery.pipeline.output import StageOutput
from refinery.pipeline.stage import Output, StageResult
from refinery.pipeline.stage_input import StageInput
from refinery.pipeline.table_stage import CorpusPart, PartAudit, TableInput, TableStage


class RazorStage(TableStage):
    """RAZOR: shortcut scores γ and the LLM rewrite/verify loop (Yang et al. 2024).

    Writes ``scores/`` (γ per row) and, unless --score-only, ``corpus/`` (rewritten, the same size as the
    input: what a pipeline's next stage reads) and ``report/`` (with the verdict on the rewritten corpus).
    Each corpus also holds the input's rejects, so each accounts for every input row. A table stage: the table
    executor writes and commits what ``compute`` gives; on Ray one task reads and writes the whole.
    """

    name, Config = "razor", RazorConfig
    needs = ("id", "text_a", "label")
    adds = ("source",)
    resources = RESOURCES
    version = 2   # 2: the verdict on the rewritten corpus in report/
    report_type = RazorReport

    @property
    def output(self) -> Output:
        return Output.INPUT if self.config.score_only else Output.CORPUS

    def queries_rows(self) -> bool:
        """The scores alone stream the input in passes of its batches; the rewrite loop queries its rows."""
        return not self.config.score_only

    def compute(self, rows: TableInput) -> list[CorpusPart]:
        """``scores/`` and, with rewriting, ``corpus/``: the verdict compares the audit's features (the input's
        preset's names) before and after."""
        from refinery.methods.razor.scores import gamma_summary, score, scored_field

        if self.config.score_only:
            return [self._streamed_scores(rows.source)]
        table = rows.table()
        before = score(table, self.config)
        figures = {"rows": table.num_rows, "field": scored_field(table), "objective": before.objective,
                   "gamma": gamma_summary(before.gamma), "config": self.config.to_dict()}
        settings = {"razor": figures}   # what each corpus records: the scores' figures and the settings
        scored = table.select(["id", "label"]).append_column("gamma", pa.array(before.gamma))
        source = rows.source
        refined, prior, record, rewriting = self._rewrite(table, before, rows, features=FeatureConfig().named(
            source.field_names, source.single_text))
        self.figures = {**figures, **rewriting}
        return [CorpusPart("scores", [scored], rows.rejects, settings=settings),
                CorpusPart(Output.CORPUS.value, [refined], rows.rejects, settings=settings,
                           audit=lambda labels: PartAudit(prior, record))]

    def result(self, manifests: dict, out: StageOutput) -> StageResult:
        """The report published (with the verdict, where the corpus was rewritten), the checkpoints cleared."""
        from refinery.pipeline.filter import verdict_headline
        from refinery.report import format as fmt

        r = RazorReport(**self.figures, input_rejected=manifests["scores"].rejected)
        out.publish_report(r, report_page(r, out.report_page(TITLE), self.judged))
        counts = {"scored": r.rows, "input rejects": r.input_rejected}
        if self.config.score_only:
            headline = f"{r.rows:,} rows scored on {r.field}: objective {fmt.number(r.objective)}"
            return StageResult(r.rows + r.input_rejected, counts, r, headline, console_lines(r), ())
        self.checkpoints.clear()
        headline = (f"{r.rows:,} rows scored on {r.field}, {r.replaced_rows:,} rows rewritten, "
                    f"objective {' → '.join(change(r.objective, r.objective_after))}; "
                    f"{verdict_headline(self.judged)}")
        warnings = () if self.judged.ok else tuple(self.judged.warnings())
        return StageResult(r.rows + r.input_rejected, counts, r, headline, console_lines(r), warnings)

    def _streamed_scores(self, source: StageInput) -> CorpusPart:
        """``scores/`` streamed: the vocabulary, the label sums and every row's γ in three passes over the input,
        re-cut into the blocks an in-memory table is scored in (the same sums, the same γ), then the rows with
        their γ in a fourth, as they are written; memory holds the vocabulary, one block and every row's γ."""
        from refinery.io.raw import rebatch
        from refinery.methods.razor.scores import SCORE_BLOCK_ROWS, fit, gamma_summary, gammas

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
        self.figures = {"rows": len(gamma), "field": field, "objective": sums.objective(),
                        "gamma": gamma_summary(gamma), "config": config.to_dict()}
        self.judged = None

        def scored():
            start = 0
            for block in blocks(["id", "label"])():
                yield block.append_column("gamma", pa.array(gamma[start:start + block.num_rows]))
                start += block.num_rows

        input_rejects = pa.concat_tables(rejects) if rejects else None   # the passes' (each finds the same)
        return CorpusPart("scores", scored(), input_rejects, settings={"razor": dict(self.figures)})

    def _rewrite(self, table: pa.Table, before, rows: TableInput, *, features: FeatureConfig
                 ) -> tuple[pa.Table, object, object, dict]:
        """The rewrite loop from the input's scores ``before``, checkpointed round by round and within a round by
        shard of prompts (a killed run resumes after its last finished one); (the rewritten corpus, the audit's prior
        rule, the audit record kept with it, the report's entries of the rewriting: ``RazorReport``'s from
        ``resumed_rounds`` to ``verdict``)."""
        from refinery.io.checkpoints import table_digest
        from refinery.io.redaction import redact
        from refinery.methods.razor.rewrite import refine, resumed
        from refinery.methods.razor.scores import gamma_summary
        from refinery.core import stats as zstats
        from refinery.methods.razor.verdict import verdict
        from refinery.models import load_classifier
        from refinery.progress import announce

        config, source = self.config, rows.source
        verifier = load_classifier(config.verifier_model) if config.verifier_model else None
        checkpoints = self.checkpoints = rows.checkpoints("razor", {"config": redact(config.to_dict()),
                                                                    "rows": table_digest(table)})
        resumed_rounds, resumed_shards = resumed(checkpoints)
        if resumed_rounds or resumed_shards:
            announce(f"razor: resuming after {resumed_rounds} finished round(s) and {resumed_shards} finished "
                     f"shard(s) of prompts of an interrupted run (checkpoints in {checkpoints.root})")
        refined, after, history = refine(table, config, engine=source.engine, verifier=verifier, scores=before,
                                         checkpoints=checkpoints)
        prior = zstats.choose_prior("auto", zstats.rows_per_label(table["label"]), source.prior)   # recorded
        self.judged, record = verdict(table, refined, features, config, prior)
        replaced = sum(s == "rewritten" for s in refined["source"].to_pylist()) \
            if "source" in refined.column_names else 0
        return refined, prior, record, {
            "resumed_rounds": resumed_rounds, "resumed_shards": resumed_shards, "rounds": history,
            "objective_after": after.objective, "gamma_after": gamma_summary(after.gamma), "replaced_rows": replaced,
            "backend": config.backend.name, "verdict": self.judged.to_dict()}
