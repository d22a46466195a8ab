"""dedup and decontaminate (issue 67): near-duplicates found with their labels, on synthetic ground truth (``refinery
synth --near-duplicates --contamination``) and on SNLI; contamination of training rows by evaluation sets."""
import json
import re

import numpy as np
import pytest
from click.testing import CliRunner

from conftest import DATA, SNLI_DEV, SNLI_HARD, SNLI_TEST, run_cli
from refinery.io.corpus import Corpus

THRESHOLD = 0.8   # dedup's default Jaccard
K = 2             # its default shingle size


def _norm_words(text) -> list:
    return re.sub(r"[^\w]+", " ", (text or "").lower()).split()


def _shingles(text) -> set:
    words = _norm_words(text)
    return {tuple(words)} if len(words) < K else {tuple(words[i:i + K]) for i in range(len(words) - K + 1)}


def _jaccard(x, y) -> float:
    a, b = _shingles(x), _shingles(y)
    return len(a & b) / len(a | b) if a | b else 1.0


def _cli(*args):
    from refinery.cli.main import main

    result = CliRunner().invoke(main, list(map(str, args)))
    assert result.exit_code == 0, result.output
    return result


def _parts(out):
    return Corpus.open(str(out / "kept")).read(), Corpus.open(str(out / "rejected")).read()


@pytest.fixture(scope="module")
def planted(tmp_path_factory):
    """A 20,000-row synthetic corpus with 5% planted near-duplicates (a fifth with another label) and 2% copies of
    its held-out split's rows, and that held-out split."""
    from refinery.io import synth

    root = tmp_path_factory.mktemp("planted")
    synth.write(synth.SynthSpec(rows=20_000, near_duplicates=0.05, flip_share=0.2, contamination=0.02),
                str(root / "train"))
    synth.write(synth.SynthSpec(rows=20_000, split="test"), str(root / "test"))
    return root, Corpus.open(str(root / "train")).read()


def _clusters(kept, rejected) -> dict:
    """Each row's cluster as dedup wrote it: the id its duplicate_of chain ends at (a label-conflict cluster's
    same-label copy names its label's kept row, which names the cluster's first), else its own."""
    named = {r["id"]: r["duplicate_of"] for r in kept.to_pylist() + rejected.to_pylist()}

    def root(i):
        while named.get(i):
            i = named[i]
        return i

    return {i: root(i) for i in named}


def test_dedup_finds_planted_near_duplicates_with_recall_and_precision_of_095(planted, tmp_path):
    """Every planted pair at Jaccard ≥ 0.8 in both texts (measured here, apart from dedup's code) is clustered
    (recall ≥ 0.95) and every pair dedup reports is of one planted family (precision ≥ 0.95); rows in = kept +
    rejected, each rejected row naming its kept partner, its similarity and its reason."""
    root, train = planted
    _cli("dedup", root / "train", "--conflicts", "one", "--out", tmp_path / "d")
    kept, rejected = _parts(tmp_path / "d")
    assert kept.num_rows + rejected.num_rows == train.num_rows
    by_id = {r["id"]: r for r in train.to_pylist()}
    positives = [(r["id"], r["planted_copy_of"]) for r in by_id.values()
                 if r["planted_edit"] not in (None, "held-out")
                 and min(_jaccard(r["text_a"], by_id[r["planted_copy_of"]]["text_a"]),
                         _jaccard(r["text_b"], by_id[r["planted_copy_of"]]["text_b"])) >= THRESHOLD]
    assert len(positives) > 400
    cluster = _clusters(kept, rejected)
    recall = sum(cluster[a] == cluster[b] for a, b in positives) / len(positives)

    def family(i):
        source = by_id[i]["planted_copy_of"]
        return source if source in by_id else i

    reported = rejected.to_pylist()
    precision = sum(family(r["id"]) == family(r["duplicate_of"]) for r in reported) / len(reported)
    assert recall >= 0.95 and precision >= 0.95, (recall, precision)
    for r in reported:
        assert r["duplicate_of"] in by_id and r["similarity"] is not None
        assert r["reason"].startswith(("exact duplicate of", "normalized duplicate of", "near-duplicate of"))
        assert r["duplicate_of"] in r["reason"]
        if r["reason"].startswith("near-duplicate"):
            assert r["similarity"] == pytest.approx(min(
                _jaccard(r["text_a"], by_id[r["duplicate_of"]]["text_a"]),
                _jaccard(r["text_b"], by_id[r["duplicate_of"]]["text_b"])), abs=1e-6)


