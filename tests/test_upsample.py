"""AUDAC up-sampling on SNLI dev+test: corrected tokens near uniform, reproducible, every added row traced."""
import hashlib
import json
import re

import pyarrow.compute as pc
import pytest
from conftest import SNLI_DEV, SNLI_TEST, run_cli

from refinery.core.features import STOPWORD_LIST
from refinery.io.corpus import MANIFEST, Corpus
from refinery.report.format import number


@pytest.fixture(scope="module")
def upsampled(tmp_path_factory):
    out = tmp_path_factory.mktemp("up") / "a"
    args = ["upsample", SNLI_DEV, SNLI_TEST, "--preset", "snli", "--k", "10", "--step", "0.2", "--iterations", "10"]
    run_cli(*args, "--out", out)
    run_cli(*args, "--out", out.parent / "b")
    return out, out.parent / "b"


def test_corrected_tokens_near_uniform(upsampled):
    out, _ = upsampled
    report = json.loads((out / "report" / "report.json").read_text())
    assert len(report["tokens"]) == 10
    for tok in report["tokens"]:
        assert max(report["p_hat_after"][tok].values()) <= 0.40, tok
        assert max(report["p_hat_before"][tok].values()) > 0.5, tok
    assert "sleeping" in report["tokens"]
    assert "nobody" in [u["token"] for u in report["uncorrectable"]]  # every 'nobody' row contradicts
    assert 0 < report["growth"] < 0.15  # modest growth (paper: +7.5% on SNLI train)
    page = (out / "report" / "report.html").read_text()   # z-plots before and after, p̂ before → after
    sleeping = [report[f"p_hat_{when}"]["sleeping"]["contradiction"] for when in ("before", "after")]
    assert page.count("<svg") == 2 and f"{number(sleeping[0])} → {number(sleeping[1])}" in page


def _tokens(text):
    words = re.sub(r"[^\w\s]|_", " ", text.lower()).split()
    return {w for w in words if w not in STOPWORD_LIST}


def test_only_rows_with_corrected_tokens_duplicated_and_traced(upsampled):
    out, _ = upsampled
    report = json.loads((out / "report" / "report.json").read_text())
    table = Corpus.open(str(out)).read()
    original = table.filter(pc.equal(table["source"], "original"))
    added = table.filter(pc.equal(table["source"], "upsampled"))
    assert original.num_rows == 19666 and added.num_rows == report["rows_added"] > 0
    by_id = {r["id"]: r for r in original.to_pylist()}
    corrected = set(report["tokens"])
    for row in added.to_pylist():
        origin = by_id[row["origin_id"]]  # every origin exists in the input
        assert (row["text_a"], row["text_b"], row["label"]) == (origin["text_a"], origin["text_b"], origin["label"])
        assert row["upsample_token"] in _tokens(origin["text_a"] + " " + origin["text_b"])
        assert _tokens(origin["text_a"] + " " + origin["text_b"]) & corrected


def test_same_seed_byte_identical(upsampled):
    a, b = upsampled
    ma = json.loads((a / MANIFEST).read_text())
    mb = json.loads((b / MANIFEST).read_text())
    for f in ma["files"]:
        assert hashlib.sha256((a / f).read_bytes()).digest() == hashlib.sha256((b / f).read_bytes()).digest()
    assert (a / "report" / "trace.parquet").read_bytes() == (b / "report" / "trace.parquet").read_bytes()
    assert [s["sha256"] for s in ma["file_stats"]] == [s["sha256"] for s in mb["file_stats"]]


def test_trace_adds_up(upsampled):
    import pyarrow.parquet as pq

    out, _ = upsampled
    trace = pq.read_table(out / "report" / "trace.parquet").to_pylist()
    report = json.loads((out / "report" / "report.json").read_text())
    assert sum(t["drawn"] for t in trace) == report["rows_added"]
    assert all(t["drawn"] == sum(v for k, v in t.items() if k.startswith("drawn:")) for t in trace)
