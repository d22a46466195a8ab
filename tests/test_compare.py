"""refinery compare: the same model trained on a corpus and its refined versions, scored on challenge sets."""
import json

import pyarrow.compute as pc
import pyarrow.parquet as pq
import pytest

from conftest import DATA, SNLI_DEV, SNLI_HARD, run_cli

HANS = DATA / "hans" / "hans_regenerated.tsv"
MNLI_HARD = DATA / "mnli" / "mnli_dev_matched_hard.jsonl"


@pytest.fixture(scope="module")
def planted(tmp_path_factory):
    """A planted-shortcut corpus with a genuine signal (cue words), its in-distribution test split and
    its anti-shortcut split (the planted words paired with other labels), all over the same words."""
    root = tmp_path_factory.mktemp("planted")
    for split, rows in (("train", 15_000), ("test", 2_000), ("anti-shortcut", 2_000)):
        run_cli("synth", "--rows", rows, "--signal-words", 200, "--split", split, "--seed", 3, "--out", root / split)
    return root


def test_refined_corpora_beat_the_original_where_the_shortcut_is_reversed(planted, tmp_path):
    run_cli("zfilter", planted / "train", "--k", 20, "--out", tmp_path / "zf")
    # AUDAC's band must reach the planted words' frequency (about 6% of the rows each)
    run_cli("upsample", planted / "train", "--k", 10, "--band-min", "0.01", "--band-max", "0.2", "--iterations", 20, "--out", tmp_path / "up")
    out = run_cli("compare", "--train", f"original={planted / 'train'}", "--train", f"zfilter={tmp_path / 'zf' / 'kept'}",
                  "--train", f"upsample={tmp_path / 'up'}", "--eval", f"test={planted / 'test'}",
                  "--eval", f"anti={planted / 'anti-shortcut'}", "--seeds", 2, "--out", tmp_path / "cmp").stdout
    assert "anti (2,000 rows; majority class " in out
    report = json.loads((tmp_path / "cmp" / "report" / "report.json").read_text())
    acc = report["accuracy"]
    # z-filtering: every seed far above every seed of the original on the reversed shortcut
    assert min(acc["anti"]["zfilter"]["seeds"]) > max(acc["anti"]["original"]["seeds"]) + 0.25, acc["anti"]
    assert acc["anti"]["zfilter"]["gain"]["significant"] and acc["anti"]["zfilter"]["gain"]["ci95"][0] > 0.25
    # AUDAC copies a row at most 3 times and never strengthens another significant feature (the cue words are
    # significant too), so the planted words' minority rows run out before their labels even out: it gains less
    gain = acc["anti"]["upsample"]["gain"]
    assert gain["significant"] and gain["ci95"][0] > 0.03, acc["anti"]["upsample"]
    for refined in ("zfilter", "upsample"):   # both within a few points in distribution
        assert abs(acc["test"][refined]["mean"] - acc["test"]["original"]["mean"]) < 0.06, acc["test"]
    predictions = pq.read_table(tmp_path / "cmp" / "report" / "predictions.parquet")
    assert predictions.num_rows == 3 * 2 * (2_000 + 2_000)
    # resumable: a rerun trains nothing and reports the same numbers
    runs = sorted((tmp_path / "cmp" / "runs").iterdir())
    stamps = [(r / "run.json").stat().st_mtime_ns for r in runs]
    run_cli("compare", "--train", f"original={planted / 'train'}", "--train", f"zfilter={tmp_path / 'zf' / 'kept'}",
            "--train", f"upsample={tmp_path / 'up'}", "--eval", f"test={planted / 'test'}",
            "--eval", f"anti={planted / 'anti-shortcut'}", "--seeds", 2, "--out", tmp_path / "cmp")
    assert [(r / "run.json").stat().st_mtime_ns for r in runs] == stamps
    assert json.loads((tmp_path / "cmp" / "report" / "report.json").read_text())["accuracy"] == acc


