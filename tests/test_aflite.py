"""AFLite (Le Bras et al. 2020): the rows a cheap linear model predicts too easily, removed iteration by iteration;
its effect measured by the audit a user runs next, its resume after a kill, and Ray's equal decisions."""
import json

import numpy as np
import pyarrow.compute as pc
import pytest
from click.testing import CliRunner
from conftest import SNLI_DEV, assert_kept_audit_is_a_fresh_one, assert_verdict_is_two_audits, fresh_audit, run_cli

from refinery.io.corpus import Corpus


@pytest.fixture(scope="module")
def snli_aflite(tmp_path_factory):
    """AFLite with its defaults on SNLI dev (9,842 rows), and the audits of its input and its kept rows."""
    root = tmp_path_factory.mktemp("aflite")
    printed = run_cli("aflite", SNLI_DEV, "--preset", "snli", "--out", root / "af").stdout
    return root, printed


def test_aflite_removes_what_a_hypothesis_only_model_predicts(snli_aflite):
    """Each iteration's held-out models predict fewer of the rows left, down to chance (1/3); the audit of the kept
    rows finds the hypothesis shortcuts under the threshold, no label is lost, every row is accounted for."""
    root, printed = snli_aflite
    report = json.loads((root / "af" / "report" / "report.json").read_text())
    means = [r["mean_predictability"] for r in report["iterations"]]
    assert len(means) >= 3 and means[0] > 0.5 and means[-1] < 0.36 and means == sorted(means, reverse=True)
    assert "rows in 9,842 = " in printed and report["kept"] + report["filtered_out"] == 9_842
    rejected = Corpus.open(str(root / "af" / "rejected")).read()
    assert pc.min(rejected["predictability"]).as_py() >= 0.75 and pc.min(rejected["aflite_iteration"]).as_py() == 1
    assert rejected.num_rows == report["filtered_out"] and "predictability ≥ tau 0.75" in report["reasons"]
    before, after = fresh_audit(SNLI_DEV, root / "a_in", "--preset", "snli"), fresh_audit(root / "af" / "kept",
                                                                                      root / "a_out")
    assert_verdict_is_two_audits(report["verdict"], before, after)
    assert_kept_audit_is_a_fresh_one(root / "af" / "kept", root / "a_out")
    assert sum(after["significant"].values()) < sum(before["significant"].values()) / 10
    assert max(after["max_z"].values()) < max(before["max_z"].values()) / 2
    shares = [n / sum(after["labels"].values()) for n in after["labels"].values()]
    assert report["verdict"]["ok"] and max(shares) < 0.36 and min(shares) > 0.30


@pytest.mark.parametrize("killed", ["after two iterations", "after its last iteration"])
def test_a_killed_aflite_resumes_and_reports_the_whole_run(snli_aflite, tmp_path, monkeypatch, killed):
    """Killed after its second iteration (or its last, before a row was written), the rerun reads them back from the
    checkpoints, goes on from there (or nowhere), keeps the rows the uninterrupted run kept with their
    predictability, and its report is the whole run's (every iteration, the rows removed, why it stopped), saying
    that it resumed, in report.json and on the page."""
    import html

    from refinery.cli.main import main
    from refinery.io.checkpoints import Checkpoints

    root, _ = snli_aflite
    straight = json.loads((root / "af" / "report" / "report.json").read_text())
    at = 4 if killed == "after two iterations" else 2 * len(straight["iterations"])   # per iteration: rows, scores
    put, calls = Checkpoints.put, []

    def killed_at(self, name, table):
        put(self, name, table)
        calls.append(name)
        if len(calls) == at:
            raise KeyboardInterrupt

    args = ["aflite", SNLI_DEV, "--preset", "snli", "--out", str(tmp_path / "af")]
    with monkeypatch.context() as m:
        m.setattr(Checkpoints, "put", killed_at)
        assert CliRunner().invoke(main, args).exit_code != 0
    assert not (tmp_path / "af" / "_SUCCESS").exists() and calls[:2] == ["iter-0001", "scores-0001"]
    again = CliRunner().invoke(main, args)
    assert again.exit_code == 0, again.output
    assert f"resumed after iteration {at // 2}" in again.output
    report = json.loads((tmp_path / "af" / "report" / "report.json").read_text())
    assert report["iterations"] == straight["iterations"] and report["stopped"] == straight["stopped"]
    rejected = Corpus.open(str(tmp_path / "af" / "rejected")).read()
    assert report["filtered_out"] == straight["filtered_out"] == rejected.num_rows == sum(
        r["removed"] for r in report["iterations"])
    assert report["resumed"] == f"resumed after iteration {at // 2} of the interrupted run before"
    assert "after a kill, and this report is the whole run" in html.unescape(
        (tmp_path / "af" / "report" / "report.html").read_text())
    kept = [Corpus.open(str(r / "af" / "kept")).read(["id", "predictability"]) for r in (root, tmp_path)]
    assert kept[0].equals(kept[1])
    assert not (tmp_path / "af" / "_checkpoints").exists()   # removed once the rows are published


