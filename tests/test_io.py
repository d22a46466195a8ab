"""Corpus I/O: formats, presets, rejects with reasons, manifests, atomic idempotent publishing."""
import json
import posixpath
import shutil
import subprocess
import sys

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from conftest import DATA, SNLI_DEV, SNLI_HARD, run_cli

from refinery.io.corpus import (
    MANIFEST,
    META_DIR,
    AllRejected,
    Corpus,
    OutputExists,
    is_corpus,
    load,
)
from refinery.io.corpus_writer import (
    CorpusWriter,
    convert,
)
from refinery.io.inputs import expand_paths
from refinery.io.read_options import ReadOptions
from refinery.io.schema import PRESETS, parse_mapping


def test_inspect_snli_test_hard_counts():
    out = run_cli("inspect", SNLI_HARD, "--preset", "snli", "--json")
    info = json.loads(out.stdout)
    assert info["rows"] == 3261
    assert info["labels"] == {"contradiction": 1135, "neutral": 1068, "entailment": 1058}
    assert info["rejected"] == 0


def test_snli_dash_labels_go_to_rejects(tmp_path):
    # snli_dev holds only gold-labelled rows; add SNLI's '-' rows and check they are quarantined
    src = tmp_path / "snli_mix.jsonl"
    lines = open(SNLI_DEV).read().splitlines()[:50]
    lines.append(json.dumps({"sentence1": "A man .", "sentence2": "A person .", "gold_label": "-"}))
    src.write_text("\n".join(lines) + "\n")
    manifest = convert([str(src)], str(tmp_path / "out"), PRESETS["snli"]).manifest
    assert (manifest.rows, manifest.rejected) == (50, 1)
    rejects = Corpus.open(str(tmp_path / "out")).read_rejects()
    assert rejects["line"].to_pylist() == [51]
    assert "label not in the label set" in rejects["reason"][0].as_py()


def planted_bad_file(path):
    good = {"sentence1": "A dog runs .", "sentence2": "An animal moves .", "gold_label": "entailment"}
    rows = [
        json.dumps(good).encode(),                                                   # 1 good
        b'{"sentence1": "broken", "sentence2": ',                                     # 2 malformed JSON
        json.dumps({"sentence1": "A cat .", "gold_label": "neutral"}).encode(),      # 3 missing column
        json.dumps({**good, "sentence2": None}).encode(),                           # 4 null text
        json.dumps({**good, "sentence1": "   "}).encode(),                          # 5 empty text
        json.dumps({**good, "gold_label": "-"}).encode(),                           # 6 label outside set
        b'{"sentence1": "caf\xe9 \xff", "sentence2": "x", "gold_label": "neutral"}', # 7 undecodable bytes
        json.dumps({**good, "sentence2": "word " * 5000}).encode(),                 # 8 over-long
        b"[1, 2]",                                                                    # 9 not an object
        json.dumps({**good, "sentence1": "Two dogs play ."}).encode(),              # 10 good
    ]
    path.write_bytes(b"\n".join(rows) + b"\n")
    return len(rows)


def test_bad_rows_quarantined_with_reasons(tmp_path):
    src = tmp_path / "bad.jsonl"
    n_lines = planted_bad_file(src)
    manifest = convert([str(src)], str(tmp_path / "out"), PRESETS["snli"]).manifest
    assert manifest.rows + manifest.rejected == n_lines
    assert manifest.rows == 2
    rejects = Corpus.open(str(tmp_path / "out")).read_rejects().to_pylist()
    by_line = {r["line"]: r for r in rejects}
    assert sorted(by_line) == [2, 3, 4, 5, 6, 7, 8, 9]
    assert "malformed JSON" in by_line[2]["reason"]
    assert by_line[3]["column"] == "sentence2" and "missing" in by_line[3]["reason"]
    assert "null" in by_line[4]["reason"]
    assert "empty text" in by_line[5]["reason"] and by_line[5]["column"] == "sentence1"
    assert "label not in the label set" in by_line[6]["reason"]
    assert "undecodable" in by_line[7]["reason"]
    assert "longer than" in by_line[8]["reason"]
    assert all(r["source_file"].endswith("bad.jsonl") and r["raw"] for r in rejects)