def test_dedup_reports_every_planted_label_conflict_and_keeps_its_rows_by_default(planted, tmp_path):
    """A planted near-duplicate with a flipped label is in a label-conflict cluster: by default (--conflicts keep)
    the cluster keeps a row of each label (each pair's rows kept, or the copy of a row of its own label the cluster
    keeps), a kept copy naming its partner; the report counts the clusters."""
    root, train = planted
    _cli("dedup", root / "train", "--out", tmp_path / "d")
    kept, rejected = _parts(tmp_path / "d")
    by_id = {r["id"]: r for r in train.to_pylist()}
    flipped = [(r["id"], r["planted_copy_of"]) for r in by_id.values() if r["planted_flip"]
               and min(_jaccard(r["text_a"], by_id[r["planted_copy_of"]]["text_a"]),
                       _jaccard(r["text_b"], by_id[r["planted_copy_of"]]["text_b"])) >= THRESHOLD]
    assert len(flipped) > 50
    kept_ids = set(kept["id"].to_pylist())
    cluster = _clusters(kept, rejected)
    dropped_for = {r["id"]: r["duplicate_of"] for r in rejected.to_pylist()}
    for a, b in flipped:
        assert cluster[a] == cluster[b]
        for row in (a, b):   # kept, or a copy of the kept row of its own label
            assert row in kept_ids or (dropped_for[row] in kept_ids
                                       and by_id[dropped_for[row]]["label"] == by_id[row]["label"]), row
    assert sum(a in kept_ids and b in kept_ids for a, b in flipped) > 0.9 * len(flipped)
    report = json.loads((tmp_path / "d" / "report" / "report.json").read_text())["dedup"]
    assert report["conflict_clusters"] >= len({cluster[a] for a, _ in flipped})
    assert sum(c["clusters"] for c in report["conflicts"]) == report["conflict_clusters"]


def test_dedup_of_two_splits_keeps_the_preferred_splits_row(planted, tmp_path):
    """Across splits, with --prefer-split test, every training copy of a held-out row is removed naming the test row,
    and the report counts them under the split pair (test, train)."""
    root, train = planted
    _cli("dedup", "--input", f"train={root / 'train'}", "--input", f"test={root / 'test'}", "--prefer-split", "test",
         "--out", tmp_path / "d")
    _, rejected = _parts(tmp_path / "d")
    copies = {r["id"]: r["planted_copy_of"] for r in train.to_pylist() if r["planted_edit"] == "held-out"}
    named = {r["id"]: r["duplicate_of"] for r in rejected.to_pylist()}
    assert all(named.get(i) == source for i, source in copies.items())
    pairs = json.loads((tmp_path / "d" / "report" / "report.json").read_text())["dedup"]["split_pairs"]
    cross = next(p for p in pairs if (p["kept split"], p["duplicate split"]) == ("test", "train"))
    assert cross["duplicates"] == len(copies)


def test_dedup_on_snli_dev_leaves_rows_that_share_only_a_premise(tmp_path):
    """SNLI dev's three hypotheses per premise are not duplicates: every pair dedup reports has both texts at
    Jaccard ≥ 0.8 (measured here), far fewer than the rows sharing a premise; the conflicts table counts each
    cluster whose labels differ."""
    import refinery as rf

    rf.dedup(SNLI_DEV, preset="snli", out=str(tmp_path / "d"))
    kept, rejected = _parts(tmp_path / "d")
    rows = kept.to_pylist() + rejected.to_pylist()
    assert len(rows) == 9842
    by_id = {r["id"]: r for r in rows}
    flagged = [(r, by_id[r["duplicate_of"]]) for r in rows if r["duplicate_of"]]
    premises = [r["text_a"] for r in rows]
    sharing = sum(premises.count(p) > 1 for p in set(premises))
    assert 0 < len(flagged) < 0.01 * sharing

    def similarity(a, b):
        return min(_jaccard(a["text_a"], b["text_a"]), _jaccard(a["text_b"], b["text_b"]))

    assert all(a["similarity"] == pytest.approx(similarity(a, b), abs=1e-6) for a, b in flagged)
    clusters, labels = {}, {}
    for r in rows:
        clusters.setdefault(r["duplicate_of"] or r["id"], []).append(r)
        labels.setdefault(r["duplicate_of"] or r["id"], set()).add(r["label"])
    for rows_of in clusters.values():   # a chain of near-duplicates: each row reaches 0.8 with another of its own
        assert len(rows_of) == 1 or all(any(similarity(a, b) >= THRESHOLD for b in rows_of if b is not a)
                                        for a in rows_of)
    members = {c for c in clusters if any(r["duplicate_of"] == c for r in rows)}
    report = json.loads((tmp_path / "d" / "report" / "report.json").read_text())
    assert report["dedup"]["conflict_clusters"] == sum(len(labels[c]) > 1 for c in members) > 0
    assert report["kept"] + report["filtered_out"] == 9842 and "verdict" in report


