"""docs/extending.md's recipe, followed: a filter written outside refinery (``ShortText`` below, the page's
example, in tests/short_text_plugin.py) and registered with ``refinery.pipeline.stage.register`` runs as a verb, as a pipeline step and as an
``rf.`` call, and the three keep the same rows.

The verb and the pipeline run in a child process that imports this module, registers the stage and starts the
CLI: the command of your own the page describes (the ``refinery`` console script knows only installed
plugins). The ``rf.`` call runs here, on a stage registered after ``refinery.api`` was imported, under its
hyphenated name's Python spelling (``short-text`` → ``rf.short_text``)."""
import json
import subprocess
import sys
from pathlib import Path

import pyarrow.parquet as pq
import pytest

import refinery as rf
from conftest import REPO, SNLI_DEV
from label_share_plugin import LabelShare
from short_text_plugin import ShortText

ROWS = 300
MIN_WORDS = 6


# my_refinery.py of docs/extending.md: import the stage's module, register it, run the CLI
MY_REFINERY = ("import sys; sys.path.insert(0, {tests!r}); sys.argv = ['my_refinery', *sys.argv[1:]]\n"
               "import short_text_plugin\nfrom refinery.pipeline.stage import register\n"
               "register(short_text_plugin.ShortText)\nfrom refinery.cli.main import run\nrun()\n")


def my_refinery(*args) -> subprocess.CompletedProcess:
    script = MY_REFINERY.format(tests=str(Path(__file__).parent))
    proc = subprocess.run([sys.executable, "-c", script, *map(str, args)], capture_output=True, text=True, cwd=REPO)
    assert proc.returncode == 0, f"my_refinery {' '.join(map(str, args))}:\n{proc.stdout}\n{proc.stderr}"
    return proc


@pytest.fixture(scope="module")
def pairs(tmp_path_factory) -> str:
    """The first 300 SNLI dev pairs as a JSONL file."""
    path = tmp_path_factory.mktemp("extending") / "pairs.jsonl"
    with open(SNLI_DEV) as fh:
        path.write_text("".join(next(fh) for _ in range(ROWS)))
    return str(path)


def kept(folder: Path) -> list:
    return pq.read_table(folder / "kept" / "part-00000.parquet", columns=["id"])["id"].to_pylist()


def test_a_filter_from_outside_is_a_verb_a_pipeline_step_and_an_rf_call(pairs, tmp_path, monkeypatch):
    from refinery.pipeline import stage

    verb = my_refinery("short-text", pairs, "--preset", "snli", "--min-words", MIN_WORDS, "--out", tmp_path / "verb")
    assert f"rows in {ROWS} = " in verb.stdout and "(ok)" in verb.stdout
    (tmp_path / "p.yaml").write_text(json.dumps({"input": {"paths": [pairs], "preset": "snli"},
                                                 "stages": [{"short-text": {"min_words": MIN_WORDS}}]}))
    my_refinery("run", tmp_path / "p.yaml", "--out", tmp_path / "pipe")

    monkeypatch.setattr(stage, "REGISTRY", dict(stage.REGISTRY))
    stage.register(ShortText)                            # after refinery.api was imported
    assert "short_text" in dir(rf)
    called = rf.short_text(pairs, preset="snli", min_words=MIN_WORDS)

    by_verb = kept(tmp_path / "verb")
    assert 0 < len(by_verb) < ROWS
    assert kept(tmp_path / "pipe" / "01-short-text") == by_verb
    assert called.to_pandas(canonical=True)["id"].tolist() == by_verb
    assert min(len(t.split()) for t in called.to_pandas(canonical=True)["text_b"]) >= MIN_WORDS
    assert called.parts == {"kept": len(by_verb), "filtered out": ROWS - len(by_verb), "input rejects": 0}
    assert called.rejected["reason"].str.endswith(f"words < {MIN_WORDS}").all()

    monkeypatch.undo()                                   # unregistered: rf. asks the registry at each call
    with pytest.raises(AttributeError):
        rf.short_text


def test_the_plugins_hold_to_the_contract_locally_and_on_ray(tmp_path, monkeypatch):
    """``check_stage`` (docs/extending.md) on the page's filter and on its table stage: every promise of the contract
    holds, on both engines, killed and rerun."""
    from refinery.pipeline import stage
    from refinery.testing import check_stage

    monkeypatch.setattr(stage, "REGISTRY", dict(stage.REGISTRY))
    stage.register(ShortText)
    stage.register(LabelShare)
    from refinery.pipeline.engine import ray_shutdown

    monkeypatch.setenv("PYTHONPATH", str(Path(__file__).parent))   # Ray's workers import the plugins' modules:
    ray_shutdown()                                                 # a Ray of their own, started with it
    try:
        result = check_stage(["short-text", "{input}", "--min-words", 7], folder=str(tmp_path / "filter"))
        table = check_stage(["label-share", "{input}", "--rare", 0.34], folder=str(tmp_path / "table"))
    finally:
        ray_shutdown()
    assert result.ok, str(result)
    checked = " ".join(c.name for c in result.checks)
    for promise in ("accounting", "each input row once", "its reason", "the audit a user runs next",
                    "ray writes the local engine's corpora and figures", "its rerun equals", "mid-overwrite"):
        assert promise in checked, str(result)
    assert table.ok, str(table)
    checked = " ".join(c.name for c in table.checks)
    for promise in ("accounting", "whole", "ray writes the local engine's corpora and figures", "its rerun equals",
                    "mid-overwrite"):
        assert promise in checked, str(table)


def test_a_table_stage_from_outside_computes_over_the_whole_input(pairs, monkeypatch):
    """The page's table stage (tests/label_share_plugin.py) as an ``rf.`` call: the input's rows in their order, each
    with its label's share of the corpus as pandas counts it, and the rows accounted for."""
    from refinery.pipeline import stage

    monkeypatch.setattr(stage, "REGISTRY", dict(stage.REGISTRY))
    stage.register(LabelShare)
    called = rf.label_share(pairs, preset="snli", rare=0.34)
    rows = called.to_pandas(canonical=True)
    shares = rows["label"].value_counts(normalize=True)
    lines = [json.loads(line) for line in Path(pairs).read_text().splitlines()]
    assert rows["text_b"].tolist() == [line["sentence2"] for line in lines]   # the input's order
    assert (rows["label_share"] - rows["label"].map(shares)).abs().max() < 1e-12
    assert (rows["rare_label"] == (rows["label"].map(shares) < 0.34)).all() and rows["rare_label"].any()
    assert called.parts == {"out": ROWS, "input rejects": 0}


def test_check_stage_finds_a_filter_that_loses_rows(tmp_path, monkeypatch):
    """A filter that loses half of the rows it keeps fails the contract's accounting and row checks."""
    from refinery.pipeline import stage
    from refinery.testing import check_stage

    class LosesRows(ShortText):
        """Drop short hypotheses, and lose half of the kept rows."""

        name = "loses-rows"

        def annotate(self, batch, keep):
            kept, dropped = super().annotate(batch, keep)
            return kept.slice(0, kept.num_rows // 2), dropped

    monkeypatch.setattr(stage, "REGISTRY", dict(stage.REGISTRY))
    stage.register(LosesRows)
    result = check_stage(["loses-rows", "{input}", "--min-words", 7], engines=("local",), kill=False,
                         folder=str(tmp_path))
    failed = {c.name for c in result.failures}
    assert failed == {"accounting: rows in = the input's rows and rejects",
                      "a filter's kept/ and rejected/ hold each input row once"}, str(result)
