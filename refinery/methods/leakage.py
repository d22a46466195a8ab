"""Leakage features of the sentence graph and their predictability (Zhang et al. 2019; METHODS §4).

A node per distinct sentence, an edge per pair; the features of a pair are computed in DuckDB
SQL (``sql/leakage_*.sql``) over the graph of all splits together (transductive, the paper's
setting) or of each split apart. A random forest on these features alone, with no text, fit on
the training split(s) and scored on the test split, measures how much the way the pairs were
sampled gives the label away (paper Table 1, ablations as Table 2).
"""
from __future__ import annotations

import json
import tempfile
from dataclasses import asdict, dataclass, field

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from refinery.core.validation import NOT_EMPTY, SEED, Allowed, at_least, one_of, setting, validate
from refinery.io import queries
from refinery.io.readers import ReadOptions
from refinery.io.schema import Mapping
from refinery.io.storage import AtomicDir, join
from refinery.models.base import label_proba
from refinery.pipeline.stage import Output, Stage, StageInput, StageResult
from refinery.progress import progress
from refinery.report import figures
from refinery.report import format as fmt
from refinery.report.page import Report, config_table, corpus_name, figure, fields, note, table

BASIC_FEATURES = ("s1_freq", "s2_freq", "s1s2_inter")
ADVANCED_FEATURES = BASIC_FEATURES + (
    "s1s2_paths3", "s1_hop2", "s2_hop2", "s1_hop3", "s2_hop3",
    "resource_allocation", "jaccard", "preferential_attachment", "adamic_adar",
)
FEATURE_SETS = {"basic": BASIC_FEATURES, "advanced": ADVANCED_FEATURES}
GRAPH_QUERIES = ("leakage_pairs", "leakage_adjacency", "leakage_nodes", "leakage_pair_ends", "leakage_common",
                 "leakage_paths3")


@dataclass
class GraphConfig:
    """How pairs become a graph.

    ``node_key``: ``id`` (the node_a/node_b sentence ids, e.g. QQP qid1/qid2), ``text``
    (normalized text) or ``auto`` (ids where the corpus has them). ``transductive``: one graph
    over all splits (else one per split). ``multigraph``: duplicate pairs are parallel edges,
    as in the reference code (else a simple graph).
    """

    node_key: str = setting("auto", one_of("auto", "id", "text"), "Sentence identity: ids, normalized text, or "
                                                                  "ids where present.")
    transductive: bool = setting(True, help="One graph over all splits (the paper's setting), else one per split.",
                                 option="--transductive/--inductive")
    multigraph: bool = setting(True, help="Duplicate pairs as parallel edges (the reference code), else collapsed.",
                               option="--multigraph/--simple-graph")

    def __post_init__(self):
        validate(self)


@dataclass
class ForestConfig:
    """The random forest that reads labels off leakage features (``models.forest.CellForest``: scikit-learn's
    forest grown on distinct feature vectors weighted by their counts, the same forest in distribution).

    Fully grown trees (min_samples_leaf 1, scikit-learn's default): larger leaves pull the
    out-of-fold P̂(y|l) toward the middle, which leaves the IPS weights short of neutral.
    """

    trees: int = setting(100, at_least(1), "Trees of the random forest.")
    min_samples_leaf: int = setting(1, at_least(1), "Least rows in a leaf.")
    max_depth: int | None = setting(None, at_least(1).or_none(), "Deepest a tree grows (none: fully grown).")
    max_samples: int | None = setting(1_000_000, at_least(1).or_none(),
                                      "Rows each tree draws with replacement (none: as many as it trains on).")
    seed: int = setting(0, SEED, "Seed of the random forest.")
    n_jobs: int = setting(-1, Allowed(lambda v: v == -1 or at_least(1).test(v), "a positive integer or -1"),
                          "Threads (-1: every core).")

    def __post_init__(self):
        validate(self)

    def make(self):
        from refinery.models.forest import CellForest

        return CellForest(n_estimators=self.trees, min_samples_leaf=self.min_samples_leaf, max_depth=self.max_depth,
                          max_samples=self.max_samples, random_state=self.seed, n_jobs=self.n_jobs)


