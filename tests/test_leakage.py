"""Leakage features (DuckDB vs networkx), predictability on planted leakage, IPS weights, debiased evaluation."""
import json
import re
import sys

import duckdb
import networkx as nx
import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq
import pytest
from conftest import REPO, SNLI_DEV, SNLI_TEST, run_cli

from refinery.io import queries
from refinery.io.corpus import Corpus
from refinery.io.corpus_writer import write_table
from refinery.io.schema import PRESETS
from refinery.io.synth import SynthSpec
from refinery.io.synth import write as write_synth
from refinery.models import leakage_settings
from refinery.models import sentence_graph
from refinery.models.forest import Cells
from refinery.methods.weights import ips

sys.path.insert(0, str(REPO / "benchmarks"))
from leakage import reference_features  # noqa: E402


def _graph_features(u, v, **config):
    """Features of pairs given as sentence ids, through the SQL path."""
    con = queries.connect()
    n = len(u)
    con.register("__rows", pa.table({
        "row_id": np.arange(n), "split": ["all"] * n, "label": ["x"] * n,
        "text_a": [f"s{a}" for a in u], "text_b": [f"s{b}" for b in v],
        "node_a": [str(a) for a in u], "node_b": [str(b) for b in v]}))
    con.execute("CREATE TABLE rows AS SELECT * FROM __rows")
    return sentence_graph.graph_features(con, leakage_settings.GraphConfig(node_key="id", **config))


def _random_pairs(seed, nodes=60, edges=400):
    rng = np.random.default_rng(seed)
    popularity = 1.0 / np.arange(1, nodes + 1)  # hubs, repeats, self-pairs all occur
    popularity /= popularity.sum()
    return rng.choice(nodes, edges, p=popularity), rng.choice(nodes, edges, p=popularity)


@pytest.mark.parametrize("seed", [0, 1])
def test_multigraph_features_equal_networkx_reference(seed):
    u, v = _random_pairs(seed)
    ours = _graph_features(u, v)
    # node numbers are dense ranks of the id strings; map the reference onto the same pairs
    ref = reference_features(ours["u"].to_numpy(), ours["v"].to_numpy())
    assert (u == v).any() and len(set(zip(u, v))) < len(u)  # self-pairs and duplicate pairs present
    for name in leakage_settings.ADVANCED_FEATURES:
        np.testing.assert_allclose(ours[name].to_numpy().astype(float), ref[name], rtol=1e-9, err_msg=name)


def test_simple_graph_link_scores_equal_networkx_builtins():
    u, v = _random_pairs(2)
    keep = u != v  # networkx's link predictors assume no self-loops
    u, v = u[keep], v[keep]
    ours = _graph_features(u, v, multigraph=False)
    a, b = ours["u"].to_numpy(), ours["v"].to_numpy()
    G = nx.Graph(list(zip(a.tolist(), b.tolist())))
    pairs = list(zip(a.tolist(), b.tolist()))
    A = nx.to_numpy_array(G, nodelist=sorted(G.nodes))
    index = {n: i for i, n in enumerate(sorted(G.nodes))}
    A2, A3 = A @ A, A @ A @ A
    expected = {
        "s1_freq": [G.degree(x) for x in a],
        "s1s2_inter": [A2[index[x], index[y]] for x, y in pairs],
        "s1s2_paths3": [A3[index[x], index[y]] for x, y in pairs],
        "jaccard": [p for _, _, p in nx.jaccard_coefficient(G, pairs)],
        "resource_allocation": [p for _, _, p in nx.resource_allocation_index(G, pairs)],
        "adamic_adar": [p for _, _, p in nx.adamic_adar_index(G, pairs)],
        "preferential_attachment": [p for _, _, p in nx.preferential_attachment(G, pairs)],
    }
    for name, values in expected.items():
        np.testing.assert_allclose(ours[name].to_numpy().astype(float), values, rtol=1e-9, err_msg=name)