def test_decontaminate_finds_every_planted_copy_of_the_held_out_rows(planted, tmp_path):
    """Against the held-out split, decontaminate removes exactly the planted copies of its rows (recall 1.0, half of
    them re-cased with a final ' .'), each naming the evaluation set and row; none of the held-out rows' neighbours."""
    root, train = planted
    _cli("decontaminate", root / "train", "--against", f"heldout={root / 'test'}", "--out", tmp_path / "c")
    kept, rejected = _parts(tmp_path / "c")
    copies = {r["id"]: r["planted_copy_of"] for r in train.to_pylist() if r["planted_edit"] == "held-out"}
    assert {r["id"]: r["eval_id"] for r in rejected.to_pylist()} == copies
    assert set(rejected["eval_set"].to_pylist()) == {"heldout"}
    assert kept.num_rows + rejected.num_rows == train.num_rows
    report = json.loads((tmp_path / "c" / "report" / "report.json").read_text())["contamination"][0]
    assert report["contaminated"] == len(copies) and report["eval_rows_behind"] == len(copies)


def test_decontaminate_folds_tokenization_and_matches_short_texts_whole(tmp_path):
    """``A man .`` against ``a man.`` is one text; a row shorter than N words is matched whole (not by a part)."""
    train = tmp_path / "train.jsonl"
    train.write_text("".join(json.dumps({"id": i, "text_a": a, "text_b": b, "label": "entailment"}) + "\n"
                             for i, (a, b) in enumerate([("A man .", "He sleeps ."), ("A man", "sleeps"),
                                                         ("A woman .", "He sleeps ."), ("A man .", "He")])))
    evals = tmp_path / "eval.jsonl"
    evals.write_text(json.dumps({"id": "e1", "text_a": "a man.", "text_b": "he  SLEEPS", "label": "neutral"}) + "\n")
    _cli("decontaminate", train, "--against", f"ev={evals}", "--out", tmp_path / "c")
    _, rejected = _parts(tmp_path / "c")
    assert sorted(rejected["id"].to_pylist()) == ["0"] and rejected["eval_id"].to_pylist() == ["e1"]


def test_decontaminate_names_a_row_with_the_first_evaluation_set_given_that_it_overlaps(tmp_path):
    """A training row in two evaluation sets is named with the first given (and its row there), in the column and in
    its reason; given the other way round, with the other; a row in one set only is named with it either way, and
    the row in neither is kept."""
    train = tmp_path / "train.jsonl"
    train.write_text("".join(json.dumps({"id": i, "text_a": a, "text_b": "x", "label": "entailment"}) + "\n"
                             for i, a in [("0", "A dog runs ."), ("1", "A cat sleeps ."), ("2", "Birds fly ."),
                                          ("3", "Fish swim .")]))
    for name, rows in (("one", [("o1", "Birds fly ."), ("o2", "A dog runs .")]), ("two", [("t1", "A dog runs ."),
                                                                                         ("t2", "A cat sleeps .")])):
        (tmp_path / f"{name}.jsonl").write_text("".join(json.dumps({"id": i, "text_a": a, "text_b": "x",
                                                                    "label": "neutral"}) + "\n" for i, a in rows))
    named = {}
    for order in (("one", "two"), ("two", "one")):
        out = tmp_path / "-".join(order)
        _cli("decontaminate", train, *(x for name in order for x in ("--against", f"{name}={tmp_path / name}.jsonl")),
             "--out", out)
        _, rejected = _parts(out)
        named[order] = {r["id"]: (r["eval_set"], r["eval_id"], r["reason"]) for r in rejected.to_pylist()}
    assert {i: v[:2] for i, v in named[("one", "two")].items()} == {"0": ("one", "o2"), "1": ("two", "t2"),
                                                                      "2": ("one", "o1")}
    assert {i: v[:2] for i, v in named[("two", "one")].items()} == {"0": ("two", "t1"), "1": ("two", "t2"),
                                                                      "2": ("one", "o1")}
    assert named[("one", "two")]["0"][2] == "contaminates one row o2 (whole text)"