def test_bad_row_fail_names_file_and_line(tmp_path):
    src = tmp_path / "bad.jsonl"
    planted_bad_file(src)
    proc = run_cli("convert", src, "--preset", "snli", "--out", tmp_path / "out", "--on-bad-row", "fail",
                   check=False)
    assert proc.returncode == 2 and proc.stderr.rstrip().endswith("[bad-row]"), proc.stderr
    assert "bad.jsonl, line 2" in proc.stderr
    assert not (tmp_path / "out").exists()
    assert not list(tmp_path.glob("out.tmp-*")), "a failed run must not leave a temporary folder"


def test_formats_round_trip(tmp_path):
    table, _ = load([SNLI_HARD], PRESETS["snli"])
    table = table.slice(0, 200)
    mapping = parse_mapping("text_a=s1,text_b=s2,label=y,id=key")
    raw = pa.table({"key": table["id"], "s1": table["text_a"], "s2": table["text_b"], "y": table["label"]})
    pq.write_table(raw, tmp_path / "x.parquet")
    rows = raw.to_pylist()
    (tmp_path / "x.json").write_text(json.dumps(rows))
    with open(tmp_path / "x.tsv", "w") as fh:
        fh.write("key\ts1\ts2\ty\n")
        for r in rows:
            fh.write("\t".join([r["key"], r["s1"], r["s2"], r["y"]]) + "\n")
    import csv
    with open(tmp_path / "x.csv", "w", newline="") as fh:
        w = csv.DictWriter(fh, ["key", "s1", "s2", "y"])
        w.writeheader()
        w.writerows(rows)
    for name in ("x.parquet", "x.json", "x.tsv", "x.csv"):
        got, rejects = load([str(tmp_path / name)], mapping)
        assert rejects.num_rows == 0, name
        assert got.select(["id", "text_a", "text_b", "label"]).equals(table.select(["id", "text_a", "text_b", "label"])), name


def test_directory_and_glob_inputs(tmp_path):
    table, _ = load([SNLI_HARD], PRESETS["snli"])
    lines = open(SNLI_HARD).read().splitlines()
    (tmp_path / "shards").mkdir()
    for i in range(3):
        (tmp_path / "shards" / f"part{i}.jsonl").write_text("\n".join(lines[i * 1000:(i + 1) * 1000]) + "\n")
    by_dir, _ = load([str(tmp_path / "shards")], PRESETS["snli"])
    by_glob, _ = load([str(tmp_path / "shards" / "part*.jsonl")], PRESETS["snli"])
    assert by_dir.num_rows == by_glob.num_rows == 3000
    assert by_dir["id"].to_pylist() == table["id"].to_pylist()[:3000]


def test_hash_ids_stable_and_unique(tmp_path):
    a, _ = load([SNLI_DEV], PRESETS["snli"])  # snli_dev has no pairID: ids are content hashes
    b, _ = load([SNLI_DEV], PRESETS["snli"])
    assert a["id"].to_pylist() == b["id"].to_pylist()
    assert len(set(a["id"].to_pylist())) == a.num_rows


DAMAGE = [b'{"sentence1": "a", "sentence2": "b", "gold_label": "neutral"} {"sentence1": "c"}',   # two objects
          b'{"sentence1": "a", "sentence1": "dup", "sentence2": "b", "gold_label": "neutral"}',
          b'{"sentence1": "\\ud800", "sentence2": "b", "gold_label": "neutral"}', b'{"sentence1": "caf\xe9"}',
          b"null", b"5", b"[1, 2]", b"not json", b"", b"   ", b"\x0b",
          b'{"sentence1": 12, "sentence2": true, "gold_label": "neutral"}',
          b'{"sentence1": 1.0, "sentence2": "b", "gold_label": "neutral"}',
          b'{"sentence1": {"a": 1}, "sentence2": "b", "gold_label": "neutral"}',
          b'{"sentence1": "a", "sentence2": "b", "gold_label": "neutral", "big": 123456789012345678901234}',
          b'{"sentence1": "a", "sentence2": "b", "gold_label": "neutral", "when": "2020-01-01"}',
          b'{"sentence1": "a", "sentence2": "b", "gold_label": "neutral", "deep": ' + b"[" * 70 + b"]" * 70 + b"}",
          b'{"sentence1": "a", "sentence2": "b", "gold_label": "neutral"}\r\r',
          b'  {"sentence1": "a", "sentence2": "b", "gold_label": "contradiction", "score": 2.5}']


