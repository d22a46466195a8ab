"""AUDAC up-sampling on SNLI dev+test: corrected tokens fall towards the prior, reproducible, every added row traced;
on an imbalanced corpus whose smallest label is written with negations: nothing made worse, the copy cap held,
negations reported with why they could not be corrected."""
import collections
import hashlib
import json
import re

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pytest
from conftest import SNLI_DEV, SNLI_TEST, run_cli

from refinery.core import stats as zstats
from refinery.core.features import KEPT_WORDS, NULL_FEATURE, STOPWORD_LIST, TokenizerOptions
from refinery.io.corpus import Corpus
from refinery.io.records import MANIFEST
from refinery.report.format import number


@pytest.fixture(scope="module")
def upsampled(tmp_path_factory):
    out = tmp_path_factory.mktemp("up") / "a"
    args = ["upsample", SNLI_DEV, SNLI_TEST, "--preset", "snli", "--k", "10", "--step", "0.2", "--iterations", "10"]
    run_cli(*args, "--out", out)
    run_cli(*args, "--out", out.parent / "b")
    return out, out.parent / "b"


def test_corrected_tokens_fall_towards_the_prior(upsampled):
    out, _ = upsampled
    report = json.loads((out / "report" / "report.json").read_text())
    assert report["prior"].startswith("uniform (auto")   # SNLI's labels are balanced: the paper's 1/3
    assert len(report["tokens"]) == 10 and "sleeping@hypothesis" in report["tokens"]
    for c in report["selected"]:
        # at least 1 (tall@hypothesis, 5 of its 92 rows of other labels, copied at most 3 times each: 12.5 -> 10.7)
        assert report["z_after"][c["token"]] < c["z"] - 1, c["token"]
        assert report["p_hat_after"][c["token"]][c["label"]] < report["p_hat_before"][c["token"]][c["label"]] - 0.1
    assert "nobody@hypothesis" in [u["token"] for u in report["uncorrectable"]]  # every 'nobody' row contradicts
    assert {u["token"] for u in report["uncorrectable"]} >= {e["token"] for e in report["left_out"] if e["uncorrectable"]}
    assert 0 < report["growth"] < 0.15  # modest growth (paper: +7.5% on SNLI train)
    assert report["verdict"]["ok"] and report["most_copies_of_a_row"] <= 3
    page = (out / "report" / "report.html").read_text()   # z-plots before and after, p̂ before → after, verdict
    sleeping = [report[f"p_hat_{when}"]["sleeping@hypothesis"]["contradiction"] for when in ("before", "after")]
    assert page.count("<svg") == 2 and f"{number(sleeping[0])} → {number(sleeping[1])}" in page
    assert "Verdict: the shortcuts before and after" in page


def test_corrected_tokens_are_the_audits_features_with_its_z(upsampled, tmp_path):
    """One vocabulary: every token AUDAC corrects (and every one it leaves out) is a feature of `refinery audit` of
    its input (same name, `w@field`), with the z* and label that audit gives it, and the z* after is the one
    `refinery audit` of the output gives; the verdict (ok, with the defaults) holds those two audits' figures."""
    import pyarrow.parquet as pq
    from conftest import assert_verdict_is_two_audits, fresh_audit

    out, _ = upsampled
    report = json.loads((out / "report" / "report.json").read_text())
    before = fresh_audit(SNLI_DEV, tmp_path / "in", SNLI_TEST, "--preset", "snli")
    after = fresh_audit(out / "corpus", tmp_path / "out")
    assert report["verdict"]["ok"] and report["verdict_input_p0"]["ok"]
    assert_verdict_is_two_audits(report["verdict"], before, after)
    assert report["threshold"] == pytest.approx(before["threshold"], abs=1e-4)

    def z_star(audit_folder):
        best = {}
        for r in pq.read_table(audit_folder / "report" / "stats.parquet").to_pylist():
            if r["z"] > best.get(r["feature"], (-np.inf,))[0]:
                best[r["feature"]] = (r["z"], r["label"], r["n"])
        return best

    audited, audited_after = z_star(tmp_path / "in"), z_star(tmp_path / "out")
    assert len(report["selected"]) == 10
    for c in report["selected"]:
        z, label, n = audited[c["token"]]     # KeyError: a token the audit does not list
        assert (c["z"], c["label"], c["n"]) == (pytest.approx(z, abs=1e-4), label, n), c["token"]
        assert z > before["threshold"]
        assert report["z_after"][c["token"]] == pytest.approx(audited_after[c["token"]][0], abs=1e-4)
    for e in report["left_out"] + report["uncorrectable"]:
        assert e["z"] == pytest.approx(audited[e["token"]][0], abs=1e-4), e["token"]


