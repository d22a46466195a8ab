"""Checkpoints of long stages: generation and RAZOR's rewriting resume after a kill from their last finished
shard or round, to the output an uninterrupted run makes; checkpoints of other settings are never reused."""
import json

import pytest
from conftest import SNLI_TEST, killed_when, run_cli
from test_ibadr import tiny_generator  # noqa: F401 (the fixture)

from refinery.io.checkpoints import CHECKPOINTS, KEY, Checkpoints
from refinery.io.corpus import Corpus
from refinery.io.location import ForeignOutput


def test_killed_generation_resumes_from_its_last_finished_shard(tiny_generator, tmp_path):  # noqa: F811
    args = ["generate", SNLI_TEST, "--preset", "snli", "--limit", 4, "--target-labels", "all",
            "--model", tiny_generator, "--max-new-tokens", 8, "--batch-size", 2, "--shard-rows", 4]
    killed = tmp_path / "killed"
    finished = killed_when(args, killed, f"{CHECKPOINTS}/generate/shard-?????/{KEY}")   # not shard-N.tmp-…
    assert len(finished) < 3                                                  # 12 prompts: 3 shards of 4
    assert f"resumed: {len(finished)} finished shard(s)" in run_cli(*args, "--out", killed).stdout
    assert not (killed / CHECKPOINTS).exists()                          # gone once the output is published
    run_cli(*args, "--out", tmp_path / "straight")
    resumed, straight = (Corpus.open(str(tmp_path / run / "corpus")).read() for run in ("killed", "straight"))
    assert resumed.num_rows == straight.num_rows >= 10 and resumed.equals(straight)


def test_checkpoints_of_other_settings_are_cleared_not_reused(tmp_path):
    import pyarrow as pa

    piece = pa.table({"x": [1, 2]})
    first = Checkpoints(str(tmp_path / "out"), "task", {"config": {"tau": 0.5}, "inputs": "abc"})
    first.put("shard-00000", piece)
    assert Checkpoints(str(tmp_path / "out"), "task", {"config": {"tau": 0.5}, "inputs": "abc"}).get(
        "shard-00000").equals(piece)
    other = Checkpoints(str(tmp_path / "out"), "task", {"config": {"tau": 0.6}, "inputs": "abc"})
    assert other.done() == [] and other.get("shard-00000") is None
    other.clear()
    assert not (tmp_path / "out" / CHECKPOINTS).exists() and (tmp_path / "out" / ".refinery.json").exists()
    (tmp_path / "mine").mkdir()
    (tmp_path / "mine" / "notes.txt").write_text("a user's file")
    with pytest.raises(ForeignOutput):
        Checkpoints(str(tmp_path / "mine"), "task", {})


def test_killed_razor_resumes_from_its_last_finished_round(tiny_generator, tmp_path):  # noqa: F811
    args = ["razor", SNLI_TEST, "--preset", "snli", "--model", tiny_generator, "--top-k", 6, "--candidates", 2,
            "--rounds", 3, "--max-new-tokens", 8, "--verify-max-new-tokens", 4]
    killed = tmp_path / "killed"
    assert killed_when(args, killed, f"{CHECKPOINTS}/razor/round-???.parquet") == ["round-001.parquet"]
    assert "resumed: 1 finished round(s)" in run_cli(*args, "--out", killed).stdout
    assert not (killed / CHECKPOINTS).exists()
    run_cli(*args, "--out", tmp_path / "straight")
    for part in ("corpus", "scores"):
        assert Corpus.open(str(killed / part)).read().equals(Corpus.open(str(tmp_path / "straight" / part)).read())
    resumed, straight = (json.loads((out / "report" / "report.json").read_text())["rounds"]
                         for out in (killed, tmp_path / "straight"))
    assert resumed == straight and len(straight) >= 1


def test_a_rerun_recomputes_what_new_code_would_compute_differently(tmp_path, monkeypatch):
    """A step's fingerprint holds refinery's version and its stage's ``version``: after either changes, an
    otherwise unchanged pipeline reruns the step (before, it said "unchanged, skipped")."""
    from refinery.methods.audit.stage import AuditStage
    from refinery.pipeline import runner
    from refinery.pipeline.config import parse_pipeline

    small = tmp_path / "small.jsonl"
    small.write_text("".join(open(SNLI_TEST).readlines()[:300]))
    spec = parse_pipeline({"input": {"paths": [str(small)], "preset": "snli"}, "stages": [{"audit": {"k": 3}}]})

    def statuses():
        return [s.status for s in runner.run_pipeline(spec, str(tmp_path / "out"), echo=lambda line: None).stages]

    assert statuses() == ["ran", "ran"]
    assert statuses() == ["skipped", "skipped"]
    monkeypatch.setattr(AuditStage, "version", AuditStage.version + 1)   # the audit's code changed
    assert statuses() == ["skipped", "ran"]
    monkeypatch.setattr(runner, "__version__", "999.0")                  # refinery upgraded
    assert statuses() == ["ran", "ran"]