def graph_features(con, config: GraphConfig = GraphConfig()) -> pa.Table:
    """Per-pair leakage features of table ``rows`` (row_id, split, label, text_a, text_b[, node_a, node_b])."""
    columns = {c[0] for c in con.execute("DESCRIBE rows").fetchall()}
    missing_b = con.execute("SELECT count(*) FROM rows WHERE text_b IS NULL").fetchone()[0]
    if missing_b:
        raise ValueError(f"{missing_b:,} rows have no text_b: leakage features need sentence pairs")
    has_ids = {"node_a", "node_b"} <= columns
    if config.node_key == "id" and not has_ids:
        raise ValueError("node_key=id needs node_a/node_b columns (a preset such as qqp or msrp, or --map node_a=…)")
    for col in ("node_a", "node_b"):
        if col not in columns:
            con.execute(f"ALTER TABLE rows ADD COLUMN {col} VARCHAR")
    params = {"use_ids": config.node_key != "text" and has_ids, "per_split": not config.transductive,
              "simple": not config.multigraph}
    for name in progress(GRAPH_QUERIES, desc="leakage graph", unit=" query"):
        queries.run_script(con, name, params)
    return queries.run(con, "leakage_features")


@dataclass
class GraphInput:
    """The rows of the named splits (input order, with ``row_id`` and ``split``), their leakage
    features, and the input's rejects (carried into outputs, so no row goes missing)."""

    rows: pa.Table
    features: pa.Table
    rejects: pa.Table


def corpus_features(inputs: dict, mapping: Mapping | None = None, opts: ReadOptions = ReadOptions(),
                    config: GraphConfig = GraphConfig(), threads: int | None = None) -> GraphInput:
    """Rows, features and rejects of named inputs ``{split: path or [paths]}``."""
    con = queries.connect(threads=threads)
    with tempfile.TemporaryDirectory(prefix="refinery-leakage-") as work:
        corpora = queries.split_corpora(inputs, mapping, opts, work)
        queries.load_rows(con, queries.files_of(corpora), opts.storage_options)
        features = graph_features(con, config)
        rows = con.sql("SELECT * FROM rows ORDER BY row_id").to_arrow_table()
        rejects = queries.corpora_rejects(corpora)
    return GraphInput(rows, features, rejects)


def matrix(features: pa.Table, names) -> np.ndarray:
    return np.column_stack([features[n].to_numpy(zero_copy_only=False).astype(np.float64) for n in names])


def split_roles(splits: list[str], test_split: str | None = None) -> tuple[list[str], str]:
    """(training splits, test split): the test split is the one named ``test``, else the last given."""
    if len(splits) < 2:
        raise ValueError("predictability needs a training and a test split (--input train=… --input test=…)")
    test = test_split or ("test" if "test" in splits else splits[-1])
    if test not in splits:
        raise ValueError(f"no split named {test!r}; splits: {', '.join(splits)}")
    return [s for s in splits if s != test], test


def _accuracy(forest_config: ForestConfig, X_train, y_train, X_test, y_test) -> tuple[float, object]:
    model = forest_config.make().fit(X_train, y_train)
    return float((model.predict(X_test) == y_test).mean()), model


def predictability(features: pa.Table, splits: list[str], test_split: str | None = None,
                   forest: ForestConfig = ForestConfig()) -> tuple[dict, pa.Table]:
    """Accuracy of a forest on leakage features alone, against the majority class (paper Tables 1–2).

    Returns the report and the test split's predictions (row_id, label, prediction, p(label)).
    """
    train_splits, test = split_roles(splits, test_split)
    split_col = features["split"].to_numpy(zero_copy_only=False)
    labels = features["label"].to_numpy(zero_copy_only=False)
    train, test_mask = np.isin(split_col, train_splits), split_col == test
    y_train, y_test = labels[train], labels[test_mask]
    values, counts = np.unique(y_train, return_counts=True)
    majority = values[np.argmax(counts)]

    X_adv = matrix(features, ADVANCED_FEATURES)  # BASIC_FEATURES are its first columns
    report = {"train_splits": train_splits, "test_split": test,
              "rows": {s: int((split_col == s).sum()) for s in splits},
              "majority_label": str(majority), "majority_accuracy": float((y_test == majority).mean())}
    runs = [("leakage_accuracy", list(BASIC_FEATURES)), ("advanced_accuracy", list(ADVANCED_FEATURES))]
    runs += [(f"without:{f}", [g for g in BASIC_FEATURES if g != f]) for f in BASIC_FEATURES]
    runs += [(f"only:{f}", [f]) for f in BASIC_FEATURES]
    index = {n: i for i, n in enumerate(ADVANCED_FEATURES)}
    ablations, models = {}, {}
    for name, names in progress(runs, desc="leakage forests", unit=" fit"):
        cols = [index[n] for n in names]
        acc, model = _accuracy(forest, X_adv[train][:, cols], y_train, X_adv[test_mask][:, cols], y_test)
        models[name] = model
        if name.startswith(("without:", "only:")):
            ablations[name] = acc
        else:
            report[name] = acc
    report["ablations"] = ablations
    report["importances"] = {
        "basic": dict(zip(BASIC_FEATURES, map(float, models["leakage_accuracy"].feature_importances_))),
        "advanced": dict(zip(ADVANCED_FEATURES, map(float, models["advanced_accuracy"].feature_importances_))),
    }
    model = models["leakage_accuracy"]
    model.set_params(n_jobs=1)  # trees summed in one order: threads would make the last bits vary run to run
    proba = model.predict_proba(X_adv[test_mask][:, :len(BASIC_FEATURES)])
    predictions = pa.table({
        "row_id": features["row_id"].filter(pa.array(test_mask)),
        "split": pa.array([test] * int(test_mask.sum()), pa.string()),
        "label": pa.array(y_test, pa.string()),
        "prediction": pa.array(model.classes_[proba.argmax(axis=1)], pa.string()),
        "p_label": pa.array(label_proba(proba, model.classes_, y_test)),
    })
    return report, predictions