def test_aflite_on_ray_keeps_the_rows_the_local_engine_keeps(snli_aflite, tmp_path, monkeypatch, ray_local):
    """On Ray the loop runs in a task of its own (``prepare_as_task``), never in the driver: the driver's class is
    made to fail its ``prepare``, while the worker's (imported there) runs it."""
    import refinery as rf
    from refinery.methods.aflite.stage import AFLiteStage

    def in_the_driver(self, source, out):
        raise AssertionError("AFLite's loop ran in the driver")

    root, _ = snli_aflite
    monkeypatch.setattr(AFLiteStage, "prepare", in_the_driver)
    rf.aflite(SNLI_DEV, preset="snli", engine="ray", out=str(tmp_path / "ray"))
    local, ray = (Corpus.open(str(p / "kept")).read() for p in (root / "af", tmp_path / "ray"))
    assert local["id"].equals(ray["id"]) and np.allclose(local["predictability"].to_numpy(),
                                                         ray["predictability"].to_numpy())


def _aflite(corpus, out, *options):
    """``refinery aflite`` with sentence embeddings, in this process: its report.json."""
    from refinery.cli.main import main

    result = CliRunner().invoke(main, ["aflite", str(corpus), "--preset", "snli", "--representation", "embeddings",
                                       "--out", str(out), *map(str, options)])
    assert result.exit_code == 0, result.output
    return json.loads((out / "report" / "report.json").read_text())


def test_aflite_on_embeddings_embeds_each_text_once_and_reads_it_back_from_the_cache(snli_dev_head, tmp_path,
                                                                                      monkeypatch):
    """With MiniLM's sentence embeddings as Φ and logistic regression, AFLite removes rows; a rerun, and a run with
    another τ, embed nothing (every text read from the content cache) and the rerun keeps the same rows."""
    monkeypatch.setenv("REFINERY_CACHE", str(tmp_path / "cache"))
    first = _aflite(snli_dev_head, tmp_path / "af1", "--inputs", "pair", "--partitions", "16")
    assert first["embeddings"]["embedded"] > 300 and first["embeddings"]["cached"] == 0   # premises and hypotheses
    assert first["filtered_out"] > 0 and first["iterations"][0]["mean_predictability"] > 0.4
    assert "logistic regression" in first["representation"]
    again = _aflite(snli_dev_head, tmp_path / "af2", "--inputs", "pair", "--partitions", "16")
    assert again["embeddings"] == {**first["embeddings"], "cached": first["embeddings"]["embedded"], "embedded": 0}
    ids = [Corpus.open(str(tmp_path / f / "kept")).read()["id"].to_pylist() for f in ("af1", "af2")]
    assert ids[0] == ids[1]
    other_tau = _aflite(snli_dev_head, tmp_path / "af3", "--inputs", "pair", "--partitions", "16", "--tau", "0.6")
    assert other_tau["embeddings"]["embedded"] == 0
    assert list((tmp_path / "cache" / "embeddings").rglob("*.arrow")) and not list(
        (tmp_path / "cache" / "embeddings").rglob("*.tmp"))


def _snli_table(rows: int | None = None):
    """SNLI dev's labeled pairs (the first ``rows``) in refinery's columns."""
    import pyarrow.json as pj

    table = pj.read_json(SNLI_DEV)
    table = table.rename_columns([{"sentence1": "text_a", "sentence2": "text_b", "gold_label": "label"}.get(n, n)
                                  for n in table.column_names])
    return table.filter(pc.field("label") != "-").slice(0, rows)


