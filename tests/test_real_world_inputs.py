"""Files as users bring them (tests/realworld.py), through the CLI: rows in = the file's data lines (records for
Parquet and Arrow, counted here from the bytes and the Arrow metadata), rows out + rejects = rows in, the rejects
are the damaged lines, and no kept text differs from its own physical line's field."""
import csv
import json
import re
from pathlib import Path

import pyarrow as pa
import pyarrow.feather as feather
import pyarrow.parquet as pq
import pytest
from conftest import SNLI_DEV, run_cli
from realworld import NAMES, write_cases, snli_rows

from refinery.io.corpus import Corpus, load
from refinery.io.inputs import expand_paths, hf_splits
from refinery.io.read_options import ReadOptions
from refinery.io.readers import AmbiguousColumnError, MissingColumnError
from refinery.io.schema import CANONICAL_SCHEMA, PRESETS, Mapping, parse_mapping

BOM = b"\xef\xbb\xbf"


@pytest.fixture(scope="module")
def cases(tmp_path_factory):
    return write_cases(tmp_path_factory.mktemp("realworld"), snli_rows(SNLI_DEV, 400))


def _mapping(flags) -> Mapping:
    return PRESETS[flags[1]] if flags[0] == "--preset" else parse_mapping(flags[1])


def _lines(path: Path) -> dict[int, bytes]:
    """Physical line number → its bytes without the line end, for every non-blank line."""
    return {i: line.rstrip(b"\r") for i, line in enumerate(path.read_bytes().removeprefix(BOM).split(b"\n"), 1)
            if line.strip()}


def _delimited(path: Path, kind: str) -> tuple[int, dict[str, dict]]:
    """(data lines, {line: fields by header name}) of a CSV/TSV read line by line, each line on its own."""
    csv.field_size_limit(1 << 24)   # a 210,000-character field
    lines = _lines(path)
    header_line = min(lines)
    split = (lambda text: next(csv.reader([text]))) if kind == "csv" else (lambda text: text.split("\t"))
    header = split(lines.pop(header_line).decode())
    fields = {}
    for number, raw in lines.items():
        try:
            fields[number] = dict(zip(header, split(raw.decode("utf-8"))))
        except UnicodeDecodeError:
            pass
    return len(lines), fields


def _arrow_file(path: Path) -> pa.Table:
    if path.suffix == ".parquet":
        return pq.read_table(path)
    if path.read_bytes()[:6] == b"ARROW1":
        return feather.read_table(path)
    with pa.ipc.open_stream(path) as reader:
        return reader.read_all()


def _source(case) -> tuple[int, list[dict]]:
    """(records the input holds, its records as dicts), found without refinery's readers."""
    path = case.input
    if case.kind in ("tsv", "csv"):
        count, fields = _delimited(path, case.kind)
        return count, list(fields.values())
    if case.kind == "jsonl":
        records = [json.loads(line) for line in _lines(path).values()]
        return len(records), records
    files = sorted(p for p in path.rglob("*") if p.suffix in (".arrow", ".parquet", ".jsonl", ".csv", ".tsv")) \
        if path.is_dir() else [path]
    count, records = 0, []
    for f in files:
        if f.suffix in (".csv", ".tsv"):
            n, fields = _delimited(f, f.suffix[1:])
            count, records = count + n, records + list(fields.values())
        elif f.suffix == ".jsonl":
            lines = [json.loads(line) for line in _lines(f).values()]
            count, records = count + len(lines), records + lines
        else:
            table = _arrow_file(f)
            count, records = count + table.num_rows, records + table.to_pylist()
    return count, records


def _text(value):
    """A source value as text: strings as they are, numbers and booleans as JSON writes them."""
    return value if value is None or isinstance(value, str) else json.dumps(value)


def _assert_unaltered(case, rows: pa.Table, records: list[dict]) -> None:
    mapping = _mapping(case.flags)
    key_source = mapping.columns.get(case.key, case.key)
    by_key = {_text(r[key_source]): r for r in records}
    for row in rows.to_pylist():
        source = by_key[_text(row[case.key])]
        raw_label = _text(source[mapping.columns["label"]])
        assert row["text_a"] == source[mapping.columns["text_a"]]
        assert row["text_b"] == (source[mapping.columns["text_b"]] if "text_b" in mapping.columns else None)
        assert row["label"] == mapping.labels.get(raw_label, raw_label)


def _equation(stdout: str) -> tuple[int, int, int]:
    m = re.search(r"rows in ([\d,]+) = ([\d,]+) out \+ ([\d,]+) rejected \(ok\)", stdout)
    assert m, stdout
    return tuple(int(x.replace(",", "")) for x in m.groups())