def test_decontaminate_counts_every_evaluation_row_behind_a_contaminated_row(tmp_path):
    """Two evaluation rows share an 8-gram with one training row: the report counts both behind it (it counted the
    first one each training row matched); a third evaluation row that shares none is not counted."""
    words = "a dog runs across the wide green field"
    rows = [("0", f"{words} today", "It moves ."), ("1", "A cat sleeps on a warm mat .", "It rests .")]
    train = tmp_path / "train.jsonl"
    train.write_text("".join(json.dumps({"id": i, "text_a": a, "text_b": b, "label": "entailment"}) + "\n"
                             for i, a, b in rows))
    evals = tmp_path / "eval.jsonl"
    evals.write_text("".join(json.dumps({"id": i, "text_a": a, "text_b": "x", "label": "neutral"}) + "\n" for i, a in
                             [("e1", f"{words} now"), ("e2", f"then {words}"), ("e3", "Birds fly over the sea .")]))
    _cli("decontaminate", train, "--against", f"ev={evals}", "--ngram", 8, "--out", tmp_path / "c")
    _, rejected = _parts(tmp_path / "c")
    assert rejected["id"].to_pylist() == ["0"]
    report = json.loads((tmp_path / "c" / "report" / "report.json").read_text())["contamination"][0]
    assert report["contaminated"] == 1 and report["eval_rows_behind"] == 2


def test_decontaminate_snli_test_against_test_hard_removes_the_hard_rows(tmp_path):
    """SNLI test-hard is a subset of SNLI test in another tokenization (``man.`` for ``man .``): every hard row found
    in test is removed (≥ 95% of the hard rows)."""
    from refinery.io.corpus import load
    from refinery.io.schema import PRESETS

    _cli("decontaminate", SNLI_TEST, "--preset", "snli", "--against", f"hard={SNLI_HARD}", "--out", tmp_path / "c")
    _, rejected = _parts(tmp_path / "c")
    hard, _ = load([SNLI_HARD], PRESETS["snli"])

    def pairs(t):
        return {(" ".join(_norm_words(a)), " ".join(_norm_words(b)))
                for a, b in zip(t["text_a"].to_pylist(), t["text_b"].to_pylist())}

    assert len(pairs(hard) & pairs(rejected)) >= 0.95 * hard.num_rows


def test_decontaminate_refuses_a_bad_against_in_one_line(tmp_path):
    """A bad --against (not NAME=PATH, or a file that is not there) exits 2 with one line naming it."""
    bad = run_cli("decontaminate", SNLI_DEV, "--preset", "snli", "--against", "nonsense", "--out", tmp_path / "a",
                  check=False)
    assert bad.returncode == 2 and "NAME=PATH" in bad.stderr and "Traceback" not in bad.stderr, bad.stderr
    assert len(bad.stderr.strip().splitlines()) == 1 and bad.stderr.rstrip().endswith("[invalid-setting]"), bad.stderr
    missing = run_cli("decontaminate", SNLI_DEV, "--preset", "snli", "--against", f"x={tmp_path / 'none.jsonl'}",
                      "--out", tmp_path / "b", check=False)
    assert missing.returncode == 2 and "none.jsonl" in missing.stderr and "Traceback" not in missing.stderr
    assert missing.stderr.rstrip().endswith("[bad-input]"), missing.stderr


