"""The leakage stage's report (``LeakageReport``) and its page (Zhang et al. 2019): the forests' accuracy against the
majority class, the ablations, a label-against-degree heatmap per label (paper Fig. 2), the feature importances and
distribution."""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import TYPE_CHECKING

from refinery.models.leakage_settings import ADVANCED_FEATURES, BASIC_FEATURES
from refinery.models.predictability import PredictabilityFigures
from refinery.pipeline.output import StageOutput
from refinery.report import format as fmt
from refinery.report.figures.heatmap import heatmap
from refinery.report.page import Report, config_table, fields, figure, note, table

if TYPE_CHECKING:   # the graph's module loads DuckDB: imported where the heatmaps are drawn
    from refinery.models.sentence_graph import GraphInput

FEATURE_MEANINGS = {
    "s1_freq": "pairs sentence 1 is in (its degree)",
    "s2_freq": "pairs sentence 2 is in (its degree)",
    "s1s2_inter": "sentences paired with both (2-step paths between them)",
    "s1s2_paths3": "3-step paths between the two sentences",
    "s1_hop2": "sentences 2 steps from sentence 1",
    "s2_hop2": "sentences 2 steps from sentence 2",
    "s1_hop3": "sentences 3 steps from sentence 1",
    "s2_hop3": "sentences 3 steps from sentence 2",
    "resource_allocation": "Σ 1/degree over the sentences paired with both",
    "jaccard": "sentences paired with both / paired with either",
    "preferential_attachment": "S1_freq × S2_freq",
    "adamic_adar": "Σ 1/log degree over the sentences paired with both",
}


@dataclass(frozen=True, kw_only=True)
class LeakageReport(PredictabilityFigures):
    """The leakage stage's report: the forests' figures (``models.predictability.PredictabilityFigures``), then the
    input's rejects, the graph's and the forest's settings, the inputs by split, the graph's sentences (nodes) and
    pairs (edges), each feature's distribution, the basic forest's accuracy's 95% interval and whether it lies above
    the majority class's (``beats_majority``)."""

    rejected: int
    graph: dict
    forest: dict
    inputs: dict
    nodes: int
    edges: int
    feature_summary: dict
    leakage_ci95: list
    leakage_beats_majority: bool


def _points(delta) -> str:
    """An accuracy difference in percentage points: 0.0047 → "+0.5 pts" (text passes through)."""
    if isinstance(delta, str):
        return delta
    return f"{100 * delta:+.1f} pts" if round(100 * delta, 1) else "0.0 pts"


def _share(v) -> str:
    return v if isinstance(v, str) else fmt.percent(v)


def degree_heatmaps(graph: GraphInput, min_cell: int = 10) -> list[str]:
    """Label share against the degrees of both sentences, one SVG heatmap per label (paper Fig. 2), cropped
    to the degrees the corpus has; cells with fewer than ``min_cell`` pairs are left empty."""
    from refinery.models.sentence_graph import DEGREE_BINS, degree_table

    shares = degree_table(graph, min_cell).shares
    ticks = [str(lo) if hi - lo == 1 else f"{lo}–{hi - 1}" for lo, hi in zip(DEGREE_BINS, DEGREE_BINS[1:])]
    ticks.append(f"{DEGREE_BINS[-1]}+")
    return [heatmap(share, ticks, ticks, title=f"share of {label}", x_label="S2_freq: pairs sentence 2 is in",
                    y_label="S1_freq", value_label="share")
            for label, share in shares.items()]


def accuracy_interval(accuracy: float, n: int) -> tuple[float, float]:
    """The 95% interval of an accuracy over ``n`` test pairs (the normal approximation, ± 1.96 sqrt(a(1 − a)/n))."""
    half = 1.96 * math.sqrt(max(accuracy * (1 - accuracy), 0.0) / max(n, 1))
    return max(accuracy - half, 0.0), min(accuracy + half, 1.0)


def beats_majority(accuracy: float, majority: float, n: int) -> bool:
    """Whether ``accuracy`` is above the majority class's beyond chance: its 95% interval lies above it."""
    return accuracy_interval(accuracy, n)[0] > majority


