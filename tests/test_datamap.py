"""Data maps (Swayamdipta et al. 2020): the task model's training dynamics on every row, the region a filter keeps,
the map, a resume after a kill, and Ray's equal decisions."""
import json

import numpy as np
import pyarrow as pa
import pytest
from click.testing import CliRunner
from conftest import SNLI_DEV, assert_kept_audit_is_a_fresh_one, assert_verdict_is_two_audits, fresh_audit, run_cli

from refinery.io.corpus import Corpus

COLUMNS = ("datamap_confidence", "datamap_variability", "datamap_correctness", "datamap_forgetfulness")


@pytest.fixture(scope="module")
def snli_map(tmp_path_factory):
    """The data map of SNLI dev (9,842 rows) with its defaults: the most ambiguous third kept."""
    root = tmp_path_factory.mktemp("datamap")
    printed = run_cli("datamap", SNLI_DEV, "--preset", "snli", "--out", root / "dm").stdout
    return root, printed


def test_the_map_is_the_dynamics_of_learning_and_the_kept_third_is_the_most_ambiguous(snli_map):
    """The model learns the rows over the epochs (training accuracy rises); every row carries its confidence,
    variability (≤ ½, a probability's std), correctness and forgetfulness; kept/ holds exactly the third highest in
    variability; the verdict is two fresh audits; the report draws the map."""
    root, printed = snli_map
    report = json.loads((root / "dm" / "report" / "report.json").read_text())
    accuracy = [e["accuracy"] for e in report["epochs"]]
    assert len(accuracy) == 5 and accuracy == sorted(accuracy) and accuracy[-1] - accuracy[0] > 0.1
    kept, dropped = (Corpus.open(str(root / "dm" / part)).read() for part in ("kept", "rejected"))
    assert kept.num_rows == round(0.33 * 9_842) and kept.num_rows + dropped.num_rows == 9_842
    both = pa.concat_tables([kept.select(COLUMNS), dropped.select(COLUMNS)])
    sigma = both["datamap_variability"].to_numpy()
    assert 0 <= sigma.min() and sigma.max() <= 0.5 and np.quantile(sigma, 0.75) > 0.1   # a map, not a point
    assert 0 <= both["datamap_correctness"].to_numpy().min() <= both["datamap_correctness"].to_numpy().max() <= 1
    assert kept["datamap_variability"].to_numpy().min() >= dropped["datamap_variability"].to_numpy().max()
    assert "not among the 33% ambiguous rows" in report["reasons"] and "rows in 9,842 = " in printed
    before, after = fresh_audit(SNLI_DEV, root / "a_in", "--preset", "snli"), fresh_audit(root / "dm" / "kept",
                                                                                      root / "a_out")
    assert_verdict_is_two_audits(report["verdict"], before, after)
    assert_kept_audit_is_a_fresh_one(root / "dm" / "kept", root / "a_out")
    page = (root / "dm" / "report" / "report.html").read_text()
    assert "Data map (Swayamdipta et al. 2020)" in page and "kept: ambiguous 33%" in page


def test_each_region_and_a_random_subset_of_the_same_size(snli_map, tmp_path):
    """hard-to-learn: the lowest confidence; easy-to-learn: the highest; random: the same size, seeded; one training
    gives every selection the same dynamics."""
    root, _ = snli_map
    confidence = {}
    for keep in ("hard", "easy", "random"):
        run_cli("datamap", SNLI_DEV, "--preset", "snli", "--keep", keep, "--out", tmp_path / keep)
        kept, dropped = (Corpus.open(str(tmp_path / keep / part)).read() for part in ("kept", "rejected"))
        confidence[keep] = (kept["datamap_confidence"].to_numpy(), dropped["datamap_confidence"].to_numpy())
        assert kept.num_rows == round(0.33 * 9_842)
    assert confidence["hard"][0].max() <= confidence["hard"][1].min()
    assert confidence["easy"][0].min() >= confidence["easy"][1].max()
    assert confidence["hard"][0].mean() < confidence["random"][0].mean() < confidence["easy"][0].mean()
    ambiguous = Corpus.open(str(root / "dm" / "kept")).read()
    by_id = dict(zip(*(Corpus.open(str(tmp_path / "random" / p)).read()[c].to_pylist()
                       for p, c in (("kept", "id"), ("kept", "datamap_confidence")))))
    same = [by_id[i] for i in ambiguous["id"].to_pylist() if i in by_id]
    assert same and np.allclose(same, [c for i, c in zip(ambiguous["id"].to_pylist(),
                                                        ambiguous["datamap_confidence"].to_pylist()) if i in by_id])


def test_a_killed_data_map_resumes_after_its_last_epoch(snli_map, tmp_path, monkeypatch):
    from refinery.cli.main import main
    from refinery.io.checkpoints import Checkpoints

    root, _ = snli_map
    put, calls = Checkpoints.put, []

    def killed_in_epoch_three(self, name, table):
        put(self, name, table)
        calls.append(name)
        if name == "model-0002":
            raise KeyboardInterrupt

    args = ["datamap", SNLI_DEV, "--preset", "snli", "--out", str(tmp_path / "dm")]
    with monkeypatch.context() as m:
        m.setattr(Checkpoints, "put", killed_in_epoch_three)
        assert CliRunner().invoke(main, args).exit_code != 0
    assert calls == ["epoch-0001", "model-0001", "epoch-0002", "model-0002"]
    again = CliRunner().invoke(main, args)
    assert again.exit_code == 0, again.output
    assert "resumed after epoch 2" in again.output
    kept = [Corpus.open(str(r / "dm" / "kept")).read() for r in (root, tmp_path)]
    assert kept[0]["id"].equals(kept[1]["id"])
    assert np.allclose(kept[0]["datamap_variability"].to_numpy(), kept[1]["datamap_variability"].to_numpy())


