"""The ``upsample`` stage: AUDAC adaptive round-robin up-sampling (arXiv 2401.13907, Algorithm 1; METHODS §3), in
DuckDB SQL, with the safeguards an imbalanced corpus needs.

The paper's algorithm: S = the top-k tokens by z*(s) = max_l z*(s,l) among tokens with n(s) in a count band.
For each s, round robin, draw d_l = ceil(D_l[s]·step) rows of each short label l from B[s] (the rows containing
s); deficits are recomputed after every draw, since the added rows carry other tokens too. Stop when every D[s]
is ~0 or after N iterations.

What refinery adds, and why (docs/upsample.md):

- p0 follows the audit's prior rule (``auto``: the label shares when the labels are imbalanced, else 1/C;
  ``uniform`` is the paper's). A token's target is p(l|s) = p0_l:
  D_l[s] = p0_l · max_l′(c_l′(s)/p0_l′) − c_l(s),
  the paper's max_l′ c_l′(s) − c_l(s) under the uniform prior. Under 1/C an imbalanced corpus's common words
  rank as biases toward its majority label merely for being common, and "correcting" them copies the
  minority labels wholesale.
- The tokens are the audit's word features (``w@field``: its tokenizer, its fields kept apart, its min_count), not
  the paper's tokens pooled over both texts: every corrected token is in ``refinery audit``'s statistics of the
  input, with the z* it gives it (``tokens.words``). Only tokens whose z* passes the audit's Bonferroni
  threshold are corrected; negations and quantifiers are never stopwords (``features.KEPT_WORDS``).
- A row is copied at most ``max_copies`` times, each turn's copies go to distinct rows, those with the fewest
  copies first. A token whose short label runs out of rows is corrected as far as they go, and the report
  says how many copies a row would have needed.
- Every copy is checked against the audit of the output (the audit's features, unigrams and bigrams per
  field, under the input's p0), a ``ShortcutGuard``: a copy that would take a feature over the significance
  threshold, raise a significant one by more than ``RISE``, or raise a label's max z* is refused, and its row
  is not drawn again.
- Under the empirical prior, copies of rows without a selected token (checked the same way) bring the label
  shares back to the input's, so that the output's p0 is the input's.
- After the last turn the output's audit is judged against the input's (``refinery.core.verdict``, under the
  output's own prior rule and under the input's p0); turns are undone, last first, until both verdicts hold.
"""
from __future__ import annotations

from refinery.methods.upsample import report
from refinery.methods.upsample.config import UpsampleConfig
from refinery.pipeline.output import StageOutput
from refinery.pipeline.stage import Output, StageResult
from refinery.pipeline.table_stage import CorpusPart, PartAudit, TableInput, TableStage


class UpsampleStage(TableStage):
    """AUDAC adaptive round-robin up-sampling (DuckDB SQL over Parquet).

    The output's ``corpus/`` holds the input and its up-sampled copies; ``report/`` the trace and the verdict.
    """

    name, Config = "upsample", UpsampleConfig
    report_type = report.UpsampleReport
    needs = ("id", "text_a", "label")
    output = Output.CORPUS
    version = 2   # 2: the corpus in corpus/ (report/ sat inside it: pandas read its files as data)
    # DuckDB holds the input's rows (texts and all) for AUDAC's queries, which scan them in order and look up the rows
    # of the selected tokens: it keeps them within 512 MiB and spills the rest to its temp folder, leaving the memory
    # to the audit's counts and the guard (10M planted rows: 2.83 GB peak against 3.31 GB at 1 GiB, 85.2 s against
    # 91.8 s; 2M rows fit within it)
    rows_memory = 1 << 29

    def compute(self, rows: TableInput) -> list[CorpusPart]:
        """AUDAC's plan (``algorithm.plan``) and the up-sampled corpus: the input's rows, the copies, its rejects, the
        output's audit kept with it."""
        from refinery.core.features import FeatureConfig
        from refinery.methods.upsample import algorithm

        source = rows.source
        features = FeatureConfig().named(source.field_names, source.single_text)
        plan = self.plan = algorithm.plan(rows.con, self.config, features, source.prior)
        self.summary = report.summary(plan, self.config, inputs=source.paths, rejected=rows.rejects.num_rows)
        return [CorpusPart(Output.CORPUS.value, algorithm.upsampled_rows(rows.con, plan.added), rows.rejects,
                           audit=lambda labels: PartAudit(plan.prior, plan.audit))]

    def result(self, manifests: dict, out: StageOutput) -> StageResult:
        r = self.summary
        out.publish_report(r, report.page(out, r, self.plan, self.config),
                           files={"trace.parquet": report.trace_table(self.plan.trace)})
        v = r.verdict
        lines = [v["line"], *(f"  {w}" for w in v["warnings"]), *(f"  note: {n}" for n in v["notes"])]
        headline = (f"{r.rows_before:,} -> {r.rows_after:,} rows (+{r.rows_added:,} up-sampled copies), "
                    f"{r.iterations_run} iteration(s)")
        ok = r.verdict["ok"] and r.verdict_input_p0["ok"]
        warnings = () if ok else tuple(r.verdict["warnings"] or r.verdict_input_p0["warnings"])
        return StageResult(r.rows_before + r.rejected, {"out": r.rows_before, "input rejects": r.rejected},
                           r, headline, (headline, *report.console_lines(r, self.config), *lines),
                           warnings + report.untouched(r))
