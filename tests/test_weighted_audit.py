"""Weights' default cap and the weighted audit (issue 65, cases 2 and 3) on SNLI dev: the default cap keeps the
effective sample size at least half the rows, the paper's letter (no cap) one option away; `refinery audit` of the
weighted corpus counts its weights, says so first, and gives the weights verdict's after side feature by feature;
`--unweighted` is the audit of the rows; the audit on Ray equals the local one."""
import json

import numpy as np
import pyarrow.parquet as pq
import pytest
from conftest import SNLI_DEV, fresh_audit, run_cli

from refinery.core import audit_record
from refinery.core.audit_record import AuditRecord
from refinery.io.corpus import Corpus


@pytest.fixture(scope="module")
def weighted(tmp_path_factory):
    """SNLI dev weighted by `refinery weights` with its defaults: (the run's folder, its console output)."""
    out = tmp_path_factory.mktemp("weighted") / "w"
    proc = run_cli("weights", "--input", f"dev={SNLI_DEV}", "--preset", "snli", "--out", out)
    return out, proc.stdout


def significant(folder) -> dict:
    """{(feature, label): z*} over an audit's threshold (``null`` aside), from its stats.parquet."""
    report = json.loads((folder / "report" / "report.json").read_text())
    stats = pq.read_table(folder / "report" / "stats.parquet").to_pylist()
    return {(r["feature"], r["label"]): r["z"] for r in stats if r["z"] > report["threshold"] and r["feature"] != "null"}


def test_weights_default_cap_keeps_half_the_rows_and_no_cap_is_an_option(weighted, tmp_path):
    """Uncapped, SNLI dev's weights put a row at 259× the mean and leave an effective sample size of 674 of 9,842;
    the default (auto) caps them so that it stays at least half the rows, and says the cap; --clip none is the
    paper's letter."""
    out, said = weighted
    report = json.loads((out / "report" / "report.json").read_text())
    d, cap = report["diagnostics"], report["cap"]
    assert d["rows"] == 9_842 and d["effective_sample_size"] >= d["rows"] / 2
    assert cap["setting"] == "auto" and 2 < cap["clip"] < 1_000 and d["max"] == pytest.approx(cap["clip"])
    assert cap["share"] == pytest.approx(d["effective_sample_size"] / d["rows"]) and cap["share"] < 0.51
    assert f"cap {cap['clip']:.3g}× the mean weight (--clip auto" in said and "(50%)" in said
    assert Corpus.open(str(out / "corpus")).manifest.body["weights"]["cap"]["clip"] == pytest.approx(cap["clip"])
    assert report["weighted_shares"] == pytest.approx(report["observed_shares"], abs=1e-6)

    run_cli("weights", "--input", f"dev={SNLI_DEV}", "--preset", "snli", "--clip", "none", "--out", tmp_path / "n")
    letter = json.loads((tmp_path / "n" / "report" / "report.json").read_text())
    assert letter["cap"]["clip"] is None and letter["cap"]["setting"] == "none"
    assert letter["diagnostics"]["effective_sample_size"] < d["rows"] / 10 < d["rows"] / 2
    assert letter["diagnostics"]["max"] > cap["clip"]


def test_the_audit_of_a_weighted_corpus_is_its_weights_verdict(weighted, tmp_path):
    """`refinery audit OUT/corpus` counts the weight column (its first line says so) and gives each label's max z*,
    the threshold and every significant feature of the verdict's after side (the audit kept with the corpus);
    --unweighted is the audit of the input's rows."""
    out, _ = weighted
    proc = run_cli("audit", out / "corpus", "--out", tmp_path / "a")
    lines = proc.stdout.splitlines()
    assert lines[0].startswith("rows in") and lines[1].startswith("note: counts the 'weight' column"), lines[:2]
    audit = json.loads((tmp_path / "a" / "report" / "report.json").read_text())
    verdict = json.loads((out / "report" / "report.json").read_text())["verdict"]
    assert audit["threshold"] == pytest.approx(verdict["threshold"], abs=1e-4)
    assert audit["max_z"] == pytest.approx({l: m["after"] for l, m in verdict["max_z"].items()}, abs=1e-4)
    assert audit["labels"] == {"contradiction": 3_278, "entailment": 3_329, "neutral": 3_235}   # rows, not weights

    after = AuditRecord.from_table(Corpus.open(str(out / "corpus")).attached(audit_record.KEY))   # the after side
    assert after.weighted
    over = after.stats.z > after.stats.threshold
    names = after.stats.features.to_pylist()
    kept = {(names[i], after.stats.labels[j]): float(after.stats.z[i, j]) for i, j in zip(*np.nonzero(over))
            if names[i] != "null"}
    counted = significant(tmp_path / "a")
    assert counted.keys() == kept.keys() and len(counted) > 50
    assert all(counted[k] == pytest.approx(kept[k], abs=1e-9) for k in kept)
    for label, listed in verdict["remaining"].items():   # the verdict's named features are the audit's
        assert all(counted[(c["feature"], label)] == pytest.approx(c["z_after"], abs=1e-4) for c in listed)
    n = {r["feature"]: r["n"] for r in pq.read_table(tmp_path / "a" / "report" / "stats.parquet").to_pylist()}
    assert any(not float(v).is_integer() for v in n.values())   # n is a sum of weights, kept as one

    rows = run_cli("audit", out / "corpus", "--unweighted", "--out", tmp_path / "u").stdout
    assert "note: counts rows (--unweighted)" in rows
    plain = fresh_audit(SNLI_DEV, tmp_path / "i", "--preset", "snli")
    unweighted = json.loads((tmp_path / "u" / "report" / "report.json").read_text())
    for key in ("threshold", "max_z", "significant", "labels"):
        assert unweighted[key] == plain[key], key
    columns = ["feature", "label", "n", "count"]
    assert pq.read_table(tmp_path / "u" / "report" / "stats.parquet").select(columns).equals(
        pq.read_table(tmp_path / "i" / "report" / "stats.parquet").select(columns))