def page(out: StageOutput, report: LeakageReport, heatmaps: list[str]) -> Report:
    """The leakage report of ``report`` with the degree ``heatmaps``, on ``out``'s report page (its header lists each
    path read with its split)."""
    inputs = {split: [paths] if isinstance(paths, str) else list(paths) for split, paths in report.inputs.items()}
    read = [f"{split}: {p}" for split, paths in inputs.items() for p in paths]
    majority, rows = report.majority_accuracy, report.rows
    test = report.test_split
    basic = ", ".join(BASIC_FEATURES)
    n = rows.get(test, 0)

    def judged(accuracy: float) -> dict:
        lo, hi = accuracy_interval(accuracy, n)
        return {"accuracy": accuracy, "95% interval": f"{fmt.percent(lo)} to {fmt.percent(hi)}",
                "vs majority class": accuracy - majority,
                "above it beyond chance": "yes" if beats_majority(accuracy, majority, n) else "no"}
    forests = [
        {"forest": f"majority class ({report.majority_label}), no features", "accuracy": majority,
         "95% interval": "—", "vs majority class": "—", "above it beyond chance": "—"},
        {"forest": f"basic leakage features ({basic})", **judged(report.leakage_accuracy)},
        {"forest": f"advanced: the {len(ADVANCED_FEATURES)} features below", **judged(report.advanced_accuracy)},
    ]
    ablations = [{"forest reads": "all three basic features", "accuracy": report.leakage_accuracy,
                  "vs majority class": report.leakage_accuracy - majority}]
    ablations += [{"forest reads": f"{'all but' if kind == 'without' else 'only'} {name}", "accuracy": acc,
                   "vs majority class": acc - majority}
                  for kind_name, acc in report.ablations.items() for kind, name in [kind_name.split(":", 1)]]
    importances = report.importances
    features_table = [{"feature": name, "what it counts": FEATURE_MEANINGS.get(name, ""),
                       "basic forest": importances["basic"].get(name, "not read"),
                       "advanced forest": importances["advanced"].get(name, "not read")}
                      for name in importances["advanced"]]
    distribution = [{"feature": name, "mean": s["mean"], "median": s["q50"], "90th percentile": s["q90"],
                     "99th percentile": s["q99"], "max": s["max"]} for name, s in report.feature_summary.items()]
    accuracy = {"accuracy": fmt.percent, "vs majority class": _points}
    return (out.report_page("Leakage: the label predicted from the sentence graph alone (Zhang et al. 2019)", read=read)
            .section("Predictability of the label from the graph alone", fields({
                "test split": f"{test} ({rows.get(test, 0):,} pairs)",
                "training splits": ", ".join(f"{s} ({rows.get(s, 0):,} pairs)" for s in report.train_splits),
                "sentences (graph nodes)": report.nodes, "pairs (graph edges)": report.edges,
                "input rejects": report.rejected}),
                table(forests, ["forest", "accuracy", "95% interval", "vs majority class", "above it beyond chance"],
                      accuracy),
                note(f"A random forest fit on the training split(s) reads only how often each sentence recurs and how "
                     f"the pairs connect, never the text, and predicts the label of the {test} split. Accuracy above "
                     "the majority class beyond chance (its 95% interval above it, over the "
                     f"{n:,} test pairs) means the way the pairs were sampled gives the label away; within the "
                     "interval, the graph tells nothing the label shares do not."))
            .section("Ablations (paper Table 2)", table(ablations, ["forest reads", "accuracy", "vs majority class"],
                                                        accuracy))
            .section("Label share by the degrees of both sentences (paper Fig. 2)",
                     *(figure(svg) for svg in heatmaps),
                     note("Every pair of the training and test splits, binned by how many pairs each of its sentences "
                          "is in (rows: S1_freq, sentence 1; columns: S2_freq, sentence 2); cells with fewer than 10 "
                          "pairs are left empty. A label whose share changes across the cells is predictable from the "
                          "degrees alone."))
            .section("Feature importances", table(
                features_table, formats={"basic forest": _share, "advanced forest": _share}),
                note("Each feature's importance: its share of its forest's impurity decrease (100% per forest); the "
                     f"basic forest reads {basic} only."))
            .section("Feature distribution (over all pairs)", table(distribution))
            .section("Configuration", config_table({"graph": report.graph, "forest": report.forest})))
