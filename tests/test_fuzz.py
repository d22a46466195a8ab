"""A 10,000-record corpus with 24 kinds of damage through every verb that reads raw input:
rows in = rows out + rejects, no kept text differs from its source line, no secret on disk."""
import os
import re

import pyarrow.compute as pc
import pytest
from conftest import SNLI_DEV, run_cli
from fuzz import damaged_corpus

from refinery.io.corpus import Corpus, read_any

SECRET = "FUZZSECRET-0815"
STORAGE = ["--storage-option", f"secret={SECRET}", "--storage-option", f"token={SECRET}"]


def _conserved(stdout: str, records: int) -> None:
    """The verb printed ``rows in N = A kept + B filtered out + … (ok)``: N the input's records, N = ΣA,B,…"""
    m = re.search(r"rows in ([\d,]+) = (.*) \(ok\)", stdout)
    assert m, stdout
    parts = [int(x.replace(",", "")) for x in re.findall(r"([\d,]+) [a-z]", m.group(2))]
    assert int(m.group(1).replace(",", "")) == records == sum(parts) and len(parts) >= 2, stdout


def _unaltered(fuzzed, table) -> int:
    rows = table.select(["id", "text_a", "text_b", "label"]).to_pylist()
    assert fuzzed.altered(rows) == []
    return len(rows)


@pytest.fixture(scope="module")
def fuzzed(tmp_path_factory):
    return damaged_corpus(tmp_path_factory.mktemp("fuzz") / "fuzz.jsonl", SNLI_DEV, rows=10_000, seed=7)


def test_fuzzed_corpus_through_every_verb(fuzzed, tmp_path):
    assert fuzzed.records >= 10_000 and len(fuzzed.kinds) >= 20
    raw, n = str(fuzzed.path), fuzzed.records

    corpus = tmp_path / "corpus"
    _conserved(run_cli("convert", raw, "--preset", "snli", "--out", corpus, *STORAGE).stdout, n)
    manifest = Corpus.open(str(corpus)).manifest
    assert manifest.rows + manifest.rejected == n
    assert _unaltered(fuzzed, read_any(str(corpus))) == manifest.rows
    assert f"rejected  {manifest.rejected:,}" in run_cli("inspect", corpus).stdout  # a finished corpus's rejects
    reasons = set(Corpus.open(str(corpus)).read_rejects()["reason"].to_pylist())
    assert len({r.split(":")[0] for r in reasons}) >= 8, reasons  # the damage is told apart, not lumped

    _conserved(run_cli("audit", raw, "--preset", "snli", "--out", tmp_path / "audit", *STORAGE).stdout, n)

    for name, source, flags in (("raw", raw, ["--preset", "snli"]), ("corpus", str(corpus), [])):
        zf = tmp_path / f"zf-{name}"
        _conserved(run_cli("zfilter", source, *flags, "--out", zf, "--k", 5, *STORAGE).stdout, n)
        kept, dropped = Corpus.open(str(zf / "kept")), Corpus.open(str(zf / "rejected"))
        assert kept.manifest.rows + kept.manifest.rejected + dropped.manifest.rows == n
        _unaltered(fuzzed, kept.read()), _unaltered(fuzzed, dropped.read())
        assert (zf / "_SUCCESS").exists()

    run_cli("probe", SNLI_DEV, "--preset", "snli", "--out", tmp_path / "p", "--save-model", tmp_path / "m")
    conf = tmp_path / "conf"
    _conserved(run_cli("confidence", raw, "--preset", "snli", "--model", tmp_path / "m", "--tau", 0.5,
                       "--out", conf, *STORAGE).stdout, n)
    kept, dropped = Corpus.open(str(conf / "kept")), Corpus.open(str(conf / "rejected"))
    assert kept.manifest.rows + kept.manifest.rejected + dropped.manifest.rows == n
    _unaltered(fuzzed, kept.read()), _unaltered(fuzzed, dropped.read())

    up = tmp_path / "up"
    _conserved(run_cli("upsample", raw, "--preset", "snli", "--out", up, *STORAGE).stdout, n)
    rows, m = read_any(str(up / "corpus")), Corpus.open(str(up / "corpus")).manifest
    copies = pc.equal(rows["source"], "upsampled")
    assert m.rows - pc.sum(copies).as_py() + m.rejected == n
    originals = rows.filter(pc.invert(copies))
    _unaltered(fuzzed, originals)
    copied = rows.filter(copies)
    _unaltered(fuzzed, copied.set_column(copied.schema.get_field_index("id"), "id", copied["origin_id"]))

    w = tmp_path / "w"
    _conserved(run_cli("weights", "--input", f"train={raw}", "--preset", "snli", "--out", w, "--folds", 2,
                       "--trees", 5, *STORAGE).stdout, n)
    m = Corpus.open(str(w / "corpus")).manifest
    assert m.rows + m.rejected == n and _unaltered(fuzzed, read_any(str(w / "corpus"))) == m.rows

    out = run_cli("leakage", "--input", f"train={raw}", "--input", f"test={raw}", "--preset", "snli",
                  "--out", tmp_path / "leak", "--trees", 5, *STORAGE).stdout
    _conserved(out, 2 * n)

    for root, _, files in os.walk(tmp_path):
        for name in files:
            with open(os.path.join(root, name), "rb") as fh:
                assert SECRET.encode() not in fh.read(), os.path.join(root, name)