def test_arrow_blocks_read_exactly_what_python_reads_line_by_line(tmp_path, monkeypatch):
    """JSONL blocks go through Arrow's JSON reader only where it reads what Python's json reads: the rows,
    ids and rejects equal a line-by-line read of SNLI dev with damaged lines between its rows."""
    import hashlib
    import random

    from refinery.io import readers

    lines = open(SNLI_DEV, "rb").read().splitlines()
    rng = random.Random(0)
    damaged = [x for line in lines for x in ([line, rng.choice(DAMAGE)] if rng.random() < 0.02 else [line])]
    path = tmp_path / "damaged.jsonl"
    path.write_bytes(b"null\n" + b"\n".join(damaged) + b"\n\n")

    def read(**opts):
        batches = list(readers.read_file(str(path), PRESETS["snli"], readers.ReadOptions(**opts)))
        return (pa.concat_tables([b.rows for b in batches], promote_options="permissive"),
                pa.concat_tables([b.rejects for b in batches]))

    with monkeypatch.context() as m:   # the reference: every line through Python's json
        m.setattr(readers, "_arrow_lines", lambda lines, lo, hi, opts, cols: (None, lines.nonblank(lo, hi)))
        expected = {limit: read(max_row_bytes=limit) for limit in (300, 4 << 20)}
    for block in (4_000, 50_000, 16 << 20):
        monkeypatch.setattr(readers, "JSONL_BLOCK_BYTES", block)
        for limit, (rows, rejects) in expected.items():
            got_rows, got_rejects = read(max_row_bytes=limit)
            assert got_rows.equals(rows) and got_rejects.equals(rejects), (block, limit)
    rows, rejects = expected[4 << 20]
    assert rows.num_rows > 9_000 and rejects.num_rows > 100 and rows["id"].null_count == 0
    first = rows.slice(0, 1).to_pylist()[0]   # the id: sha1 of file name, line, texts and label
    line = 1 + lines.index(next(x for x in lines if json.loads(x)["sentence1"] == first["text_a"]))
    key = f"damaged.jsonl\x1f{line + 1}\x1f{first['text_a']}\x1f{first['text_b']}\x1f{first['label']}"
    assert first["id"] == hashlib.sha1(key.encode()).hexdigest()[:16]


def test_publish_modes_idempotent(tmp_path):
    out = str(tmp_path / "c")
    m1 = convert([SNLI_HARD], out, PRESETS["snli"])
    data1 = (tmp_path / "c" / "part-00000.parquet").read_bytes()
    m2 = convert([SNLI_HARD], out, PRESETS["snli"], mode="overwrite")
    assert m1.manifest.stats == m2.manifest.stats and not m1.skipped
    assert data1 == (tmp_path / "c" / "part-00000.parquet").read_bytes()
    kept = convert([SNLI_HARD], out, PRESETS["snli"], mode="skip")
    assert kept.skipped and kept.manifest.body == m2.manifest.body   # kept, said so
    with pytest.raises(OutputExists) as refused:
        convert([SNLI_HARD], out, PRESETS["snli"], mode="error")
    assert refused.value.code == "output-exists"


def test_crash_leaves_no_finished_output(tmp_path):
    out = str(tmp_path / "c")
    with pytest.raises(RuntimeError):
        with CorpusWriter(out, shard_rows=10) as w:
            w.write(load([SNLI_HARD], PRESETS["snli"])[0].slice(0, 50))
            raise RuntimeError("crash mid-write")
    assert not (tmp_path / "c").exists() and not list(tmp_path.iterdir())


