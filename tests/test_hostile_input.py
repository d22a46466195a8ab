"""Hostile input: values decoded row by row, BOMs, compressed shards, rejects carried through every verb,
secrets never written, one-line errors."""
import bz2
import gzip
import json
import lzma

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
import zstandard
from conftest import SNLI_DEV, SNLI_HARD, run_cli

from refinery.io.corpus import load
from refinery.io.read_options import ReadOptions
from refinery.io.schema import PRESETS


def _snli_lines(n, start=0):
    with open(SNLI_DEV, encoding="utf-8") as fh:
        rows = [json.loads(line) for _, line in zip(range(start + n), fh)][start:]
    return [{"sentence1": r["sentence1"], "sentence2": r["sentence2"], "gold_label": r["gold_label"],
             "pairID": f"p{i}"} for i, r in enumerate(rows, start=start)]


@pytest.fixture(scope="module")
def hostile(tmp_path_factory):
    """SNLI rows with damaged ones in between; returns (path, lines, good source rows by id)."""
    rows = [r for r in _snli_lines(400) if r["gold_label"] != "-"]
    damaged = [
        '{"sentence1": 12345, "sentence2": "A number as text .", "gold_label": "neutral", "pairID": "num"}',
        '{"sentence1": {"x": 1}, "sentence2": "An object .", "gold_label": "neutral", "pairID": "obj"}',
        '{"sentence1": "A man .", "sentence2": "Someone .", "gold_label": 7, "pairID": "numlabel"}',
        "[" * 50_000 + "]" * 50_000,
        '{"sentence1": "x", "sentence2": "y", "gold_label": "entailment", "extra": ' + "[" * 80 + "]" * 80 + "}",
        '{"sentence1": "big", "sentence2": "' + "z" * 5_000_000 + '", "gold_label": "entailment"}',
        "not json at all",
        '["an", "array", "row"]',
        '{"sentence1": "", "sentence2": "empty premise", "gold_label": "neutral"}',
        '{"sentence1": "a", "sentence2": "b", "gold_label": "-"}',
    ]
    lines = [json.dumps(r) for r in rows]
    for i, bad in enumerate(damaged):
        lines.insert(7 + 31 * i, bad)
    path = tmp_path_factory.mktemp("hostile") / "hostile.jsonl"
    path.write_bytes(b"\xef\xbb\xbf" + "\r\n".join(lines).encode() + b"\r\n")   # BOM and CRLF
    return path, len(lines), {r["pairID"]: r for r in rows}


@pytest.mark.parametrize("batch_rows", [65_536, 7, 1])
def test_each_value_is_decoded_on_its_own_terms(hostile, batch_rows):
    path, lines, source = hostile
    rows, rejects = load([str(path)], PRESETS["snli"], ReadOptions(batch_rows=batch_rows))
    assert rows.num_rows + rejects.num_rows == lines
    by_id = {r["id"]: r for r in rows.to_pylist()}
    assert by_id.pop("num")["text_a"] == "12345"                       # a scalar in a text column is its text
    assert by_id.keys() == source.keys()                                # the first (BOM) row included
    for i, r in by_id.items():                                          # no other value altered
        assert (r["text_a"], r["text_b"], r["label"]) == (source[i]["sentence1"], source[i]["sentence2"],
                                                          source[i]["gold_label"])
    reasons = dict(zip(rejects["line"].to_pylist(), rejects["reason"].to_pylist()))
    columns = dict(zip(rejects["line"].to_pylist(), rejects["column"].to_pylist()))
    text = "\n".join(reasons.values())
    assert "column 'sentence1' holds a JSON object where text is expected" in text
    assert "label not in the label set" in text                         # 7 became "7": that row only
    assert text.count("nested deeper than 64 levels") == 2
    assert "over the 4,194,304-byte limit" in text
    assert "malformed JSON" in text and "is not an object" in text and "empty text in column 'sentence1'" in text
    assert "sentence1" in columns.values() and "gold_label" in columns.values()


def test_bom_delimited_release_and_a_split_made_of_several_files(tmp_path):
    rows = [r for r in _snli_lines(600) if r["gold_label"] != "-"]
    header = "Quality\t#1 ID\t#2 ID\t#1 String\t#2 String\n"

    def msrp(name, part, bom):
        body = "".join(f"{int(r['gold_label'] == 'entailment')}\t{hash(r['sentence1']) % 10**6}\t"
                       f"{r['pairID']}\t{r['sentence1']}\t{r['sentence2']}\n" for r in part)
        (tmp_path / name).write_bytes((b"\xef\xbb\xbf" if bom else b"") + (header + body).encode())
        return str(tmp_path / name)

    a, b, c = msrp("msr_train.txt", rows[:250], True), msrp("msr_val.txt", rows[250:400], False), \
        msrp("msr_test.txt", rows[400:], True)
    table, rejects = load([a], PRESETS["msrp"])
    assert table.num_rows == 250 and rejects.num_rows == 0
    out = tmp_path / "leak"
    run_cli("leakage", "--input", f"train={a}", "--input", f"train={b}", "--input", f"test={c}",
            "--preset", "msrp", "--out", out, "--trees", 10)
    report = json.loads((out / "report" / "report.json").read_text())
    assert report["rows"] == {"train": 400, "test": len(rows) - 400}