@pytest.mark.parametrize("name", NAMES)
def test_convert_and_inspect_account_for_every_line_and_alter_no_text(cases, name, tmp_path):
    if name not in cases:
        pytest.skip(f"{name}: its writer is not installed")
    case = cases[name]
    records, source = _source(case)
    out = tmp_path / "corpus"
    if not records:   # a header alone: no rows, refused by every verb alike (convert wrote an empty corpus)
        for verb in (("convert", "--out", out), ("inspect",)):
            refused = run_cli(verb[0], case.input, *case.flags, *verb[1:], check=False)
            assert refused.returncode == 2, refused.stdout
            [line] = refused.stderr.splitlines()   # one line: the file, that it has no rows, the fix, the code
            assert line.startswith(f"error: {case.input}: no rows") and line.endswith(" [empty-input]"), line
            assert "give a file that holds rows" in line, line
        assert not out.exists()
        return
    rows_in, rows_out, rejected = _equation(run_cli("convert", case.input, *case.flags, "--out", out).stdout)
    assert rows_in == records and rows_out + rejected == records
    corpus = Corpus.open(str(out))
    assert (corpus.manifest.rows, corpus.manifest.rejected) == (rows_out, rejected)
    assert sorted(corpus.read_rejects()["line"].to_pylist()) == sorted(case.rejects)
    assert rows_out == records - len(case.rejects)
    rows = corpus.read()
    if rows_out:
        assert rows.schema.field("text_a").type == pa.string() and rows.schema.field("label").type == pa.string()
        assert rows.select([f.name for f in CANONICAL_SCHEMA]).schema == pa.schema(
            [f.with_nullable(True) for f in CANONICAL_SCHEMA])
        _assert_unaltered(case, rows, source)
    if case.splits:   # a DatasetDict: each split in its dataset_dict.json order, named in the split column
        assert list(dict.fromkeys(rows["split"].to_pylist())) == list(case.splits)
    info = json.loads(run_cli("inspect", case.input, *case.flags, "--json").stdout)
    assert (info["rows"], info["rejected"]) == (rows_out, rejected)


@pytest.mark.parametrize("name", ["pandas_parquet", "polars_ipc", "hf_layout_dict"])
def test_zfilter_reads_what_pandas_polars_and_hf_write(cases, name, tmp_path):
    """The reported crash: pandas 3's large_string made zfilter fail in a string kernel."""
    if name not in cases:
        pytest.skip(f"{name}: its writer is not installed")
    case = cases[name]
    records, _ = _source(case)
    proc = run_cli("zfilter", case.input, *case.flags, "--out", tmp_path / "z", "--k", 5)
    m = re.search(r"rows in ([\d,]+) = (.*) \(ok\)", proc.stdout)
    assert m and int(m.group(1).replace(",", "")) == records, proc.stdout
    assert sum(int(x.replace(",", "")) for x in re.findall(r"([\d,]+) [a-z]", m.group(2))) == records


@pytest.mark.parametrize("name, flags, message", [
    ("sick", ["--preset", "snli"], "SICK_train.txt has no columns 'sentence1', 'sentence2', 'gold_label' "
     "(--preset snli); it has pair_ID, sentence_A, sentence_B, relatedness_score, entailment_judgment; "
     "try --preset sick"),
    ("fever_claims", ["--preset", "fever"], "fever_train.jsonl has no column 'evidence' (--preset fever); "
     "it has id, verifiable, label, claim; try --preset fever_claims"),
    ("sick", ["--map", "text_a=sentence_A,text_b=sentence_B,label=entailment_judgement"],
     "did you mean 'entailment_judgment' for 'entailment_judgement'?"),
    ("msrp_map", ["--map", "text_a=#1 String,text_b=#2 String,label=Quality,id=#1 Id"],
     "no column '#1 Id' (--map)"),
])
def test_a_mapped_column_the_file_lacks_is_named_at_once(cases, name, flags, message, tmp_path):
    proc = run_cli("convert", cases[name].input, *flags, "--out", tmp_path / "o", check=False)
    assert proc.returncode == 2 and message in proc.stderr, proc.stderr
    assert proc.stderr.rstrip().endswith("[missing-columns]"), proc.stderr
    assert len(proc.stderr.strip().splitlines()) == 1 and not (tmp_path / "o").exists()


def test_fever_claims_preset_reads_claims_without_evidence(cases):
    rows, rejects = load([str(cases["fever_claims"].input)], PRESETS["fever_claims"])
    assert rows.num_rows == 400 and rejects.num_rows == 0 and rows["text_b"].null_count == 400
    assert set(rows["label"].to_pylist()) == {"SUPPORTS", "REFUTES", "NOT ENOUGH INFO"}
    assert PRESETS["fever_claims"].field_names[0] == "claim" and PRESETS["qqp"].field_names == ("question1",
                                                                                                 "question2")


