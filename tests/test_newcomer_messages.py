"""The messages a newcomer reads (issue 65): a pipeline's step lines and receipt carry each verdict's reasons as the
verb prints them, convert keeps the input's field names, a file in refinery's columns reads without --map, a label
an evaluation set lacks is stated, and a missing column is named as the user's file names it, with the fix."""
import json

import pytest
import yaml
from conftest import DATA, SNLI_DEV, SNLI_TEST, run_cli

from refinery.io.corpus import Corpus


@pytest.fixture(scope="module")
def lost_label_corpus(tmp_path_factory):
    """A planted corpus whose contradictions mostly carry the shortcut (z-filtering takes most of them: a label
    lost), as SICK's are mostly written with a negation."""
    corpus = tmp_path_factory.mktemp("lost") / "corpus"
    run_cli("synth", "--rows", 6000, "--label-shares", "0.45,0.4,0.15", "--planted",
            "nobody:contradiction:0.9,sleeping:contradiction:0.5", "--out", corpus)
    return corpus


def test_a_pipeline_step_says_its_verdicts_reasons_as_the_verb_does(lost_label_corpus, tmp_path):
    """SICK through `refinery run`: zfilter's line said `verdict WARNING: ; remedy: …` (the lost label's rows were
    left out), upsample's said no verdict, and each audit was `reading the audit 00-input passes on`. The step's
    lines are the verb's, the receipt's headline names the lost label, and the report says which audit it reads."""
    spec = tmp_path / "p.yaml"
    spec.write_text(yaml.safe_dump({"input": {"paths": [str(lost_label_corpus)]},
                                    "stages": [{"audit": {}}, {"zfilter": {}}, {"upsample": {}}]}))
    said = run_cli("run", spec, "--out", tmp_path / "o").stdout
    verb = run_cli("zfilter", lost_label_corpus, "--out", tmp_path / "zf",   # in a pipeline's terms, as the step
                   env={"REFINERY_TERMS": "pipeline"}).stdout.splitlines()
    verdict = json.loads((tmp_path / "zf" / "report" / "report.json").read_text())["verdict"]
    assert verdict["labels_lost"] == ["contradiction"]
    step = said.split("== 02-zfilter\n")[1].split("== 03-upsample")[0].splitlines()
    # every verdict line of the verb, in the step's log as the verb printed it (rows: 877 → 51 contradictions)
    shown = [line for line in verb if line.startswith(("verdict", "  "))]
    assert shown and all(f"   {line}" in step for line in shown), (shown, step)
    assert all(f"     {w}" in step for w in verdict["warnings"]) and any("contradiction 877 → " in w
                                                                         for w in verdict["warnings"])
    assert "verdict WARNING: ;" not in said
    upsample = said.split("== 03-upsample\n")[1].splitlines()
    assert any(line.startswith("   verdict ok: max z*") for line in upsample), upsample
    receipt = json.loads((tmp_path / "o" / "pipeline" / "receipt.json").read_text())
    zfilter = next(s for s in receipt["steps"] if s["step"] == "02-zfilter")
    assert zfilter["headline"].endswith("verdict WARNING: " + "; ".join(verdict["warnings"]))
    assert zfilter["verdicts"][""]["warnings"] == verdict["warnings"]
    assert "   report: the input's audit is read from 01-audit" in said.splitlines()
    assert "   report: the audit of 02-zfilter/kept is read from 02-zfilter (the one its verdict made)" in said
    assert "passes on" not in said


def _snli_rows(path, n: int, keep=lambda r: True) -> list[dict]:
    """The first ``n`` rows of an SNLI file with a gold label that ``keep`` accepts."""
    rows = []
    with open(path, encoding="utf-8") as fh:
        for line in fh:
            r = json.loads(line)
            if r["gold_label"] != "-" and keep(r):
                rows.append(r)
            if len(rows) == n:
                break
    return rows


def _msrp_file(path, rows: list[dict]) -> None:
    """SNLI pairs in MSRP's release format (``Quality\\t#1 ID\\t#2 ID\\t#1 String\\t#2 String``; 1: paraphrase, here
    the entailments)."""
    lines = ["Quality\t#1 ID\t#2 ID\t#1 String\t#2 String"]
    lines += [f"{int(r['gold_label'] == 'entailment')}\t{2 * i}\t{2 * i + 1}\t{r['sentence1']}\t{r['sentence2']}"
              for i, r in enumerate(rows)]
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")