@pytest.fixture(scope="module")
def split_word_corpus(tmp_path_factory):
    """6,000 planted rows, uniform labels: `sleeping` leans to contradiction in the hypotheses; `guitar`, in 7% of the
    neutral rows and 3.5% of the others, sits in the premise of every other row that has it and in the hypothesis
    of the rest (SICK's neutral words, which both texts hold): per field its z* is under the audit's threshold,
    pooled over both texts it is over it."""
    from refinery.io import synth
    from refinery.io.corpus_writer import CorpusWriter

    spec = synth.SynthSpec(rows=6000, seed=3, planted={"sleeping": ("contradiction", 0.3),
                                                       "guitar": ("neutral", 0.07)}, leak=0.5)
    rows = pa.concat_tables(synth.generate(spec)).to_pylist()
    moved = 0
    for r in rows:
        if "guitar " in r["text_b"]:
            if moved % 2 == 0:
                r["text_b"] = r["text_b"].replace("guitar ", "", 1)
                r["text_a"] = "guitar " + r["text_a"]
            moved += 1
    path = tmp_path_factory.mktemp("split") / "corpus"
    with CorpusWriter(str(path)) as writer:
        writer.write(pa.Table.from_pylist(rows))
        writer.commit()
    return path


def test_a_label_without_a_significant_feature_gets_no_correction(split_word_corpus, tmp_path):
    """The audit finds no significant neutral feature (`guitar@premise`, `guitar@hypothesis` under the threshold,
    though `guitar` pooled over both texts is over it): AUDAC corrects no neutral-leaning token, only the audit's
    significant `sleeping@hypothesis`."""
    from conftest import fresh_audit

    run_cli("upsample", split_word_corpus, "--out", tmp_path / "up")
    report = json.loads((tmp_path / "up" / "report" / "report.json").read_text())
    audit = fresh_audit(split_word_corpus, tmp_path / "audit")
    assert audit["significant"]["neutral"] == 0 and audit["significant"]["contradiction"] > 0
    rows = Corpus.open(str(split_word_corpus)).read().to_pylist()
    pooled = collections.Counter(r["label"] for r in rows if "guitar" in (r["text_a"] + " " + r["text_b"]).split())
    n = sum(pooled.values())
    assert (pooled["neutral"] / n - 1 / 3) / np.sqrt(2 / 9 / n) > audit["threshold"]   # pooled, it would be
    assert report["tokens"] == ["sleeping@hypothesis"]
    assert {c["label"] for c in report["selected"]} == {"contradiction"}
    corrected = Corpus.open(str(tmp_path / "up" / "corpus")).read()
    copies = corrected.filter(pc.equal(corrected["source"], "upsampled"))
    assert copies.num_rows == report["rows_added"] > 0
    assert set(pc.drop_null(copies["upsample_token"]).to_pylist()) == {"sleeping@hypothesis"}


def _word_features(table: pa.Table) -> set:
    """(row, feature) of every unigram feature of ``table``'s rows, as `refinery audit` of SNLI names them."""
    from refinery.core.features import FeatureConfig, extract

    long = extract(table, FeatureConfig(families=("unigram",), field_names=("premise", "hypothesis")))
    return set(zip(long["row"].to_pylist(), pc.dictionary_decode(long["feature"].combine_chunks()).to_pylist()))