def test_a_data_map_on_ray_keeps_the_rows_the_local_engine_keeps(snli_map, tmp_path):
    root, _ = snli_map
    run_cli("datamap", SNLI_DEV, "--preset", "snli", "--engine", "ray", "--out", tmp_path / "ray")
    local, ray = (Corpus.open(str(p / "kept")).read() for p in (root / "dm", tmp_path / "ray"))
    assert local["id"].equals(ray["id"])


def test_a_data_map_of_a_fine_tuned_encoder_and_of_frozen_embeddings(snli_dev_head, tmp_path, monkeypatch):
    """The transformer backend fine-tunes MiniLM epoch by epoch and records each row's p(gold) after each (200 rows, 2
    epochs); the embeddings backend trains a softmax head on MiniLM's cached sentence embeddings."""
    from refinery.cli.main import main

    monkeypatch.setenv("REFINERY_CACHE", str(tmp_path / "cache"))
    small = tmp_path / "small.jsonl"
    small.write_text("".join(snli_dev_head.read_text().splitlines(keepends=True)[:200]))
    for backend in ("transformer", "embeddings"):
        result = CliRunner().invoke(main, ["datamap", str(small), "--preset", "snli", "--backend", backend,
                                           "--epochs", "2", "--out", str(tmp_path / backend)])
        assert result.exit_code == 0, result.output
        report = json.loads((tmp_path / backend / "report" / "report.json").read_text())
        assert [e["epoch"] for e in report["epochs"]] == [1, 2] and report["kept"] == round(0.33 * 200)
        assert all(0 < e["mean_p_gold"] < 1 for e in report["epochs"]) and backend in report["config"]["backend"]
        kept = Corpus.open(str(tmp_path / backend / "kept")).read()
        assert kept["datamap_variability"].to_numpy().min() >= 0 and "MiniLM" in report["task_model"]
    assert report["embeddings"]["embedded"] > 200 and report["embeddings"]["cached"] == 0


def _snli_pairs():
    import pyarrow.json as pj

    table = pj.read_json(SNLI_DEV)
    table = table.rename_columns([{"sentence1": "text_a", "sentence2": "text_b", "gold_label": "label"}.get(n, n)
                                  for n in table.column_names])
    return table.filter(pa.compute.field("label") != "-")


def test_the_compiled_sgd_epoch_takes_the_numpy_steps_of_its_equation():
    """The data map's task model on SNLI dev's pairs (TF-IDF hashed n-grams, normalized in place as they are laid
    out on disk): the compiled epoch (float32 sums in the rows' order, NumPy's softmax) over the rows laid out
    on disk leaves W bit for bit where minibatch SGD written with SciPy's products does, W ← W − (η/|B|) Σ_{i∈B}
    x_iᵀ (softmax(x_i W) − e_{y_i}), in one permutation of every row an epoch (one block) or block by block (three),
    and scores every row as SciPy's product does."""
    import scipy.sparse as sp

    from refinery.methods.datamap.learners import BATCH, SoftmaxHead, softmax
    from refinery.models.ngram import HashedCorpus, label_codes, smooth_idf, sublinear_tf, tf_idf

    table = _snli_pairs()
    X = sp.vstack([sublinear_tf(table.slice(s, 1000), "pair", (1, 2), 2 ** 16)
                   for s in range(0, table.num_rows, 1000)], format="csr")
    idf = smooth_idf(np.bincount(X.indices, minlength=X.shape[1]), X.shape[0])   # rows hold a column once
    expected_features = tf_idf(X, idf)
    features = tf_idf(X, idf, in_place=True)
    np.testing.assert_array_equal(features.data, expected_features.data)

    y, labels = label_codes([table["label"].cast("string")])
    for block_rows in (65_536, 4_000):   # one block: one permutation of every row an epoch; three: block by block
        corpus = HashedCorpus([table], 0, "pair", block_rows, bits=16, by_frequency=False, unit_tf_idf=True)
        assert len(corpus.rows) == (1 if block_rows == 65_536 else 3)
        head = SoftmaxHead(corpus.rows, y, len(labels), 100.0, 0, corpus.order)
        head.train_epoch(1)
        head.train_epoch(2)
        W = np.zeros_like(head.W)
        for epoch in (1, 2):
            rng = np.random.default_rng([0, epoch])
            runs = [rng.permutation(len(y))] if len(corpus.rows) == 1 else []
            for b in (rng.permutation(len(corpus.rows)) if len(corpus.rows) > 1 else []):
                start, stop = corpus.rows.span(b)
                local = np.arange(stop - start)
                rng.shuffle(local)
                runs.append(corpus.order[start + local])   # the input's rows of block b, in the epoch's order
            for order in runs:
                for start in range(0, len(order), BATCH):
                    rows = order[start:start + BATCH]
                    batch = features[rows]
                    used, local = np.unique(batch.indices, return_inverse=True)
                    compact = sp.csr_matrix((batch.data, local.astype(np.int32), batch.indptr),
                                            shape=(len(rows), len(used)))
                    residual = softmax(np.asarray(compact @ W[used]))
                    residual[np.arange(len(rows)), y[rows]] -= 1.0
                    W[used] -= (100.0 / len(rows)) * np.asarray(compact.T @ residual, np.float32)
        np.testing.assert_array_equal(head.W, W)
        p_gold, right = head.gold(y)
        proba = softmax(np.asarray(features @ W))
        np.testing.assert_array_equal(p_gold, proba[np.arange(len(y)), y].astype(np.float32))
        np.testing.assert_array_equal(right, proba.argmax(axis=1) == y)
        assert right.mean() > 0.7 and p_gold.mean() > 0.5   # it learns the rows it trains on
