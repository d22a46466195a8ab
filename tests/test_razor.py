"""RAZOR: shortcut scores against a brute-force reference and the audit, and the rewrite loop with SmolLM2."""
import json
import re

import numpy as np
import pyarrow as pa
import pytest
from conftest import (SNLI_DEV, SNLI_TEST, assert_kept_audit_is_a_fresh_one, assert_verdict_is_two_audits,
                      fresh_audit, run_cli)

from refinery.io.corpus import read_any
from refinery.methods.razor import scores as razor_scores
from refinery.methods.razor.config import RazorConfig
from refinery.methods.razor.report import RazorReport, change, console_lines
from refinery.methods.razor.rewrite import clean_candidate, verified_label
from refinery.methods.razor.verdict import verdict
from refinery.methods.audit.config import AuditConfig
from refinery.core.table_audit import audit_table


def brute_force(table, dim=64):
    """γ and the objective from the full cosine matrix (O(n²)), straight from METHODS §5."""
    tokens = RazorConfig().tokenizer.tokenize(table[razor_scores.scored_field(table)]).to_pylist()
    docs = len(tokens)
    df = {}
    for toks in tokens:
        for t in set(toks):
            df[t] = df.get(t, 0) + 1
    g = np.zeros((docs, dim))
    for i, toks in enumerate(tokens):
        for j, t in enumerate(toks):
            s = toks.count(t) / len(toks) * np.log(docs / df[t])
            k = np.arange(dim)
            angle = j / 10000 ** (2 * k / dim)
            g[i] += s * np.where(k % 2 == 0, np.sin(angle), np.cos(angle))
        g[i] /= max(len(toks) - 1, 1)
    u = g / np.linalg.norm(g, axis=1, keepdims=True)
    cos = u @ u.T
    labels = np.array(table["label"].to_pylist(), dtype=object)
    gamma = np.array([1 - cos[i, labels != labels[i]].mean() for i in range(docs)])
    names = sorted(set(labels))
    objective = sum(cos[np.ix_(labels == a, labels == b)].sum() for a in names for b in names if a < b)
    return gamma, objective


@pytest.mark.parametrize("block_rows", [1 << 18, 64])   # one block, and the rows embedded 64 at a time
def test_scores_equal_the_quadratic_definition(snli_pair, monkeypatch, block_rows):
    monkeypatch.setattr(razor_scores, "SCORE_BLOCK_ROWS", block_rows)
    sample = snli_pair.slice(0, 400)
    gamma, objective = brute_force(sample)
    scores = razor_scores.score(sample)
    np.testing.assert_allclose(scores.gamma, gamma, atol=1e-12)
    assert scores.objective == pytest.approx(objective, rel=1e-9)


