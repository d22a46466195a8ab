"""refinery compare: the same model trained on a corpus and its refined versions, scored on challenge sets."""
import json
import re
import shutil

import pyarrow.compute as pc
import pyarrow.parquet as pq
import pytest

from conftest import DATA, SNLI_DEV, SNLI_HARD, run_cli
from refinery.io.schema import PRESETS
from refinery.methods.compare import training
from refinery.methods.compare.config import CompareConfig
from refinery.methods.compare.stage import CompareStage, CompareStageConfig
from refinery.pipeline.output import StageOutput
from refinery.pipeline.stage_input import StageInput

HANS = DATA / "hans" / "hans_regenerated.tsv"
MNLI_HARD = DATA / "mnli" / "mnli_dev_matched_hard.jsonl"


def compare(train: dict, evals: list, out, mapping, **model):
    """The compare stage on ``train`` ({name: path}, the first the baseline) and ``evals`` (NAME=PATH[:PRESET]),
    read through ``mapping``: its result."""
    paths = {name: str(p) for name, p in train.items()}
    config = CompareStageConfig(paths, tuple(evals), model=CompareConfig(**model))
    last = list(paths.values())[-1]
    return CompareStage(config).run(StageInput({"": [last]}, mapping), StageOutput(str(out), inputs=list(paths.values())))


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
                  "--train", f"upsample={tmp_path / 'up' / 'corpus'}", "--eval", f"test={planted / 'test'}",
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
    # both within a few points in distribution (the z-filter holds its kept rows to their own, lower threshold:
    # it drops more rows than Algorithm 1's letter, and loses up to about 7 points here)
    for refined, most in (("zfilter", 0.08), ("upsample", 0.06)):
        assert abs(acc["test"][refined]["mean"] - acc["test"]["original"]["mean"]) < most, acc["test"]
    predictions = pq.read_table(tmp_path / "cmp" / "report" / "predictions.parquet")
    assert predictions.num_rows == 3 * 2 * (2_000 + 2_000)
    # resumable: a rerun trains nothing and reports the same numbers; a run cut short (no report, no _SUCCESS) too:
    # OUT was refinery's from the start (an interrupted compare left runs/ in a folder it could not claim again)
    runs = sorted((tmp_path / "cmp" / "runs").iterdir())
    stamps = [(r / "key.json").stat().st_mtime_ns for r in runs]
    assert (tmp_path / "cmp" / "_SUCCESS").exists() and (tmp_path / "cmp" / ".refinery.json").exists()
    shutil.rmtree(tmp_path / "cmp" / "report")
    (tmp_path / "cmp" / "_SUCCESS").unlink()
    run_cli("compare", "--train", f"original={planted / 'train'}", "--train", f"zfilter={tmp_path / 'zf' / 'kept'}",
            "--train", f"upsample={tmp_path / 'up' / 'corpus'}", "--eval", f"test={planted / 'test'}",
            "--eval", f"anti={planted / 'anti-shortcut'}", "--seeds", 2, "--out", tmp_path / "cmp")
    assert [(r / "key.json").stat().st_mtime_ns for r in runs] == stamps
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
    assert "<img" not in page and "(majority class: non-entailment)" in page
    # charts: the accuracy, and the bias slices of the sets that hold the baseline's top features (not HANS)
    slices = report["bias_slices"]
    assert slices["snli-hard"]["features"] and slices["mnli-hard"]["features"] and not slices["hans"]["features"]
    assert len(slices["hans"]["absent"]) == 10 and page.count("<svg") == 3
    assert {f["eval_label"] for f in slices["snli-hard"]["features"]} <= {"entailment", "neutral", "contradiction"}
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
    assert proc.stderr.rstrip().endswith("[missing-setting]"), proc.stderr
    assert len(proc.stderr.strip().splitlines()) == 1


