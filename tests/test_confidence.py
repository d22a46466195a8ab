"""The confidence stage: its cross-fitted n-gram model at streaming speed (hashed n-grams from the compiled
scanner, TF-IDF as scikit-learn computes it, averaged SGD as good as L-BFGS on SNLI), and a transformer's
cross-fitting that resumes from its finished folds after a kill."""
import html
import json
import os

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pytest
from conftest import SNLI_DEV, killed_when, run_cli
from sklearn.feature_extraction.text import TfidfTransformer

from refinery.core.features import TokenizerOptions
from refinery.core.hashed_ngrams import ngram_counts
from refinery.io.checkpoints import CHECKPOINTS
from refinery.io.corpus import Corpus, load
from refinery.io.corpus_writer import write_table
from refinery.io.schema import PRESETS
from refinery.models.base import cross_fit_proba
from refinery.models.ngram import NGramClassifier, cross_fit_sgd, smooth_idf, sublinear_tf, tf_idf


@pytest.fixture(scope="module")
def snli_dev():
    return load([SNLI_DEV], PRESETS["snli"])[0]


def test_ngram_counts_count_the_reference_tokenizers_unigrams_and_bigrams(snli_dev):
    texts = pa.concat_arrays([snli_dev["text_b"].combine_chunks(),
                              pa.array(["Un café à Paris, naïve!", "", None, "東京 タワー"])])
    counts = ngram_counts(texts, len(texts), 2 ** 20)
    tokens = np.array([len(t) for t in TokenizerOptions().tokenize(texts).to_pylist()])
    assert np.array_equal(np.asarray(counts.sum(axis=1)).ravel(), tokens + np.maximum(tokens - 1, 0))
    assert tokens[-4] == 7                                              # un café à paris , naïve !
    # a row's columns do not depend on the batch it came in (ASCII scanner and Arrow tokenizer agree)
    alone = ngram_counts(pa.array(["a man, a plan."]), 1, 2 ** 20)
    mixed = ngram_counts(pa.array(["a man, a plan.", "ünïcode row"]), 2, 2 ** 20)
    assert (alone[0] != mixed[0]).nnz == 0


def test_tf_idf_is_scikit_learns_sublinear_smooth_l2_tf_idf(snli_dev):
    tf = sublinear_tf(snli_dev)
    counts = tf.copy()
    counts.data = np.exp(counts.data - 1)
    expected = TfidfTransformer(sublinear_tf=True).fit_transform(counts)
    got = tf_idf(tf, smooth_idf(np.bincount(tf.indices, minlength=tf.shape[1]), tf.shape[0]))
    assert abs(got - expected).max() < 1e-5


def test_sgd_cross_fit_is_as_good_as_lbfgs_out_of_fold(snli_dev):
    """Held-out log-loss and accuracy of the averaged-SGD fold models against L-BFGS's, same folds."""
    y = snli_dev["label"].to_numpy(zero_copy_only=False)

    def scores(proba, classes):
        codes = np.searchsorted(np.array(classes, dtype=object), y)
        return (-np.log(np.clip(proba[np.arange(len(y)), codes], 1e-15, 1)).mean(),
                (proba.argmax(axis=1) == codes).mean())

    sgd = cross_fit_sgd(snli_dev, 5, 0)
    sgd_loss, sgd_acc = scores(*sgd[:2])
    lbfgs_loss, lbfgs_acc = scores(*cross_fit_proba(lambda: NGramClassifier(), snli_dev, 5, 0))
    assert sgd_loss <= lbfgs_loss + 0.005 and sgd_acc >= lbfgs_acc - 0.005
    assert sgd_acc > 0.37                                  # above the 1/3 of three balanced labels (±0.005 by chance)
    # threads, and batches of any size, change nothing: rows are hashed alike and blocks drawn by position
    batches = [snli_dev.slice(s, 1000) for s in range(0, snli_dev.num_rows, 1000)]
    assert np.array_equal(sgd[0], cross_fit_sgd(batches, 5, 0)[0])


