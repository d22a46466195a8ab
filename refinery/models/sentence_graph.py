"""The sentence graph of a pair corpus and what is read off it (Zhang et al. 2019; METHODS §4).

A node per distinct sentence, an edge per pair; the features of a pair are computed in DuckDB SQL
(``sql/leakage_*.sql``, beside this module) over the graph of all splits together (transductive, the paper's
setting) or of each split apart. A random forest on these features alone, with no text, fit on the training
split(s) and scored on the test split, measures how much the way the pairs were sampled gives the label away
(paper Table 1, ablations as Table 2).
"""
from __future__ import annotations

from contextlib import contextmanager
from dataclasses import dataclass, fields

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from refinery.io import queries
from refinery.io.db import memory_limit
from refinery.io.read_options import ReadOptions
from refinery.io.schema import Mapping
from refinery.messages import NamedSplits, Refusal, Setting
from refinery.models.leakage_settings import (ADVANCED_FEATURES, BASIC_FEATURES, GRAPH_MEMORY, ForestConfig,
                                              GraphConfig)
from refinery.models.base import label_proba
from refinery.models.forest import TREE_DTYPE, Cells
from refinery.models.predictability import PredictabilityFigures
from refinery.progress import progress

GRAPH_QUERIES = ("leakage_pairs", "leakage_adjacency", "leakage_nodes", "leakage_pair_ends", "leakage_common",
                 "leakage_paths3")
GRAPH_TABLES = ("pairs", "adj", "nodes", "pair_ends", "pair_common", "pair_paths3")   # what the queries create
TABLES_MEMORY = 1 << 30   # DuckDB's memory while the forests run: its tables go to disk, not beside the forests' arrays


def build_graph(con, config: GraphConfig = GraphConfig()) -> int:
    """Table ``features`` (row_id, split, label, u, v and the leakage features; input order) of table ``rows``
    (row_id, split, label, text_a, text_b[, node_a, node_b]), built in DuckDB, which spills past its memory
    limit; the graph's working tables are dropped. Returns the number of sentences (graph nodes)."""
    columns = {c[0] for c in con.execute("DESCRIBE rows").fetchall()}
    missing_b = con.sql("SELECT count(*) FROM rows WHERE text_b IS NULL").fetchall()[0][0]
    if missing_b:
        raise Refusal(f"{missing_b:,} rows have no text_b: leakage features need sentence pairs",
                      code="missing-columns")
    has_ids = {"node_a", "node_b"} <= columns
    if config.node_key == "id" and not has_ids:
        raise Refusal("node_key=id needs node_a/node_b columns (a preset such as qqp or msrp, or ",
                      Setting("map", "node_a=…"), ")", code="missing-columns")
    for col in ("node_a", "node_b"):
        if col not in columns:
            con.execute(f"ALTER TABLE rows ADD COLUMN {col} VARCHAR")
    params = {"use_ids": config.node_key != "text" and has_ids, "per_split": not config.transductive,
              "simple": not config.multigraph}
    for name in progress(GRAPH_QUERIES + ("leakage_features",), desc="leakage graph", unit=" query"):
        if name == "leakage_features":
            queries.create_table(con, "features", name, package=__package__)
        else:
            queries.run_script(con, name, params, package=__package__)
    nodes = con.sql("SELECT count(*) FROM nodes").fetchall()[0][0]
    for table in GRAPH_TABLES:
        con.execute(f"DROP TABLE {table}")
    return nodes


def graph_features(con, config: GraphConfig = GraphConfig()) -> pa.Table:
    """Per-pair leakage features of table ``rows`` (see :func:`build_graph`) as one Arrow table."""
    build_graph(con, config)
    return con.sql("SELECT * FROM features").to_arrow_table()