def test_compressed_files_and_shard_folders(tmp_path):
    data = "".join(json.dumps(r) + "\n" for r in _snli_lines(300)).encode()
    folder = tmp_path / "shards"
    folder.mkdir()
    for name, pack in (("a.jsonl.gz", gzip.compress), ("b.jsonl.bz2", bz2.compress), ("c.jsonl.xz", lzma.compress),
                       ("d.jsonl.zst", zstandard.ZstdCompressor().compress), ("e.jsonl", bytes)):
        (folder / name).write_bytes(pack(data))
    one, _ = load([str(folder / "e.jsonl")], PRESETS["snli"])
    every, rejects = load([str(folder)], PRESETS["snli"])
    assert every.num_rows == 5 * one.num_rows and rejects.num_rows == 5 * (300 - one.num_rows)
    glob, _ = load([str(folder / "*.zst")], PRESETS["snli"])
    assert glob["text_b"].equals(one["text_b"])


@pytest.mark.parametrize("args, message, code", [
    (["convert", SNLI_DEV, "--out", "{tmp}/o"], "(it has sentence1, sentence2, gold_label); name its columns with --preset snli",
     "missing-columns"),
    (["convert", "{tmp}/data.xyz", "--preset", "snli", "--out", "{tmp}/o"], "data.xyz", "bad-input"),
    (["sql", "label_distribution", SNLI_DEV, "--preset", "snli", "--param", "x"], "--param 'x' is not NAME=VALUE",
     "invalid-setting"),
    (["audit", "{tmp}/empty.jsonl", "--preset", "snli", "--out", "{tmp}/a"], "no good rows in", "all-rejected"),
    (["zfilter", "{tmp}/empty.jsonl", "--preset", "snli", "--out", "{tmp}/z"], "no good rows in", "all-rejected"),
    (["upsample", "{tmp}/empty.jsonl", "--preset", "snli", "--out", "{tmp}/u"], "no good rows in", "all-rejected"),
    (["audit", "{tmp}/cut.jsonl.gz", "--preset", "snli", "--out", "{tmp}/a"],
     "cut.jsonl.gz: the compressed file is damaged or cut short", "bad-input"),
    (["audit", "{tmp}/cut.parquet", "--map", "text_a=text_a,label=label", "--out", "{tmp}/a"],
     "cut.parquet: not a whole Parquet file", "bad-input"),
    (["audit", "{tmp}/bad.jsonl", "--preset", "snli", "--on-bad-row", "fail", "--engine", "ray", "--out", "{tmp}/a"],
     "bad.jsonl, line 3: malformed JSON", "bad-row"),   # raised in a Ray worker: the same one line
])
def test_user_mistakes_exit_2_with_one_line(tmp_path, args, message, code):
    (tmp_path / "empty.jsonl").write_text('{"sentence1": "only a premise", "sentence2": " ", "gold_label": "neutral"}\n')
    (tmp_path / "data.xyz").write_text("x\n")
    data = "".join(json.dumps(r) + "\n" for r in _snli_lines(300)).encode()
    packed = gzip.compress(data)
    (tmp_path / "cut.jsonl.gz").write_bytes(packed[:len(packed) // 2])
    (tmp_path / "bad.jsonl").write_bytes(b"".join(data.splitlines(keepends=True)[:2]) + b'{"broken": \n')
    sink = pa.BufferOutputStream()
    pq.write_table(pa.table({"text_a": ["a"] * 100, "label": ["x"] * 100}), sink)
    (tmp_path / "cut.parquet").write_bytes(sink.getvalue().to_pybytes()[:-40])
    proc = run_cli(*[a.format(tmp=tmp_path) for a in args], check=False)
    assert proc.returncode == 2, proc.stderr
    assert message in proc.stderr and "Traceback" not in proc.stderr
    assert proc.stderr.rstrip().endswith(f" [{code}]"), proc.stderr   # the kind of refusal (issue 63)
    assert len(proc.stderr.strip().splitlines()) == 1, proc.stderr


def test_skip_reuses_only_an_identical_run_and_dead_temps_are_cleaned(tmp_path):
    out, source = tmp_path / "c", tmp_path / "dev.jsonl"
    source.write_bytes(open(SNLI_DEV, "rb").read())
    run_cli("convert", source, "--preset", "snli", "--out", out)
    again = run_cli("convert", source, "--preset", "snli", "--out", out, "--mode", "skip")
    assert "skipped (same inputs and config)" in again.stdout
    other = run_cli("convert", source, "--preset", "snli", "--labels", "entailment,neutral", "--out", out,
                    "--mode", "skip", check=False)
    assert other.returncode == 2 and "another configuration" in other.stderr
    assert other.stderr.rstrip().endswith("[output-exists]"), other.stderr
    with open(source, "a") as fh:                       # same path and config, but the input has changed
        fh.write('{"sentence1": "A late row .", "sentence2": "Added .", "gold_label": "neutral"}\n')
    changed = run_cli("convert", source, "--preset", "snli", "--out", out, "--mode", "skip", check=False)
    assert changed.returncode == 2 and "inputs that have changed" in changed.stderr and str(source) in changed.stderr
    assert changed.stderr.rstrip().endswith("[output-exists]"), changed.stderr
    zf = tmp_path / "zf"                                # verbs with several parts compare their inputs too
    run_cli("zfilter", SNLI_HARD, "--preset", "snli", "--out", zf, "--k", 5)
    moved = run_cli("zfilter", SNLI_DEV, "--preset", "snli", "--out", zf, "--k", 5, "--mode", "skip", check=False)
    assert moved.returncode == 2 and "other inputs" in moved.stderr
    assert moved.stderr.rstrip().endswith("[output-exists]"), moved.stderr
    dead = tmp_path / "c.tmp-999999999-0123456789ab"   # a run killed mid-write (no such process)
    dead.mkdir()
    (dead / "part-00000.parquet").write_bytes(b"half")
    run_cli("convert", SNLI_DEV, "--preset", "snli", "--out", out)
    assert not dead.exists() and not list(tmp_path.glob("c.tmp-*"))


def test_lone_surrogate_escape_is_that_rows_reject_in_jsonl_and_json_arrays(tmp_path):
    good = '{"sentence1": "A dog runs .", "sentence2": "An animal moves \\ud83d\\ude00 .", "gold_label": "entailment"}'
    bad = '{"sentence1": "A cat \\ud800 sits .", "sentence2": "A cat .", "gold_label": "entailment"}'
    (tmp_path / "rows.jsonl").write_text(f"{good}\n{bad}\n")
    (tmp_path / "rows.json").write_text(f"[{good}, {bad}]")
    for name in ("rows.jsonl", "rows.json"):
        rows, rejects = load([str(tmp_path / name)], PRESETS["snli"])
        assert rows["text_b"].to_pylist() == ["An animal moves \U0001F600 ."]   # a valid pair decodes as usual
        assert rejects["column"].to_pylist() == ["sentence1"]
        assert "lone UTF-16 surrogate" in rejects["reason"][0].as_py() and "\\ud800" in rejects["raw"][0].as_py()


def test_only_credentials_are_hidden_not_words_that_contain_key_or_token(tmp_path):
    """Names holding 'key', 'token' or 'auth' anywhere were taken for credentials: 'm_key.yaml: stage 1' printed as
    'm_key.yaml: ***', a tokenizer setting's message lost its words, and weights' node_key vanished from manifests."""
    from refinery.io.redaction import redact, redact_text

    said = redact_text("aws_secret_access_key=A1 session_token: T2 api-key=K3 password=P4 --storage-option key=K5 "
                       "s3://me:P6@host/b url=https://h/?X-Amz-Security-Token=T7 conn=Protocol=https;AccountKey=K8 "
                       "secretKey=S9 PGPASSWORD=P10 storage_key=K11 max_tokens=5 tokenizer=ws node_key=auto")
    assert not any(secret in said for secret in ("A1", "T2", "K3", "P4", "K5", "P6", "T7", "K8", "S9", "P10", "K11"))
    assert said.endswith("max_tokens=5 tokenizer=ws node_key=auto")
    assert redact({"graph": {"node_key": "auto"}, "api_key_env": "OPENAI_API_KEY", "storage_options": {
        "key": "K", "secret": "S", "client_kwargs": {"endpoint_url": "http://127.0.0.1:9000"}}}) == {
        "graph": {"node_key": "auto"}, "api_key_env": "OPENAI_API_KEY", "storage_options": {
            "key": "***", "secret": "***", "client_kwargs": {"endpoint_url": "http://127.0.0.1:9000"}}}
    pipeline = tmp_path / "m_key.yaml"
    pipeline.write_text(f"input: {{paths: [{SNLI_HARD}], preset: snli}}\nstages:\n  - zfilter: {{kk: 1}}\n")
    proc = run_cli("run", pipeline, check=False)
    assert proc.returncode == 2 and proc.stderr.endswith(
        f"error: {pipeline}: stage 1 (zfilter): unknown key(s) kk; did you mean 'k'?; known: k, batch_size, min_count, warmup, settle, settle_limit, "
        "biased_set, prior, alpha, shuffle_seed, features, seed_corpus [unknown-setting]\n"), proc.stderr


def test_a_truncated_json_line_is_rejected_with_a_reason_that_reads(tmp_path):
    lines = open(SNLI_HARD).readlines()[:3]
    (tmp_path / "cut.jsonl").write_text(lines[0] + lines[1] + lines[2][:40] + "\n")
    run_cli("convert", tmp_path / "cut.jsonl", "--preset", "snli", "--out", tmp_path / "c")
    from refinery.io.corpus import Corpus
    [reason] = Corpus.open(str(tmp_path / "c")).read_rejects()["reason"].to_pylist()
    assert reason.startswith("malformed JSON: Unterminated string starting at column "), reason   # not 'at at'
