"""Corpus I/O: formats, presets, rejects with reasons, manifests, atomic idempotent publishing."""
import json

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from conftest import DATA, SNLI_DEV, SNLI_HARD, run_cli

from refinery.io.corpus import Corpus, CorpusWriter, OutputExists, convert, load
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
    manifest = convert([str(src)], str(tmp_path / "out"), PRESETS["snli"])
    assert (manifest["rows"], manifest["rejected"]) == (50, 1)
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
    manifest = convert([str(src)], str(tmp_path / "out"), PRESETS["snli"])
    assert manifest["rows"] + manifest["rejected"] == n_lines
    assert manifest["rows"] == 2
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
    assert proc.returncode != 0
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
    assert m1["file_stats"] == m2["file_stats"]
    assert data1 == (tmp_path / "c" / "part-00000.parquet").read_bytes()
    assert convert([SNLI_HARD], out, PRESETS["snli"], mode="skip") == m1
    with pytest.raises(OutputExists):
        convert([SNLI_HARD], out, PRESETS["snli"], mode="error")


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
    manifest = convert([SNLI_HARD], str(out), PRESETS["snli"], shard_rows=1000)
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