def test_score_only_on_snli_and_biased_words_in_high_gamma_rows(snli_pair, tmp_path):
    out = run_cli("razor", SNLI_DEV, SNLI_TEST, "--preset", "snli", "--out", tmp_path / "rz", "--score-only").stdout
    assert "rows in 19,666 = 19,666 scored + 0 input rejects (ok)" in out, out
    assert re.search(r"objective \d{3},\d{3},\d{3}, median γ", out), out   # every digit (it printed 1.2687e+08)
    scores = read_any(str(tmp_path / "rz" / "scores")).sort_by("id")
    table = snli_pair.sort_by("id")
    assert scores.num_rows == table.num_rows == 19_666
    assert scores["id"].equals(table["id"]) and not np.isnan(scores["gamma"].to_numpy()).any()
    report = json.loads((tmp_path / "rz" / "report" / "report.json").read_text())
    assert report["field"] == "text_b" and report["objective"] > 0
    # the rows RAZOR flags carry the audit's top hypothesis words more often than the rest
    top = audit_table(table, AuditConfig(k=10)).top_k(10)
    words = {e["feature"].split("@")[0] for entries in top.values() for e in entries
             if e["feature"].endswith("@hypothesis") and " " not in e["feature"]}
    tokens = RazorConfig().tokenizer.tokenize(table["text_b"]).to_pylist()
    carries = np.array([bool(words & set(t)) for t in tokens])
    order = np.argsort(-scores["gamma"].to_numpy())
    top_decile = order[:len(order) // 10]
    assert carries[top_decile].mean() > carries[order[len(order) // 10:]].mean() + 0.05


def test_multiclass_gamma_uses_all_other_labels():
    t = pa.table({"id": list("abcdef"), "text_a": ["p"] * 6,
                  "text_b": ["one two three", "one two three", "red green", "a b c d e f g", "x", "x y"],
                  "label": ["A", "A", "B", "B", "C", "C"]})
    scores = razor_scores.score(t)
    gamma, objective = brute_force(t)
    np.testing.assert_allclose(scores.gamma, gamma, atol=1e-12)
    assert scores.objective == pytest.approx(objective)


def test_verdict_catches_a_shortcut_the_rewrites_carry_and_credits_rewrites_that_remove_it(snli_pair):
    """The rewritten corpus is audited against the input: appending 'nobody' to contradictions is caught, and so
    is renaming a shortcut word (sleeping → resting: the same shortcut); giving the shortcut rows the hypotheses
    of other labels is credited. The console prints the objective with the digits that show the change."""
    from refinery.core.features import FeatureConfig

    table = snli_pair.slice(0, 3000)
    hypotheses, labels = table["text_b"].to_pylist(), table["label"].to_pylist()
    config = RazorConfig(top_k=20, rounds=3)

    def judged(rewrite):
        texts = [rewrite(i, h) if y == "contradiction" else h for i, (h, y) in enumerate(zip(hypotheses, labels))]
        refined = table.set_column(table.column_names.index("text_b"), "text_b", pa.array(texts))
        return verdict(table, refined, FeatureConfig(), config)[0]

    worse = judged(lambda i, h: h + " nobody" if i % 3 == 0 else h)
    assert not worse.ok and worse.worsened[0].feature == "nobody@hypothesis"
    assert "top_k=…, now 20; rounds=…, now 3" in worse.remedy_worsened
    renamed = judged(lambda i, h: h.replace("sleeping", "resting"))
    assert not renamed.ok and "resting@hypothesis" in {c.feature for c in renamed.worsened}
    others = [h for h, y in zip(hypotheses, labels) if y != "contradiction"]
    shortcut = re.compile(r"\b(sleeping|nobody|asleep|cat|alone)\b", re.I)
    swapped = judged(lambda i, h: others[i % len(others)] if shortcut.search(h) else h)
    assert swapped.ok and swapped.fixed_total >= 5 and not swapped.notes
    assert swapped.max_z["contradiction"].after < swapped.max_z["contradiction"].before - 1

    report = RazorReport(rows=3000, field="text_b", objective=31_782_330.4, gamma={"median": 0.0134}, config={},
                         rounds=[{"round": 1, "candidates": 4, "accepted": 2, "replaced": 1, "kept": False,
                                  "objective_before": 31_782_330.4, "objective_after": 31_782_265.1}],
                         verdict=swapped.to_dict(), input_rejected=0)
    lines = console_lines(report)
    assert "objective 31,782,330 → 31,782,265 (undone)" in lines[1]   # it printed 3.17823e+07 -> 3.17823e+07
    assert lines[2] == swapped.line() and len(lines) == 3              # a verdict that holds is one line
    assert change(0.512341, 0.512349) == ("0.51234", "0.51235")


def test_verifier_answers_match_labels_exactly():
    labels = ["contradiction", "entailment", "neutral"]
    assert verified_label("Entailment.", labels) == "entailment"
    assert verified_label("not entailment", labels) is None      # the reference's substring check said yes
    assert verified_label("neutral-ish", labels) is None
    assert clean_candidate('Hypothesis: "A dog runs."\nmore') == "A dog runs."


def test_two_round_rewrite_with_smollm2_keeps_size_and_labels(snli_pair, tmp_path):
    from refinery.io.corpus_writer import write_table

    table = snli_pair.slice(0, 3000)
    write_table(table, str(tmp_path / "in"))
    out = tmp_path / "rw"
    printed = run_cli("razor", tmp_path / "in", "--out", out, "--top-k", 8,
                      "--candidates", 2, "--rounds", 2, "--max-new-tokens", 24, "--verify", "choice").stdout
    refined = read_any(str(out / "corpus"))
    report = json.loads((out / "report" / "report.json").read_text())
    assert refined.num_rows == report["rows"] == 3000
    assert report["objective_after"] >= report["objective"]
    rows = {r["id"]: r for r in table.to_pylist()}
    rewritten = [r for r in refined.to_pylist() if r["source"] == "rewritten"]
    assert len(rewritten) == report["replaced_rows"] > 0
    for r in rewritten:
        original = rows[r["origin_id"]]
        assert r["label"] == original["label"] and r["text_a"] == original["text_a"]
        assert r["text_b"] != original["text_b"]
    kept_ids = {r["id"] for r in refined.to_pylist() if r["source"] != "rewritten"}
    assert kept_ids | {r["origin_id"] for r in rewritten} == set(rows)
    assert set(refined["label"].to_pylist()) == {"entailment", "neutral", "contradiction"}
    for r in report["rounds"]:
        assert r["accepted"] <= r["candidates"] and r["replaced"] <= r["accepted"]
    # the verdict on the rewritten corpus: on the console and in report.json (judged both ways in the test above)
    assert report["verdict"]["stage"] == "razor" and report["verdict"]["line"] in printed
    assert_verdict_is_two_audits(report["verdict"], fresh_audit(tmp_path / "in", tmp_path / "audit-in"),
                                 fresh_audit(out / "corpus", tmp_path / "audit-out"))   # the audits a user runs next
    assert_kept_audit_is_a_fresh_one(out / "corpus", tmp_path / "audit-out")