def test_csv_multiline_reads_a_quoted_field_over_lines_as_one_row_and_still_stops_a_stray_quote(cases):
    case = cases["csv_quotes"]
    mapping = _mapping(case.flags)
    rows, rejects = load([str(case.input)], mapping, ReadOptions(csv_multiline=True))
    records, _ = _source(case)
    assert rows.num_rows + rejects.num_rows == records - 1          # lines 6-7 are one record
    by_id = dict(zip(rows["id"].to_pylist(), rows["text_a"].to_pylist()))
    assert by_id["r-multi"] == "one line\nand the next" and by_id["r-stray"] == 'a 6" ruler'
    reasons = dict(zip(rejects["line"].to_pylist(), rejects["reason"].to_pylist()))
    assert sorted(reasons) == [11, 17, 20]
    assert reasons[11].startswith("unbalanced quote") and reasons[17] == "expected 5 columns, got 6"
    assert reasons[20] == "undecodable bytes (not UTF-8)"
    default = load([str(case.input)], mapping)[1]
    assert "read such records with csv_multiline=True" in default.filter(pa.compute.equal(default["line"], 6))["reason"][0].as_py()


def test_hf_folders_give_their_arrow_files_in_their_own_order_and_never_their_metadata(cases):
    single, whole = cases["hf_layout"].input, cases["hf_layout_dict"].input
    order = ["data-00001-of-00002.arrow", "data-00000-of-00002.arrow"]
    assert expand_paths([str(single)]) == [str(single / name) for name in order]
    assert hf_splits(str(whole)) == {split: [str(whole / split / name) for name in order] for split in ("train", "test")}
    assert hf_splits(str(single)) == {}
    rows, _ = load([str(single)], PRESETS["snli"])
    assert rows["row"].to_pylist() == list(range(400))             # state.json's order, not the file names'


def test_optional_and_pass_through_columns_are_normalized(tmp_path):
    n = 6
    table = pa.table({
        "s": pa.array([f"text {i}" for i in range(n)], pa.large_string()),
        "y": pa.array([0, 1, 0, 1, 0, 1], pa.int64()).dictionary_encode(),
        "w": pa.array(["0.5", "2", "abc", "", None, "1e-3"], pa.string_view()),
        "part": pa.array(["train"] * 3 + ["test"] * 3).dictionary_encode(),
        "a": pa.array(range(n), pa.int32()), "b": pa.array(range(n, 2 * n), pa.uint64()),
        "raw": pa.array([f"bytes {i}".encode() for i in range(n)], pa.large_binary()),
        "tag": pa.array(["x", "y"] * 3, pa.large_string()).dictionary_encode(),
    })
    pq.write_table(table, tmp_path / "t.parquet")
    mapping = parse_mapping("text_a=s,label=y,weight=w,split=part,node_a=a,node_b=b")
    rows, rejects = load([str(tmp_path / "t.parquet")], mapping)
    assert rows.schema.field("weight").type == pa.float64() and rows["weight"].to_pylist() == [0.5, 2.0, None, 0.001]
    assert rows["label"].to_pylist() == ["0", "1", "0", "1"] and rows["split"].to_pylist() == ["train", "train",
                                                                                              "test", "test"]
    assert rows["node_a"].to_pylist() == ["0", "1", "4", "5"] and rows["node_b"].type == pa.string()
    assert rows.schema.field("tag").type == pa.string() and rows.schema.field("raw").type == pa.binary()
    assert rejects["line"].to_pylist() == [3, 4]
    assert set(rejects["reason"].to_pylist()) == {"column 'w' holds a value that is not a number"}

    spark = pa.table({"s": pa.array([b"caf\xc3\xa9", b"caf\xe9", b"ok"], pa.binary()), "y": ["a", "b", "c"]})
    pq.write_table(spark, tmp_path / "spark.parquet")               # strings stored as bytes without a UTF-8 mark
    rows, rejects = load([str(tmp_path / "spark.parquet")], parse_mapping("text_a=s,label=y"))
    assert rows["text_a"].to_pylist() == ["caf\u00e9", "ok"] and rejects["line"].to_pylist() == [2]
    assert rejects["reason"][0].as_py() == "column 's' holds bytes that are not UTF-8"


def test_absent_optional_columns_and_ambiguous_headers(cases, tmp_path):
    no_ids = str(cases["large_string_parquet"].input)                     # no pairID: the preset hashes ids
    rows, _ = load([no_ids], PRESETS["snli"])
    assert rows.num_rows == 400 and rows["id"].null_count == 0 and len(set(rows["id"].to_pylist())) == 400
    # a --map names what it needs
    with pytest.raises(MissingColumnError, match=r"no column 'pairID' \(map=…\)") as e:
        load([no_ids], parse_mapping("text_a=sentence1,text_b=sentence2,label=gold_label,id=pairID"))
    assert e.value.code == "missing-columns"
    (tmp_path / "dup.tsv").write_text("id\ttext\ttext\tlabel\n1\ta\tb\tyes\n")
    with pytest.raises(AmbiguousColumnError, match=r"two columns named 'text' \(columns 2 and 3\)") as e:
        load([str(tmp_path / "dup.tsv")], parse_mapping("text_a=text,label=label"))
    assert e.value.code == "bad-input"
    rows, _ = load([str(cases["duplicate_unmapped"].input)], PRESETS["snli"])
    assert rows.num_rows == 400 and {"", ".2"} <= set(rows.column_names)
