"""z-filtering (Algorithm 1) on SNLI and planted corpora; compositions; the confidence filter."""
import json

import numpy as np
import pyarrow as pa
from conftest import SNLI_DEV, SNLI_HARD, SNLI_TEST, run_cli

from refinery.io import synth
from refinery.io.corpus import Corpus, load
from refinery.io.schema import PRESETS
from refinery.methods import zfilter
from refinery.methods.audit import audit, audit_table
from refinery.methods.confidence import confidence_filter


def test_snli_zfilter_accounts_for_every_row(tmp_path):
    run_cli("zfilter", SNLI_DEV, SNLI_TEST, "--preset", "snli", "--k", "20", "--out", tmp_path / "z")
    kept = Corpus.open(str(tmp_path / "z" / "kept"))
    rejected = Corpus.open(str(tmp_path / "z" / "rejected"))
    assert kept.manifest["rows"] + rejected.manifest["rows"] == 19666
    ids = kept.read(["id"])["id"].to_pylist() + rejected.read(["id"])["id"].to_pylist()
    assert len(set(ids)) == 19666
    report = json.loads((tmp_path / "z" / "report" / "report.json").read_text())
    for label in ("entailment", "neutral", "contradiction"):
        assert report["max_z_after"][label] < 0.5 * report["max_z_before"][label]
    # every rejected row names the biased features it hit, and each is a feature of that row
    rej = rejected.read().to_pylist()
    assert all(r["biased_features"] for r in rej)
    assert any("sleeping@hypothesis" in r["biased_features"] for r in rej if r["label"] == "contradiction")
    # an independent audit of the kept corpus agrees that the strong shortcuts are gone
    after = audit([str(tmp_path / "z" / "kept")])
    assert max(e["z"] for es in after.top_k(1).values() for e in es) < 8


def test_incremental_state_matches_recount():
    table, _ = load([SNLI_HARD], PRESETS["snli"])
    cfg = zfilter.ZFilterConfig(batch_size=500)
    zf = zfilter.ZFilter(["contradiction", "entailment", "neutral"], cfg)
    kept = []
    for batch in zfilter.with_features(zfilter.rebatch(iter([table]), 500), cfg.features):
        keep, _ = zf.filter(batch)
        kept.append(batch.filter(pa.array(keep)).drop_columns(["features"]))
    full = audit_table(pa.concat_tables(kept)).stats
    inc = zf.Z.stats()                    # the features z* is defined for: n ≥ min_count
    names = np.array(inc.features.to_pylist(), dtype=object)
    order = np.argsort(names)
    eligible = np.nonzero(full.n >= cfg.min_count)[0]
    full_names = np.array(full.features.to_pylist(), dtype=object)[eligible]
    assert len(names) > 1000 and list(names[order]) == sorted(full_names)
    full_order = eligible[np.argsort(full_names)]
    np.testing.assert_array_equal(inc.counts[order], full.counts[full_order])
    np.testing.assert_allclose(inc.z[order], full.z[full_order])