@pytest.mark.ray
def test_dedup_on_ray_keeps_the_rows_the_local_engine_keeps(planted, tmp_path, monkeypatch, ray_local):
    """On Ray the clustering runs in a task of its own (``prepare_as_task``), never in the driver, and keeps the
    rows the local engine keeps."""
    import refinery as rf
    from refinery.methods.dedup.stage import DedupStage

    root, _ = planted
    rf.dedup(str(root / "train"), out=str(tmp_path / "local"))

    def in_the_driver(self, source, out):
        raise AssertionError("dedup's clustering ran in the driver")

    monkeypatch.setattr(DedupStage, "prepare", in_the_driver)
    rf.dedup(str(root / "train"), engine="ray", out=str(tmp_path / "ray"))
    local, ray = (Corpus.open(str(p / "kept")).read() for p in (tmp_path / "local", tmp_path / "ray"))
    assert local["id"].equals(ray["id"]) and local["duplicate_of"].equals(ray["duplicate_of"])


@pytest.mark.parametrize("verb, options", [("dedup", ["--conflicts", "drop"]), ("decontaminate", ["--ngram", "8"])])
def test_verb_pipeline_step_and_rf_call_keep_the_same_rows_and_the_verdict_is_two_fresh_audits(planted, tmp_path,
                                                                                               verb, options):
    """``refinery dedup``/``decontaminate``, the same step of ``refinery run`` and ``rf.dedup``/``rf.decontaminate``
    keep the same ids; the verdict's figures are those of fresh audits of the input and of the kept rows."""
    import yaml

    import refinery as rf
    from conftest import assert_verdict_is_two_audits, fresh_audit

    root, _ = planted
    if verb == "decontaminate":
        options = [*options, "--against", f"heldout={root / 'test'}"]
    _cli(verb, root / "train", *options, "--out", tmp_path / "verb")
    config = {"conflicts": "drop"} if verb == "dedup" else {"ngram": 8, "against": [f"heldout={root / 'test'}"]}
    (tmp_path / "p.yaml").write_text(yaml.safe_dump({"input": {"paths": [str(root / "train")]},
                                                     "stages": [{verb: config}]}))
    _cli("run", tmp_path / "p.yaml", "--out", tmp_path / "pipe")
    getattr(rf, verb)(str(root / "train"), out=str(tmp_path / "rf"), **config)
    ids = [Corpus.open(str(out / "kept")).read(["id"])["id"].to_pylist()
           for out in (tmp_path / "verb", tmp_path / "pipe" / f"01-{verb}", tmp_path / "rf")]
    dropped = Corpus.open(str(tmp_path / "verb" / "rejected")).read().num_rows
    assert ids[0] == ids[1] == ids[2] and dropped > 100
    report = json.loads((tmp_path / "verb" / "report" / "report.json").read_text())
    assert_verdict_is_two_audits(report["verdict"], fresh_audit(root / "train", tmp_path / "a_in"),
                                 fresh_audit(tmp_path / "verb" / "kept", tmp_path / "a_out"))


@pytest.mark.ray
def test_decontaminate_on_ray_keeps_the_rows_the_local_engine_keeps(planted, tmp_path, ray_local):
    """On Ray the matching runs in a task of its own and removes the rows the local engine removes, each naming the
    same evaluation row."""
    import refinery as rf

    root, _ = planted
    against = [f"heldout={root / 'test'}"]
    rf.decontaminate(str(root / "train"), out=str(tmp_path / "local"), against=against)
    rf.decontaminate(str(root / "train"), engine="ray", out=str(tmp_path / "ray"), against=against)
    kept = [Corpus.open(str(p / "kept")).read(["id"])["id"] for p in (tmp_path / "local", tmp_path / "ray")]
    rejected = [Corpus.open(str(p / "rejected")).read(["id", "eval_id"]) for p in (tmp_path / "local", tmp_path / "ray")]
    assert kept[0].equals(kept[1]) and rejected[0].equals(rejected[1]) and rejected[0].num_rows > 100