DEGREE_BINS = (1, 2, 3, 4, 5, 6, 11, 21, 51)


def _degree_bin(deg: np.ndarray) -> np.ndarray:
    return np.searchsorted(np.array(DEGREE_BINS), deg, side="right") - 1


def degree_table(features: pa.Table, min_cell: int = 10) -> dict:
    """Label shares per (S1_freq, S2_freq) degree cell (paper Fig. 2): {label: matrix}, and the cell counts.

    Cells with fewer than ``min_cell`` pairs are left empty (NaN) rather than shown as 0 or 1.
    """
    a = _degree_bin(features["s1_freq"].to_numpy())
    b = _degree_bin(features["s2_freq"].to_numpy())
    labels = features["label"].to_numpy(zero_copy_only=False)
    B = len(DEGREE_BINS)
    cell = a * B + b
    total = np.bincount(cell, minlength=B * B).reshape(B, B)
    shares = {}
    for lab in sorted(set(labels)):
        hit = np.bincount(cell[labels == lab], minlength=B * B).reshape(B, B)
        shares[str(lab)] = np.where(total >= min_cell, hit / np.maximum(total, 1), np.nan)
    return {"shares": shares, "counts": total}


def degree_heatmaps(features: pa.Table, min_cell: int = 10) -> list[str]:
    """Label share against the degrees of both sentences, one SVG heatmap per label (paper Fig. 2), cropped
    to the degrees the corpus has; cells with fewer than ``min_cell`` pairs are left empty."""
    shares = degree_table(features, min_cell)["shares"]
    ticks = [str(lo) if hi - lo == 1 else f"{lo}–{hi - 1}" for lo, hi in zip(DEGREE_BINS, DEGREE_BINS[1:])]
    ticks.append(f"{DEGREE_BINS[-1]}+")
    return [figures.heatmap(share, ticks, ticks, title=f"share of {label}",
                            x_label="S2_freq: pairs sentence 2 is in", y_label="S1_freq",
                            value_label="share")
            for label, share in shares.items()]


def identical_pairs(rows: pa.Table, features: pa.Table, label: str) -> pa.Table:
    """The probe corpus of paper §3: every distinct sentence paired with itself, labelled ``label``.

    ``s_freq`` is the sentence's degree in the corpus graph: all three basic leakage features of
    such a pair equal it, so a model's scores against ``s_freq`` expose reliance on leakage.
    """
    u, v = features["u"].to_numpy(), features["v"].to_numpy()
    deg = dict(zip(u, features["s1_freq"].to_numpy()))
    deg.update(zip(v, features["s2_freq"].to_numpy()))
    nodes = np.concatenate([u, v])
    texts = pa.concat_arrays([rows["text_a"].combine_chunks(), rows["text_b"].combine_chunks()])
    first = np.unique(nodes, return_index=True)[1]
    text = pc.take(texts, pa.array(first))
    node = nodes[first]
    return pa.table({
        "id": pa.array([f"identical-{n}" for n in node], pa.string()),
        "text_a": text, "text_b": text,
        "label": pa.array([label] * len(node), pa.string()),
        "s_freq": pa.array([int(deg[n]) for n in node], pa.int64()),
    })