def test_convert_keeps_the_presets_field_names_for_the_audit(tmp_path):
    """`refinery convert msr_paraphrase_train.txt --preset msrp`, then `refinery audit`: the features were named
    @premise/@hypothesis, where the input's audit (and a stage's output) names them @sentence1/@sentence2."""
    _msrp_file(tmp_path / "msr.txt", _snli_rows(SNLI_DEV, 2000))
    run_cli("convert", tmp_path / "msr.txt", "--preset", "msrp", "--out", tmp_path / "c")
    assert Corpus.open(str(tmp_path / "c")).manifest.body["field_names"] == ["sentence1", "sentence2"]
    run_cli("audit", tmp_path / "c", "--out", tmp_path / "a")
    run_cli("audit", tmp_path / "msr.txt", "--preset", "msrp", "--out", tmp_path / "raw")
    converted = json.loads((tmp_path / "a" / "report" / "topk.json").read_text())
    raw = json.loads((tmp_path / "raw" / "report" / "topk.json").read_text())
    features = [e["feature"] for entries in converted.values() for e in entries]
    assert features and all(f.endswith(("@sentence1", "@sentence2")) for f in features), features
    assert converted == raw


def test_a_file_in_refinerys_columns_reads_without_a_map(tmp_path):
    """`refinery inspect train.parquet` (columns id, text_a, text_b, label) said "name its columns with --preset or
    --map", though the API read it: every verb reads it as it is, as the same rows the preset reads of the source."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    from refinery.io.corpus import load
    from refinery.io.schema import PRESETS

    rows = [{**r, "pairID": f"p{i}"} for i, r in enumerate(_snli_rows(SNLI_DEV, 1500))]
    pq.write_table(pa.table({"id": [r["pairID"] for r in rows], "text_a": [r["sentence1"] for r in rows],
                             "text_b": [r["sentence2"] for r in rows], "label": [r["gold_label"] for r in rows]}),
                   tmp_path / "train.parquet")
    info = json.loads(run_cli("inspect", tmp_path / "train.parquet", "--json").stdout)
    assert info["rows"] == 1500 and info["rejected"] == 0
    run_cli("convert", tmp_path / "train.parquet", "--out", tmp_path / "c")
    (tmp_path / "snli.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    table = Corpus.open(str(tmp_path / "c")).read()
    preset = load([str(tmp_path / "snli.jsonl")], PRESETS["snli"])[0]
    for column in ("id", "text_a", "text_b", "label"):
        assert table[column].to_pylist() == preset[column].to_pylist()
    run_cli("audit", tmp_path / "train.parquet", "--out", tmp_path / "a")
    run_cli("audit", tmp_path / "snli.jsonl", "--preset", "snli", "--out", tmp_path / "b")
    as_is, by_preset = (json.loads((tmp_path / d / "report" / "topk.json").read_text()) for d in "ab")
    assert as_is == by_preset and as_is["contradiction"]
    # a file in other columns is still refused, in one line naming its columns and the preset that reads it
    proc = run_cli("inspect", tmp_path / "snli.jsonl", check=False)
    assert proc.returncode == 2 and len(proc.stderr.strip().splitlines()) == 1
    assert "has no text_a and label columns (it has " in proc.stderr and "sentence1" in proc.stderr
    assert proc.stderr.rstrip().endswith("[missing-columns]"), proc.stderr
    assert "--preset snli" in proc.stderr


def test_a_label_the_evaluation_set_lacks_is_stated(tmp_path):
    """A 3-label model scored on a 2-label set (FEVER-Symmetric lacks NOT ENOUGH INFO) said nothing of the missing
    label: report.json records it, and the console and the page say it."""
    (tmp_path / "train.jsonl").write_text("".join(json.dumps(r) + "\n" for r in _snli_rows(SNLI_DEV, 3000)))
    two = _snli_rows(SNLI_TEST, 600, lambda r: r["gold_label"] != "neutral")
    (tmp_path / "two.jsonl").write_text("".join(json.dumps(r) + "\n" for r in two))
    said = run_cli("compare", "--train", f"snli={tmp_path / 'train.jsonl'}", "--preset", "snli", "--eval",
                   f"two={tmp_path / 'two.jsonl'}", "--out", tmp_path / "cmp").stdout
    report = json.loads((tmp_path / "cmp" / "report" / "report.json").read_text())
    info = report["eval"]["two"]
    assert info["labels"] == ["contradiction", "entailment"] and info["training_labels_unscored"] == ["neutral"]
    assert info["labels_merged"] == {} and report["training_labels"] == ["contradiction", "entailment", "neutral"]
    stated = next(n for n in report["notes"] if n.startswith("two has no 'neutral' rows"))
    assert f"note: {stated}" in said.splitlines()
    page = (tmp_path / "cmp" / "report" / "report.html").read_text()
    assert stated.replace("'", "&#x27;") in page and "training labels it lacks" in page


def test_a_missing_column_is_named_as_the_users_file_names_it_with_the_fix(tmp_path):
    """weights on FEVER's claims said `needs column(s) text_b, which … lacks (it has id, label, text_a)`: refinery's
    names, not the file's, and no word of what to do."""
    rows = _snli_rows(SNLI_DEV, 300)
    to_fever = {"entailment": "SUPPORTS", "contradiction": "REFUTES", "neutral": "NOT ENOUGH INFO"}
    (tmp_path / "train.jsonl").write_text("".join(json.dumps({
        "id": i, "claim": r["sentence2"], "label": to_fever[r["gold_label"]], "evidence_pages": [f"Page_{i}"]}) + "\n"
        for i, r in enumerate(rows)))
    proc = run_cli("weights", tmp_path / "train.jsonl", "--preset", "fever_claims", "--out", tmp_path / "w",
                   check=False)
    said = proc.stderr.strip()
    assert proc.returncode == 2 and len(said.splitlines()) == 1 and said.endswith("[missing-columns]"), said
    assert "read with --preset fever_claims, it has id, label, claim (as text_a); not read: evidence_pages" in said
    assert "weights reads pairs of texts" in said and "--map text_a=claim,label=label,id=id,text_b=COLUMN" in said
    # a pipeline refuses the step before any work, in the same words
    spec = tmp_path / "p.yaml"
    spec.write_text(yaml.safe_dump({"input": {"paths": [str(tmp_path / "train.jsonl")], "preset": "fever_claims"},
                                    "stages": [{"weights": {}}]}))
    proc = run_cli("run", spec, "--out", tmp_path / "o", check=False)
    assert proc.returncode == 2 and "step 01-weights needs column(s) text_b" in proc.stderr
    assert proc.stderr.rstrip().endswith("[missing-columns]"), proc.stderr
    assert "claim (as text_a); not read: evidence_pages" in proc.stderr