def test_only_rows_with_corrected_tokens_duplicated_and_traced(upsampled):
    out, _ = upsampled
    report = json.loads((out / "report" / "report.json").read_text())
    table = Corpus.open(str(out / "corpus")).read()
    original = table.filter(pc.equal(table["source"], "original"))
    added = table.filter(pc.equal(table["source"], "upsampled"))
    assert original.num_rows == 19666 and added.num_rows == report["rows_added"] > 0
    by_id = {r["id"]: r for r in original.to_pylist()}
    for row in added.to_pylist():
        origin = by_id[row["origin_id"]]  # every origin exists in the input
        assert (row["text_a"], row["text_b"], row["label"]) == (origin["text_a"], origin["text_b"], origin["label"])
    tokens = added["upsample_token"].to_pylist()   # each copy holds its token, one of those corrected
    has = _word_features(added.select(["text_a", "text_b", "label"]))
    assert all((i, t) in has for i, t in enumerate(tokens)) and set(tokens) <= set(report["tokens"])


def test_same_seed_byte_identical(upsampled):
    a, b = upsampled
    ma = json.loads((a / "corpus" / MANIFEST).read_text())
    mb = json.loads((b / "corpus" / MANIFEST).read_text())
    for f in ma["files"]:
        assert hashlib.sha256((a / "corpus" / f).read_bytes()).digest() == \
            hashlib.sha256((b / "corpus" / f).read_bytes()).digest()
    assert (a / "report" / "trace.parquet").read_bytes() == (b / "report" / "trace.parquet").read_bytes()
    assert [s["sha256"] for s in ma["file_stats"]] == [s["sha256"] for s in mb["file_stats"]]


def test_trace_adds_up(upsampled):
    import pyarrow.parquet as pq

    out, _ = upsampled
    trace = pq.read_table(out / "report" / "trace.parquet").to_pylist()
    report = json.loads((out / "report" / "report.json").read_text())
    assert sum(t["drawn"] for t in trace if not t["undone"]) == report["rows_added"]
    assert all(t["drawn"] == sum(v for k, v in t.items() if k.startswith("drawn:")) for t in trace)


# ---------------------------------------------------------------- an imbalanced corpus written with negations

NEGATION_PLANTED = {"no": ("contradiction", 0.5), "not": ("contradiction", 0.4), "sleeping": ("contradiction", 0.1),
                    "outdoors": ("entailment", 0.12), "tall": ("neutral", 0.1)}
CAP = 3


@pytest.fixture(scope="module")
def negation_corpus(tmp_path_factory):
    """4,000 rows, label shares 56/29/15, `no`/`not` in half the contradictions and few rows elsewhere (SICK-like)."""
    from refinery.io import synth

    out = tmp_path_factory.mktemp("neg") / "corpus"
    synth.write(synth.SynthSpec(rows=4000, seed=1, label_shares=(0.56, 0.29, 0.15), planted=NEGATION_PLANTED,
                                leak=0.03), str(out))
    return out


@pytest.fixture(scope="module")
def negation_defaults(negation_corpus):
    """upsample with its defaults, as a user runs it: (output folder, console)."""
    out = negation_corpus.parent / "up"
    proc = run_cli("upsample", negation_corpus, "--out", out)
    return out, proc.stdout + proc.stderr


@pytest.fixture(scope="module")
def negation_in_band(negation_corpus):
    """upsample with a band wide enough to take in `no` and `not` (the old code copied one row 21 times)."""
    out = negation_corpus.parent / "up-wide"
    run_cli("upsample", negation_corpus, "--out", out, "--band-max", "0.2")
    return out, json.loads((out / "report" / "report.json").read_text())