@pytest.mark.ray
def test_the_weighted_audit_on_ray_equals_local(weighted, ray_local, monkeypatch):
    """Several units, each cut into a part per CPU and summed by the reducers: the sums of weights, the statistics
    and the significant features equal the local audit's (sums added in another order: equal to 1e-9)."""
    from refinery.io import read_units
    from refinery.methods.audit.counting import audit

    out, _ = weighted
    path = str(out / "corpus")
    monkeypatch.setattr(read_units, "UNIT_ROWS", 4_000)
    monkeypatch.setattr(read_units, "MIN_UNIT_ROWS", 1_000)
    local, ray = (audit([path], engine=engine, weighted=True) for engine in ("local", "ray"))
    assert ray.weighted and type(ray.counter).__name__ == "WeightedAuditCounts" and ray.counter.merged
    assert ray.label_rows == local.label_rows and ray.counter.label_totals == pytest.approx(local.counter.label_totals)
    a, b = local.counter.counts(), ray.counter.counts()
    assert a["feature"].equals(b["feature"]) and a["label"].equals(b["label"])
    np.testing.assert_allclose(b["count"].to_numpy(), a["count"].to_numpy(), rtol=1e-9)
    assert ray.stats.threshold == local.stats.threshold
    by_feature = [r.stats.to_table(weighted=True).sort_by([("feature", "ascending"), ("label", "ascending")])
                  for r in (local, ray)]
    assert by_feature[0]["feature"].equals(by_feature[1]["feature"])
    np.testing.assert_allclose(by_feature[1]["z"].to_numpy(), by_feature[0]["z"].to_numpy(), rtol=1e-9, atol=1e-9)
    np.testing.assert_allclose(by_feature[1]["n_eff"].to_numpy(), by_feature[0]["n_eff"].to_numpy(), rtol=1e-9)
    np.testing.assert_allclose(b["square"].to_numpy(), a["square"].to_numpy(), rtol=1e-9)   # Σ w², summed alike
    assert (by_feature[0]["n_eff"].to_numpy() < by_feature[0]["n"].to_numpy()).any()
    assert ray.stats.significant_per_label() == local.stats.significant_per_label()


@pytest.mark.ray
def test_a_file_in_refinerys_columns_is_audited_on_ray_without_a_mapping(snli_rows, ray_local, tmp_path):
    """A Parquet file already in refinery's columns (id, text_a, text_b, label) reads without --preset or --map on
    Ray as it does locally (``io.corpus.input_mapping``, one resolution), with the same statistics."""
    from refinery.methods.audit.counting import audit

    table, _ = snli_rows
    path = tmp_path / "canonical.parquet"
    pq.write_table(table.slice(0, 2_000), path)
    local, ray = (audit([str(path)], engine=engine) for engine in ("local", "ray"))
    assert ray.rows == local.rows == 2_000
    by = [("feature", "ascending"), ("label", "ascending")]
    assert ray.stats.to_table().sort_by(by).equals(local.stats.to_table().sort_by(by))


# ------------------------------------------------ z* at Kish's effective size (issue 65, the weighted audit's test)

FRIENDS = "friends@hypothesis"


@pytest.fixture(scope="module")
def snli_rows():
    """SNLI dev in refinery's columns, and each row's word features (``features.extract``, the audit's words)."""
    from refinery.core.features import FeatureConfig, extract
    from refinery.io.corpus import load
    from refinery.io.schema import PRESETS

    table, _ = load([SNLI_DEV], PRESETS["snli"])
    return table, extract(table, FeatureConfig(families=("unigram", "bigram")))


def weighted_corpus(path, table, weights):
    """``table`` with a ``weight`` column, as a corpus (what `refinery weights` writes)."""
    import pyarrow as pa

    from refinery.io.corpus_writer import write_table

    write_table(table.select(["id", "text_a", "text_b", "label"]).append_column("weight", pa.array(weights)),
                str(path))
    return path