def test_compare_refuses_repeated_names_and_training_on_evaluation_rows(tmp_path):
    twice = run_cli("compare", "--train", f"snli={SNLI_DEV}", "--train", f"snli={SNLI_HARD}", "--eval",
                    f"hard={SNLI_HARD}", "--preset", "snli", "--out", tmp_path / "a", check=False)
    assert twice.returncode == 2 and "names 'snli' twice" in twice.stderr, twice.stderr
    assert twice.stderr.rstrip().endswith("[invalid-setting]"), twice.stderr
    none = run_cli("compare", "--eval", f"hard={SNLI_HARD}", "--preset", "snli", "--out", tmp_path / "a", check=False)
    assert none.returncode == 2 and "give --train NAME=PATH[@SPLIT]" in none.stderr, none.stderr
    assert not (tmp_path / "a").exists()
    # SNLI-hard is a subset of SNLI test: training on test and scoring on hard scores training rows
    leaked = run_cli("compare", "--train", f"test={SNLI_HARD.replace('_hard', '')}", "--eval", f"hard={SNLI_HARD}",
                     "--preset", "snli", "--out", tmp_path / "b", check=False)
    assert leaked.returncode == 2 and "3,261 of the 3,261 rows of evaluation set hard" in leaked.stderr, leaked.stderr
    assert leaked.stderr.rstrip().endswith("[evaluation-overlap]") and "--allow-overlap" in leaked.stderr, leaked.stderr
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
    out = run_cli("compare", "--train", f"w={tmp_path / 'w' / 'corpus'}", "--eval", f"hard={SNLI_HARD}", "--preset", "snli",
                  "--out", tmp_path / "c").stdout
    report = json.loads((tmp_path / "c" / "report" / "report.json").read_text())
    assert report["train"]["w"] == {**report["train"]["w"], "rows": 9_842, "other_splits_left_out": 3_261}
    assert report["eval"]["hard"]["leaked_rows"] == {"w": 0} and "also in training" not in out
    assert report["eval"]["hard"]["majority"] == {"label": "contradiction", "accuracy": round(1_135 / 3_261, 4)}
    nosplit = run_cli("compare", "--train", f"w={tmp_path / 'w' / 'corpus'}@dev", "--eval", f"hard={SNLI_HARD}", "--preset",
                      "snli", "--out", tmp_path / "d", check=False)
    assert nosplit.returncode == 2 and "has splits test, train and no 'dev' split" in nosplit.stderr
    assert nosplit.stderr.rstrip().endswith("[missing-split]"), nosplit.stderr