def _label_max(stats: zstats.ZStats, p0=None) -> dict:
    """Each label's largest z* over the features in ≥ min_count rows (``null``, the label prior, left out)."""
    rows, p, _ = stats.eligible()
    z = zstats.z_score(p, stats.n[rows][:, None], (stats.p0 if p0 is None else p0)[None, :])
    ranked = np.array(stats.features.take(rows).to_pylist()) != NULL_FEATURE
    return {label: float(z[ranked, j].max()) for j, label in enumerate(stats.labels)}


def _audits(out):
    """The audits (refinery's defaults, prior auto) of an up-sampled folder's original rows and of all its rows."""
    from refinery.core.table_audit import audit_table

    table = Corpus.open(str(out / "corpus")).read()
    columns = ["id", "text_a", "text_b", "label"]
    original = table.filter(pc.equal(table["source"], "original")).select(columns)
    return audit_table(original), audit_table(table.select(columns)), table


@pytest.mark.parametrize("run", ["negation_defaults", "negation_in_band"])
def test_no_label_max_z_rises_and_no_row_copied_past_the_cap(run, request):
    """The output's audit, made apart from the stage (prior auto: the output's own label shares; and the input's
    p0), shows no label's max z* above the input's, and no row is copied more than the cap."""
    out, _ = request.getfixturevalue(run)
    before, after, table = _audits(out)
    assert before.prior.name == "empirical"
    limit = _label_max(before.stats)
    # under the input's p0 exactly; under the output's own shares within what z* prints (2 decimals): whole rows
    # cannot restore label shares to the last digit
    for p0, tolerance in ((before.stats.p0, 1e-9), (None, 0.005)):
        for label, z in _label_max(after.stats, p0).items():
            assert z <= limit[label] + tolerance, (label, z, limit[label])
    copies = collections.Counter(pc.drop_null(table["origin_id"]).to_pylist())
    assert max(copies.values()) <= CAP
    report = json.loads((out / "report" / "report.json").read_text())
    assert report["verdict"]["ok"] and report["most_copies_of_a_row"] == max(copies.values())
    shares = [report[f"labels_{w}"]["contradiction"] / report[f"rows_{w}"] for w in ("before", "after")]
    assert abs(shares[0] - shares[1]) < 0.002    # copies of other rows keep the label shares


def test_copies_spread_over_distinct_rows_and_correction_stops_when_rows_run_out(negation_in_band):
    """`no` needs 57 copies of each of its entailment and neutral rows: it is corrected as far as 3 copies go,
    each turn's copies are distinct rows, and the report says why it stopped."""
    import pyarrow.parquet as pq

    out, report = negation_in_band
    assert {"no@hypothesis", "not@hypothesis"} <= set(report["tokens"])
    table = Corpus.open(str(out / "corpus")).read()
    added = table.filter(pc.equal(table["source"], "upsampled")).to_pylist()
    turns = collections.Counter((r["upsample_iteration"], r["upsample_token"], r["origin_id"]) for r in added)
    assert max(turns.values()) == 1       # a turn never copies one row twice
    trace = pq.read_table(out / "report" / "trace.parquet").to_pylist()
    assert sum(t["drawn"] for t in trace if not t["undone"]) == report["rows_added"]
    why = {e["token"]: e["reason"] for e in report["not_corrected"]}
    assert re.search(r"\d+ entailment rows contain `no@hypothesis` and \d+ neutral rows contain `no@hypothesis`; "
                     r"correcting it would copy each \d+ times \(--max-copies 3\); consider generation "
                     r"\(refinery ibadr\)", why["no@hypothesis"])
    assert report["z_after"]["no@hypothesis"] < report["selected"][report["tokens"].index("no@hypothesis")]["z"]