def test_running_biased_set_is_the_top_k_of_a_fresh_recount():
    """B_Z kept up to date batch by batch (a shortlist of k, so trims and rebuilds happen) is, at
    every batch, the top-k by z* of all features with n >= min_count, ties broken by name."""
    table, _ = load([SNLI_HARD], PRESETS["snli"])
    for prior in ("uniform", "empirical"):
        cfg = zfilter.ZFilterConfig(k=6, min_count=4, prior=prior)
        zf = zfilter.ZFilter(["contradiction", "entailment", "neutral"], cfg)
        zf.biased.shortlist = 6
        rebuilds, rebuild = [], zf.biased.rebuild
        zf.biased.rebuild = lambda: (rebuilds.append(1), rebuild())
        batches = list(zfilter.with_features(zfilter.rebatch(iter([table]), 200), cfg.features))
        for batch in batches:
            zf.filter(batch)
            cells = zf.biased_cells()
            stats = zf.Z.stats(prior=prior, min_count=cfg.min_count)
            names = np.array(stats.features.to_pylist(), dtype=object)
            expected = set()
            for j in range(3):
                order = np.lexsort((names, -stats.z[:, j]))[: cfg.k]
                expected |= {(names[i], j) for i in order}
            got = set(zip(zf.Z.names(cells // 3).to_pylist(), (cells % 3).tolist()))
            assert got == expected
        assert len(expected) == 18
        # uniform: rebuilt only when the shortlist ran short; empirical: p0 moves, rescored each batch
        assert (1 < len(rebuilds) < len(batches) / 4) if prior == "uniform" else len(rebuilds) >= len(batches)


def test_planted_tokens_filtered_out(tmp_path):
    spec = synth.SynthSpec(rows=20_000, seed=3)
    synth.write(spec, str(tmp_path / "c"))
    zfilter.run([str(tmp_path / "c")], str(tmp_path / "z"), config=zfilter.ZFilterConfig(k=10, batch_size=500))
    before, after = audit([str(tmp_path / "c")]).stats, audit([str(tmp_path / "z" / "kept")]).stats

    def z_of(st, word, label):
        return st.z[st.features.index(f"{word}@hypothesis").as_py(), st.labels.index(label)]

    def p_of(st, word, label):
        return st.p_hat[st.features.index(f"{word}@hypothesis").as_py(), st.labels.index(label)]

    for word, (label, _) in spec.planted.items():
        assert z_of(after, word, label) < 0.35 * z_of(before, word, label), word
        assert abs(p_of(after, word, label) - 1 / 3) < 0.5 * abs(p_of(before, word, label) - 1 / 3), word


def test_seed_and_compositions(tmp_path):
    lines = open(SNLI_DEV).read().splitlines()
    (tmp_path / "d0.jsonl").write_text("\n".join(lines[:3000]) + "\n")
    (tmp_path / "g.jsonl").write_text("\n".join(lines[3000:6000]) + "\n")
    d0, g = str(tmp_path / "d0.jsonl"), str(tmp_path / "g.jsonl")
    for kind in ("zaug", "parz", "seqz"):
        r = zfilter.compose(kind, [d0], [g], str(tmp_path / kind), PRESETS["snli"],
                            config=zfilter.ZFilterConfig(batch_size=500))
        kept = Corpus.open(str(tmp_path / kind / "kept")).manifest["rows"]
        rejected = Corpus.open(str(tmp_path / kind / "rejected")).manifest["rows"]
        if kind == "zaug":   # D0 kept whole, G filtered conditionally
            assert kept + rejected == 6000 and kept >= 3000
        elif kind == "parz":
            assert kept + rejected == 6000
        else:                # Z(D0) is the seed; G filtered on top
            z_d0 = Corpus.open(str(tmp_path / kind / "stages" / "z_original" / "kept")).manifest["rows"]
            assert kept + rejected == z_d0 + 3000
    assert r["kept"] > 0

    def ids(path):
        return set(Corpus.open(str(path)).read(["id"])["id"].to_pylist())

    d0_ids = set(load([d0], PRESETS["snli"])[0]["id"].to_pylist())
    assert d0_ids <= ids(tmp_path / "zaug" / "kept")                          # Z-Aug keeps D0 whole
    st = tmp_path / "parz" / "stages"
    assert ids(tmp_path / "parz" / "kept") == ids(st / "z_original" / "kept") | ids(st / "z_generated" / "kept")
    z_d0 = ids(tmp_path / "seqz" / "stages" / "z_original" / "kept")
    assert z_d0 <= ids(tmp_path / "seqz" / "kept") and not (z_d0 & ids(tmp_path / "seqz" / "rejected"))


def test_conditional_mode_never_admits_a_seed_biased_feature():
    seed, _ = load([SNLI_DEV], PRESETS["snli"])
    batch, _ = load([SNLI_TEST], PRESETS["snli"])
    cfg = zfilter.ZFilterConfig(k=20, batch_size=2000)
    zf = zfilter.ZFilter(["contradiction", "entailment", "neutral"], cfg)
    zf.seed(zfilter.add_features(seed, cfg.features))
    biased = zf.Z.stats().biased_sets(20)
    first = next(zfilter.with_features(zfilter.rebatch(iter([batch]), 2000), cfg.features))
    keep, hits = zf.filter(first)
    assert 0 < keep.sum() < first.num_rows
    for row, k, h in zip(first.to_pylist(), keep, hits):
        carried = set(row["features"]) & biased[row["label"]]
        assert bool(k) == (not carried)
        assert set(h) == carried


def test_confidence_filter_keeps_only_above_tau():
    from refinery.models import NGramClassifier

    dev, _ = load([SNLI_DEV], PRESETS["snli"])
    test, _ = load([SNLI_HARD], PRESETS["snli"])
    model = NGramClassifier("pair").fit(dev)
    kept, rejected = confidence_filter(test, 0.6, model=model)
    assert kept.num_rows + rejected.num_rows == test.num_rows
    assert kept.num_rows > 0 and rejected.num_rows > 0
    assert min(kept["confidence"].to_pylist()) > 0.6 >= max(rejected["confidence"].to_pylist())
    p = model.predict_proba(kept)
    cols = [model.classes_.index(l) for l in kept["label"].to_pylist()]
    assert np.all(p[np.arange(kept.num_rows), cols] > 0.6)
    col = test.append_column("p", pa.array(np.linspace(0, 1, test.num_rows)))
    kept2, _ = confidence_filter(col, 0.95, proba_column="p")
    assert kept2.num_rows == int((np.linspace(0, 1, test.num_rows) > 0.95).sum())