def test_a_corpus_of_one_named_split_trains_on_it_and_print_config_gives_the_same_comparison(tmp_path):
    """weights over one named split writes that split's name (no 'all'); compare trains on a corpus's only split.
    --print-config prints the comparison as a pipeline whose run scores the same."""
    lines = open(SNLI_DEV).read().splitlines()
    (tmp_path / "dev.jsonl").write_text("\n".join(lines[:800]) + "\n")
    (tmp_path / "hard.jsonl").write_text("\n".join(open(SNLI_HARD).read().splitlines()[:300]) + "\n")
    run_cli("zfilter", tmp_path / "dev.jsonl", "--preset", "snli", "--k", 5, "--out", tmp_path / "zf")
    run_cli("weights", "--input", f"dev={tmp_path / 'dev.jsonl'}", "--preset", "snli", "--folds", 2, "--trees", 5,
            "--out", tmp_path / "w")
    args = ["compare", "--train", f"z={tmp_path / 'zf' / 'kept'}", "--train", f"w={tmp_path / 'w' / 'corpus'}", "--eval",
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


# ------------------------------------------------------------------------------- does the model rely less on it?

def _jsonl(path, rows):
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


def _cue_rows(n, seed, cue_share, start=0):
    """NLI rows whose hypothesis carries a signal word of its label in half the rows, and the cue word ``zzcue`` in
    ``cue_share[label]`` of each label's rows: a shortcut to contradiction where that share is high."""
    import random
    rng = random.Random(seed)
    signal = {"entailment": ["outside", "together", "someone"], "neutral": ["tall", "friends", "because"],
              "contradiction": ["sleeping", "cat", "moon"]}
    fill = "man woman child dog walks sits runs near park street table road".split()
    rows = []
    for i in range(n):
        label = ("entailment", "neutral", "contradiction")[i % 3]
        words = rng.sample(fill, 4) + ([rng.choice(signal[label])] if rng.random() < 0.5 else []) + \
            (["zzcue"] if rng.random() < cue_share[label] else [])
        rng.shuffle(words)
        rows.append({"pairID": f"r{start + i}", "sentence1": " ".join(rng.sample(fill, 6)),
                     "sentence2": " ".join(words), "gold_label": label})
    return rows


def test_bias_slices_score_the_rows_of_the_baselines_top_feature_by_label(tmp_path):
    """AUDAC's Figure 2/4 and Table 1: the rows of a biased feature split by whether their gold label is the
    feature's label; the numbers are checked by hand from the predictions."""
    train = _jsonl(tmp_path / "train.jsonl", _cue_rows(900, 1, {"contradiction": 0.9, "entailment": 0.05,
                                                                "neutral": 0.05}))
    test = _jsonl(tmp_path / "test.jsonl", _cue_rows(300, 2, {"contradiction": 0.5, "entailment": 0.5,
                                                              "neutral": 0.5}, start=10_000))
    result = compare({"base": train}, [f"test={test}"], tmp_path / "cmp", PRESETS["snli"], bootstrap=200)
    report, out = result.report, "\n".join(result.lines)
    assert report.to_json() == json.loads((tmp_path / "cmp" / "report" / "report.json").read_text())
    assert type(report).from_json(report.to_json()) == report
    slices = report.bias_slices["test"]
    top = slices["features"][0]
    assert (top["feature"], top["label"], top["eval_label"]) == ("zzcue@hypothesis", "contradiction", "contradiction")
    assert top["z"] > slices["threshold"]
    # by hand: the test rows with zzcue, split by gold label, scored from predictions.parquet
    rows = [json.loads(line) for line in test.read_text().splitlines()]
    cue = {r["pairID"]: r["gold_label"] for r in rows if "zzcue" in r["sentence2"].split()}
    predictions = pq.read_table(tmp_path / "cmp" / "report" / "predictions.parquet").to_pylist()
    hits = {p["id"]: p["prediction"] == p["gold"] for p in predictions if p["id"] in cue}
    majority = [hits[i] for i, gold in cue.items() if gold == "contradiction"]
    others = [hits[i] for i, gold in cue.items() if gold != "contradiction"]
    assert top["rows"] == len(cue) and top["majority"]["rows"] == len(majority) > 30
    assert top["others"]["rows"] == len(others)
    assert top["majority"]["accuracy"]["base"] == round(sum(majority) / len(majority), 4)
    assert top["others"]["accuracy"]["base"] == round(sum(others) / len(others), 4)
    assert top["gap"]["base"] > 0.2              # the model follows the shortcut: the cue's rows of other labels suffer
    lo, hi = top["others"]["ci95"]["base"]
    assert lo <= top["others"]["accuracy"]["base"] <= hi and hi - lo > 0
    assert "base's most biased features" in out and f"zzcue@hypothesis → contradiction ({len(cue)} rows): base " in out
    page = (tmp_path / "cmp" / "report" / "report.html").read_text()
    assert "test: does the model follow base&#x27;s shortcuts?" in page and page.count("<svg") == 2


@pytest.fixture(scope="module")
def snli_small(tmp_path_factory):
    """1,500 SNLI dev rows, the same with 95% of its contradictions left out, a balanced 90% of it, and 600
    SNLI-hard rows."""
    root = tmp_path_factory.mktemp("small")
    rows = [json.loads(line) for line in open(SNLI_DEV).read().splitlines()[:1_500]]
    contradictions = [r for r in rows if r["gold_label"] == "contradiction"]
    few = [r for r in rows if r["gold_label"] != "contradiction"] + contradictions[::20]
    return {"dev": _jsonl(root / "dev.jsonl", rows), "few": _jsonl(root / "few.jsonl", few),
            "most": _jsonl(root / "most.jsonl", [r for i, r in enumerate(rows) if i % 10]),
            "hard": _jsonl(root / "hard.jsonl", [json.loads(line) for line in
                                                 open(SNLI_HARD).read().splitlines()[:600]])}


def test_a_label_that_collapses_is_a_warning_the_headline_cannot_hide(snli_small, tmp_path):
    """After z-filtering SICK the headline said -2.5 points while contradiction fell from 28.3% to 1.2%."""
    out = run_cli("compare", "--train", f"dev={snli_small['dev']}", "--train", f"few={snli_small['few']}",
                  "--train", f"most={snli_small['most']}", "--eval", f"hard={snli_small['hard']}", "--preset", "snli",
                  "--bootstrap", 200, "--out", tmp_path / "cmp").stdout
    report = json.loads((tmp_path / "cmp" / "report" / "report.json").read_text())
    labels = report["accuracy"]["hard"]
    before = labels["dev"]["breakdown"]["label"]["contradiction"]["accuracy"]
    after = labels["few"]["breakdown"]["label"]["contradiction"]["accuracy"]
    assert before - after > 0.10
    assert len(report["warnings"]) == 1                      # few's contradictions, not most (a balanced 90%)
    warning = report["warnings"][0]
    assert warning.startswith(f"hard: few's accuracy on contradiction fell from {before:.1%} to {after:.1%}")
    assert f"WARNING: {warning}" in out
    assert "Warning: " + warning.replace("'", "&#x27;") in (tmp_path / "cmp" / "report" / "report.html").read_text()
    # gains in points, on the console too
    delta = labels["few"]["gain"]["delta"]
    assert f"{100 * delta:+.1f} points [" in out and "%]" not in out
    lo, hi = labels["most"]["ci95"]                           # each bar's own interval around its accuracy
    assert lo <= labels["most"]["mean"] <= hi


def test_compare_counts_the_evaluation_rows_a_corpus_contaminates_beside_each_accuracy(snli_small, tmp_path):
    """Test-hard rows copied into training in another tokenization and case, with a word added (so not an exact
    overlap, which compare refuses): each is reported contaminated by the 13-gram rule of decontaminate, and the
    clean SNLI dev rows contaminate none."""
    hard = [json.loads(line) for line in open(snli_small["hard"])]
    premises = [r["sentence1"] for r in hard]
    chosen = [r for r in hard if premises.count(r["sentence1"]) == 1                  # no other row of its premise
              and len(re.findall(r"\w+", r["sentence1"] + " " + r["sentence2"])) >= 16][:25]
    planted = [{**r, "pairID": f"planted-{r['pairID']}", "sentence1": _retokenized(r["sentence1"]),
                "sentence2": _retokenized(r["sentence2"]) + " indeed"} for r in chosen]
    dev = [json.loads(line) for line in open(snli_small["dev"])]
    leaky = _jsonl(tmp_path / "leaky.jsonl", dev + planted)
    out = run_cli("compare", "--train", f"clean={snli_small['dev']}", "--train", f"leaky={leaky}", "--eval",
                  f"hard={snli_small['hard']}", "--preset", "snli", "--bootstrap", 100, "--out", tmp_path / "cmp").stdout
    report = json.loads((tmp_path / "cmp" / "report" / "report.json").read_text())
    assert report["eval"]["hard"]["leaked_rows"] == {"clean": 0, "leaky": 0}          # no exact overlap
    found = report["eval"]["hard"]["contaminated"]
    assert found["clean"] == {"rows": 0, "share": 0.0, "examples": []}
    assert found["leaky"]["rows"] == len(planted) == 25 and found["leaky"]["share"] == round(25 / 600, 4)
    assert [(x["id"], x["training_id"]) for x in found["leaky"]["examples"]] == \
        [(r["pairID"], f"planted-{r['pairID']}") for r in chosen[:5]]
    # every row flagged in the predictions; the accuracy on the others is the mean over the unflagged rows
    predictions = pq.read_table(tmp_path / "cmp" / "report" / "predictions.parquet").to_pylist()
    leaked = [p for p in predictions if p["corpus"] == "leaky"]
    assert {p["id"] for p in leaked if p["contaminated"]} == {r["pairID"] for r in chosen}
    assert not any(p["contaminated"] for p in predictions if p["corpus"] == "clean")
    clean = [p["prediction"] == p["gold"] for p in leaked if not p["contaminated"]]
    cell = report["accuracy"]["hard"]["leaky"]
    assert cell["contaminated_rows"] == 25 and cell["clean_accuracy"] == round(sum(clean) / len(clean), 4)
    assert report["accuracy"]["hard"]["clean"]["contaminated_rows"] == 0
    assert "clean_accuracy" not in report["accuracy"]["hard"]["clean"]
    assert f"13-gram contaminated rows: 25, {cell['clean_accuracy']:.1%} on the others" in out, out
    assert "13-gram contaminated rows: 0" in out
    page = (tmp_path / "cmp" / "report" / "report.html").read_text()
    assert ">contaminated rows</th>" in page and ">accuracy on the other rows</th>" in page
    assert f"planted-{chosen[0]['pairID']}" in page


def _retokenized(text):
    """``A man.`` → ``a man .``: lower case, punctuation split off (one text once normalized)."""
    return re.sub(r"\s*([.,!?;:])", r" \1", text.lower())


def test_a_set_pairing_each_claim_with_every_label_cannot_separate_models_that_read_the_claim(tmp_path):
    """A claim-only model on a FEVER-Symmetric-style set scored 50.0% ± 0.0 for every corpus and nothing said
    why; its overlap with the training claims went unseen because the check read claim and evidence."""
    claims = [json.loads(line)["sentence1"] for line in open(SNLI_DEV).read().splitlines()[:1_200:3]]
    labels = ("SUPPORTS", "REFUTES", "NOT ENOUGH INFO")
    train = _jsonl(tmp_path / "claims.jsonl", [{"id": f"t{i}", "claim": c, "label": labels[i % 3]}
                                               for i, c in enumerate(claims[:300])])
    symmetric = [{"id": f"s{i}-{j}", "claim": c, "evidence": f"evidence {j} of claim {i}", "label": label}
                 for i, c in enumerate(claims[300:]) for j, label in enumerate(labels)]
    test = _jsonl(tmp_path / "symmetric.jsonl", symmetric)
    result = compare({"claims": train, "again": train}, [f"sym={test}:fever"], tmp_path / "cmp",
                     PRESETS["fever_claims"], bootstrap=100)
    report, out = result.report, "\n".join(result.lines)
    assert report.reads == "text_a"
    assert report.accuracy["sym"]["claims"]["mean"] == pytest.approx(1 / 3, abs=1e-4)
    shared = report.eval["sym"]["inputs_with_several_labels"]
    assert shared == {"rows": 300, "inputs": 100, "best_possible_accuracy": round(1 / 3, 4), "separates_models": False}
    assert "this set cannot separate the models" in out and "scored on their text_a alone" in out
    assert "cannot separate the models" in (tmp_path / "cmp" / "report" / "report.html").read_text()
    # the overlap is judged on the claims the model reads: the evidence differs, the claims do not
    leaked = _jsonl(tmp_path / "leaked.jsonl", [{"id": f"l{i}", "claim": c, "evidence": "other evidence",
                                                 "label": labels[i % 3]} for i, c in enumerate(claims[:30])])
    with pytest.raises(ValueError, match=r"30 of the 30 rows of evaluation set leak .* training corpus claims "
                                         r".*one text \(text_a\) alone") as overlap:
        compare({"claims": train}, [f"leak={leaked}:fever"], tmp_path / "cmp2", PRESETS["fever_claims"])
    assert overlap.value.code == "evaluation-overlap"


def test_models_of_pairs_and_of_single_texts_are_not_compared_or_scored_on_what_they_do_not_read():
    import pyarrow as pa

    pairs = pa.table({"text_a": ["a dog runs"], "text_b": ["an animal moves"], "label": ["entailment"]})
    single = pa.table({"text_a": ["a dog runs"], "label": ["SUPPORTS"]})
    assert training.model_reads({"a": pairs}, "pair") == "pair" and training.model_reads({"a": pairs}, "hypothesis") == "text_b"
    assert training.model_reads({"a": single}, "hypothesis") == "text_a"
    with pytest.raises(ValueError, match="training corpora a hold pairs and b single texts") as mixed:
        training.model_reads({"a": pairs, "b": single}, "pair")
    assert mixed.value.code == "conflicting-settings"
    assert training.model_view(pairs, "text_a", "e").column_names == ["text_a", "label"]     # the claim alone
    with pytest.raises(ValueError, match="evaluation set e holds single texts, and the models read pairs") as single_texts:
        training.model_view(single, "pair", "e")
    assert single_texts.value.code == "missing-columns"


def test_a_compare_step_passes_on_every_split_of_its_input_and_counts_them(tmp_path):
    """A compare step over a corpus of train and test splits trained on train and said 'rows in 800 = 800 passed on':
    the test split's rows were in no part of the accounting."""
    lines = open(SNLI_DEV).read().splitlines()
    (tmp_path / "train.jsonl").write_text("\n".join(lines[:800]) + "\n")
    (tmp_path / "test.jsonl").write_text("\n".join(lines[800:1100]) + "\n")
    (tmp_path / "p.yaml").write_text(
        f"input: {{splits: {{train: {tmp_path / 'train.jsonl'}, test: {tmp_path / 'test.jsonl'}}}, preset: snli}}\n"
        f"stages:\n  - compare: {{evals: ['hard={SNLI_HARD}:snli'], model: {{bootstrap: 100}}}}\n")
    printed = run_cli("run", tmp_path / "p.yaml", "--out", tmp_path / "o", "--no-audit-steps").stdout
    assert "rows in 1,100 = 1,100 passed on + 0 input rejects (ok)" in printed, printed
    report = json.loads((tmp_path / "o" / "01-compare" / "report" / "report.json").read_text())
    best, majority = max(v["mean"] for v in report["accuracy"]["hard"].values()), report["eval"]["hard"]["majority"]
    assert (best < majority["accuracy"]) == any(n.startswith("hard: every model scores under its majority class")
                                                for n in report["notes"]), report["notes"]


def test_a_model_that_predicts_one_label_has_no_gap_to_read(tmp_path):
    """On HANS every model predicted non-entailment for all 30,000 rows, and a slice read "not@premise 100% vs 0%" as if
    the model followed a shortcut. A model that predicts one label for (nearly) every row of a set or a feature's
    rows has no gap there, and the report says why."""
    train = _jsonl(tmp_path / "train.jsonl", _cue_rows(900, 1, {"contradiction": 0.9, "entailment": 0.05,
                                                                "neutral": 0.05}))
    rows = _cue_rows(900, 1, {"contradiction": 0.9, "entailment": 0.05, "neutral": 0.05})
    one = _jsonl(tmp_path / "one.jsonl", [{**r, "gold_label": "contradiction" if i % 50 else r["gold_label"]}
                                          for i, r in enumerate(rows)])     # 98% contradiction: it answers that
    test = _jsonl(tmp_path / "test.jsonl", _cue_rows(300, 2, {"contradiction": 0.5, "entailment": 0.5,
                                                              "neutral": 0.5}, start=10_000))
    result = compare({"base": train, "one": one}, [f"test={test}"], tmp_path / "cmp", PRESETS["snli"], bootstrap=100)
    report, said = result.report, "\n".join(result.lines)
    assert report.accuracy["test"]["one"]["one_label"]["label"] == "contradiction"
    assert report.accuracy["test"]["base"]["one_label"] is None
    top = report.bias_slices["test"]["features"][0]
    assert top["feature"] == "zzcue@hypothesis" and top["one_label"]["one"]["label"] == "contradiction"
    assert top["gap"]["one"] is None and top["gap"]["base"] > 0.2 and top["one_label"]["base"] is None
    assert "one predicts 'contradiction' for 100% of them (no gap: it reads one label)" in said, said
    assert any(n.startswith("test: one's model predicts 'contradiction' for ") for n in report.notes)
    page = (tmp_path / "cmp" / "report" / "report.html").read_text()
    assert "zzcue@hypothesis: one predicts &#x27;contradiction&#x27;" in page


def test_compare_on_ray_trains_its_runs_as_tasks_to_the_in_process_results(planted, tmp_path):
    args = ["compare", "--train", f"original={planted / 'train'}", "--train", f"test={planted / 'test'}",
            "--eval", f"anti={planted / 'anti-shortcut'}", "--seeds", 2]
    run_cli(*args, "--out", tmp_path / "local")
    run_cli(*args, "--engine", "ray", "--out", tmp_path / "ray")
    local, ray = (json.loads((tmp_path / out / "report" / "report.json").read_text()) for out in ("local", "ray"))
    assert local["accuracy"] == ray["accuracy"] and len(ray["accuracy"]["anti"]["original"]["seeds"]) == 2
    assert pq.read_table(tmp_path / "local" / "report" / "predictions.parquet").equals(
        pq.read_table(tmp_path / "ray" / "report" / "predictions.parquet"))
