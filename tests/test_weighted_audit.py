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
    assert Corpus.open(str(out / "corpus")).manifest["weights"]["cap"]["clip"] == pytest.approx(cap["clip"])
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
    assert counted.keys() == kept.keys() and len(counted) > 100
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
    from refinery.methods.audit import on_ray
    from refinery.methods.audit.counting import audit

    out, _ = weighted
    path = str(out / "corpus")
    monkeypatch.setattr(on_ray, "UNIT_ROWS", 4_000)
    monkeypatch.setattr(on_ray, "MIN_UNIT_ROWS", 1_000)
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
    assert ray.stats.significant_per_label() == local.stats.significant_per_label()