def test_nine_rows_weighing_twelve_are_nine_rows(snli_rows, tmp_path):
    """Nine neutral SNLI rows holding `friends` (in no other row), each weighing 4/3: Σw = 12 ≥ min_count, but their
    effective size (Σw)²/Σw² is 9, so the feature stays untested (on Σw it was tested, z* 4.90); the rows beside
    them weigh 1 and keep their plain audit."""
    import pyarrow.compute as pc

    table, features = snli_rows
    holding = np.unique(features.filter(pc.equal(features["feature"], FRIENDS))["row"].to_numpy())
    neutral = holding[np.array(table["label"].take(holding).to_pylist()) == "neutral"][:9]
    others = np.setdiff1d(np.arange(3_000), holding)
    rows = np.concatenate([others, neutral])
    weights = np.concatenate([np.ones(len(others)), np.full(9, 4 / 3)])
    corpus = weighted_corpus(tmp_path / "friends", table.take(rows), weights)
    report = fresh_audit(corpus, tmp_path / "a")
    stats = pq.read_table(tmp_path / "a" / "report" / "stats.parquet")
    assert FRIENDS not in stats["feature"].to_pylist()
    assert report["features_with_min_count"] == len(set(stats["feature"].to_pylist()))
    plain = stats.filter(pc.equal(stats["feature"], "sleeping@hypothesis")).to_pylist()   # rows of weight 1
    assert plain and all(r["n"] == r["n_eff"] for r in plain)


def test_weighted_z_is_tested_at_the_effective_size(snli_rows, tmp_path):
    """3,000 SNLI dev rows with seeded log-normal weights: every word feature's n (Σw), n_eff, p̂ and z* in
    stats.parquet are those computed here from the rows (p̂ = Σ_l w / Σ w, n_eff = (Σw)²/Σw²,
    z* = (p̂ − p0)/sqrt(p0(1 − p0)/n_eff)); the tested features are those with n_eff ≥ min_count."""
    import pyarrow as pa

    table, features = snli_rows
    rows = 3_000
    w = np.random.default_rng(7).lognormal(0.0, 1.0, rows)
    corpus = weighted_corpus(tmp_path / "w", table.slice(0, rows), w)
    report = fresh_audit(corpus, tmp_path / "a")
    mine = features.filter(pa.compute.less(features["row"], rows))
    cells = pa.table({"feature": mine["feature"], "w": w[mine["row"].to_numpy()],
                      "label": table["label"].take(mine["row"])})
    cells = cells.append_column("w2", pa.compute.multiply(cells["w"], cells["w"]))
    per_feature = {r["feature"]: r for r in cells.group_by("feature").aggregate([("w", "sum"), ("w2", "sum")])
                   .to_pylist()}
    per_cell = {(r["feature"], r["label"]): r["w_sum"] for r in cells.group_by(["feature", "label"])
                .aggregate([("w", "sum")]).to_pylist()}
    stats = {(r["feature"], r["label"]): r for r in pq.read_table(tmp_path / "a" / "report" / "stats.parquet")
             .to_pylist() if r["feature"] != "null"}
    n_eff = {f: r["w_sum"] ** 2 / r["w2_sum"] for f, r in per_feature.items()}
    assert {f for f, _ in stats} == {f for f, n in n_eff.items() if n >= 10}
    assert any(per_feature[f]["w_sum"] >= 10 > n for f, n in n_eff.items())   # Σw alone would test more
    labels = np.array(table["label"].slice(0, rows).to_pylist())
    shares = {l: w[labels == l].sum() / w.sum() for l in report["label_prior"]}   # the weighted label shares
    p0 = shares if report["prior"].startswith("empirical") else {l: 1 / len(shares) for l in shares}
    assert p0 == pytest.approx({l: v["p0"] for l, v in report["label_prior"].items()}, abs=1e-4)
    # the label prior line: each label's weighted share (they sum to 1), its z* at the rows' effective size
    rows_eff = w.sum() ** 2 / (w ** 2).sum()
    for label, v in report["label_prior"].items():
        z = (shares[label] - p0[label]) / np.sqrt(p0[label] * (1 - p0[label]) / rows_eff)
        assert v["share"] == pytest.approx(shares[label], abs=1e-4) and v["z"] == pytest.approx(z, abs=1e-3)
    for (feature, label), r in stats.items():
        n, p = per_feature[feature]["w_sum"], per_cell.get((feature, label), 0.0) / per_feature[feature]["w_sum"]
        z = (p - p0[label]) / np.sqrt(p0[label] * (1 - p0[label]) / n_eff[feature])
        assert r["n"] == pytest.approx(n, rel=1e-9) and r["n_eff"] == pytest.approx(n_eff[feature], rel=1e-9)
        assert r["p_hat"] == pytest.approx(p, rel=1e-9, abs=1e-12) and r["z"] == pytest.approx(z, rel=1e-9, abs=1e-9)