def test_negations_reported_with_why(negation_defaults):
    """With the defaults `no` and `not` (in 9% and 7% of the rows) are outside the count band, and the report and the
    console say so, with the copies their correction would need."""
    out, console = negation_defaults
    report = json.loads((out / "report" / "report.json").read_text())
    assert report["prior"].startswith("empirical (auto") and "prior p0: empirical (auto" in console
    left = {e["token"]: e for e in report["left_out"]}
    for word in ("no@hypothesis", "not@hypothesis"):
        assert left[word]["label"] == "contradiction" and left[word]["copies_needed"] > CAP
        assert f"rows contain `{word}`; correcting it would copy each" in left[word]["reason"]
        assert f"    {word} " in console
    assert "verdict ok" in console   # nothing got worse; but what stayed as it was is said (it was not)
    assert re.search(r"warning: \d+ significant token\(s\) stay as they were: no@hypothesis \(z\* [\d.]+, "
                     r"contradiction\): n outside the band 10–80; \d+ entailment rows contain `no@hypothesis`",
                     console), console
    assert all(e["reason"].startswith("z* under the threshold") for e in report["left_out"]
               if e["token"].split("@")[0] in KEPT_WORDS and e["z"] <= report["threshold"])   # each negation's line
    page = (out / "report" / "report.html").read_text()
    assert "rows contain `no@hypothesis`; correcting it would copy each" in page.replace("&#x27;", "'").replace(
        "&#96;", "`")


def test_negations_and_quantifiers_are_never_stopwords():
    assert {"no", "not", "nobody", "never", "nothing", "none", "only", "all", "every", "n't"} <= KEPT_WORDS
    assert not KEPT_WORDS & set(STOPWORD_LIST) and {"the", "a", "is"} <= set(STOPWORD_LIST)
    tokens = TokenizerOptions(remove_punctuation=True, remove_stopwords=True).tokenize(
        pa.array(["Nobody is not here, and all of them don't sing"]))
    assert tokens.to_pylist() == [["nobody", "not", "all", "n't", "sing"]]


def test_zplot_names_no_feature_below_the_prior_as_top():
    """A label whose features all fall below p0 has no top features: the plot names none of them for it."""
    from refinery.report.figures.zplot import zplot

    stats = zstats.from_matrix(pa.array(["alpha", "bravo", "charlie"]), ["x", "y"],
                               np.array([[30, 0], [25, 5], [20, 10]]), np.array([0.5, 0.5]), 10)
    svg = zplot(stats, 3)
    assert all(svg.count(name) == 1 for name in ("alpha", "bravo", "charlie"))   # in x's list only


def test_one_row_copied_44_times_is_caught_and_the_guard_stops_short_of_it(negation_corpus):
    """The paper's letter copied one SICK row 44 times and made its rarer words shortcuts (`hooded`: z* 8.9). The
    verdict on such an output names them; the guard admits copies of that row only while none crosses the
    threshold, and its verdict holds."""
    from refinery.core.features import FeatureConfig
    from refinery.core.verdict import judge
    from refinery.core.table_audit import audit_table
    from refinery.methods.upsample.guard import ShortcutGuard

    table = Corpus.open(str(negation_corpus)).read().select(["id", "text_a", "text_b", "label"])
    row = next(i for i, (text, label) in enumerate(zip(table["text_b"].to_pylist(), table["label"].to_pylist()))
               if label == "entailment" and text.startswith("no "))
    copied = pa.concat_tables([table, *[table.slice(row, 1)] * 44])
    before = audit_table(table)
    worse = judge(before.stats, audit_table(copied).stats, stage="upsample", under_threshold=False)
    assert not worse.ok and worse.worsened_total > 0
    assert all(c.label == "entailment" for c in worse.worsened)   # the row's own words, now entailment shortcuts

    guard = ShortcutGuard.over(table, np.array([row]), sorted(before.stats.labels), FeatureConfig(), before.prior)
    admitted = sum(len(guard.admit([row])[0]) for _ in range(44))
    assert 0 < admitted < 44
    assert all(v.ok for v in guard.verdicts())