def test_hop_counts_are_neighbour_counts_on_a_tree():
    G = nx.random_labeled_tree(80, seed=4)
    u, v = map(np.array, zip(*G.edges))
    ours = _graph_features(u, v)
    # the SQL numbers nodes by the rank of their id strings: map back through them
    ids = sorted(set(map(str, np.concatenate([u, v]))))
    for x, h2, h3 in zip(ours["u"].to_numpy(), ours["s1_hop2"].to_numpy(), ours["s1_hop3"].to_numpy()):
        dist = nx.single_source_shortest_path_length(G, int(ids[x]), cutoff=3)
        assert h2 == sum(d == 2 for d in dist.values())
        assert h3 == sum(d == 3 for d in dist.values())


@pytest.fixture(scope="module")
def planted(tmp_path_factory):
    """A planted-leakage corpus: premises drawn from a pool whose popularity depends on the label."""
    root = tmp_path_factory.mktemp("leak")
    write_synth(SynthSpec(rows=24_000, premise_pool=2_000, seed=7), str(root / "all"))
    table = Corpus.open(str(root / "all")).read()
    write_table(table.slice(0, 18_000), str(root / "train"))
    write_table(table.slice(18_000), str(root / "test"))
    return root


def test_planted_leakage_is_predictable_and_weights_neutralize_it(planted):
    out = planted / "report"
    inputs = ["--input", f"train={planted / 'train'}", "--input", f"test={planted / 'test'}"]
    run_cli("leakage", *inputs, "--out", out, "--trees", "50")
    report = json.loads((out / "report" / "report.json").read_text())
    assert report["test_split"] == "test" and report["rows"] == {"train": 18_000, "test": 6_000}
    assert report["leakage_accuracy"] > report["majority_accuracy"] + 0.2, report
    assert report["leakage_beats_majority"] and report["leakage_ci95"][0] > report["majority_accuracy"]
    features = pq.read_table(out / "report" / "features.parquet")
    assert features.num_rows == 24_000
    page = (out / "report" / "report.html").read_text()   # the degree heatmap: one SVG per label, no PNG
    assert "<img" not in page and page.count("<svg") == len(set(features["label"].to_pylist())) >= 2

    run_cli("weights", *inputs, "--out", planted / "weighted", "--folds", "5", "--trees", "50")
    weighted = Corpus.open(str(planted / "weighted" / "corpus"))
    table = weighted.read()
    assert table.num_rows == 24_000 and set(table["split"].to_pylist()) == {"train", "test"}
    w, y = table["weight"].to_numpy(), np.array(table["label"].to_pylist())
    assert abs(w.mean() - 1) < 1e-9 and w.min() > 0
    for label in set(y):  # weighted label proportions equal the observed ones (3 labels)
        assert abs(w[y == label].sum() / w.sum() - (y == label).mean()) < 1e-6
    d = weighted.manifest.body["weights"]["diagnostics"]
    assert 0 < d["effective_sample_size"] < 24_000 and d["max"] > 1

    proc = run_cli("evaluate", "--predictions", out / "report" / "predictions.parquet", "--weights", planted / "weighted")
    result = json.loads(proc.stdout)["test"]
    assert result["accuracy"] > result["majority_accuracy"] + 0.2
    # under the weights the leakage-only forest falls back toward the weighted majority rate
    assert result["weighted_accuracy"] < result["weighted_majority_accuracy"] + 0.06, result
    assert result["accuracy"] - result["weighted_accuracy"] > 0.2, result


@pytest.mark.parametrize("labels", [2, 4])
def test_prior_search_matches_observed_proportions(labels):
    rng = np.random.default_rng(labels)
    proba = rng.dirichlet(np.full(labels, 0.4), size=5_000)
    y = np.array([rng.choice(labels, p=p) for p in proba])
    y[:labels] = np.arange(labels)
    proba = np.clip(proba ** 1.5, 1e-3, 1)  # miscalibrated on purpose: the prior must absorb it
    proba /= proba.sum(1, keepdims=True)
    for clip in (None, 20.0):
        prior = ips.fit_prior(proba, y, clip=clip)
        w = ips.ips_weights(proba, y, prior, clip=clip)
        np.testing.assert_allclose(ips.label_shares(w, y, labels), np.bincount(y) / len(y), atol=1e-6)
        assert abs(w.mean() - 1) < 1e-12 and (clip is None or w.max() <= clip + 1e-9)