def test_leakage_neutral_weights_beat_the_original_where_premise_popularity_is_reversed(tmp_path):
    """The selection bias of Zhang et al.: a premise's popularity (its degree) sets its label odds.
    The anti-shortcut split pairs popular premises with the labels of rare ones and vice versa."""
    for split, rows in (("train", 12_000), ("test", 2_000), ("anti-shortcut", 2_000)):
        run_cli("synth", "--rows", rows, "--signal-words", 200, "--planted", "none", "--premise-pool", 2_000,
                "--split", split, "--seed", 3, "--out", tmp_path / split)
    run_cli("weights", "--input", f"train={tmp_path / 'train'}", "--clip", 10, "--out", tmp_path / "weighted")
    run_cli("compare", "--train", f"original={tmp_path / 'train'}", "--train", f"weights={tmp_path / 'weighted'}",
            "--eval", f"test={tmp_path / 'test'}", "--eval", f"anti={tmp_path / 'anti-shortcut'}", "--seeds", 2,
            "--out", tmp_path / "cmp")
    acc = json.loads((tmp_path / "cmp" / "report" / "report.json").read_text())["accuracy"]
    assert min(acc["anti"]["weights"]["seeds"]) > max(acc["anti"]["original"]["seeds"]) + 0.08, acc["anti"]
    gain = acc["anti"]["weights"]["gain"]
    assert gain["significant"] and gain["ci95"][0] > 0.05, gain
    assert abs(acc["test"]["weights"]["mean"] - acc["test"]["original"]["mean"]) < 0.06, acc["test"]


def test_an_snli_model_is_scored_on_hans_and_mnli_hard_in_one_run(tmp_path):
    out = run_cli("compare", "--train", f"snli={SNLI_DEV}", "--preset", "snli", "--eval", f"snli-hard={SNLI_HARD}",
                  "--eval", f"mnli-hard={MNLI_HARD}:mnli", "--eval", f"hans={HANS}:hans",
                  "--out", tmp_path / "cmp").stdout
    report = json.loads((tmp_path / "cmp" / "report" / "report.json").read_text())
    hans = report["eval"]["hans"]
    assert hans["rows"] == 30_000 and hans["labels"] == ["entailment", "non-entailment"]
    assert hans["label_map"] == {"contradiction": "non-entailment", "entailment": "entailment",
                                 "neutral": "non-entailment"}
    assert report["eval"]["mnli-hard"]["rows"] == 4_573 and report["eval"]["snli-hard"]["rows"] == 3_261
    cells = report["accuracy"]["hans"]["snli"]["breakdown"]["heuristic × label"]
    assert set(cells) == {f"{h} / {l}" for h in ("lexical_overlap", "subsequence", "constituent")
                          for l in ("entailment", "non-entailment")}
    assert all(c["rows"] == 5_000 for c in cells.values())
    overall = report["accuracy"]["hans"]["snli"]["mean"]
    assert overall == pytest.approx(sum(c["accuracy"] for c in cells.values()) / 6, abs=1e-3)
    # SNLI test-hard rows are SNLI test rows, not dev rows: the leak check finds none
    assert report["eval"]["snli-hard"]["leaked_rows"] == {"snli": 0}
    assert "hans (30,000 rows; majority class " in out
    page = (tmp_path / "cmp" / "report" / "report.html").read_text()   # the bar chart is an SVG, not a PNG
    assert "<img" not in page and page.count("<svg") == 1 and "(majority class: non-entailment)" in page
    predictions = pq.read_table(tmp_path / "cmp" / "report" / "predictions.parquet")
    assert set(predictions.filter(pc.equal(predictions["eval"], "hans"))["prediction"].to_pylist()) <= \
        {"entailment", "non-entailment"}


def test_an_evaluation_label_no_map_reaches_is_a_clear_error(tmp_path):
    proc = run_cli("compare", "--train", f"snli={SNLI_DEV}", "--preset", "snli", "--eval", f"hard={SNLI_HARD}",
                   "--label-map", "hard=neutral:contradiction,contradiction:neutral", "--out", tmp_path / "a",
                   check=False)
    assert proc.returncode == 0, proc.stderr          # a swap reaches every label
    proc = run_cli("compare", "--train", f"snli={SNLI_DEV}", "--preset", "snli", "--eval", f"hard={SNLI_HARD}",
                   "--label-map", "hard=neutral:contradiction,contradiction:contradiction", "--out", tmp_path / "b",
                   check=False)
    assert proc.returncode == 2 and "no training label maps to 'neutral'" in proc.stderr, proc.stderr
    assert len(proc.stderr.strip().splitlines()) == 1