@dataclass
class LeakageConfig:
    graph: GraphConfig = field(default_factory=GraphConfig)
    forest: ForestConfig = field(default_factory=ForestConfig)
    test_split: str | None = setting(None, NOT_EMPTY.or_none(), "The split to score (none: 'test', else the last).")
    identical_label: str | None = setting(None, NOT_EMPTY.or_none(), "Also write identical/: each sentence paired "
                                          "with itself, with this label (paper §3).", option="--identical-pairs")

    def __post_init__(self):
        validate(self)


def run(inputs: dict[str, str], out: str, mapping: Mapping | None = None, opts: ReadOptions = ReadOptions(),
        config: LeakageConfig = LeakageConfig()) -> dict:
    """Features, predictability and report of ``inputs`` ({split: path}; a corpus's own ``split``
    column wins, so one corpus of several splits is scored as those splits) into ``out``.

    Writes features.parquet, predictions.parquet (test split), report.json, report.html, and
    with ``identical_label`` the identical-pair probe corpus under ``identical/``.
    """
    import pyarrow.parquet as pq

    from refinery.io.corpus import write_table

    graph, forest = config.graph, config.forest
    graph_input = corpus_features(inputs, mapping, opts, graph)
    rows, features = graph_input.rows, graph_input.features
    splits = list(dict.fromkeys(rows["split"].to_pylist()))  # in input order
    report, predictions = predictability(features, splits, config.test_split, forest)
    report["rejected"] = graph_input.rejects.num_rows
    ids = rows["id"]
    predictions = predictions.append_column("id", pc.take(ids, predictions["row_id"]))
    features = features.append_column("id", ids)
    report.update(graph=asdict(graph), forest=asdict(forest), inputs=inputs,
                  nodes=int(np.unique(np.concatenate([features["u"].to_numpy(), features["v"].to_numpy()])).size),
                  edges=features.num_rows, feature_summary=_summary(features))
    with AtomicDir(out, opts.storage_options) as d:
        for name, data in (("features.parquet", features), ("predictions.parquet", predictions)):
            sink = pa.BufferOutputStream()
            pq.write_table(data, sink, compression="zstd")
            d.write_bytes(name, sink.getvalue().to_pybytes())
        d.write_text("report.json", json.dumps(report, indent=1, default=str))
        d.write_text("report.html", _html(report, features, opts.storage_options))
        d.commit()
    if config.identical_label is not None:
        write_table(identical_pairs(rows, features, config.identical_label), join(out, "identical"),
                    storage_options=opts.storage_options)
    return report


class LeakageStage(Stage):
    """How well the sentence graph alone predicts the label (leakage features, random forest; Zhang et al. 2019).

    The input needs two splits or more (``--input train=… --input test=…``, or a ``split`` column). Writes
    features.parquet, predictions.parquet and the report; in a pipeline the rows pass on unchanged.
    """

    name, Config = "leakage", LeakageConfig
    needs = ("id", "text_a", "text_b", "label", "split")
    output = Output.INPUT

    def run(self, source: StageInput, out: str) -> StageResult:
        r = run(source.splits if source.named else {"all": source.paths}, out, source.mapping, source.opts,
                self.config)
        pairs = sum(r["rows"].values())
        lines = (f"{r['edges']:,} pairs, {r['nodes']:,} sentences; test split {r['test_split']!r}",
                 f"  leakage accuracy  {r['leakage_accuracy']:.4f}  (advanced {r['advanced_accuracy']:.4f})",
                 f"  majority accuracy {r['majority_accuracy']:.4f}  ({r['majority_label']})",
                 *(f"  {name:<22} {acc:.4f}" for name, acc in r["ablations"].items()))
        return StageResult(pairs + r["rejected"], {"pairs": pairs, "input rejects": r["rejected"]}, r,
                           f"leakage accuracy {r['leakage_accuracy']:.4f} against majority "
                           f"{r['majority_accuracy']:.4f} (test split {r['test_split']!r})", lines,
                           report_file="report.html")


def _summary(features: pa.Table) -> dict:
    out = {}
    for name in ADVANCED_FEATURES:
        x = features[name].to_numpy().astype(float)
        out[name] = {"mean": round(float(x.mean()), 4), "max": float(x.max()),
                     **{f"q{q}": float(np.quantile(x, q / 100)) for q in (50, 90, 99)}}
    return out


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