def test_guard_streams_its_input_and_extracts_its_candidates_a_chunk_at_a_time(negation_corpus, monkeypatch):
    """``plan`` hands the guard DuckDB's record batches, and it extracts its candidates' features ``CANDIDATE_ROWS``
    at a time: the guard (each feature's counts, each candidate's features, its decisions) is the one built from
    the whole table, whatever the order of the candidates."""
    from refinery.core.features import FeatureConfig
    from refinery.core.stats import Prior
    from refinery.methods.upsample import guard as shortcut_guard

    table = Corpus.open(str(negation_corpus)).read().select(["text_a", "text_b", "label"])
    labels = sorted(set(table["label"].to_pylist()))
    candidates = np.random.default_rng(0).permutation(table.num_rows)[:300]
    uniform = Prior("uniform")
    whole = shortcut_guard.ShortcutGuard.over(table, candidates, labels, FeatureConfig(), uniform)
    monkeypatch.setattr(shortcut_guard, "CANDIDATE_ROWS", 37)
    streamed = shortcut_guard.ShortcutGuard.over(iter(table.to_batches(max_chunksize=250)), candidates, labels,
                                                 FeatureConfig(), uniform)

    def described(guard):
        names = guard.names.to_pylist()
        base = {name: row.tolist() for name, row in zip(names, guard.base)}
        features = [sorted(names[k] for k in guard.in_kept[guard.fids[guard.offsets[i]:guard.offsets[i + 1]]])
                    for i in range(len(candidates))]
        return base, features, guard.label_of.tolist(), guard.totals.tolist()

    assert described(streamed) == described(whole)
    rows = [int(r) for r in candidates[:120]]
    assert streamed.admit(rows) == whole.admit(rows)
    assert [v.ok for v in streamed.verdicts()] == [v.ok for v in whole.verdicts()]


def test_the_papers_letter_is_one_option_away_and_its_verdict_says_what_the_guard_prevents(negation_corpus):
    """``--prior uniform --max-copies 1000 --no-guard`` is AUDAC as written: every drawn copy is added, and on this
    SICK-like corpus a label's largest z* rises, which the verdict names; with the guard (the default) the same
    settings make nothing worse."""
    reports = {}
    for guard in ("--guard", "--no-guard"):
        out = negation_corpus.parent / f"letter{guard}"
        console = run_cli("upsample", negation_corpus, "--out", out, "--prior", "uniform", "--max-copies", "1000",
                          guard).stdout
        reports[guard] = json.loads((out / "report" / "report.json").read_text()), console
    (guarded, _), (letter, console) = reports["--guard"], reports["--no-guard"]
    assert guarded["verdict"]["ok"] and not letter["verdict"]["ok"]
    assert letter["verdict"]["labels_risen"] and "--no-guard: every drawn copy was added" in console
    assert letter["rows_added"] > guarded["rows_added"]


def test_a_band_holding_no_shortcut_is_widened_and_tokens_pass_the_audits_threshold(tmp_path):
    """On 6,000 rows the band of 0.2–2% of the rows (20–120) holds none of the significant tokens: `outdoors`, in
    a thousand rows, leans to entailment and copies of its other rows (one each) correct it. The band is widened to
    the significant tokens whose correction fits --max-copies; every token is significant by the input's audit's
    threshold, the one its verdict and a fresh `refinery audit` use (no second threshold of the tokens' own)."""
    corpus, out = tmp_path / "wide", tmp_path / "up"
    run_cli("synth", "--rows", 6000, "--planted", "outdoors:entailment:0.3", "--leak", 0.5, "--out", corpus)
    console = run_cli("upsample", corpus, "--out", out).stdout
    report = json.loads((out / "report" / "report.json").read_text())
    assert report["band_widened"] and [c["token"] for c in report["selected"]] == ["outdoors@hypothesis"]
    assert report["threshold"] == pytest.approx(report["verdict"]["threshold_before"], abs=1e-4)
    assert all(c["z"] > report["threshold"] for c in report["selected"])
    assert report["verdict"]["ok"] and not report["verdict"]["labels_over_threshold"], console
    assert report["z_after"]["outdoors@hypothesis"] < report["threshold"] < report["selected"][0]["z"]