class GraphInput:
    """The rows of the named splits and their leakage features as DuckDB tables ``rows`` and ``features`` (input
    order, ``row_id`` the position; on disk past DuckDB's memory limit), the number of sentences, and the
    input's rejects (carried into outputs, so no row goes missing). Columns come out as NumPy arrays or
    Arrow batches, never as a Python object per row."""

    def __init__(self, con, nodes: int, rejects: pa.Table):
        self.con, self.nodes, self.rejects = con, nodes, rejects
        self._on_disk = False   # within ``tables_on_disk``

    def __enter__(self) -> "GraphInput":
        return self

    def __exit__(self, *exc) -> None:
        self.con.close()

    @property
    def num_rows(self) -> int:
        return self.con.sql("SELECT count(*) FROM features").fetchall()[0][0]

    @contextmanager
    def tables_on_disk(self):
        """DuckDB's memory limit lowered to ``TABLES_MEMORY`` meanwhile, so its tables wait on disk and a scan of them
        keeps no more of them cached while NumPy arrays, forests and counters take the memory (a lower limit, from a
        tight memory budget, stands; within an outer block, the outer one sets it back)."""
        if self._on_disk:
            yield
            return
        self.keep_tables_on_disk()
        try:
            yield
        finally:
            self._on_disk = False
            self.con.execute(f"SET memory_limit = '{memory_limit(GRAPH_MEMORY)}'")

    def keep_tables_on_disk(self) -> None:
        """DuckDB's memory limit lowered to ``TABLES_MEMORY`` from now on (``tables_on_disk``, for the rest of the
        connection's life)."""
        self._on_disk = True
        self.con.execute(f"SET memory_limit = '{memory_limit(TABLES_MEMORY)}'")

    def splits(self) -> list[str]:
        """The splits in input order."""
        return [s for s, in self.con.sql("SELECT split FROM rows GROUP BY split ORDER BY min(row_id)").fetchall()]

    def labels(self) -> list[str]:
        return [s for s, in self.con.sql("SELECT DISTINCT label FROM features ORDER BY label").fetchall()]

    def _selection(self, splits, rows: np.ndarray | None = None) -> tuple[str, dict]:
        """(FROM and WHERE clauses, their parameters) of the rows of ``features`` in ``splits`` (None: all) and, where
        ``rows`` (a bool per row of ``features``, in input order) is given, those it marks (registered with the
        connection as ``__marked``, replaced by the next)."""
        source, conditions, params = "features", [], {}
        if rows is not None:
            self.con.register("__marked", pa.table({"marked": np.asarray(rows, bool)}))
            source, conditions = "features POSITIONAL JOIN __marked", ["marked"]
        if splits is not None:
            conditions.append("list_contains($splits, split)")
            params["splits"] = list(splits)
        return f"FROM {source}" + (f" WHERE {' AND '.join(conditions)}" if conditions else ""), params

    def codes(self, column: str, values: list[str], splits=None, rows: np.ndarray | None = None) -> np.ndarray:
        """Each row's position of its ``column`` value in ``values`` (rows of ``splits``, default all; ``rows``: only
        those it marks)."""
        where, params = self._selection(splits, rows)
        sql = f"SELECT (list_position($values, {queries.quote_ident(column)}) - 1)::BIGINT AS c {where}"
        return self.con.sql(sql, params={"values": list(values), **params}).fetchnumpy()["c"]

    def matrix(self, names, splits=None, rows: np.ndarray | None = None) -> np.ndarray:
        """The named features as float64 columns, a row per pair (of ``splits``, default all; ``rows``: only those
        it marks, a bool per row), filled a column at a time."""
        where, params = self._selection(splits, rows)
        X = None
        for j, name in enumerate(names):
            column = self.con.sql(f"SELECT {queries.quote_ident(name)}::DOUBLE AS x {where}",
                                  params=params or None).fetchnumpy()["x"]
            if X is None:
                X = np.empty((len(column), len(names)))
            X[:, j] = column
        return X

    def cells(self, names, labels: list[str], splits=None, rows: np.ndarray | None = None) -> Cells:
        """The rows of ``splits`` (default all; ``rows``: only those it marks, a bool per row) as a forest's training
        cells on the named features: what ``Cells.of(self.matrix(names, splits, rows), self.codes("label", labels,
        splits, rows))`` gives, the same cells in the same order (DuckDB groups NaN as one value after the others and
        -0.0 with 0.0, as ``distinct_rows``), grouped and sorted by DuckDB within its memory limit, spilling past it:
        no matrix of every row is held, only the cells, fetched a column at a time."""
        where, params = self._selection(splits, rows)
        vector = [f"{queries.quote_ident(name)}::DOUBLE AS x{j}" for j, name in enumerate(names)]
        self.con.execute(f"CREATE OR REPLACE TEMP TABLE __cells AS SELECT {', '.join(vector)}, "
                         f"(list_position($labels, label) - 1)::BIGINT AS y, count(*)::DOUBLE AS n {where} "
                         "GROUP BY ALL ORDER BY ALL", {"labels": list(labels), **params})

        def column(name: str) -> np.ndarray:
            return self.con.sql(f"SELECT {name} FROM __cells").fetchnumpy()[name]

        try:
            vectors = np.empty((self.con.sql("SELECT count(*) FROM __cells").fetchall()[0][0], len(vector)), TREE_DTYPE)
            for j in range(len(vector)):
                vectors[:, j] = column(f"x{j}")
            codes = column("y")
            classes = np.unique(codes)
            return Cells(vectors, np.searchsorted(classes, codes), column("n"), classes)
        finally:
            self.con.execute("DROP TABLE __cells")

    def batches(self, sql: str, params: dict | None = None, rows: int = 1 << 17):
        """Record batches of a query over ``rows`` and ``features`` (a full scan keeps the input order)."""
        return self.con.sql(sql, params=params).to_arrow_reader(batch_size=rows)

    def batches_on_a_cursor(self, sql: str, params: dict | None = None, rows: int = 1 << 17):
        """``batches`` read on a cursor of their own: another thread reads them while the connection runs queries."""
        con = self.con.cursor()
        try:
            yield from con.sql(sql, params=params).to_arrow_reader(batch_size=rows)
        finally:
            con.close()

    def features(self) -> pa.Table:
        """Every pair's features as one Arrow table (small corpora; large ones go by :meth:`batches`)."""
        return self.con.sql("SELECT * FROM features").to_arrow_table()