def _points(delta) -> str:
    """An accuracy difference in percentage points: 0.0047 → "+0.5 pts" (text passes through)."""
    if isinstance(delta, str):
        return delta
    return f"{100 * delta:+.1f} pts" if round(100 * delta, 1) else "0.0 pts"


def _share(v) -> str:
    return v if isinstance(v, str) else fmt.percent(v)


def _html(report: dict, features: pa.Table, storage_options: dict | None = None) -> str:
    inputs = {split: [paths] if isinstance(paths, str) else list(paths) for split, paths in report["inputs"].items()}
    corpus = corpus_name([p for paths in inputs.values() for p in paths], storage_options)
    read = [f"{split}: {p}" for split, paths in inputs.items() for p in paths]
    majority, rows = report["majority_accuracy"], report["rows"]
    test = report["test_split"]
    basic = ", ".join(BASIC_FEATURES)
    forests = [
        {"forest": f"majority class ({report['majority_label']}), no features", "accuracy": majority,
         "vs majority class": "—"},
        {"forest": f"basic leakage features ({basic})", "accuracy": report["leakage_accuracy"],
         "vs majority class": report["leakage_accuracy"] - majority},
        {"forest": f"advanced: the {len(ADVANCED_FEATURES)} features below", "accuracy": report["advanced_accuracy"],
         "vs majority class": report["advanced_accuracy"] - majority},
    ]
    ablations = [{"forest reads": "all three basic features", "accuracy": report["leakage_accuracy"],
                  "vs majority class": report["leakage_accuracy"] - majority}]
    ablations += [{"forest reads": f"{'all but' if kind == 'without' else 'only'} {name}", "accuracy": acc,
                   "vs majority class": acc - majority}
                  for kind_name, acc in report["ablations"].items() for kind, name in [kind_name.split(":", 1)]]
    importances = report["importances"]
    features_table = [{"feature": name, "what it counts": FEATURE_MEANINGS.get(name, ""),
                       "basic forest": importances["basic"].get(name, "not read"),
                       "advanced forest": importances["advanced"].get(name, "not read")}
                      for name in importances["advanced"]]
    distribution = [{"feature": name, "mean": s["mean"], "median": s["q50"], "90th percentile": s["q90"],
                     "99th percentile": s["q99"], "max": s["max"]} for name, s in report["feature_summary"].items()]
    accuracy = {"accuracy": fmt.percent, "vs majority class": _points}
    return (Report("Leakage: the label predicted from the sentence graph alone (Zhang et al. 2019)", corpus, read)
            .section("Predictability of the label from the graph alone", fields({
                "test split": f"{test} ({rows.get(test, 0):,} pairs)",
                "training splits": ", ".join(f"{s} ({rows.get(s, 0):,} pairs)" for s in report["train_splits"]),
                "sentences (graph nodes)": report["nodes"], "pairs (graph edges)": report["edges"],
                "input rejects": report["rejected"]}),
                table(forests, ["forest", "accuracy", "vs majority class"], accuracy),
                note(f"A random forest fit on the training split(s) reads only how often each sentence recurs and how "
                     f"the pairs connect, never the text, and predicts the label of the {test} split. Accuracy above "
                     "the majority class means the way the pairs were sampled gives the label away."))
            .section("Ablations (paper Table 2)", table(ablations, ["forest reads", "accuracy", "vs majority class"],
                                                        accuracy))
            .section("Label share by the degrees of both sentences (paper Fig. 2)",
                     *(figure(svg) for svg in degree_heatmaps(features)),
                     note("Every pair of the training and test splits, binned by how many pairs each of its sentences "
                          "is in (rows: S1_freq, sentence 1; columns: S2_freq, sentence 2); cells with fewer than 10 "
                          "pairs are left empty. A label whose share changes across the cells is predictable from the "
                          "degrees alone."))
            .section("Feature importances", table(
                features_table, formats={"basic forest": _share, "advanced forest": _share}),
                note("Each feature's importance: its share of its forest's impurity decrease (100% per forest); the "
                     f"basic forest reads {basic} only."))
            .section("Feature distribution (over all pairs)", table(distribution))
            .section("Configuration", config_table({"graph": report["graph"], "forest": report["forest"]}))
            .html())