def test_an_input_that_loses_many_rows_to_rejects_says_why(tmp_path):
    """1,000 SNLI dev rows and 300 HANS rows read through SNLI's preset: HANS's non-entailment rows are rejected (a
    label of another release). Beside the count, the verb says how many and the commonest reason, which names the
    preset that reads them."""
    dev, hans = tmp_path / "dev.jsonl", tmp_path / "hans300.tsv"
    with open(SNLI_DEV) as fh:
        dev.write_text("".join(line for _, line in zip(range(1000), fh)))
    with open(DATA / "hans" / "hans_regenerated.tsv") as fh:
        hans.write_text("".join(line for _, line in zip(range(300), fh)))
    proc = run_cli("dedup", dev, hans, "--preset", "snli", "--out", tmp_path / "o")
    said = [line for line in proc.stderr.splitlines() if "input rows" in line]
    assert len(said) == 1, proc.stderr
    assert said[0].startswith("warning: 299 of 1,299 input rows (23.0%) were rejected, 299 for label not in the "
                              "label set") and "preset hans" in said[0], said


def test_an_evaluation_set_of_other_labels_is_refused_with_its_reason(tmp_path):
    """`compare --eval odd=FILE:snli` over a file whose labels are ent/con/neu said only "no good rows in FILE": the
    refusal names how many were rejected and why, and the fix."""
    rows = [json.loads(line) for line in open(SNLI_TEST)][:200]
    short = {"entailment": "ent", "contradiction": "con", "neutral": "neu"}
    (tmp_path / "odd.jsonl").write_text("".join(json.dumps({**r, "gold_label": short[r["gold_label"]]}) + "\n"
                                                for r in rows if r["gold_label"] in short))
    done = run_cli("compare", "--train", f"dev={SNLI_DEV}", "--eval", f"odd={tmp_path / 'odd.jsonl'}:snli",
                   "--preset", "snli", "--out", tmp_path / "c", check=False)
    assert done.returncode == 2 and "evaluation set odd: no good rows in" in done.stderr
    assert done.stderr.rstrip().endswith("[all-rejected]"), done.stderr
    assert "rejected, most for 'label not in the label set entailment|neutral|contradiction'" in done.stderr
    assert f"give the preset of its release (odd={tmp_path / 'odd.jsonl'}:PRESET)" in done.stderr