def corpus_features(inputs: dict, mapping: Mapping | None = None, opts: ReadOptions = ReadOptions(),
                    config: GraphConfig = GraphConfig(), threads: int | None = None) -> GraphInput:
    """The rows and leakage features of named inputs ``{split: path or [paths]}``, in DuckDB (a connection of its own,
    closed with the ``GraphInput``)."""
    con = queries.connect(threads=threads, most_memory=GRAPH_MEMORY)
    return graph_of(con, queries.load_input(con, inputs, mapping, opts), config)


def graph_of(con, rejects, config: GraphConfig = GraphConfig()) -> GraphInput:
    """The sentence graph of the rows in ``con``'s table ``rows`` (``queries.load_input``; ``rejects``: the input's)
    and their leakage features."""
    return GraphInput(con, build_graph(con, config), rejects)


def split_roles(splits: list[str], test_split: str | None = None) -> tuple[list[str], str]:
    """(training splits, test split): the test split is the one named ``test``, else the last given."""
    if len(splits) < 2:
        raise Refusal("predictability needs a training and a test split (", NamedSplits(), ")", code="missing-split")
    test = test_split or ("test" if "test" in splits else splits[-1])
    if test not in splits:
        raise Refusal(Setting("test_split", test), f": the input has no split of that name; its splits: "
                      f"{', '.join(splits)}", code="missing-split")
    return [s for s in splits if s != test], test


def _columns(names) -> slice | list[int]:
    """Where ``names`` sit among ADVANCED_FEATURES: a slice (a view, no copy) when they are adjacent."""
    cols = [ADVANCED_FEATURES.index(n) for n in names]
    return slice(cols[0], cols[-1] + 1) if cols == list(range(cols[0], cols[-1] + 1)) else cols


@dataclass(frozen=True, kw_only=True)
class Predictability(PredictabilityFigures):
    """How well leakage features alone predict the label (paper Tables 1–2): its figures, and the test split's
    ``predictions`` (row_id, split, label, prediction, p(label), id)."""

    predictions: pa.Table

    def to_json(self) -> dict:
        """Its figures as the report keeps them (the predictions apart)."""
        return {f.name: getattr(self, f.name) for f in fields(PredictabilityFigures)}