def test_compare_refuses_repeated_names_and_training_on_evaluation_rows(tmp_path):
    twice = run_cli("compare", "--train", f"snli={SNLI_DEV}", "--train", f"snli={SNLI_HARD}", "--eval",
                    f"hard={SNLI_HARD}", "--preset", "snli", "--out", tmp_path / "a", check=False)
    assert twice.returncode == 2 and "names 'snli' twice" in twice.stderr, twice.stderr
    # SNLI-hard is a subset of SNLI test: training on test and scoring on hard scores training rows
    leaked = run_cli("compare", "--train", f"test={SNLI_HARD.replace('_hard', '')}", "--eval", f"hard={SNLI_HARD}",
                     "--preset", "snli", "--out", tmp_path / "b", check=False)
    assert leaked.returncode == 2 and "3,261 of the 3,261 rows of evaluation set hard" in leaked.stderr, leaked.stderr
    assert not (tmp_path / "b" / "report").exists()
    allowed = run_cli("compare", "--train", f"test={SNLI_HARD.replace('_hard', '')}", "--eval", f"hard={SNLI_HARD}",
                      "--preset", "snli", "--allow-overlap", "--out", tmp_path / "b").stdout
    assert "3,261 evaluation rows also in training" in allowed
    report = json.loads((tmp_path / "b" / "report" / "report.json").read_text())
    assert report["accuracy"]["hard"]["test"]["overlap_rows"] == 3_261


def test_a_corpus_with_splits_trains_on_its_train_split(tmp_path):
    """refinery weights over train+test writes one corpus with a split column: compare trains on 'train' only."""
    run_cli("weights", "--input", f"train={SNLI_DEV}", "--input", f"test={SNLI_HARD}", "--preset", "snli",
            "--folds", 2, "--trees", 10, "--out", tmp_path / "w")
    out = run_cli("compare", "--train", f"w={tmp_path / 'w'}", "--eval", f"hard={SNLI_HARD}", "--preset", "snli",
                  "--out", tmp_path / "c").stdout
    report = json.loads((tmp_path / "c" / "report" / "report.json").read_text())
    assert report["train"]["w"] == {**report["train"]["w"], "rows": 9_842, "other_splits_left_out": 3_261}
    assert report["eval"]["hard"]["leaked_rows"] == {"w": 0} and "also in training" not in out
    assert report["eval"]["hard"]["majority"] == {"label": "contradiction", "accuracy": round(1_135 / 3_261, 4)}
    nosplit = run_cli("compare", "--train", f"w={tmp_path / 'w'}@dev", "--eval", f"hard={SNLI_HARD}", "--preset",
                      "snli", "--out", tmp_path / "d", check=False)
    assert nosplit.returncode == 2 and "has splits test, train and no 'dev' split" in nosplit.stderr


def test_a_corpus_of_one_named_split_trains_on_it_and_print_config_gives_the_same_comparison(tmp_path):
    """weights over one named split writes that split's name (no 'all'); compare trains on a corpus's only split.
    --print-config prints the comparison as a pipeline whose run scores the same."""
    lines = open(SNLI_DEV).read().splitlines()
    (tmp_path / "dev.jsonl").write_text("\n".join(lines[:800]) + "\n")
    (tmp_path / "hard.jsonl").write_text("\n".join(open(SNLI_HARD).read().splitlines()[:300]) + "\n")
    run_cli("zfilter", tmp_path / "dev.jsonl", "--preset", "snli", "--k", 5, "--out", tmp_path / "zf")
    run_cli("weights", "--input", f"dev={tmp_path / 'dev.jsonl'}", "--preset", "snli", "--folds", 2, "--trees", 5,
            "--out", tmp_path / "w")
    args = ["compare", "--train", f"z={tmp_path / 'zf' / 'kept'}", "--train", f"w={tmp_path / 'w'}", "--eval",
            f"hard={tmp_path / 'hard.jsonl'}", "--preset", "snli", "--bootstrap", 100]
    run_cli(*args, "--out", tmp_path / "c")
    verb = json.loads((tmp_path / "c" / "report" / "report.json").read_text())
    assert verb["train"]["w"]["rows"] == 800 and verb["train"]["w"]["other_splits_left_out"] == 0
    printed = run_cli(*args, "--out", tmp_path / "c2", "--print-config").stdout
    assert not (tmp_path / "c2").exists()                                   # printing runs nothing
    (tmp_path / "c.yaml").write_text(printed)
    run_cli("run", tmp_path / "c.yaml", "--out", tmp_path / "p", "--no-audit-steps")
    piped = json.loads((tmp_path / "p" / "01-compare" / "report" / "report.json").read_text())
    assert [v["rows"] for v in piped["train"].values()] == [v["rows"] for v in verb["train"].values()]
    assert [v["mean"] for v in piped["accuracy"]["hard"].values()] == \
        [v["mean"] for v in verb["accuracy"]["hard"].values()]