def _snli_hypotheses(rows: int | None = None):
    """SNLI dev's hypotheses as AFLite's Φ (hashed 1-2-grams, sublinear tf, 2^18 columns) and label codes."""
    from refinery.models.ngram import label_codes, sublinear_tf

    table = _snli_table(rows)
    y, labels = label_codes([table["label"].cast("string")])
    return sublinear_tf(table, "hypothesis", (1, 2), 2 ** 18), y, labels


def test_the_compiled_naive_bayes_predicts_what_the_sparse_products_of_its_equation_do():
    """The m models of an iteration fit and scored by the compiled kernels (reading Φ's rows left from disk a block of
    rows at a time, a block of partitions at a time, the next block drawn meanwhile) give each row the same right and held-out counts as
    the equation's direct products, Φᵀ Z for N_{l,d} and Φ log θ for the scores, on S = a random 70% of SNLI dev."""
    from refinery.methods.aflite.naive_bayes import naive_bayes_predictability
    from refinery.methods.aflite.partitions import draw_partitions
    from refinery.models.ngram import HashedCorpus

    X, y, labels = _snli_hypotheses()
    alive = np.flatnonzero(np.random.default_rng(1).random(X.shape[0]) < 0.7)
    corpus = HashedCorpus([_snli_table()], None, "hypothesis", 1000, bits=18, by_frequency=False)   # 10 blocks
    assert len(corpus.rows) == 10 and np.array_equal(corpus.y, y)
    right, held = naive_bayes_predictability(corpus.rows, alive, y, len(labels),
                                             draw_partitions(len(alive), 0.5, 20, np.random.default_rng(5)))
    S, codes, C = X[alive], y[alive], len(labels)
    expected_right, expected_held = np.zeros(len(alive), np.int32), np.zeros(len(alive), np.int32)
    rng = np.random.default_rng(5)
    for _ in range(20):
        train = np.zeros(len(alive), bool)
        train[rng.permutation(len(alive))[:round(0.5 * len(alive))]] = True
        Z = np.zeros((len(alive), C), np.float32)
        Z[np.flatnonzero(train), codes[train]] = 1.0
        counts = np.asarray(S.T.tocsr() @ Z, np.float64)                                  # N_{l,d}
        log_theta = np.log(counts + 1.0) - np.log(counts.sum(axis=0) + counts.shape[0])[None, :]
        priors = Z.sum(axis=0)
        log_prior = np.log(np.maximum(priors, 1e-12) / priors.sum()).astype(np.float32)
        predicted = (np.asarray(S @ log_theta.astype(np.float32)) + log_prior).argmax(axis=1)
        expected_right += (~train & (predicted == codes)).astype(np.int32)
        expected_held += (~train).astype(np.int32)
    assert held.sum() > 0.4 * 20 * len(alive)
    np.testing.assert_array_equal(held, expected_held)
    np.testing.assert_array_equal(right, expected_right)
    assert 0.4 < right.sum() / held.sum() < 0.9   # a hypothesis-only model: better than chance, far from perfect


@pytest.mark.parametrize("rows", [2, 3, 17, 1000, 250_001])
def test_each_partition_is_the_first_t_of_numpys_permutation_and_leaves_the_generator_as_it_does(rows):
    """T_j drawn by replaying NumPy's Fisher–Yates draws only down to t is the set ``rng.permutation(rows)[:t]``
    is, for each of the partitions in turn, and the generator's next draws are the same after it."""
    from refinery.methods.aflite.partitions import draw_partitions

    ours, numpys = np.random.default_rng([3, 7]), np.random.default_rng([3, 7])
    t = min(max(1, round(0.3 * rows)), rows - 1)
    for positions in draw_partitions(rows, 0.3, 5, ours):
        np.testing.assert_array_equal(np.sort(positions), np.sort(numpys.permutation(rows)[:t]))
    assert ours.integers(0, 2 ** 40, 9).tolist() == numpys.integers(0, 2 ** 40, 9).tolist()
    assert ours.random() == numpys.random()