def predictability(graph: GraphInput, splits: list[str], test_split: str | None = None,
                   forest: ForestConfig = ForestConfig()) -> Predictability:
    """Accuracy of a forest on leakage features alone, against the majority class (paper Tables 1–2). Each
    forest scores the test split as its trees grow and keeps none of them (``CellForest.fit_predict_proba``); the
    basic one's scores are the predictions."""
    train_splits, test = split_roles(splits, test_split)
    labels = graph.labels()
    names = pa.array(labels, pa.string())
    rows = dict(graph.con.sql("SELECT split, count(*) FROM features GROUP BY split").fetchall())
    accuracy_of = {}
    runs = [("leakage_accuracy", BASIC_FEATURES), ("advanced_accuracy", ADVANCED_FEATURES)]
    runs += [(f"without:{f}", tuple(g for g in BASIC_FEATURES if g != f)) for f in BASIC_FEATURES]
    runs += [(f"only:{f}", (f,)) for f in BASIC_FEATURES]
    ablations, importances = {}, {}
    with graph.tables_on_disk():
        X_test, y_test = graph.matrix(ADVANCED_FEATURES, [test]), graph.codes("label", labels, [test])
        for name, features in progress(runs, desc="leakage forests", unit=" fit"):
            train = graph.cells(features, labels, train_splits)   # no matrix of the training rows
            model = forest.make()
            scores = model.fit_predict_proba(train, X_test[:, _columns(features)])   # its trees dropped
            accuracy = float((model.classes_[scores.argmax(axis=1)] == y_test).mean())
            if name.startswith(("without:", "only:")):
                ablations[name] = accuracy
                continue
            accuracy_of[name] = accuracy
            kind = "basic" if features == BASIC_FEATURES else "advanced"
            importances[kind] = dict(zip(features, map(float, model.feature_importances_)))
            if kind == "basic":   # the training rows per label, from its cells (every run's are the same rows)
                basic, proba = model, scores
                trained = np.bincount(train.classes[train.labels], weights=train.counts, minlength=len(labels))
        majority = int(np.argmax(trained))   # ties: the first label in order
    keys = graph.con.sql("SELECT row_id, split FROM features WHERE split = $test", params={"test": test}).to_arrow_table()
    ids = graph.con.sql("SELECT id FROM rows WHERE split = $test", params={"test": test}).to_arrow_table()
    predictions = pa.table({
        "row_id": keys["row_id"], "split": keys["split"],
        "label": pc.take(names, pa.array(y_test)),
        "prediction": pc.take(names, pa.array(basic.classes_[proba.argmax(axis=1)])),
        "p_label": pa.array(label_proba(proba, basic.classes_, y_test)),
        "id": ids["id"],
    })
    return Predictability(train_splits=train_splits, test_split=test, rows={s: int(rows.get(s, 0)) for s in splits},
                          leakage_accuracy=accuracy_of["leakage_accuracy"],
                          advanced_accuracy=accuracy_of["advanced_accuracy"], majority_label=labels[majority],
                          majority_accuracy=float((y_test == majority).mean()), ablations=ablations,
                          importances=importances, predictions=predictions)


DEGREE_BINS = (1, 2, 3, 4, 5, 6, 11, 21, 51)


@dataclass(frozen=True)
class DegreeTable:
    """Label shares per (S1_freq, S2_freq) degree cell (paper Fig. 2): ``shares`` {label: matrix}, and each cell's
    pairs (``counts``)."""

    shares: dict
    counts: np.ndarray


def degree_table(graph: GraphInput, min_cell: int = 10) -> DegreeTable:
    """The ``DegreeTable`` of ``graph``'s pairs; cells with fewer than ``min_cell`` pairs are left empty (NaN)
    rather than shown as 0 or 1."""
    B = len(DEGREE_BINS)
    cells = graph.con.sql(
        "SELECT len(list_filter($bins, lambda b: b <= s1_freq)) - 1, len(list_filter($bins, lambda b: b <= s2_freq)) - 1, "
        "label, count(*) FROM features GROUP BY ALL", params={"bins": list(DEGREE_BINS)}).fetchall()
    hits = {label: np.zeros((B, B)) for label in sorted({c[2] for c in cells})}
    for a, b, label, n in cells:
        hits[label][a, b] = n
    total = sum(hits.values())
    shares = {str(label): np.where(total >= min_cell, hit / np.maximum(total, 1), np.nan) for label, hit in hits.items()}
    return DegreeTable(shares, total.astype(np.int64))


def identical_pairs(graph: GraphInput, label: str) -> pa.Table:
    """The probe corpus of paper §3: every distinct sentence paired with itself, labelled ``label``.

    ``s_freq`` is the sentence's degree in the corpus graph: all three basic leakage features of
    such a pair equal it, so a model's scores against ``s_freq`` expose reliance on leakage. A sentence's
    text is that of its first occurrence, as sentence 1 before sentence 2.
    """
    return graph.con.sql("""
        WITH ends AS (
            SELECT f.u AS node, 0 AS side, f.row_id, r.text_a AS text, f.s1_freq AS s_freq
            FROM features f POSITIONAL JOIN (SELECT text_a FROM rows) r
            UNION ALL
            SELECT f.v, 1, f.row_id, r.text_b, f.s2_freq FROM features f POSITIONAL JOIN (SELECT text_b FROM rows) r
        ),
        sentences AS (
            SELECT node, first(text ORDER BY side, row_id) AS text, any_value(s_freq)::BIGINT AS s_freq
            FROM ends GROUP BY node
        )
        SELECT 'identical-' || node AS id, text AS text_a, text AS text_b, $label AS label, s_freq
        FROM sentences ORDER BY node""", params={"label": label}).to_arrow_table()


def feature_summary(graph: GraphInput) -> dict:
    """Mean, max and the 50th, 90th and 99th percentiles of every feature, a column at a time."""
    out = {}
    for name in ADVANCED_FEATURES:
        x = graph.matrix([name])[:, 0]
        out[name] = {"mean": round(float(x.mean()), 4), "max": float(x.max()),
                     **{f"q{q}": float(np.quantile(x, q / 100)) for q in (50, 90, 99)}}
    return out