def test_two_label_selection_probability_is_paper_eq1():
    rng = np.random.default_rng(0)
    p1 = rng.random(100)
    proba = np.column_stack([1 - p1, p1])
    prior = np.array([0.3, 0.7])
    eq1 = prior[0] * p1 / (prior[0] * p1 + prior[1] * (1 - p1))
    np.testing.assert_allclose(ips.selection_probability(proba, prior)[:, 1], eq1)


def test_snli_dev_test_graph_end_to_end(tmp_path):
    inputs = ["--input", f"dev={SNLI_DEV}", "--input", f"test={SNLI_TEST}", "--preset", "snli"]
    run_cli("leakage", *inputs, "--out", tmp_path / "lk", "--trees", "30", "--identical-pairs", "entailment")
    report = json.loads((tmp_path / "lk" / "report" / "report.json").read_text())
    assert report["edges"] == 19_666
    # each premise has about three hypotheses: far fewer sentences than 2 × pairs
    assert 20_000 < report["nodes"] < 30_000
    assert report["feature_summary"]["s1_freq"]["q50"] == 3
    assert 0.3 < report["leakage_accuracy"] < 0.45 and 0.3 < report["majority_accuracy"] < 0.4
    # SNLI's pairs leak little: half a point over the majority class on 9,824 pairs is within chance, and said so
    lo, hi = report["leakage_ci95"]
    assert lo < report["leakage_accuracy"] < hi and report["leakage_beats_majority"] == (lo > report["majority_accuracy"])
    identical = Corpus.open(str(tmp_path / "lk" / "identical")).read()
    assert identical.num_rows == report["nodes"]
    assert identical["text_a"].equals(identical["text_b"])
    assert set(identical["label"].to_pylist()) == {"entailment"}

    run_cli("weights", *inputs, "--out", tmp_path / "w", "--folds", "3", "--trees", "30")
    table = Corpus.open(str(tmp_path / "w" / "corpus")).read()
    assert table.num_rows == 19_666 and abs(table["weight"].to_numpy().mean() - 1) < 1e-9


def test_the_test_split_is_named_or_the_last_and_a_missing_one_refused():
    assert sentence_graph.split_roles(["train", "dev", "test"]) == (["train", "dev"], "test")
    assert sentence_graph.split_roles(["train", "dev"]) == (["train"], "dev")
    with pytest.raises(ValueError, match=r"^test_split='validation': the input has no split of that name; its "
                                         r"splits: train, test$") as refused:
        sentence_graph.split_roles(["train", "test"], "validation")
    assert refused.value.code == "missing-split"


def test_inductive_graphs_are_per_split():
    both = {"dev": SNLI_DEV, "test": SNLI_TEST}
    transductive = sentence_graph.corpus_features(both, PRESETS["snli"]).features()
    inductive = sentence_graph.corpus_features(both, PRESETS["snli"],
                                               config=leakage_settings.GraphConfig(transductive=False)).features()
    dev_alone = sentence_graph.corpus_features({"dev": SNLI_DEV}, PRESETS["snli"]).features()
    dev = inductive.filter(pc.equal(inductive["split"], "dev"))
    for name in leakage_settings.ADVANCED_FEATURES:
        assert dev[name].equals(dev_alone[name]), name
    # sentences shared across splits raise degrees only in the transductive graph
    assert (transductive["s1_freq"].to_numpy() >= inductive["s1_freq"].to_numpy()).all()