def test_manifest_fields_and_checksums(tmp_path):
    import hashlib

    out = tmp_path / "c"
    manifest = convert([SNLI_HARD], str(out), PRESETS["snli"], shard_rows=1000).manifest.body   # as written
    assert isinstance(manifest["rows"], int) and isinstance(manifest["rejected"], int)
    assert len(manifest["files"]) == 4 and manifest["rows"] == 3261
    for stat in manifest["file_stats"]:
        assert hashlib.sha256((out / stat["path"]).read_bytes()).hexdigest() == stat["sha256"]
    assert sum(s["rows"] for s in manifest["file_stats"] if s["path"] in manifest["files"]) == 3261


def test_hans_and_mnli_presets():
    hans, rej = load([str(DATA / "hans" / "hans_regenerated.tsv")], PRESETS["hans"])
    assert hans.num_rows == 30000 and rej.num_rows == 0
    assert set(hans["label"].to_pylist()) == {"entailment", "non-entailment"}
    assert "heuristic" in hans.column_names  # other columns pass through
    mnli, _ = load([str(DATA / "mnli" / "mnli_dev_matched_hard.jsonl")], PRESETS["mnli"])
    assert mnli.num_rows == 4573


def test_qqp_preset_keeps_sentence_ids(tmp_path):
    src = tmp_path / "qqp.tsv"
    src.write_text("id\tqid1\tqid2\tquestion1\tquestion2\tis_duplicate\n"
                   "0\t1\t2\tHow do I learn Python?\tWhat is the best way to learn Python?\t1\n"
                   "1\t3\t4\tWhy is the sky blue?\tHow tall is Everest?\t0\n"
                   "2\t5\t6\tbroken row with too few columns\n")
    table, rejects = load([str(src)], PRESETS["qqp"])
    assert table["label"].to_pylist() == ["duplicate", "not_duplicate"]
    assert table["node_a"].to_pylist() == ["1", "3"] and table["node_b"].to_pylist() == ["2", "4"]
    assert rejects["line"].to_pylist() == [4] and "expected 6 columns" in rejects["reason"][0].as_py()


# ---------------------------------------------------------------- release folders, output folders, empty inputs

def _nli_rows(n: int, labels=("entailment", "neutral", "contradiction")) -> list[dict]:
    return [{"sentence1": f"A person number {i} walks .", "sentence2": f"Someone {i % 7} moves .",
             "gold_label": labels[i % len(labels)]} for i in range(n)]


def _write_jsonl(path, rows) -> str:
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return str(path)


def test_a_release_folder_reads_its_data_and_names_the_files_it_skips(tmp_path, caplog):
    release = tmp_path / "SICK"   # as the release ships: readme.txt was read as data and refused
    release.mkdir()
    (release / "SICK.txt").write_text("pair_ID\tsentence_A\tsentence_B\tentailment_judgment\n" + "".join(
        f"{i}\tA man {i} plays .\tSomeone {i} plays .\t{['ENTAILMENT', 'NEUTRAL'][i % 2]}\n" for i in range(1, 41)))
    for name, text in {"readme.txt": "SICK: Sentences Involving Compositional Knowledge\n", "LICENSE": "CC BY\n",
                       "SHA256SUMS": "0" * 64 + "  SICK.txt\n", "SICK.txt.md5": "0  SICK.txt\n", "README.md": "#\n",
                       "paper.pdf": "%PDF", "index.html": "<html>", ".DS_Store": "\0"}.items():
        (release / name).write_text(text)
    (release / ".git").mkdir()
    (release / ".git" / "notes.txt").write_text("a\tb\n")
    with caplog.at_level("WARNING", logger="refinery.inputs"):
        assert expand_paths([str(release)]) == [str(release / "SICK.txt")]
        assert expand_paths([str(release / "*")]) == [str(release / "SICK.txt")]
        table, rejects = load([str(release)], PRESETS["sick"])
    assert table.num_rows == 40 and rejects.num_rows == 0
    notices = [r.getMessage() for r in caplog.records]
    assert len(notices) == 2   # once per input, however often it is listed
    assert notices[0] == (f"notice: {release}: skipped 8 files that are not data: .DS_Store, LICENSE, README.md, "
                          "SHA256SUMS, SICK.txt.md5, index.html, paper.pdf, readme.txt")
    assert expand_paths([str(release / "readme.txt")]) == [str(release / "readme.txt")]   # named: read