def test_ascii_texts_are_folded_as_the_unicode_rule_folds_them():
    """The byte-by-byte fold of ASCII texts gives what NFKC, lower case and the regular expression give; a batch with
    any other character takes the regular expression."""
    import pyarrow as pa
    import pyarrow.compute as pc

    from refinery.core.minhash import normalized

    texts = pa.array(["A man .", None, "  Two\tdogs,run!! ", "", "...", "x1-2Y_z", "it 9:30\n", "\x01a\x7fB"])
    rule = pc.utf8_trim_whitespace(pc.replace_substring_regex(pc.utf8_lower(pc.utf8_normalize(
        pc.fill_null(texts, ""), "NFKC")), r"[^\p{L}\p{N}\p{M}]+", " "))
    assert normalized(texts).to_pylist() == rule.to_pylist() == [
        "a man", "", "two dogs run", "", "", "x1 2y z", "it 9 30", "a b"]
    # contractions are joined before either fold: the same on both paths
    assert normalized(pa.array(["it's 9:30", "it 's 9:30"])).to_pylist() == ["its 9 30", "its 9 30"]
    assert normalized(pa.array(["it's 9:30", "it 's déjà"])).to_pylist() == ["its 9 30", "its déjà"]
    assert normalized(pa.array(["Café, DÉJÀ vu!", "Ｆｕｌｌ width"])).to_pylist() == ["café déjà vu", "full width"]


def test_decontaminate_reads_evaluation_rows_whatever_their_label_and_joins_split_contractions(tmp_path):
    """A newcomer's findings: an evaluation set read through the input's preset lost the rows whose label is not in
    its label set (HANS's non-entailment against SNLI: 10,000 of 15,000 rows silently unread), and SNLI test-hard
    kept the 3 rows whose test copy splits a contraction (``does n't`` / ``doesn't``, ``can not`` / ``cannot``).
    Every test-hard row is in test: decontaminating it against test would keep nothing, which is refused in one
    line (exit 2), nothing written; a preset typo after the last ':' is named."""
    import pyarrow as pa

    from refinery.core.minhash import normalized

    assert normalized(pa.array(["He does n't know .", "He doesn't know.", "She cannot go", "she can not go"]))\
        .to_pylist() == ["he doesnt know", "he doesnt know", "she can not go", "she can not go"]
    hans = tmp_path / "hans.tsv"
    lines = (DATA / "hans" / "hans_regenerated.tsv").read_text().splitlines()
    hans.write_text("\n".join(lines[:601]) + "\n")    # its header and 600 rows, both labels
    proc = run_cli("decontaminate", SNLI_DEV, "--preset", "snli", "--against", f"h={hans}", "--out", tmp_path / "a")
    report = json.loads((tmp_path / "a" / "report" / "report.json").read_text())
    (h,) = report["contamination"]
    assert h["rows"] == 600 and h["rejected"] == 0, h     # both of HANS's labels read, through SNLI's columns
    whole = run_cli("decontaminate", SNLI_HARD, "--preset", "snli", "--against", f"test={SNLI_TEST}",
                    "--out", tmp_path / "b", check=False)
    assert whole.returncode == 2 and not (tmp_path / "b").exists(), whole.stderr
    (said,) = whole.stderr.strip().splitlines()
    assert said.endswith("[too-few-rows]") and "would keep no row" in said, said
    assert "every one of the 3,261 training rows overlaps test" in said and "nothing was written" in said, said
    typo = run_cli("decontaminate", SNLI_DEV, "--preset", "snli", "--against", f"t={SNLI_TEST}:snl",
                   "--out", tmp_path / "c", check=False)
    assert typo.returncode == 2 and "no preset 'snl' (did you mean 'snli'?)" in typo.stderr, typo.stderr
    assert typo.stderr.rstrip().endswith("[invalid-setting]"), typo.stderr
    assert proc.returncode == 0


@pytest.fixture(scope="module")
def planted_200k(tmp_path_factory):
    """200,000 planted rows with 5% near-duplicates: LSH long enough to be killed between its groups of bands."""
    from refinery.io import synth

    path = tmp_path_factory.mktemp("planted_200k") / "train"
    synth.write(synth.SynthSpec(rows=200_000, near_duplicates=0.05, flip_share=0.2), str(path))
    return path


