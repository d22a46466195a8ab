"""Each writer users bring (pandas 3, polars, DuckDB, HF datasets) read by the verbs that read corpora (every writer
by the reader they share, every verb by a writer in turn): every verb accounts for every record and gives the same
figures as on the JSONL the rows came from."""
import json
import re

import pytest

from conftest import SNLI_DEV, run_cli
from realworld import arrow_cases, hf_datasets, snli_rows

ROWS = 600
WRITERS = ("pandas_parquet", "polars_ipc", "duckdb_parquet", "hf_dataset")
HARD = {"pandas_parquet": 1, "duckdb_parquet": 1}   # a null hypothesis written on purpose: that record's reject


@pytest.fixture(scope="module")
def written(tmp_path_factory):
    root = tmp_path_factory.mktemp("writers")
    rows = snli_rows(SNLI_DEV, ROWS)
    cases = {**arrow_cases(root, rows), **hf_datasets(root, rows)}
    jsonl = root / "rows.jsonl"
    jsonl.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return cases, jsonl


def _rows_in(stdout: str) -> int:
    m = re.search(r"rows in ([\d,]+) = (.*) \((ok)\)", stdout)
    assert m, stdout
    assert sum(int(x.replace(",", "")) for x in re.findall(r"([\d,]+) [a-z]", m.group(2))) == \
        int(m.group(1).replace(",", ""))
    return int(m.group(1).replace(",", ""))


VERBS = {   # verb: arguments around the input (the split verbs: the written file as train, the JSONL as test)
    "audit": lambda p, j, o: ["audit", p, "--k", "5", "--out", o],
    "zfilter": lambda p, j, o: ["zfilter", p, "--k", "5", "--out", o],
    "confidence": lambda p, j, o: ["confidence", p, "--model", "ngram", "--folds", "2", "--tau", "0.2", "--out", o],
    "upsample": lambda p, j, o: ["upsample", p, "--iterations", "2", "--out", o],
    "razor": lambda p, j, o: ["razor", p, "--score-only", "--out", o],
    "leakage": lambda p, j, o: ["leakage", "--input", f"train={p}", "--input", f"test={j}", "--trees", "10",
                                "--out", o],
    "weights": lambda p, j, o: ["weights", "--input", f"train={p}", "--input", f"test={j}", "--trees", "10",
                                "--folds", "2", "--out", o],
    "convert": lambda p, j, o: ["convert", p, "--out", o],
}
SPLIT_VERBS = ("leakage", "weights")


# every writer through the reader every verb shares (audit, with the JSONL's statistics, and convert), and every other
# verb through one writer each in turn: the verbs differ in what they do with the rows, not in how they read them
PAIRS = sorted({(w, v) for w in WRITERS for v in ("audit", "convert")}
               | {(WRITERS[i % len(WRITERS)], v) for i, v in enumerate(sorted(set(VERBS) - {"audit", "convert"}))})


@pytest.mark.parametrize("writer, verb", PAIRS)
def test_every_verb_reads_what_every_writer_writes(written, tmp_path, writer, verb):
    cases, jsonl = written
    if writer not in cases:
        pytest.skip(f"{writer}: its writer is not installed")
    out = run_cli(*VERBS[verb](cases[writer].input, jsonl, tmp_path / "o"), "--preset", "snli").stdout
    assert _rows_in(out) == ROWS * (2 if verb in SPLIT_VERBS else 1)
    if verb == "audit" and writer not in HARD:   # the same rows from JSONL: the same statistics
        run_cli(*VERBS[verb](jsonl, jsonl, tmp_path / "j"), "--preset", "snli")
        assert (tmp_path / "o" / "report" / "topk.json").read_text() == (tmp_path / "j" / "report" / "topk.json").read_text()


@pytest.mark.parametrize("writer", WRITERS)
def test_compare_probe_sql_and_inspect_read_every_writer(written, tmp_path, writer):
    cases, jsonl = written
    if writer not in cases:
        pytest.skip(f"{writer}: its writer is not installed")
    path = cases[writer].input
    if WRITERS.index(writer) % 2 == 0:   # compare and probe, each over half the writers (they read as every verb)
        out = run_cli("compare", "--train", f"w={path}", "--eval", f"j={jsonl}", "--preset", "snli",
                      "--allow-overlap", "--bootstrap", "100", "--out", tmp_path / "c").stdout
        assert f"training rows: w {ROWS - HARD.get(writer, 0):,}" in out
    else:
        probe = run_cli("probe", path, "--eval", jsonl, "--preset", "snli", "--out", tmp_path / "p").stdout
        assert f"on {ROWS - HARD.get(writer, 0):,} rows" in probe
    counts = json.loads(run_cli("sql", "label_distribution", path, "--preset", "snli", "--format", "json").stdout)
    assert sum(r["n"] for r in counts) == ROWS - HARD.get(writer, 0)
    info = json.loads(run_cli("inspect", path, "--preset", "snli", "--json").stdout)
    assert info["rows"] + info["rejected"] == ROWS