def test_a_corpus_folder_reads_as_its_rows_in_pandas_pyarrow_and_datasets(tmp_path):
    import pandas as pd
    import pyarrow.dataset as pads

    datasets = pytest.importorskip("datasets")
    src = _write_jsonl(tmp_path / "in.jsonl", _nli_rows(200) + [{"sentence1": "x", "gold_label": "neutral"}])
    out = tmp_path / "c"
    manifest = convert([src], str(out), PRESETS["snli"], shard_rows=80).manifest
    rows = Corpus.open(str(out)).read()
    assert manifest.rows == 200 and manifest.rejected == 1   # the reject is not among the rows below
    assert pd.read_parquet(out).equals(rows.to_pandas())
    assert pads.dataset(out).to_table().equals(rows)
    assert datasets.load_dataset(str(out), split="train", cache_dir=str(tmp_path / "hf")).num_rows == 200
    assert sorted(p.name for p in out.iterdir()) == [".refinery", ".refinery.json", *manifest.files]


def test_columns_whose_types_drift_between_batches_end_in_one_schema_as_a_whole_read_gives(tmp_path):
    """An unmapped column that is a number in one batch and text in the next, or first appears late, crashed the
    writer ('Unable to merge') or began shards of other schemas, which pandas and datasets cannot read as one."""
    import pandas as pd

    datasets = pytest.importorskip("datasets")
    rows = _nli_rows(12)
    for i, row in enumerate(rows):
        row["extra"] = i if i < 5 else f"t{i}" if i < 9 else {"k": i}   # int64, then text, then a struct
        if i >= 7:
            row["late"] = i % 2 == 0                                       # a column first seen at row 8
    src = _write_jsonl(tmp_path / "in.jsonl", rows)
    whole = convert([src], str(tmp_path / "whole"), PRESETS["snli"])
    opts = ReadOptions(batch_rows=2)
    drifted = convert([src], str(tmp_path / "drift"), PRESETS["snli"], opts, shard_rows=3)
    assert len(drifted.manifest.files) > 1 and whole.rows == drifted.rows == 12
    schemas = {pq.read_schema(tmp_path / "drift" / f) for f in drifted.manifest.files}
    assert len(schemas) == 1 and schemas.pop().field("extra").type == pa.string()
    assert pd.read_parquet(tmp_path / "drift").equals(pd.read_parquet(tmp_path / "whole"))
    assert Corpus.open(str(tmp_path / "drift")).read()["extra"].to_pylist()[3:10] == \
        ["3", "4", "t5", "t6", "t7", "t8", '{"k": 9}']
    loaded = datasets.load_dataset("parquet", data_dir=str(tmp_path / "drift"), split="train",
                                   cache_dir=str(tmp_path / "hf"))
    assert loaded.num_rows == 12 and loaded.column_names[-2:] == ["extra", "late"]