def test_dedup_killed_between_groups_of_bands_resumes_from_the_verified_ones(planted_200k, tmp_path):
    """A run killed once two groups of LSH bands are verified resumes from them (said on the console), and its
    output and report equal an uninterrupted run's."""
    from conftest import killed_when

    from refinery.io.checkpoints import CHECKPOINTS

    killed = tmp_path / "killed"
    finished = killed_when(["dedup", planted_200k], killed, f"{CHECKPOINTS}/dedup/bands-*.parquet", at_least=2)
    resumed = run_cli("dedup", planted_200k, "--out", killed).stdout
    assert re.search(r"resumed: (\d+) groups of LSH bands", resumed), resumed
    assert int(re.search(r"resumed: (\d+) groups", resumed).group(1)) >= len(finished) >= 2
    assert not (killed / CHECKPOINTS).exists()   # gone once the output is published
    run_cli("dedup", planted_200k, "--out", tmp_path / "straight")
    for part in ("kept", "rejected"):
        assert Corpus.open(str(killed / part)).read().equals(Corpus.open(str(tmp_path / "straight" / part)).read())
    reports = [json.loads((out / "report" / "report.json").read_text()) for out in (killed, tmp_path / "straight")]
    assert reports[0]["resumed"].startswith("resumed: ") and "resumed" not in reports[1]
    assert {k: v for k, v in reports[0].items() if k not in ("timing", "resumed")} == \
        {k: v for k, v in reports[1].items() if k != "timing"}


def test_a_tight_memory_budget_holds_fewer_bands_and_finds_the_same_pairs(planted):
    """Bands held one at a time (a tight budget) verify the same pairs as three at a time; a budget the signatures
    do not fit in is refused, naming the memory needed."""
    from refinery.methods.dedup.clusters import BAND_BYTES_PER_ROW, OverBudget, bands_at_once, near_edges, \
        rows_nbytes, signed_rows
    from refinery.methods.dedup.config import DedupConfig

    _, table = planted
    rows = signed_rows([table], K)
    held, n = rows_nbytes(rows), len(rows)
    assert bands_at_once(held, n, held + BAND_BYTES_PER_ROW * n) == 1
    assert bands_at_once(held, n, 1 << 34) == 3
    with pytest.raises(OverBudget, match="memory budget") as refused:
        bands_at_once(held, n, held)
    assert refused.value.code == "over-budget"
    everyone = np.arange(n)
    one, three = (near_edges(rows.shingles, everyone, DedupConfig(), at_once=k) for k in (1, 3))
    assert len(one[0]) > 500 and np.array_equal(one[0], three[0])


def test_dedup_refuses_a_budget_its_signatures_do_not_fit_in_one_line(planted, tmp_path):
    root, _ = planted
    proc = run_cli("dedup", root / "train", "--memory-budget", "512K", "--out", tmp_path / "o", check=False)
    assert proc.returncode == 2 and "Traceback" not in proc.stderr, proc.stderr
    assert len(proc.stderr.strip().splitlines()) == 1 and "memory budget" in proc.stderr, proc.stderr
    assert proc.stderr.rstrip().endswith("[over-budget]") and "--memory-budget" in proc.stderr, proc.stderr
    assert not (tmp_path / "o" / "kept").exists()


def test_mistakes_a_newcomer_makes_are_refused_in_one_line(planted, tmp_path):
    """A --prefer-split that names no split of the input (it would keep the training copies of test rows, silently),
    a memory budget that is neither bytes nor a fraction, an evaluation set read without its preset: one line each,
    exit 2, nothing written."""
    root, _ = planted
    two = ["--input", f"train={root / 'train'}", "--input", f"test={root / 'test'}"]
    cases = [(["dedup", *two, "--prefer-split", "tset"], "missing-split",
              ("--prefer-split tset", "(its splits: train, test)", "did you mean test?")),
             (["dedup", root / "train", "--prefer-split", "test"], "missing-split",
              ("--prefer-split test", "names no splits", "--input train=PATH --input test=PATH")),
             (["dedup", root / "train", "--memory-budget", "1.5"], "invalid-setting",
              ("memory budget '1.5'", "a fraction of memory is at most 1", "1.5G")),
             (["decontaminate", root / "train", "--against", f"dev={SNLI_DEV}"], "missing-columns",
              ("--against dev: ", "--preset snli")),
             ]
    for args, code, said in cases:
        proc = run_cli(*args, "--out", tmp_path / "o", check=False)
        assert proc.returncode == 2 and len(proc.stderr.strip().splitlines()) == 1, (args, proc.stderr)
        assert proc.stderr.rstrip().endswith(f"[{code}]") and all(s in proc.stderr for s in said), (args, proc.stderr)
        assert not (tmp_path / "o").exists()
    assert "=PATH:PRESET" in proc.stderr
    run_cli("dedup", root / "train", "--memory-budget", "none", "--out", tmp_path / "o")   # the default, spelled


