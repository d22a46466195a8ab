"""The ``weights`` stage: leakage-neutral inverse-propensity weights (Zhang et al. 2019, Algorithm 1; METHODS §4).

P̂(y | l) is cross-predicted from the leakage features l (K folds, random forest); the
probability that the sampling intention S equals the label is

    P(S=y | l) = [P̂(y|l) / π_y] / Σ_y′ [P̂(y′|l) / π_y′]      (paper Eq. 1 for two labels)

and w = 1 / P(S=y | l), normalized to mean 1. The prior π is found by bisection so that the
weighted label proportions equal the observed ones. Under w, P_w(y | l) = π_y: the label no
longer depends on the leakage features, so a leakage-only model falls to the majority rate.
The weights are capped at ``clip`` times the mean weight, capped and renormalized until none is over (the
prior fitted under the cap). By default (``auto``, ``ips.auto_clip``) the cap is the largest that keeps the
effective sample size (Σw)²/Σw² (Kish) at least half the rows: uncapped IPS weights of a real corpus can
put one row at hundreds of times the mean (the paper's letter, ``none``). When the effective sample size
is under 10% of the rows, a few rows carry the weight: the report warns and suggests the gentlest ``clip``
that lifts it past 10%, with the ESS that ``--clip`` gives (the prior fitted again under the cap, as the
verdict's caps below).

The verdict (``core.verdict``): while the prior is fit (on one core) the audit's features of every row are counted
on the other, and as the rows are written those in enough rows are counted again plain and weighted
(``core.weighted_counts``: count(x, l) = Σ w, z* on the weighted n and counts, what a model trained on rows drawn
∝ w sees), with the same p0 and threshold. Weights promise to make no shortcut of the text stronger:
a row of weight 300 makes each of its words a feature "in 300 rows" of one label. Only the weights written are
judged; where the verdict warns, the weights ``--clip`` would give for each of ``ips.SUGGESTED_CLIPS`` below the
largest weight (the prior fitted again for each: a search over the few distinct cells of P̂) are judged on the
features over the threshold with or without the weights, counted again alone, so the remedy names the gentlest
cap under which none of them worsens. ``report/`` holds report.json and
report.html: the verdict, the weights' histogram, the ESS, the label shares and the leakage-only model's
accuracy with and without the weights.
"""
from __future__ import annotations

from refinery.methods.weights.config import WeightsConfig
from refinery.methods.weights.report import WeightsReport, cap_text, page
from refinery.models.leakage_settings import GRAPH_MEMORY
from refinery.pipeline.output import StageOutput
from refinery.pipeline.stage import Output, StageResult
from refinery.pipeline.table_stage import CorpusPart, TableInput, TableStage


class WeightsStage(TableStage):
    """Leakage-neutral IPS weights w = 1/P(S=y|l) (Zhang et al. 2019, Algorithm 1).

    The output's ``corpus/`` is the input with a ``weight`` column, and a ``split`` column where the input has
    named splits (``--input SPLIT=PATH`` or the input's ``split`` column); its manifest holds the diagnostics,
    and ``report/`` the verdict, the weights' distribution and effective sample size.
    """

    name, Config = "weights", WeightsConfig
    report_type = WeightsReport
    needs = ("id", "text_a", "text_b", "label")
    adds = ("weight",)
    output = Output.CORPUS
    version = 4   # 4: the corpus in corpus/; 3: report/ (the verdict, the histogram); 2: no invented 'all' split
    unnamed_split = ""   # an unnamed input's rows keep their own ``split`` column, or none (``leakage_neutral.UNNAMED``)
    rows_memory = GRAPH_MEMORY

    def compute(self, rows: TableInput) -> list[CorpusPart]:
        """The weights of the input's rows (``leakage_neutral.Weighing``) and the weighted corpus."""
        from refinery.core.features import FeatureConfig
        from refinery.methods.weights.leakage_neutral import Weighing
        from refinery.models.sentence_graph import graph_of

        source = rows.source
        features = FeatureConfig().named(source.field_names, source.single_text)
        weighing = self.weighing = Weighing(graph_of(rows.con, rows.rejects, self.config.graph), self.config,
                                            features, rows.splits, source.prior)
        return [CorpusPart(Output.CORPUS.value, weighing.rows(), rows.rejects, weighing.manifest_entries(),
                           audit=weighing.measured)]

    def result(self, manifests: dict, out: StageOutput) -> StageResult:
        from refinery.pipeline.filter import verdict_headline

        r, verdict = self.weighing.judged(manifests[Output.CORPUS.value])
        out.publish_report(r, page(out, r, verdict))
        d, oof, warning = r.diagnostics, r.out_of_fold, r.low_ess_warning
        ess = (f"effective sample size {d['effective_sample_size']:,.0f} of {d['rows']:,} rows "
               f"({r.cap.share:.0%})")
        lines = (f"{d['rows']:,} rows -> {out.url(Output.CORPUS.value)}: weight min {d['min']:.3f}, "
                 f"max {d['max']:.2f}× the mean, {ess}", f"  {cap_text(r.cap)}",
                 f"  leakage-only model: accuracy {oof['accuracy']:.4f} -> weighted {oof['weighted_accuracy']:.4f} "
                 f"(weighted majority {oof['weighted_majority_accuracy']:.4f})", *verdict.lines())
        warnings = ((str(warning["message"]),) if warning else ()) + tuple(verdict.warnings())
        return StageResult(r.rows + r.rejected, {"weighted": r.rows, "input rejects": r.rejected}, r,
                           f"weights min {d['min']:.3f}, max {d['max']:.2f}, {ess}"
                           + (f"; warning: {warning['message']}" if warning else "")
                           + f"; {verdict_headline(verdict)}", lines, warnings)