def test_nested_columns_whose_types_change_in_a_piece_never_crash_the_reader(tmp_path):
    """Arrow's threaded JSON reader crashed the process (SIGSEGV, no message) in about one read of four of a piece
    whose nested columns change type between its blocks; such pieces are read serially, and the rows all kept."""
    rows = [{"premise": f"a man rides a horse {i}", "hypothesis": "nobody rides", "label": "contradiction",
             "n": i if i < 15_000 else f"s{i}", "d": {"a": i} if i < 15_000 else {"a": i, "w": "x"},
             "m": i if i < 15_000 else {"k": i}, "l": [i] if i < 15_000 else "str", "f": 0.5 if i < 15_000 else True}
            for i in range(30_000)]
    src = _write_jsonl(tmp_path / "in.jsonl", rows)
    script = ("import sys, numpy as np\nfrom refinery.io.lines import LineTexts\n"
              "from refinery.io.readers import _arrow_lines\nfrom refinery.io.read_options import ReadOptions\n"
              "lines = LineTexts(memoryview(np.fromfile(sys.argv[1], np.uint8)))\n"
              "for _ in range(12):\n    _arrow_lines(lines, 0, len(lines.starts), ReadOptions(), frozenset())\n")
    proc = subprocess.run([sys.executable, "-c", script, src], capture_output=True, text=True)
    assert proc.returncode == 0, (proc.returncode, proc.stderr[-500:])
    converted = convert([src], str(tmp_path / "c"), parse_mapping("text_a=premise,text_b=hypothesis,label=label"))
    assert converted.rows == 30_000 and converted.rejected == 0
    assert Corpus.open(str(tmp_path / "c")).read()["l"].to_pylist()[14_999:15_001] == ["[14999]", "str"]


@pytest.mark.parametrize("batch_rows", [1, 65_536])
def test_true_after_a_float_stays_true(tmp_path, batch_rows):
    """A column of 0.5 then true was written [0.5, 1.0] (Arrow made a double of the line-by-line values)."""
    rows = [{**r, "x": x} for r, x in zip(_nli_rows(2), (0.5, True))]
    convert([_write_jsonl(tmp_path / "in.jsonl", rows)], str(tmp_path / "c"), PRESETS["snli"],
            ReadOptions(batch_rows=batch_rows))
    assert Corpus.open(str(tmp_path / "c")).read()["x"].to_pylist() == ["0.5", "true"]


def test_an_unmapped_column_named_as_a_corpus_column_is_kept_beside_it(tmp_path):
    """A file's own text_b and id, not mapped (SNLI's preset maps sentence2 and makes ids), were dropped."""
    rows = [{**r, "text_b": f"mine {i}", "id": f"u{i}"} for i, r in enumerate(_nli_rows(4))]
    convert([_write_jsonl(tmp_path / "in.jsonl", rows)], str(tmp_path / "c"), PRESETS["snli"])
    table = Corpus.open(str(tmp_path / "c")).read()
    assert table.column_names == ["id", "text_a", "text_b", "label", "text_b.2", "id.2"]
    assert table["text_b.2"].to_pylist() == [f"mine {i}" for i in range(4)] and table["id.2"][0].as_py() == "u0"
    assert table["text_b"][0].as_py() == rows[0]["sentence2"]


def test_a_corpus_folder_is_a_data_dir_for_datasets_parquet(tmp_path):
    datasets = pytest.importorskip("datasets")
    out = tmp_path / "c"
    convert([_write_jsonl(tmp_path / "in.jsonl", _nli_rows(60))], str(out), PRESETS["snli"])
    loaded = datasets.load_dataset("parquet", data_dir=str(out), split="train", cache_dir=str(tmp_path / "hf"))
    assert loaded.num_rows == 60


def test_a_corpus_written_with_manifest_json_beside_its_shards_still_opens(tmp_path):
    out = tmp_path / "old"
    src = _write_jsonl(tmp_path / "in.jsonl", _nli_rows(30) + [{"sentence1": "x", "gold_label": "neutral"}])
    convert([src], str(out), PRESETS["snli"])
    manifest = json.loads((out / MANIFEST).read_text())   # as earlier versions laid it out: all beside the shards
    for name in manifest["rejects"]:
        (out / name).rename(out / posixpath.basename(name))
    manifest["rejects"] = [posixpath.basename(name) for name in manifest["rejects"]]
    (out / "manifest.json").write_text(json.dumps(manifest))
    shutil.rmtree(out / META_DIR)
    corpus = Corpus.open(str(out))
    assert is_corpus(str(out)) and corpus.read().num_rows == 30 and corpus.read_rejects().num_rows == 1
    assert load([str(out)])[0].num_rows == 30