def test_killed_transformer_confidence_resumes_from_its_finished_folds(tmp_path):
    """kill -9 once a fold's scores are checkpointed, run again: the same scores as an uninterrupted run."""
    data = tmp_path / "snli.jsonl"
    with open(SNLI_DEV) as fh:
        data.write_text("".join(fh.readline() for _ in range(150)))
    args = ["confidence", str(data), "--preset", "snli", "--model", "transformer", "--folds", "3", "--tau", "0.3"]
    killed = tmp_path / "killed"
    finished = len(killed_when(args, killed, f"{CHECKPOINTS}/confidence/fold-*.parquet"))
    assert finished < 3
    assert f"resumed: {finished} of 3 folds" in run_cli(*args, "--out", killed).stdout
    assert not (killed / CHECKPOINTS).exists()                        # gone once the output is published
    run_cli(*args, "--out", tmp_path / "straight")

    def scores(out):
        parts = [Corpus.open(str(out / part)).read() for part in ("kept", "rejected")]
        table = pa.concat_tables([p.select(["id", "confidence"]) for p in parts if p.num_rows]).sort_by("id")
        return table["id"].to_pylist(), table["confidence"].to_numpy()

    (ids, resumed), (straight_ids, straight) = scores(killed), scores(tmp_path / "straight")
    assert ids == straight_ids and len(ids) == 150
    np.testing.assert_allclose(resumed, straight, atol=1e-6)


def test_confidence_after_confidence_replaces_the_column(tmp_path):
    """A filter's added column replaces the one an earlier stage added (it failed: duplicate field names)."""
    lines = open(SNLI_DEV).read().splitlines()
    (tmp_path / "dev.jsonl").write_text("\n".join(lines[:600]) + "\n")
    (tmp_path / "p.yaml").write_text("input: {paths: [dev.jsonl], preset: snli}\nstages:\n"
                                     "  - confidence: {model: ngram, folds: 2, tau: 0.2}\n"
                                     "  - confidence: {model: ngram, folds: 2, tau: 0.3}\n")
    run_cli("run", tmp_path / "p.yaml", "--out", tmp_path / "o")
    kept = Corpus.open(str(tmp_path / "o" / "02-confidence" / "kept")).read()
    rejected = Corpus.open(str(tmp_path / "o" / "02-confidence" / "rejected")).read()
    assert kept.column_names.count("confidence") == 1 and rejected.column_names.count("confidence") == 1
    assert min(kept["confidence"].to_pylist()) > 0.3 >= max(rejected["confidence"].to_pylist())


@pytest.fixture(scope="module")
def scored_dev(tmp_path_factory, snli_dev):
    """SNLI dev with two probability columns: ``keeps_shortcut`` drops the rows that contradict its shortcuts
    (non-contradictions with sleeping/nobody), ``drops_shortcut`` drops the contradictions that carry them."""
    root = tmp_path_factory.mktemp("scored")
    hypothesis = pc.utf8_lower(snli_dev["text_b"])
    shortcut = pc.or_(pc.match_substring_regex(hypothesis, r"\bsleeping\b"),
                      pc.match_substring_regex(hypothesis, r"\bnobody\b")).to_numpy(zero_copy_only=False)
    contradiction = (snli_dev["label"].to_numpy(zero_copy_only=False) == "contradiction")
    table = snli_dev.append_column("keeps_shortcut", pa.array(np.where(shortcut & ~contradiction, 0.0, 1.0)))
    table = table.append_column("drops_shortcut", pa.array(np.where(shortcut & contradiction, 0.0, 1.0)))
    table = table.append_column("keeps_five", pa.array(np.where(np.arange(table.num_rows) < 5, 0.9, 0.0)))
    write_table(table, str(root / "dev"))
    return root


@pytest.mark.parametrize("column, ok", [("drops_shortcut", True), ("keeps_shortcut", False)])
def test_confidence_verdict_credits_a_filter_that_removes_a_shortcut_and_catches_one_that_feeds_it(
        scored_dev, column, ok):
    out = scored_dev / column
    proc = run_cli("confidence", scored_dev / "dev", "--proba-column", column, "--tau", "0.5", "--out", out)
    verdict = json.loads((out / "report" / "report.json").read_text())["verdict"]
    assert verdict["ok"] is ok, verdict["warnings"]
    page = (out / "report" / "report.html").read_text()
    assert "Verdict: the shortcuts before and after" in page and verdict["line"] in html.unescape(page)
    if ok:   # the contradictions' sleeping/nobody are no longer significant
        fixed = {c["feature"] for c in verdict["fixed"] if c["label"] == "contradiction"}
        assert {"sleeping@hypothesis", "nobody@hypothesis"} <= fixed and verdict["line"] in proc.stdout
    else:    # its counter-examples gone, sleeping rises (by ≥ 1 z*); the remedy names --tau
        assert "sleeping@hypothesis" in {c["feature"] for c in verdict["worsened"] if c["label"] == "contradiction"}
        assert "lower --tau (now 0.5)" in verdict["remedy"] and "remedy: a model is most confident" in proc.stderr


