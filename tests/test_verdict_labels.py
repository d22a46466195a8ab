"""A verdict's labels: each by rows and by share, a label kept at under half the other labels' rate is lost (issue
65, case 8), and a feature over the threshold only because the label shares moved away from a uniform p0 is the
shares' change, not a shortcut (case 9). The verdict is a function of the two audits, so each case is the audit of
a corpus and of a subset of its rows chosen as the stage did."""
from __future__ import annotations

import numpy as np
import pyarrow as pa
import pytest
from conftest import SNLI_DEV

from refinery.core.verdict import LabelRows, Verdict, judge
from refinery.io import synth
from refinery.io.corpus import load
from refinery.io.schema import PRESETS
from refinery.methods.audit.config import AuditConfig
from refinery.core.table_audit import audit_table
from refinery.report.verdict import section


def _kept(table: pa.Table, rates: dict, seed: int = 0) -> pa.Table:
    """``table``'s rows with, of each label, the share ``rates`` gives of its rows (drawn at random)."""
    rng = np.random.default_rng(seed)
    labels = np.array(table["label"].to_pylist())
    keep = np.zeros(len(labels), bool)
    for label, rate in rates.items():
        rows = np.flatnonzero(labels == label)
        keep[rng.choice(rows, int(round(rate * len(rows))), replace=False)] = True
    return table.filter(pa.array(keep))


@pytest.fixture(scope="module")
def msrp_like():
    """4,000 planted rows with MSRP's two labels and shares (67.5% paraphrase), no planted words: the audit's auto
    prior is empirical, as on MSRP."""
    spec = synth.SynthSpec(rows=4000, seed=1, labels=("paraphrase", "non_paraphrase"), label_shares=(0.675, 0.325),
                           planted={})
    table = pa.concat_tables(list(synth.generate(spec)))
    return table, audit_table(table)


def test_a_label_kept_at_under_half_the_other_labels_rate_is_lost(msrp_like):
    """AFLite on MSRP kept 35% of paraphrase and 80% of non-paraphrase and said "ok": the share fell 67% → 47%, 0.7
    of before, over the share rule's half. Against the other labels' rate (35% < 50% of 80%) the label is lost: the
    verdict warns, naming it with its rows, the share of them kept and its share of the corpus, and the remedy;
    console, report.json and the HTML section alike."""
    table, before = msrp_like
    assert before.prior.name == "empirical"
    v = judge(before.stats, audit_table(_kept(table, {"paraphrase": 0.35, "non_paraphrase": 0.8})).stats,
              stage="aflite", under_threshold=False)
    rows = v.label_rows["paraphrase"]
    assert 0.66 < rows.share_before < 0.69 and 0.46 < rows.share_after < 0.50
    assert rows.share_after / rows.share_before > 0.5     # the share rule's "not lost"
    assert v.worsened_total == 0 and not v.risen   # nothing else is wrong: the label is the warning
    assert v.lost == ["paraphrase"] and not v.ok
    said = "\n".join(v.lines())
    named = (f"paraphrase {rows.before:,.0f} → {rows.after:,.0f} rows (35% kept), {100 * rows.share_before:.1f}% → "
             f"{100 * rows.share_after:.1f}% of the corpus")
    assert said.startswith("verdict WARNING") and f"  labels: non_paraphrase 1,288 → 1,030 rows (80% kept)" in said
    assert f"  {named}: the label is lost, 35% of its rows kept where the other labels kept 80% of theirs" in said, said
    assert "  remedy: add rows of the label" in said
    report = v.to_dict()
    assert report["labels_lost"] == ["paraphrase"] and report["ok"] is False and named in report["labels"]
    assert report["label_rows"]["paraphrase"]["after"] == rows.after
    html = section(v)
    assert ('<td>paraphrase</td><td class="num">2,712</td><td class="num">949</td><td class="num">35.0%</td><td '
            'class="num">80.0%</td><td class="num">67.8%</td><td class="num">48.0%</td><td>yes</td>') in html
    assert "share kept" not in html   # one name, one meaning: the rows per label of a filter call its rows kept so