EMPTY_INPUTS = {"empty.jsonl": "", "blank.jsonl": "\n\n", "header.csv": "sentence1,sentence2,gold_label\n"}


@pytest.mark.parametrize("verb", ["convert", "inspect", "audit", "zfilter"])
def test_an_empty_input_is_refused_by_every_verb_naming_the_file(tmp_path, verb):
    from click.testing import CliRunner

    from refinery.cli.main import main

    for name, text in EMPTY_INPUTS.items():
        (tmp_path / name).write_text(text)
        out = ["--out", str(tmp_path / "out")] if verb != "inspect" else []
        result = CliRunner().invoke(main, [verb, str(tmp_path / name), "--preset", "snli", *out])
        assert result.exit_code == 2, (name, result.output)
        [line] = result.output.splitlines()   # one line: the file, that it has no rows, the fix, the code
        assert line.startswith(f"error: {tmp_path / name}: no rows") and line.endswith(" [empty-input]"), line
        assert "give a file that holds rows" in line, line
        assert not (tmp_path / "out").exists()


def test_convert_of_an_input_whose_every_row_is_rejected_fails_naming_reasons_and_the_rejects(tmp_path):
    src = _write_jsonl(tmp_path / "bad.jsonl", _nli_rows(30, ("yes", "no")) + [{"sentence1": "x", "gold_label": "no"}])
    out = tmp_path / "c"
    with pytest.raises(AllRejected) as refused:
        convert([src], str(out), PRESETS["snli"])
    assert refused.value.code == "all-rejected"
    said = str(refused.value)   # the file, the commonest reasons with their counts, where the rejects are, the fix
    assert f"no good rows in {src}: all 31 rejected" in said, said
    assert "label not in the label set entailment|neutral|contradiction (30)" in said, said
    assert "missing or null value in column 'sentence2' (1)" in said, said
    assert f"{out}/.refinery/rejects-*.parquet" in said and "preset=… or map=… and labels=…" in said, said
    corpus = Corpus.open(str(out))   # written, for the user to read
    assert corpus.manifest.rows == 0 and corpus.read_rejects().num_rows == 31
    assert corpus.manifest.reject_reasons == {
        "label not in the label set entailment|neutral|contradiction": 30,
        "missing or null value in column 'sentence2'": 1}


ALL_REJECTED = {"convert": "c/.refinery/rejects-*.parquet", "audit": "c/rejects (refinery inspect {out}/rejects)",
                "zfilter": "c/kept/.refinery/rejects-*.parquet"}


@pytest.mark.parametrize("verb", sorted(ALL_REJECTED))
def test_every_verb_fails_an_all_rejected_input_in_one_line_and_leaves_its_rejects(tmp_path, verb):
    from click.testing import CliRunner

    from refinery.cli.main import main

    src = _write_jsonl(tmp_path / "bad.jsonl", _nli_rows(40, ("0", "1", "2")))   # numeric labels, a word label set
    out = tmp_path / "c"
    result = CliRunner().invoke(main, [verb, src, "--preset", "snli", "--out", str(out)])
    where = str(tmp_path / ALL_REJECTED[verb].format(out=out))
    assert result.exit_code == 2, result.output
    [line] = result.output.splitlines()   # one line: the file, the reason, where the rejects are, the fix, the code
    assert line.startswith(f"error: no good rows in {src}: all 40 rejected") and line.endswith(" [all-rejected]"), line
    assert "label not in the label set entailment|neutral|contradiction (40)" in line, line
    assert f"are in {where};" in line and "--preset or --map and --labels" in line, line
    rejects = Corpus.open(str(out / {"convert": "", "audit": "rejects", "zfilter": "kept"}[verb])).read_rejects()
    assert rejects.num_rows == 40 and rejects["line"].to_pylist() == list(range(1, 41))
    assert not (out / "_SUCCESS").exists()   # not a finished run
