"""Named DuckDB queries over canonical corpora, and user .sql files; names are quoted, never spliced."""
import json

from conftest import SNLI_DEV, SNLI_HARD, SNLI_TEST, run_cli

from refinery.io import queries
from refinery.io.corpus import Corpus
from refinery.io.corpus_writer import convert
from refinery.io.read_options import ReadOptions
from refinery.io.schema import PRESETS


def test_label_distribution_matches_inspect(tmp_path):
    out = run_cli("sql", "label_distribution", f"hard={SNLI_HARD}", "--preset", "snli", "--format", "json")
    rows = json.loads(out.stdout)
    assert {r["label"]: r["n"] for r in rows} == {"contradiction": 1135, "neutral": 1068, "entailment": 1058}


def test_cross_split_leaks_find_test_hard_inside_test(tmp_path):
    # every snli_test_hard pair is an snli_test pair; the releases tokenize differently ("don't" vs
    # "do n't"), so normalization recovers all but a handful (15 of 3,261 here)
    con = queries.connect()
    files = queries.corpus_files([f"test={SNLI_TEST}", f"hard={SNLI_HARD}"], PRESETS["snli"], ReadOptions(),
                                 str(tmp_path))
    queries.register_corpora(con, files)
    leaks = queries.run(con, "cross_split_leaks")
    hard_ids = {r["id"] for r in leaks.to_pylist() if r["split"] == "hard"}
    assert 0.99 * 3261 <= len(hard_ids) <= 3261
    assert all(r["label"] == r["other_label"] for r in leaks.to_pylist())


def test_duplicates_and_lengths(tmp_path):
    convert([SNLI_DEV], str(tmp_path / "dev"), PRESETS["snli"])
    con = queries.connect()
    queries.register_corpora(con, {"dev": Corpus.open(str(tmp_path / "dev")).files})
    dups = queries.run(con, "duplicates_exact")
    assert all(n > 1 for n in dups["occurrences"].to_pylist())
    hist = queries.run(con, "length_histogram")
    assert sum(r["n"] for r in hist.to_pylist() if r["field"] == "text_a") == 9842


def test_user_sql_file_and_quoting(tmp_path):
    q = tmp_path / "mine.sql"
    q.write_text("SELECT count(*) AS n FROM corpus WHERE label = $label;")
    out = run_cli("sql", str(q), SNLI_HARD, "--preset", "snli", "--param", "label=neutral", "--format", "json")
    assert json.loads(out.stdout) == [{"n": 1068}]
    assert queries.quote_ident('a"b') == '"a""b"'
    assert queries.quote_literal("it's") == "'it''s'"


def test_csv_writes_list_columns_as_json_text(tmp_path):
    import csv
    import io

    from click.testing import CliRunner

    from refinery.cli.main import main

    src = tmp_path / "dups.jsonl"   # failed with 'Unsupported Type:list<l: string>'
    src.write_text("".join(json.dumps({"sentence1": f"A man {i % 5} .", "sentence2": "He is .", "pairID": str(i),
                                       "gold_label": "neutral"}) + "\n" for i in range(20)))
    convert([str(src)], str(tmp_path / "c"), PRESETS["snli"])
    printed = CliRunner().invoke(main, ["sql", "duplicates_exact", str(tmp_path / "c"), "--format", "csv"])
    assert printed.exit_code == 0, printed.output
    rows = list(csv.DictReader(io.StringIO(printed.output.strip())))
    assert len(rows) == 5 and all(json.loads(r["in_splits"]) == ["c"] for r in rows)
    assert sorted(i for r in rows for i in json.loads(r["ids"])) == sorted(map(str, range(20)))
    written = CliRunner().invoke(main, ["sql", "duplicates_exact", str(tmp_path / "c"), "--format", "csv",
                                        "--output", str(tmp_path / "dups.csv")])
    assert written.exit_code == 0 and (tmp_path / "dups.csv").read_text() == printed.output.strip() + "\n"