@pytest.mark.parametrize("tau, kept", [(0.5, 5), (0.95, 0)])
def test_confidence_keeping_too_few_rows_to_test_a_feature_warns_and_keeping_none_is_not_judged(scored_dev, tau, kept):
    """Five rows kept: no feature reaches min_count after (it raised IndexError), so none is judged; none kept: no verdict is claimed
    for an empty corpus (it said 'ok')."""
    out = scored_dev / f"few-{kept}"
    proc = run_cli("confidence", scored_dev / "dev", "--proba-column", "keeps_five", "--tau", tau, "--out", out)
    report = json.loads((out / "report" / "report.json").read_text())
    warning = (f"kept {kept / 9842:.1%} of the rows ({kept} of 9,842): p_M(label | text) has median 0.000 and "
               f"reaches 0.900, against tau {tau:g}; check the settings (tau {tau:g}, proba_column keeps_five)")
    assert report["kept"] == kept and f"warning: {warning}\n" in proc.stderr and report["warnings"] == [warning]
    assert html.escape(warning[1:], quote=False) in (out / "report" / "report.html").read_text()
    if kept:
        assert "verdict" not in report and "no verdict: the 5 kept rows are too few" in proc.stdout
    else:
        assert "verdict" not in report and "no verdict: nothing was kept" in proc.stdout
        assert "No verdict: nothing was kept" in (out / "report" / "report.html").read_text()
        empty = Corpus.open(str(out / "kept")).read()   # it lost every column but the canonical four
        assert empty.num_rows == 0 and {"keeps_five", "drops_shortcut", "confidence"} <= set(empty.column_names)


@pytest.mark.ray
def test_confidence_on_ray_decides_in_worker_processes_and_keeps_the_local_rows(scored_dev, ray_local):
    """Under the Ray engine a filter's ``decide`` runs in Ray's worker processes (each batch's process id recorded
    there), each input shard's kept and filtered-out rows are written by its worker (``part-u<shard>`` in the
    manifests), and the rows, their order, the report and the kept rows' audit are the local engine's: the rows'
    numbers carry across the input's four shards."""
    from refinery.io.read_options import ReadOptions
    from refinery.methods.confidence.config import ConfidenceConfig
    from refinery.methods.confidence.stage import ConfidenceStage
    from refinery.pipeline.output import StageOutput
    from refinery.pipeline.stage import StageInput, set_column

    class RecordingPid(ConfidenceStage):
        def decide(self, batch):
            self.decided_in = os.getpid()
            return super().decide(batch)

        def annotate(self, batch, keep):
            return super().annotate(set_column(batch, "decided_in", pa.array([self.decided_in] * batch.num_rows)),
                                    keep)

    sharded = scored_dev / "dev-in-shards"
    if not sharded.exists():
        write_table(Corpus.open(str(scored_dev / "dev")).read(), str(sharded), shard_rows=2_500)
    parts, reports, audits = {}, {}, {}
    for engine in ("local", "ray"):
        source = StageInput({"": [str(sharded)]}, opts=ReadOptions(batch_rows=2_000), engine=engine)
        out = StageOutput(str(scored_dev / f"pids-{engine}"), inputs=source.paths)
        RecordingPid(ConfidenceConfig(proba_column="drops_shortcut", tau=0.5)).run(source, out)
        parts[engine] = {p: Corpus.open(out.url(p)) for p in ("kept", "rejected")}
        reports[engine] = json.loads((scored_dev / f"pids-{engine}" / "report" / "report.json").read_text())
        audits[engine] = parts[engine]["kept"].attached("audit")
    assert len(Corpus.open(str(sharded)).files) == 4
    assert all(len(c.files) == 4 and all(f.rsplit("/", 1)[1].startswith("part-u") for f in c.files)
               for c in parts["ray"].values())
    ray_rows = {p: c.read() for p, c in parts["ray"].items()}
    decided_in = {pid for t in ray_rows.values() for pid in t["decided_in"].to_pylist()}
    assert decided_in and os.getpid() not in decided_in
    local_rows = {p: c.read() for p, c in parts["local"].items()}
    assert {pid for t in local_rows.values() for pid in t["decided_in"].to_pylist()} == {os.getpid()}
    for part, table in ray_rows.items():
        assert table.drop_columns(["decided_in"]).equals(local_rows[part].drop_columns(["decided_in"])), part
        assert table.num_rows > 0, part
    assert reports["ray"]["verdict"] == reports["local"]["verdict"]
    assert audits["ray"].sort_by("feature").equals(audits["local"].sort_by("feature"))