def test_cell_forest_is_sklearns_forest_in_distribution(planted):
    """The forest grown on count-weighted cells gives the P̂(y|l) of scikit-learn's forest grown on the rows, as
    closely as two seeds of scikit-learn's forest agree with each other (planted corpus, basic features); grown
    tree by tree and each dropped once it scored the test rows, the same figures exactly."""
    from sklearn.ensemble import RandomForestClassifier

    with sentence_graph.corpus_features({"train": str(planted / "train"), "test": str(planted / "test")}) as graph:
        labels = graph.labels()
        X, y = graph.matrix(leakage_settings.BASIC_FEATURES, ["train"]), graph.codes("label", labels, ["train"])
        X_test, y_test = graph.matrix(leakage_settings.BASIC_FEATURES, ["test"]), graph.codes("label", labels, ["test"])
    rows = [RandomForestClassifier(100, random_state=seed, n_jobs=2).fit(X, y).predict_proba(X_test) for seed in (0, 1)]
    forest = leakage_settings.ForestConfig(trees=100, max_samples=None).make().fit(X, y)
    cells = forest.predict_proba(X_test)
    assert len(X) == 18_000 and forest.cells_ < len(X) / 10   # the rows fall into few cells
    scored = leakage_settings.ForestConfig(trees=100, max_samples=None).make()   # each tree dropped once it scored
    assert np.array_equal(scored.fit_predict_proba(Cells.of(X, y), X_test), cells) and not scored.estimators_
    assert np.array_equal(scored.feature_importances_, forest.feature_importances_)
    noise = np.abs(rows[0] - rows[1]).mean()
    assert 0 < noise < 0.05
    assert np.abs(cells - rows[0]).mean() < 1.25 * noise and np.abs(cells - rows[1]).mean() < 1.25 * noise
    accuracy = [(p.argmax(1) == y_test).mean() for p in (cells, *rows)]
    assert accuracy[0] > np.bincount(y_test).max() / len(y_test) + 0.2 and abs(accuracy[0] - accuracy[1]) < 0.01


def test_distinct_rows_are_the_sorted_distinct_rows_np_unique_gives(planted):
    """The cells a forest grows on: the distinct rows in lexicographic order and each row's cell, as np.unique of
    each column folded into one key gives them (NaN last and one value, -0.0 = 0.0), on the planted corpus's
    leakage features and on columns with both."""
    from refinery.models.forest import distinct_rows

    def reference(X):
        key = np.zeros(len(X), np.int64)
        for column in X.T:
            values, codes = np.unique(column, return_inverse=True)
            key = np.unique(key * len(values) + codes.ravel(), return_inverse=True)[1].ravel()
        first = np.full(key.max() + 1, len(key), np.int64)
        np.minimum.at(first, key, np.arange(len(key)))
        return X[first], key

    with sentence_graph.corpus_features({"train": str(planted / "train"), "test": str(planted / "test")}) as graph:
        X = graph.matrix(leakage_settings.BASIC_FEATURES)
    rng = np.random.default_rng(0)
    odd = rng.integers(-2, 3, (5000, 3)).astype(float)
    odd[rng.random(odd.shape) < 0.05] = np.nan
    odd[odd == 0] = np.where(rng.random(int((odd == 0).sum())) < 0.5, -0.0, 0.0)
    for table in (X, odd):
        cells, index = distinct_rows(table)
        expected_cells, expected_index = reference(table)
        assert np.array_equal(index, expected_index) and np.array_equal(cells, expected_cells, equal_nan=True)
        assert len(cells) < len(table) and np.array_equal(cells[index], table, equal_nan=True)
        split, last = distinct_rows(table[:, :-1], table[:, -1])   # a column given apart: the same cells
        assert np.array_equal(split, cells, equal_nan=True) and np.array_equal(last, index)