def test_a_stage_that_keeps_a_third_of_every_label_loses_none(msrp_like):
    """A data map keeps a third of every label by design: no label is lost; one emptied is, whatever the rest."""
    table, before = msrp_like
    v = judge(before.stats, audit_table(_kept(table, {"paraphrase": 1 / 3, "non_paraphrase": 1 / 3})).stats,
              stage="datamap")
    assert not v.lost and v.ok, v.lines()
    assert "paraphrase 2,712 → 904 rows (33% kept), 67.8% → 67.8% of the corpus" in v.labels_line()
    emptied = Verdict("s", 4.0, 1.0, True, {}, {}, {}, [], 0, [], 0, 0, label_rows={
        "a": LabelRows(900, 300, 0.9, 0.9), "b": LabelRows(100, 0, 0.1, 0.0)})
    assert emptied.lost == ["b"]
    grown = Verdict("s", 4.0, 1.0, True, {}, {}, {}, [], 0, [], 0, 0, label_rows={   # up-sampling: nothing removed
        "a": LabelRows(100, 300, 0.5, 0.75), "b": LabelRows(100, 100, 0.5, 0.25)})
    assert not grown.lost and "(×3.00)" in grown.labels_line()


@pytest.fixture(scope="module")
def snli_dev():
    table, _ = load([SNLI_DEV], PRESETS["snli"])
    return table, audit_table(table)


def test_a_word_in_every_row_over_a_drifted_uniform_prior_is_the_label_shares_change(snli_dev):
    """The data map on FEVER (uniform prior) named `.@claim`, in 6,595 of 6,599 kept rows, as crossing the threshold
    at z* 8.56: the label prior's own z* (SUPPORTS 33.3 → 38.3%). SNLI dev (balanced: uniform) with a fifth of its
    neutral and contradiction rows left out moves entailment 33.8 → 39.0%: the full stop of the premises, in 8,140
    rows, is as often entailment as the rows are, so it is the shares' change, listed apart and said in a note, not
    a feature that worsened or remains; a word that leans to entailment beyond its share still counts. Under the
    empirical prior no feature is the shares' drift."""
    table, before = snli_dev
    assert before.prior.name == "uniform"
    subset = _kept(table, {"entailment": 1.0, "neutral": 0.8, "contradiction": 0.8})
    v = judge(before.stats, audit_table(subset).stats, stage="datamap")
    counted = {c.feature for c in v.worsened} | {c.feature for cs in v.remaining.values() for c in cs}
    drifted = {c.feature: c for c in v.drifted}
    assert ".@premise" not in counted and ".@premise" in drifted and drifted[".@premise"].n_after == 8140
    assert drifted[".@premise"].z_after > v.threshold and drifted[".@premise"].label == "entailment"
    assert v.max_z["entailment"].feature_after not in drifted
    assert "outside@hypothesis" in {c.feature for c in v.remaining["entailment"]}   # a shortcut still
    shares = v.label_rows["entailment"]
    note = next(n for n in v.notes if n.startswith("the label shares drifted from p0"))
    assert (f"entailment {100 * shares.share_before:.1f}% → {100 * shares.share_after:.1f}% of the rows, p0 33.3%"
            in note and ".@premise (entailment) z* " in note and "not shortcuts" in note)
    assert f"  note: {note}" in v.lines() and v.to_dict()["drifted_total"] == v.drifted_total > 0
    assert "by the label shares&#x27; drift alone (not shortcuts)</b> (" in section(v)

    empirical = AuditConfig(prior="empirical")
    w = judge(audit_table(table, empirical).stats, audit_table(subset, empirical).stats, stage="datamap")
    assert w.drifted_total == 0 and not [n for n in w.notes if "drifted" in n]


def test_a_drift_the_stage_did_not_make_is_no_change(snli_dev):
    """On a corpus whose shares differ from the uniform p0 and a stage that keeps them (weights, dedup of a few
    rows), the note says the shares differ from p0, not that they drifted (the newcomer read 37.2% → 37.2%)."""
    table, _ = snli_dev
    same = audit_table(_kept(table, {"entailment": 1.0, "neutral": 0.8, "contradiction": 0.8})).stats
    v = judge(same, same, stage="weights", under_threshold=False)
    note = next(n for n in v.notes if n.startswith("the label shares"))
    shares = v.label_rows["entailment"]
    assert note.startswith("the label shares differ from p0 (entailment ") and "→" not in note.split(":")[0]
    assert f"entailment {100 * shares.share_after:.1f}% of the rows, p0 33.3%" in note and "change" not in note