def test_decontaminate_in_python_takes_evaluation_sets_as_data(tmp_path):
    """``rf.decontaminate(df, against={name: data or (data, preset)})``, as a notebook holds its evaluation set,
    removes what the same set given as a path removes; evaluation sets given without names are refused, saying
    what to give; ``help`` says it."""
    import pandas as pd

    import refinery as rf

    with open(SNLI_TEST) as fh:
        test = pd.DataFrame([json.loads(line) for _, line in zip(range(600), fh)])
    with open(SNLI_HARD) as fh:
        hard = pd.DataFrame([json.loads(line) for line in fh])
    with pytest.warns(UserWarning):
        as_data = rf.decontaminate(test, preset="snli", against={"hard": (hard, "snli")})
        as_path = rf.decontaminate(test, preset="snli", against={"hard": (SNLI_HARD, "snli")})
    kept = [r.to_pandas(canonical=True)["id"].tolist() for r in (as_data, as_path)]
    assert kept[0] == kept[1] and 0 < len(kept[0]) < 600
    with pytest.raises(TypeError, match=r"against: give the evaluation sets as \{name: data\}"):
        rf.decontaminate(test, preset="snli", against=[hard])
    assert "In Python: {name: data, or (data, preset)}" in rf.decontaminate.__doc__


def test_a_printed_pipeline_names_its_evaluation_sets_wherever_it_runs(tmp_path):
    """``decontaminate … --against hard=hard.jsonl:snli --print-config`` in one folder writes the evaluation set's
    path from that folder, so the pipeline runs from any other (a relative path was left relative)."""
    import shutil

    (tmp_path / "here").mkdir()
    (tmp_path / "elsewhere").mkdir()
    shutil.copy(SNLI_HARD, tmp_path / "here" / "hard.jsonl")
    printed = run_cli("decontaminate", SNLI_DEV, "--preset", "snli", "--against", "hard=hard.jsonl:snli", "--out",
                      "o", "--print-config", cwd=tmp_path / "here").stdout
    assert f"hard={tmp_path / 'here' / 'hard.jsonl'}:snli" in printed
    (tmp_path / "p.yaml").write_text(printed)
    run_cli("run", tmp_path / "p.yaml", "--out", tmp_path / "o", cwd=tmp_path / "elsewhere")


def test_shingles_on_disk_give_back_each_rows_shingles_and_the_pairs_jaccard():
    """SNLI dev's shingles spilled in batches of uneven size, empty texts among them: any rows gathered across
    batches are their shingles as made in memory, and pairs' least Jaccard is the one of those."""
    import pyarrow as pa

    from refinery.core import minhash
    from refinery.io.corpus import load
    from refinery.io.schema import PRESETS
    from refinery.methods.dedup.clusters import SpilledShingles

    table, _ = load([SNLI_DEV], PRESETS["snli"])
    texts = [table["text_a"].to_pylist(), table["text_b"].to_pylist()]
    texts[1][5] = texts[1][7000] = ""   # rows without a shingle in a field
    whole = [minhash.shingles(minhash.normalized(pa.array(t)), K, f).narrowed() for f, t in enumerate(texts)]
    spilled = SpilledShingles(2)
    for begin, end in ((0, 1000), (1000, 1001), (1001, 6000), (6000, len(texts[0]))):
        spilled.append([minhash.shingles(minhash.normalized(pa.array(t[begin:end])), K, f).narrowed()
                        for f, t in enumerate(texts)])
    assert len(spilled) == table.num_rows and spilled.nonempty().all()
    rows = np.unique(np.random.default_rng(0).integers(0, table.num_rows, 3000))
    rows = np.union1d(rows, [0, 5, 999, 1000, 1001, 7000, table.num_rows - 1])
    for got, made in zip(spilled.gather(rows), whole):
        assert np.array_equal(got.sizes(), made.sizes()[rows])
        assert all(np.array_equal(got.values[got.starts[i]:got.starts[i + 1]],
                                  made.values[made.starts[r]:made.starts[r + 1]]) for i, r in enumerate(rows))
    left, right = rows[:-1], np.roll(rows, 7)[:-1]
    jaccard = spilled.min_jaccard(left, right)
    assert np.array_equal(jaccard, minhash.min_jaccard(whole, whole, left, right))
    assert jaccard[right == 5].max() == 0 and (jaccard > 0).sum() >= 50
    spilled.close()