def test_graph_cells_are_the_cells_of_its_matrix(planted):
    """``GraphInput.cells``, grouped and sorted in DuckDB, gives the cells ``Cells.of`` makes of the rows' matrix and
    labels: the same vectors, labels, counts and order, on the planted corpus's advanced features (a split, a
    subset of the columns, the rows a mask marks) and on a features table of NaN, -0.0 and 0.0 with a label no
    training row has."""
    def same(graph, names, labels, splits, rows=None):
        cells = graph.cells(names, labels, splits, rows)
        expected = Cells.of(graph.matrix(names, splits, rows), graph.codes("label", labels, splits, rows))
        assert len(cells.counts) < graph.num_rows
        for field in ("vectors", "labels", "counts", "classes"):
            got, want = getattr(cells, field), getattr(expected, field)
            assert got.dtype == want.dtype and np.array_equal(got, want, equal_nan=True), field

    with sentence_graph.corpus_features({"train": str(planted / "train"), "test": str(planted / "test")}) as graph:
        labels = graph.labels()
        same(graph, leakage_settings.ADVANCED_FEATURES, labels, ["train"])
        same(graph, ("s2_freq", "jaccard"), labels, None)
        marked = np.random.default_rng(0).random(graph.num_rows) < 0.7   # a fold's training rows
        same(graph, leakage_settings.BASIC_FEATURES, labels, None, marked)
        same(graph, leakage_settings.BASIC_FEATURES, labels, ["train"], marked)
        whole = graph.matrix(leakage_settings.BASIC_FEATURES)
        assert np.array_equal(graph.matrix(leakage_settings.BASIC_FEATURES, rows=marked), whole[marked])
    rng = np.random.default_rng(0)
    odd = rng.integers(-2, 3, (5000, 3)).astype(float)
    odd[rng.random(odd.shape) < 0.05] = np.nan
    odd[odd == 0] = np.where(rng.random(int((odd == 0).sum())) < 0.5, -0.0, 0.0)
    odd_rows = pa.table({"a": odd[:, 0], "b": odd[:, 1], "c": odd[:, 2], "label": rng.choice(["x", "y"], len(odd)),
                         "split": np.repeat(["train", "test"], len(odd) // 2)})
    con = duckdb.connect()
    con.execute("CREATE TABLE features AS SELECT * FROM odd_rows")
    with sentence_graph.GraphInput(con, 0, odd_rows.slice(0, 0)) as graph:
        same(graph, ("a", "b", "c"), ["w", "x", "y"], ["train"])


def test_weighted_counts_are_the_audits_counts_and_sums_of_weights():
    """Weight 1: the audit's own counts, row-level families included, over batches that bring a label late;
    weight 2 doubles every count and n, but not the rows' effective size (Σw)²/Σw² (Kish): z* stays the plain one."""
    from refinery.core.features import FeatureConfig
    from refinery.core.weighted_counts import WeightedCounts
    from refinery.io.corpus import load
    from refinery.methods.audit.config import AuditConfig
    from refinery.core.table_audit import audit_table

    table = load([SNLI_DEV], PRESETS["snli"])[0].slice(0, 1500)
    table = table.take(np.argsort(table["label"].to_numpy(zero_copy_only=False), kind="stable"))  # a label per batch
    config = FeatureConfig(("unigram", "bigram", "length", "overlap", "null")).named(("premise", "hypothesis"))
    counts = WeightedCounts(None, config, 2)
    for batch in table.to_batches(400):
        counts.add(pa.Table.from_batches([batch]), None, np.full(batch.num_rows, 2.0))
    audit = audit_table(table, AuditConfig(features=config, min_count=1)).stats
    plain, doubled = counts.stats(0, audit.p0, 1), counts.stats(1, audit.p0, 1)
    assert plain.labels == audit.labels and abs(plain.threshold - audit.threshold) < 1e-12
    expected = dict(zip(audit.features.to_pylist(), audit.counts.tolist()))
    assert dict(zip(plain.features.to_pylist(), plain.counts.tolist())) == expected
    assert "hypo-len<5" in expected and "lex-overlap>0.8" in expected
    np.testing.assert_array_equal(doubled.counts, 2 * plain.counts)
    np.testing.assert_array_equal(doubled.n, 2 * plain.n)
    np.testing.assert_allclose(doubled.effective_n, plain.n)   # equal weights: n_eff is the rows
    np.testing.assert_allclose(doubled.z, plain.z)             # the same p̂ on the same rows, not √2 × z*
    assert counts.label_totals(1) == {l: 2.0 * n for l, n in counts.label_totals(0).items()}


def test_a_replayed_count_is_the_count_of_the_rows_added_again():
    """A restricted counter fed the token ids a ``replayable`` counter kept on disk (``replay``: no text read or
    tokenized again) counts exactly what it counts with the rows added again: every feature's sums under three
    weightings, over slices of several batches with a label coming late; row-level families are refused."""
    from refinery.core.features import FeatureConfig
    from refinery.core.weighted_counts import SLICE_ROWS, WeightedCounts
    from refinery.io.corpus import load

    table = load([SNLI_DEV], PRESETS["snli"])[0]
    table = table.take(np.argsort(table["label"].to_numpy(zero_copy_only=False), kind="stable"))  # a label per batch
    config = FeatureConfig().named(("premise", "hypothesis"))
    rng = np.random.default_rng(0)
    weights = [rng.gamma(2.0, 1.0, table.num_rows), np.where(rng.random(table.num_rows) < 0.5, 0.5, 3.0)]
    first = WeightedCounts(None, config, 1, masks=1, replayable=True)
    for batch in table.to_batches(3_000):   # batches under a slice and one cut into slices
        first.add(pa.Table.from_batches([batch]), None)
    first.add(table.slice(0, 0), None)
    tested = first.tested((0,), 2)   # the features in ≥ 2 rows, found sorted: what restricted finds in place
    again, replayed = (first.restricted(3, masks=1, min_rows=2) for _ in range(2))
    for batch in table.to_batches(3_000):
        rows = slice(again.rows, again.rows + batch.num_rows)
        again.add(pa.Table.from_batches([batch]), None, *(w[rows] for w in weights))
    seen = []
    replayed.replay(first.tokens, None, *weights, done=seen.append)
    assert sum(seen) == table.num_rows and first.tokens.lengths("labels") == seen and len(seen) > 1
    assert SLICE_ROWS > 3_000
    for weighting in range(3):
        for squares in (False, True):
            (names, sums), (replayed_names, replayed_sums) = (c.flush().matrix(weighting, squares=squares)
                                                              for c in (again, replayed))
            assert names.equals(replayed_names) and np.array_equal(sums, replayed_sums)
    assert len(tested) > 1_000 and again.names().equals(first.names(tested))
    assert again.label_totals(2) == replayed.label_totals(2)
    some = np.sort(np.random.default_rng(1).choice(len(tested), 300, replace=False))   # a second look at a few
    few = replayed.restricted(2, masks=1, rows=some).replay(first.tokens, None, weights[1]).flush()
    assert few.names().equals(replayed.names(some)) and few.label_totals(1) == replayed.label_totals(2)
    for weighting, theirs in ((0, 0), (1, 2)):
        assert np.array_equal(few.matrix(weighting)[1], replayed.matrix(theirs, rows=some)[1])
        assert np.array_equal(few.matrix(weighting, squares=True)[1], replayed.matrix(theirs, some, squares=True)[1])
    with_rows = WeightedCounts(None, FeatureConfig(("unigram", "length")), 1, replayable=True)
    with_rows.add(table.slice(0, 100), None)
    with pytest.raises(RuntimeError, match="row-level families"):
        WeightedCounts(None, FeatureConfig(("unigram", "length")), 1).replay(with_rows.tokens, None)


def test_rows_counted_beside_the_weights_fit_are_the_rows_counted_in_order_and_a_stop_or_a_failure_says_so():
    """``count_rows`` run ``Beside`` the caller (a thread and a DuckDB cursor of its own) while the connection runs
    other queries, as the weights' fit does: the same counts and kept token ids as the rows counted in the caller's
    thread, in the same order; ``stop`` ends it and ``result`` then says so; an error in its query is raised by
    ``result`` in the caller's thread."""
    import functools

    from refinery.core.features import FeatureConfig
    from refinery.core.weighted_counts import WeightedCounts
    from refinery.methods.weights.leakage_neutral import Beside, count_rows

    config = FeatureConfig().named(("premise", "hypothesis"))
    sql = "SELECT * EXCLUDE (row_id, split) FROM rows"
    with sentence_graph.corpus_features({"dev": SNLI_DEV}, PRESETS["snli"]) as graph:
        here = WeightedCounts(None, config, 1, masks=1, replayable=True)
        counting = Beside(functools.partial(count_rows, graph, sql,
                                            WeightedCounts(None, config, 1, masks=1, replayable=True)), "a count")
        for _ in range(3):   # the connection busy meanwhile
            assert len(graph.codes("label", graph.labels())) == graph.num_rows
        for batch in graph.batches(sql):
            here.add(pa.Table.from_batches([batch]), None)
        behind = counting.result()
        (names, sums), (their_names, their_sums) = (c.flush().matrix(0) for c in (behind, here))
        assert names.equals(their_names) and np.array_equal(sums, their_sums) and behind.rows == 9_842
        slices = range(len(here.tokens.lengths("labels")))
        assert [behind.tokens.read("text_b:ids", k).tolist() for k in slices] \
            == [here.tokens.read("text_b:ids", k).tolist() for k in slices]
        cut = WeightedCounts(None, config, 1, masks=1)
        stopped = Beside(functools.partial(count_rows, graph, sql, cut, batch_rows=1), "a count")   # a row at a time
        stopped.stop()
        with pytest.raises(RuntimeError, match="a count was stopped"):
            stopped.result()
        assert cut.rows < 9_842
        failed = Beside(functools.partial(count_rows, graph, "SELECT * FROM no_such_table", cut), "a count")
        with pytest.raises(duckdb.CatalogException, match="no_such_table"):
            failed.result()


@pytest.fixture(scope="module")
def pooled(tmp_path_factory):
    """A corpus whose premises come from a pool whose popularity depends on the label (no planted words): the
    pooled premises' words are the shortcuts, and the sentence graph sees them."""
    root = tmp_path_factory.mktemp("pooled")
    write_synth(SynthSpec(rows=6_000, premise_pool=400, planted={}, seed=7), str(root / "corpus"))
    return root


def test_weights_verdict_credits_weights_that_neutralize_the_leak_and_catches_heavy_rows(pooled):
    """Weights capped at 3 neutralize the pooled premises' words: the verdict holds and most significant features
    of the input are no longer significant. Uncapped (--clip none), a few rows weigh 100× the mean; z* is tested at
    each feature's effective size (Σw)²/Σw², so a heavy row is one row and makes no shortcut (on Σw it made its
    words features of hundreds of rows): the verdict holds, and the low effective sample size is the warning, with
    the --clip that lifts it."""
    run_cli("weights", pooled / "corpus", "--out", pooled / "capped", "--folds", "5", "--trees", "50", "--clip", "3")
    capped = json.loads((pooled / "capped" / "report" / "report.json").read_text())["verdict"]
    assert capped["ok"], capped["warnings"]
    assert capped["fixed_total"] > capped["significant_before"] / 2 and not capped["worsened_total"]
    assert capped["max_z"]["entailment"]["after"] < capped["max_z"]["entailment"]["before"] / 2

    proc = run_cli("weights", pooled / "corpus", "--out", pooled / "heavy", "--folds", "5", "--trees", "50",
                   "--clip", "none")   # the paper's letter
    report = json.loads((pooled / "heavy" / "report" / "report.json").read_text())
    verdict = report["verdict"]
    assert verdict["ok"] and not verdict["worsened_total"] and not report["clips_checked"]
    assert report["diagnostics"]["max"] > 50 and report["low_ess_warning"]
    assert "verdict ok" in proc.stdout and "effective sample size" in proc.stderr and "--clip 10 gives" in proc.stderr
    page = (pooled / "heavy" / "report" / "report.html").read_text()
    assert "Verdict: the shortcuts before and after" in page and "rows per weight" in page
    assert "effective sample size" in page and not re.search(r"\bnan\b", page, re.IGNORECASE)
    assert report["rows"] == 6_000 and report["histogram"]["rows"] and sum(report["histogram"]["rows"]) == 6_000


def test_an_audit_of_weighted_rows_says_it_counts_their_weights(tmp_path):
    """`refinery audit` of a weights output counts the weight column and says so; --unweighted counts rows and says
    that; an input without weights gets no note."""
    small = tmp_path / "dev.jsonl"
    small.write_text("".join(open(SNLI_DEV).readlines()[:600]))
    run_cli("weights", "--input", f"dev={small}", "--preset", "snli", "--folds", 2, "--trees", 5, "--out", tmp_path / "w")
    said = run_cli("audit", tmp_path / "w" / "corpus", "--out", tmp_path / "a").stdout
    assert "note: counts the 'weight' column" in said, said
    notes = json.loads((tmp_path / "a" / "report" / "report.json").read_text())["notes"]
    assert len(notes) == 1 and "the audit the `refinery weights` verdict makes of these rows" in notes[0]
    rows = run_cli("audit", tmp_path / "w" / "corpus", "--unweighted", "--out", tmp_path / "u").stdout
    assert "note: counts rows (--unweighted)" in rows
    assert "note:" not in run_cli("audit", small, "--preset", "snli", "--out", tmp_path / "b").stdout