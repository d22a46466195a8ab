"""Pipelines: the stage contract, pipeline files, ``refinery run`` locally and on Ray, skipping
unchanged stages, and a pipeline submitted as a Ray job to a two-node cluster over S3."""
import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet  # noqa: F401 (pa.parquet)
import pytest
import yaml
from conftest import BIN, DATA, RAY_ENV, REPO, SNLI_DEV, SNLI_HARD, RayNode, free_port, fresh_audit, run_cli
from test_remote import S3Server

from refinery.io.corpus import Corpus
from refinery.pipeline.config import (
    ConfigError,
    from_dict,
    load_pipeline,
    parse_pipeline,
    to_dict,
)
from refinery.pipeline.stage import REGISTRY, Output, stage_class

EXAMPLE = REPO / "examples" / "snli.yaml"
CORPUS_PARTS = ["00-input", "02-zfilter/kept", "02-zfilter/rejected", "03-weights/corpus"]


def _tables(out: Path | str, storage_options=None, parts=CORPUS_PARTS) -> dict:
    return {part: Corpus.open(f"{out}/{part}", storage_options).read() for part in parts}


def _same(a, b, part: str) -> None:
    """The same rows and values; computed floats to 1e-9 (a Ray job's driver runs BLAS on other threads,
    which moves the last bits of a fitted model's probabilities)."""
    assert a.schema == b.schema and a.num_rows == b.num_rows, part
    for name in a.column_names:
        if pa.types.is_floating(a.schema.field(name).type):
            assert np.allclose(a[name].to_numpy(), b[name].to_numpy(), rtol=1e-9, atol=0), (part, name)
        else:
            assert a[name].equals(b[name]), (part, name)


def test_every_stage_config_round_trips_and_declares_its_contract():
    for name in REGISTRY:
        cls = stage_class(name)
        assert cls.name == name
        assert set(cls.needs) <= {"id", "text_a", "text_b", "label", "split"}
        required = {"confidence": {"model": "ngram"}, "compare": {"evals": ("hard=data/hard.jsonl:snli",)},
                    "decontaminate": {"against": ("hard=data/hard.jsonl:snli",)}}
        config = cls.Config(**required.get(name, {}))
        assert isinstance(cls(config).output, Output)
        data = json.loads(json.dumps(to_dict(config)))          # through JSON and back
        assert from_dict(cls.Config, data) == config
        assert from_dict(cls.Config, yaml.safe_load(yaml.safe_dump(data))) == config


def test_pipeline_errors_name_the_file_and_key(tmp_path):
    bad = {"input": {"paths": [SNLI_HARD], "preset": "snli"}, "stages": [{"zfilter": {"k": 5, "kk": 1}}]}
    with pytest.raises(ConfigError, match=r"stage 1 \(zfilter\): unknown key\(s\) kk") as unknown:
        parse_pipeline(bad)
    with pytest.raises(ConfigError, match=r"\(zfilter\)\.k: expected an integer, got 'five'") as invalid:
        parse_pipeline({**bad, "stages": [{"zfilter": {"k": "five"}}]})
    with pytest.raises(ConfigError, match="unknown stage 'zfliter'; did you mean 'zfilter'\\?") as no_stage:
        parse_pipeline({**bad, "stages": ["zfliter"]})
    assert (unknown.value.code, invalid.value.code, no_stage.value.code) == (
        "unknown-setting", "invalid-setting", "unknown-setting")
    with pytest.raises(ConfigError, match=r"^pipeline: input: map=…: .*'txt_a'; did you mean "
                                          r"'text_a'\? \(fields: text_a, ") as field:
        parse_pipeline({**bad, "input": {"paths": [SNLI_HARD], "map": {"txt_a": "sentence1", "label": "gold_label"}}})
    with pytest.raises(ConfigError, match=r"model=… \(ngram, .*\) and proba_column=… .*not both") as both:
        parse_pipeline({**bad, "stages": [{"confidence": {"model": "ngram", "proba_column": "p"}}]})
    assert (field.value.code, both.value.code) == ("unknown-setting", "conflicting-settings")
    assert parse_pipeline({**bad, "stages": [{"confidence": {"tau": 0.5}}]}).stages[0].config.model == "ngram"
    path = tmp_path / "p.yaml"
    path.write_text(yaml.safe_dump({**bad, "stages": [{"audit": {"features": {"families": ["unigram", "trigram"]}}}]}))
    proc = run_cli("run", path, check=False)
    assert proc.returncode == 2 and "Traceback" not in proc.stderr and len(proc.stderr.strip().splitlines()) == 1
    assert proc.stderr.rstrip().endswith("[invalid-setting]"), proc.stderr
    assert str(path) in proc.stderr and "trigram" in proc.stderr


def test_print_config_fills_defaults_and_loads_back(tmp_path):
    printed = run_cli("run", EXAMPLE, "--print-config", "--engine", "ray").stdout
    data = yaml.safe_load(printed)
    assert data["engine"] == "ray" and list(data["stages"][1]) == ["zfilter"]
    assert data["stages"][1]["zfilter"]["min_count"] == 10                     # a default, filled in
    again = tmp_path / "again.yaml"
    again.write_text(printed)
    assert load_pipeline(str(again)).to_dict() == load_pipeline(str(EXAMPLE)).to_dict() | {"engine": "ray"}



def test_settings_naming_a_folder_are_taken_from_the_pipeline_files_folder_and_printed_absolute(tmp_path):
    """A saved model's relative folder was read from the working directory, not the pipeline file's; and
    ``--print-config`` wrote it relative, so the printed file ran only from where it was printed."""
    (tmp_path / "runs" / "model").mkdir(parents=True)
    (tmp_path / "runs" / "s").mkdir()   # a corpus setting's path must be there (a step's name need not), and the
    (tmp_path / "runs" / "a").mkdir()   # state an audit updates
    for name in ("state.bin", "state.json"):
        (tmp_path / "runs" / "a" / name).write_text("")
    (tmp_path / "runs" / "p.yaml").write_text("input: {paths: [d.jsonl], preset: snli}\nstages:\n"
                                              "  - confidence: {model: model}\n  - confidence: {model: ngram}\n"
                                              "  - audit: {update: a}\n"
                                              "  - zfilter: {seed_corpus: [input, 01-confidence, confidence, "
                                              "audit, s]}\n")
    spec = load_pipeline(str(tmp_path / "runs" / "p.yaml"))
    assert [s.config.model for s in spec.stages[:2]] == [str(tmp_path / "runs" / "model"), "ngram"]
    assert spec.stages[2].config.update == str(tmp_path / "runs" / "a")   # a folder: taken from there, found or not
    assert spec.stages[3].config.seed_corpus == ("input", "01-confidence", "confidence", "audit",
                                                 str(tmp_path / "runs" / "s"))   # step names stay
    printed = run_cli("confidence", "d.jsonl", "--preset", "snli", "--model", "model", "--out", "o", "--print-config",
                      cwd=tmp_path / "runs").stdout
    assert yaml.safe_load(printed)["stages"] == [{"confidence": {**to_dict(stage_class("confidence").Config(
        model="ngram")), "model": str(tmp_path / "runs" / "model")}}]


def test_a_variable_gives_a_number_or_a_flag_its_setting_takes(tmp_path, monkeypatch):
    """``k: ${K}`` was refused: 'expected an integer, got '20''; a value written as text in the file still is."""
    monkeypatch.setenv("K", "7")
    monkeypatch.setenv("SETTLE", "false")
    (tmp_path / "p.yaml").write_text(f"input: {{paths: [{SNLI_HARD}], preset: snli}}\nstages:\n"
                                     "  - zfilter:\n      k: ${K}\n      settle: ${SETTLE}\n")
    config = load_pipeline(str(tmp_path / "p.yaml")).stages[0].config
    assert (config.k, config.settle) == (7, False)
    monkeypatch.setenv("K", "seven")
    with pytest.raises(ConfigError, match=r"\(zfilter\)\.k: .*'seven'.*integer") as from_environment:
        load_pipeline(str(tmp_path / "p.yaml"))
    (tmp_path / "q.yaml").write_text(f"input: {{paths: [{SNLI_HARD}], preset: snli}}\nstages:\n"
                                     "  - zfilter: {k: '7'}\n")
    with pytest.raises(ConfigError, match=r"\(zfilter\)\.k: .*integer.*'7'") as as_text:
        load_pipeline(str(tmp_path / "q.yaml"))
    assert from_environment.value.code == as_text.value.code == "invalid-setting"


def test_runs_print_config_writes_out_absolute_and_credentials_as_variables(tmp_path):
    """``refinery run P --out x --print-config`` printed ``out: x``, which the printed file reads from its own folder;
    and it printed a credential the file took from the environment."""
    (tmp_path / "p.yaml").write_text(f"input:\n  paths: [{SNLI_HARD}]\n  preset: snli\n  storage_options:\n"
                                     "    secret: ${MY_SECRET}\nstages:\n  - audit: {}\n")
    printed = run_cli("run", tmp_path / "p.yaml", "--out", "x", "--print-config", env={"MY_SECRET": "hunter2"},
                      cwd=tmp_path).stdout
    data = yaml.safe_load(printed)
    assert data["out"] == str(tmp_path / "x") and data["input"]["storage_options"] == {"secret": "${REFINERY_SECRET}"}


def test_a_verbs_print_config_is_the_one_stage_pipeline_that_gives_its_result(tmp_path):
    """``refinery zfilter … --print-config`` writes a pipeline file; running it keeps the same rows as the verb."""
    args = [SNLI_DEV, "--preset", "snli", "--k", "5", "--batch-size", "500", "--features", "unigram",
            "--storage-option", "secret=hunter2"]
    printed = run_cli("zfilter", *args, "--out", tmp_path / "verb", "--print-config").stdout
    assert "hunter2" not in printed and "${REFINERY_SECRET}" in printed   # credentials come from the environment
    assert not (tmp_path / "verb").exists()                                 # printing runs nothing
    data = yaml.safe_load(printed)
    assert data["stages"] == [{"zfilter": {**to_dict(stage_class("zfilter").Config()),
                                           "k": 5, "batch_size": 500,
                                           "features": data["stages"][0]["zfilter"]["features"]}}]
    assert data["stages"][0]["zfilter"]["features"]["families"] == ["unigram"]
    del data["input"]["storage_options"]
    (tmp_path / "verb.yaml").write_text(yaml.safe_dump(data))
    run_cli("zfilter", *args[:-2], "--out", tmp_path / "verb")
    run_cli("run", tmp_path / "verb.yaml", "--out", tmp_path / "pipe")
    verb = Corpus.open(str(tmp_path / "verb" / "kept")).read()
    pipe = Corpus.open(str(tmp_path / "pipe" / "01-zfilter" / "kept")).read()
    assert verb.num_rows < 9_842 and verb["id"].equals(pipe["id"])
def test_snli_example_local_and_ray_identical_and_reruns_only_what_changed(tmp_path):
    local, ray = tmp_path / "local", tmp_path / "ray"
    first = run_cli("run", EXAMPLE, "--out", local).stdout
    assert first.count("(ok)") == 4 and "MISMATCH" not in first
    assert "rows in 19,666 = 19,666 rows + 0 rejected (ok)" in first             # SNLI dev + test
    run_cli("run", EXAMPLE, "--out", ray, "--engine", "ray", "--no-audit-steps")
    a, b = _tables(local), _tables(ray)
    for part in CORPUS_PARTS:
        assert a[part].equals(b[part]), part
    on_ray = {s["stage"]: s for s in json.loads((ray / "pipeline" / "run.json").read_text())["stages"]}
    # weights' work is one process (DuckDB, a forest): on Ray it ran as one task, whose bars the driver recorded (the
    # verdict's counts run beside the fit and the writing, without bars of their own; this verdict checks no caps)
    assert on_ray["weights"]["task_peak_rss"] > 2**20 and on_ray["zfilter"]["task_peak_rss"] is None
    assert [p["what"] for p in on_ray["weights"]["phases"]] == ["leakage graph", "weights: folds", "cross-predict",
                                                                "weights: write"]
    assert set(a["03-weights/corpus"]["split"].to_pylist()) == {"dev", "test"}
    assert a["03-weights/corpus"].num_rows == a["02-zfilter/kept"].num_rows
    audit = json.loads((local / "01-audit" / "report" / "summary.json").read_text())
    assert audit["rows"] == 19_666
    receipt = assert_receipt(local, ["00-input", "02-zfilter", "03-weights"], "02-zfilter")
    zfiltered = {s["step"]: s for s in receipt["steps"]}["02-zfilter"]["audit"]
    assert max(zfiltered["max_z"].values()) < 6 < 17 < min(receipt["steps"][0]["audit"]["max_z"].values())
    assert "made the shortcuts" not in (local / "pipeline" / "report.html").read_text()
    # the demo shows the way: every refining step's verdict is ok, on the console and in the receipt
    verdicts = [line for line in first.splitlines() if line.strip().startswith("verdict ")]
    assert len(verdicts) == 2 and all(line.strip().startswith("verdict ok") for line in verdicts), verdicts
    headlines = {s["step"]: s["headline"] for s in receipt["steps"]}
    assert "WARNING" not in headlines["02-zfilter"] + headlines["03-weights"], headlines

    again = run_cli("run", EXAMPLE, "--out", local, "--no-audit-steps").stdout  # nothing changed: all skipped
    assert again.count("unchanged, skipped") == 4

    changed = tmp_path / "changed.yaml"                                       # other folds for the weights stage
    changed.write_text(EXAMPLE.read_text().replace("weights: {folds: 10}", "weights: {folds: 5}"))
    out = run_cli("run", changed, "--out", local, "--no-audit-steps", env={"DATA": str(DATA)}).stdout
    assert [line.split()[1].rstrip(":") for line in out.splitlines() if line.startswith("== ")] == \
        ["00-input", "01-audit", "02-zfilter", "03-weights"]
    assert out.count("unchanged, skipped") == 3 and "== 03-weights\n" in out
    now = _tables(local)
    assert now["02-zfilter/kept"].equals(a["02-zfilter/kept"])
    assert not now["03-weights/corpus"]["weight"].equals(a["03-weights/corpus"]["weight"])
    run_json = json.loads((local / "pipeline" / "run.json").read_text())
    assert [s["status"] for s in run_json["stages"]] == ["skipped"] * 3 + ["ran"]
    assert all(s["seconds"] > 0 for s in run_json["stages"])      # a reused stage keeps the time it took


def assert_receipt(out: Path, audited: list, filter_step: str, targeted=lambda feature: True) -> dict:
    """The pipeline report's receipt: every step's rows add up, the input's top features are significant and
    those ``targeted`` fall below their input z* after ``filter_step``, and each stage's report it links to
    exists."""
    receipt = json.loads((out / "pipeline" / "receipt.json").read_text())
    steps = {s["step"]: s for s in receipt["steps"]}
    assert [s["step"] for s in receipt["steps"] if "audit" in s] == audited
    assert all(sum(s["parts"].values()) == s["rows_in"] and s["seconds"] > 0 and s["peak_rss"] > 2**20
               for s in receipt["steps"])
    before, after = steps["00-input"]["audit"], steps[filter_step]["audit"]
    assert receipt["tracked"]
    for feature in receipt["tracked"]:
        assert before["tracked"][feature] > before["threshold"], feature
        if targeted(feature):
            assert after["tracked"][feature] is None or after["tracked"][feature] < before["tracked"][feature], feature
    html = (out / "pipeline" / "report.html").read_text()
    for step in receipt["steps"]:
        if step["report"]:
            assert f'href="{step["report"]}"' in html and (out / "pipeline" / step["report"]).is_file()
    shown = re.sub(r"<pre>.*?</pre>", "", html.split("<body>")[1], flags=re.S)   # the pipeline file aside
    assert "<svg" in shown and "{" not in shown and not re.search(r"\d\.\d{5}", shown)   # no raw dicts, long floats
    return receipt


def test_failed_stage_leaves_earlier_stages_finished(tmp_path):
    spec = tmp_path / "p.yaml"
    spec.write_text(yaml.safe_dump({"input": {"paths": [SNLI_HARD], "preset": "snli"},
                                    "stages": [{"zfilter": {"k": 5}}, {"confidence": {"proba_column": "missing"}}]}))
    proc = run_cli("run", spec, "--out", tmp_path / "o", check=False)
    assert proc.returncode == 2 and "no column 'missing'" in proc.stderr
    assert proc.stderr.rstrip().endswith("[missing-columns]"), proc.stderr
    assert (tmp_path / "o" / "01-zfilter" / "_SUCCESS").exists()
    assert not (tmp_path / "o" / "02-confidence" / "_SUCCESS").exists()
    # the pipeline report is still written: the finished step, and the failed one with its error
    steps = json.loads((tmp_path / "o" / "pipeline" / "run.json").read_text())["stages"]
    assert [(s["folder"], s["status"]) for s in steps] == [("00-input", "ran"), ("01-zfilter", "ran"),
                                                           ("02-confidence", "failed")]
    assert "no column 'missing'" in steps[-1]["headline"]
    page = (tmp_path / "o" / "pipeline" / "report.html").read_text()
    assert "The run failed" in page and "02-confidence (failed)" in page
    rerun = run_cli("run", spec, "--out", tmp_path / "o", check=False)
    assert "== 01-zfilter: unchanged, skipped" in rerun.stdout


def test_audit_zfilter_weights_compare_over_one_file_and_an_unchanged_rerun_audits_nothing(tmp_path):
    """A file read as one unnamed split goes through every stage: weights names no split, compare trains on
    the weighted corpus; a rerun reuses every step and the report's audits."""
    lines = open(SNLI_DEV).read().splitlines()
    (tmp_path / "dev.jsonl").write_text("\n".join(lines[:900]) + "\n")
    (tmp_path / "hard.jsonl").write_text("\n".join(open(SNLI_HARD).read().splitlines()[:300]) + "\n")
    spec = tmp_path / "p.yaml"
    spec.write_text(yaml.safe_dump({"input": {"paths": ["dev.jsonl"], "preset": "snli"}, "stages": [
        {"audit": {"k": 5}}, {"zfilter": {"k": 5}}, {"weights": {"folds": 2, "forest": {"trees": 5}}},
        {"compare": {"evals": [f"hard={tmp_path / 'hard.jsonl'}:snli"], "model": {"bootstrap": 100}}}]}))
    first = run_cli("run", spec, "--out", tmp_path / "o").stdout
    # the input's audit is the audit step's, the kept rows' and the weighted rows' those zfilter's and weights'
    # verdicts kept with them: the report counts nothing again
    assert "report: auditing" not in first and first.count(" is read from ") == 3
    assert "report: the input's audit is read from 01-audit" in first
    weighted = Corpus.open(str(tmp_path / "o" / "03-weights" / "corpus")).read()
    assert "split" not in weighted.column_names and "weight" in weighted.column_names
    report = json.loads((tmp_path / "o" / "04-compare" / "report" / "report.json").read_text())
    assert list(report["train"]) == ["input", "03-weights"] and report["train"]["03-weights"]["weighted"]
    assert report["train"]["03-weights"]["rows"] == weighted.num_rows and report["eval"]["hard"]["rows"] == 300
    receipt = json.loads((tmp_path / "o" / "pipeline" / "receipt.json").read_text())
    recount = fresh_audit(tmp_path / "o" / "00-input", tmp_path / "recount", "--k", 5)
    assert {k: receipt["steps"][0]["audit"][k] for k in ("max_z", "threshold", "significant", "labels")} == \
        {k: recount[k] for k in ("max_z", "threshold", "significant", "labels")}
    kept = fresh_audit(tmp_path / "o" / "02-zfilter" / "kept", tmp_path / "recount-kept", "--k", 5)
    assert {k: receipt["steps"][2]["audit"][k] for k in ("max_z", "threshold", "significant", "labels", "prior")} == \
        {k: kept[k] for k in ("max_z", "threshold", "significant", "labels", "prior")}
    again = run_cli("run", spec, "--out", tmp_path / "o").stdout
    assert again.count("unchanged, skipped") == 5 and "auditing" not in again
    assert again.count(" is read from ") == 3
    rereceipt = json.loads((tmp_path / "o" / "pipeline" / "receipt.json").read_text())
    assert [s.get("audit") for s in rereceipt["steps"]] == [s.get("audit") for s in receipt["steps"]]
    assert rereceipt["final_top"] == receipt["final_top"]


def test_fever_example_audits_single_text_claims_and_upsamples(tmp_path):
    """examples/fever.yaml on FEVER-shaped claims made of SNLI dev hypotheses (FEVER's labels,
    nested evidence that is not read), with two bad rows: audit -> AUDAC."""
    to_fever = {"entailment": "SUPPORTS", "contradiction": "REFUTES", "neutral": "NOT ENOUGH INFO"}
    lines = []
    with open(SNLI_DEV) as fh:
        for i, line in zip(range(6000), fh):
            r = json.loads(line)
            lines.append(json.dumps({"id": i, "claim": r["sentence2"], "label": to_fever[r["gold_label"]],
                                     "evidence": [[[i, None, "Some_Page", 0]]]}))
    lines += [json.dumps({"id": 6000, "claim": "A dog runs .", "label": "MAYBE"}), '{"id": 6001, "claim": ']
    claims = tmp_path / "train.jsonl"
    claims.write_text("\n".join(lines) + "\n")
    out = tmp_path / "o"
    printed = run_cli("run", REPO / "examples" / "fever.yaml", "--out", out, env={"FEVER": str(claims)}).stdout
    assert "rows in 6,002 = 6,000 rows + 2 rejected (ok)" in printed and printed.count("(ok)") == 3
    top = json.loads((out / "01-audit" / "report" / "topk.json").read_text())["REFUTES"]
    assert {"nobody@text", "no@text", "not@text"} & {e["feature"] for e in top[:10]}     # the claim-only shortcut
    report = json.loads((out / "02-upsample" / "report" / "report.json").read_text())
    upsampled = Corpus.open(str(out / "02-upsample" / "corpus")).read()
    assert upsampled.num_rows == 6000 + report["rows_added"] and report["rows_added"] > 0
    assert all(report["max_p_after"][t] < max(report["p_hat_before"][t].values()) for t in report["tokens"])
    receipt = assert_receipt(out, ["00-input", "02-upsample"], "02-upsample",   # the tokens AUDAC up-sampled
                             lambda feature: feature.split(" → ")[0] in report["tokens"])
    assert {"nobody@text → REFUTES", "sleeping@text → REFUTES"} <= set(receipt["tracked"])
    flow = {s["step"]: s for s in receipt["steps"]}["02-upsample"]
    assert flow["rows"] == 6000 + report["rows_added"]
    html = (out / "pipeline" / "report.html").read_text()   # AUDAC's guard: no label's shortcut made stronger
    before = receipt["steps"][0]["audit"]["max_z"]
    assert all(z <= before[label] + 0.5 for label, z in flow["audit"]["max_z"].items()), (before, flow["audit"])
    assert "stronger" not in html


def test_leakage_stage_scores_the_pipelines_named_splits(tmp_path):
    spec = tmp_path / "p.yaml"
    spec.write_text(yaml.safe_dump({"input": {"splits": {"train": SNLI_HARD, "test": SNLI_HARD}, "preset": "snli"},
                                    "stages": [{"leakage": {"forest": {"trees": 20}}}, {"zfilter": {"k": 5}}]}))
    printed = run_cli("run", spec, "--out", tmp_path / "o", "--no-audit-steps").stdout
    receipt = json.loads((tmp_path / "o" / "pipeline" / "receipt.json").read_text())
    assert not any("audit" in s for s in receipt["steps"]) and "auditing" not in printed
    assert [s["report"] for s in receipt["steps"]] == [None, "../01-leakage/report/report.html", "../02-zfilter/report/report.html"]
    report = json.loads((tmp_path / "o" / "01-leakage" / "report" / "report.json").read_text())
    assert report["rows"] == {"train": 3261, "test": 3261} and report["test_split"] == "test"
    assert 0 < report["majority_accuracy"] < 0.5 and 0 < report["leakage_accuracy"] < 1
    predictions = pa.parquet.read_table(tmp_path / "o" / "01-leakage" / "report" / "predictions.parquet")
    assert predictions.num_rows == 3261
    assert "== 02-zfilter" in printed and "rows in 6,522 = " in printed      # the rows passed on unchanged


def test_generation_pipeline_composes_generated_rows_with_the_filtered_original(tmp_path):
    """generate (SmolLM2-135M) -> compose seqz with ``original: input``: the composition holds
    Z(D0) and the generated rows that carry none of its biased features; every row is accounted for. (SNLI's hard
    set has no significant shortcut, so Algorithm 1's letter, top-k whatever their z*, is what filters it.)"""
    spec = tmp_path / "p.yaml"
    spec.write_text(yaml.safe_dump({
        "input": {"paths": [SNLI_HARD], "preset": "snli"},
        "stages": [{"generate": {"limit": 6, "sampling": {"max_new_tokens": 24}, "batch_size": 6}},
                   {"compose": {"composition": "seqz", "original": ["input"],
                                "zfilter": {"k": 5, "min_count": 5, "biased_set": "top-k"}}}]}))
    printed = run_cli("run", spec, "--out", tmp_path / "o").stdout
    assert printed.count("(ok)") == 3 and "MISMATCH" not in printed
    generated = Corpus.open(str(tmp_path / "o" / "01-generate" / "corpus")).read()
    assert 0 < generated.num_rows <= 6 and set(generated["source"].to_pylist()) == {"generated"}
    kept = Corpus.open(str(tmp_path / "o" / "02-compose" / "kept")).read()
    z_original = Corpus.open(str(tmp_path / "o" / "02-compose" / "stages" / "z_original" / "kept")).read()
    sources = kept["source"].to_pylist()
    assert sources.count("original") == z_original.num_rows < 3261
    assert kept.num_rows == z_original.num_rows + sources.count("generated")
    assert f"rows in {3261 + generated.num_rows:,} = " in printed


def test_pipeline_job_on_a_two_node_ray_cluster_over_s3(tmp_path):
    """``ray job submit`` of jobs/run.py to a head and a second node; input, pipeline file and
    output on the S3 server; the result equals a local run of the same pipeline."""
    s3 = S3Server(tmp_path / "s3root")
    s3.start()
    raw = s3.root / "bucket" / "raw"
    raw.mkdir()
    shutil.copy(SNLI_HARD, raw / "snli_hard.jsonl")
    pipeline = {"input": {"splits": {"hard": "s3://bucket/raw/snli_hard.jsonl"}, "preset": "snli"},
                "stages": [{"audit": {"k": 10}}, {"zfilter": {"k": 10, "batch_size": 500}},
                           {"confidence": {"model": "ngram", "folds": 3, "tau": 0.2}},
                           {"weights": {"folds": 3, "forest": {"trees": 20}}}]}
    (s3.root / "bucket" / "pipeline.yaml").write_text(yaml.safe_dump(pipeline))
    port, dash = free_port(), free_port()
    env = {**os.environ, **s3.env, **RAY_ENV}
    ray = str(BIN / "ray")
    nodes = [RayNode(tmp_path / "head.log", "--head", "--port", str(port), "--dashboard-host", "127.0.0.1",
                     "--dashboard-port", str(dash), env=s3.env)]
    try:
        nodes.append(RayNode(tmp_path / "second.log", "--address", f"127.0.0.1:{port}", "--resources",
                             '{"second_node": 1}', env=s3.env))
        # refinery is installed on every node (as cluster.yaml's setup does), so no working dir is shipped:
        # two nodes on one machine share Ray's session folder, and one node's runtime-env cleanup can
        # delete the unpacked working dir that the other node's job driver runs in
        runtime = {"env_vars": {k: v for k, v in s3.env.items()}}
        proc = subprocess.run(
            [ray, "job", "submit", "--address", f"http://127.0.0.1:{dash}",
             "--runtime-env-json", json.dumps(runtime), "--",
             sys.executable, str(REPO / "jobs" / "run.py"), "s3://bucket/pipeline.yaml", "--out", "s3://bucket/run"],
            env=env, capture_output=True, text=True, timeout=600)
        assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
        assert "pipeline finished: 5 steps under s3://bucket/run" in proc.stdout
        assert proc.stdout.count("(ok)") == 5 and "MISMATCH" not in proc.stdout
        listed = json.loads(subprocess.run([ray, "list", "nodes", "--address", f"http://127.0.0.1:{dash}",
                                           "--format", "json"], env=env, capture_output=True, text=True).stdout)
        assert sum(n["state"] == "ALIVE" for n in listed) == 2
    finally:
        for node in reversed(nodes):
            node.stop()
    os.environ.update(s3.env)
    try:
        local = tmp_path / "local"
        spec = tmp_path / "local.yaml"
        spec.write_text(yaml.safe_dump({**pipeline, "input": {"splits": {"hard": SNLI_HARD}, "preset": "snli"}}))
        run_cli("run", spec, "--out", local)
        parts = ["00-input", "02-zfilter/kept", "02-zfilter/rejected", "03-confidence/kept", "03-confidence/rejected",
                 "04-weights/corpus"]
        remote = {part: Corpus.open(f"s3://bucket/run/{part}").read() for part in parts}
        for part, table in _tables(local, parts=parts).items():
            _same(remote[part], table, part)
    finally:
        for k in s3.env:
            os.environ.pop(k, None)
        s3.stop()


def test_compare_stage_scores_the_filtered_corpus_against_the_input(tmp_path):
    """examples/compare.yaml: z-filter SNLI dev, then compare it with the unfiltered input on SNLI-hard and HANS."""
    out = tmp_path / "cmp"
    printed = run_cli("run", REPO / "examples" / "compare.yaml", "--out", out, env={"DATA": str(DATA)}).stdout
    assert "02-compare" in printed and "against input: zfiltered snli-hard " in printed
    report = json.loads((out / "02-compare" / "report" / "report.json").read_text())
    assert report["baseline"] == "input" and list(report["train"]) == ["input", "zfiltered"]
    assert report["train"]["input"]["rows"] == 9_842 > report["train"]["zfiltered"]["rows"]
    assert set(report["accuracy"]) == {"snli-hard", "hans"}
    assert "heuristic × label" in report["accuracy"]["hans"]["zfiltered"]["breakdown"]
    gain = report["accuracy"]["snli-hard"]["zfiltered"]["gain"]
    assert gain["ci95"][0] <= gain["delta"] <= gain["ci95"][1]
    page = (out / "pipeline" / "report.html").read_text()    # compare's answer is in the pipeline's report
    assert "Does it help? (02-compare)" in page and f"{100 * gain['delta']:+.1f} points" in page


def test_the_examples_write_only_where_out_says():
    """The shipped pipeline files name no out: (snli.yaml wrote ../snli-out, beside the checkout, when --out was
    forgotten): without --out they refuse in one line, before any work."""
    examples = sorted((REPO / "examples").glob("*.yaml"))
    assert len(examples) == 5 and all("out" not in yaml.safe_load(p.read_text()) for p in examples)
    methods = load_pipeline(str(REPO / "examples" / "methods.yaml"))   # five methods side by side, one compare
    assert [(s.name, s.reads) for s in methods.stages][2:] == [("aflite", "input"), ("datamap", "input"), (
        "confidence", "input"), ("upsample", "input"), ("compare", None)]
    proc = run_cli("run", REPO / "examples" / "snli.yaml", check=False)
    assert proc.returncode == 2 and len(proc.stderr.strip().splitlines()) == 1, proc.stderr
    assert proc.stderr.rstrip().endswith("[missing-setting]"), proc.stderr
    assert "no output folder" in proc.stderr and "--out" in proc.stderr and "out: in the pipeline file" in proc.stderr


def test_a_step_needing_a_column_no_earlier_step_gives_is_refused_before_any_work(tmp_path):
    """``Stage.needs`` against the input's columns and the earlier steps' ``adds``: leakage needs the splits an
    unnamed input lacks, and the run stops before its input is read into OUT."""
    spec = tmp_path / "p.yaml"
    spec.write_text(yaml.safe_dump({"input": {"paths": [SNLI_HARD], "preset": "snli"},
                                    "stages": [{"zfilter": {"k": 5}}, {"leakage": {}}]}))
    proc = run_cli("run", spec, "--out", tmp_path / "o", check=False)
    assert proc.returncode == 2 and proc.stderr.rstrip().endswith("[missing-columns]"), proc.stderr
    assert "step 02-leakage needs column(s) split" in proc.stderr and "name the splits" in proc.stderr
    assert "the steps before it add source_stage" in proc.stderr
    assert not (tmp_path / "o").exists()


def test_a_compare_step_runs_again_when_an_evaluation_set_changes(tmp_path):
    """The evaluation sets are part of compare's fingerprint (``Stage.also_reads``): an unchanged rerun skips the
    step, a changed evaluation file runs it again."""
    evals = tmp_path / "eval.jsonl"
    lines = Path(SNLI_DEV).read_text().splitlines()
    evals.write_text("\n".join(lines[:600]) + "\n")
    spec = tmp_path / "p.yaml"
    spec.write_text(yaml.safe_dump({"input": {"paths": [SNLI_HARD], "preset": "snli"},
                                    "stages": [{"compare": {"evals": [f"dev={evals}:snli"]}}]}))
    run_cli("run", spec, "--out", tmp_path / "o")
    assert "01-compare: unchanged, skipped" in run_cli("run", spec, "--out", tmp_path / "o").stdout
    evals.write_text("\n".join(lines[:900]) + "\n")
    rerun = run_cli("run", spec, "--out", tmp_path / "o").stdout
    assert "== 01-compare\n" in rerun
    report = json.loads((tmp_path / "o" / "01-compare" / "report" / "report.json").read_text())
    by_label = report["accuracy"]["dev"]["input"]["breakdown"]["label"]
    assert sum(c["rows"] for c in by_label.values()) == 900


def test_a_pipeline_whose_last_step_kept_nothing_does_not_show_its_input_as_what_it_made(tmp_path):
    """The report's "z-statistics of the corpus the pipeline made" showed the input's when the last step kept no
    row; its steps table said the empty corpus was 'a file that holds rows' to give."""
    (tmp_path / "p.yaml").write_text(f"input: {{paths: [{SNLI_HARD}], preset: snli}}\nstages:\n"
                                     "  - datamap: {share: 0.0001, epochs: 2}\n")   # keeps 0 of 3,261
    run_cli("run", tmp_path / "p.yaml", "--out", tmp_path / "o")
    page = (tmp_path / "o" / "pipeline" / "report.html").read_text()
    assert "The corpus the pipeline made (01-datamap)" in page and "Not audited: it passes on no rows." in page
    assert "z-statistics of the corpus the pipeline made" not in page and "give a file" not in page
    assert "2 epoch" in page   # its progress bars' units, counted


def test_a_credential_from_the_environment_reaches_no_file_of_the_run(tmp_path):
    """A pipeline file's ``secret: ${VAR}`` was written, as the secret itself, into pipeline/pipeline.yaml and the
    report."""
    (tmp_path / "p.yaml").write_text(f"input:\n  paths: [{SNLI_HARD}]\n  preset: snli\n  storage_options:\n"
                                     "    secret: ${MY_SECRET}\nstages:\n  - audit: {}\n")
    run_cli("run", tmp_path / "p.yaml", "--out", tmp_path / "o", "--no-audit-steps", env={"MY_SECRET": "hunter2x"})
    written = [p for p in (tmp_path / "o").rglob("*") if p.is_file()]
    assert len(written) > 10 and not [p for p in written if b"hunter2x" in p.read_bytes()]
    saved = (tmp_path / "o" / "pipeline" / "pipeline.yaml").read_text()
    assert "storage_options: {secret: '${REFINERY_SECRET}'}" in saved


def test_a_mistyped_step_name_in_a_corpus_setting_is_refused_before_any_work(tmp_path):
    """compare's ``train`` and zfilter's ``seed_corpus`` name earlier steps or paths: a name that is neither (a step
    mistyped) is refused when the file is read, naming the closest step, not after the steps before it ran."""
    spec = {"input": {"paths": [SNLI_HARD], "preset": "snli"}, "stages": [
        {"zfilter": {}}, {"compare": {"train": {"orig": "input", "z": "zfiltre"}, "evals": [f"dev={SNLI_DEV}:snli"]}}]}
    with pytest.raises(ConfigError, match="train: 'zfiltre' is no earlier step and no file or folder.*'zfilter'") as refused:
        parse_pipeline(spec, str(tmp_path))
    assert refused.value.code == "unknown-setting"
    spec["stages"][1]["compare"]["train"]["z"] = SNLI_DEV   # a path: read as it is
    assert parse_pipeline(spec, str(tmp_path)).stages[1].config.train["z"] == SNLI_DEV


def test_a_step_reads_an_earlier_step_so_methods_run_side_by_side(tmp_path):
    """``reads: input`` runs a stage on the pipeline's input instead of the step before it; compare then names
    both methods' outputs; a step that names no earlier step is refused before any work."""
    lines = open(SNLI_DEV).read().splitlines()
    (tmp_path / "dev.jsonl").write_text("\n".join(lines[:900]) + "\n")
    (tmp_path / "hard.jsonl").write_text("\n".join(open(SNLI_HARD).read().splitlines()[:300]) + "\n")
    spec = {"input": {"paths": ["dev.jsonl"], "preset": "snli"}, "stages": [
        {"zfilter": {"k": 5}}, {"aflite": {"partitions": 8}, "reads": "input"},
        {"compare": {"evals": [f"hard={tmp_path / 'hard.jsonl'}:snli"], "train": {"input": "input", "zfilter": "zfilter"},
                     "model": {"bootstrap": 100}}}]}
    (tmp_path / "p.yaml").write_text(yaml.safe_dump(spec))
    run_cli("run", tmp_path / "p.yaml", "--out", tmp_path / "o")
    run = {s["stage"]: s for s in json.loads((tmp_path / "o" / "pipeline" / "run.json").read_text())["stages"]}
    assert run["aflite"]["rows_in"] == run["zfilter"]["rows_in"] == 900   # both read the input
    report = json.loads((tmp_path / "o" / "03-compare" / "report" / "report.json").read_text())
    assert list(report["train"]) == ["input", "zfilter", "02-aflite"]   # the step's own input named by its step
    assert report["train"]["02-aflite"]["rows"] == Corpus.open(str(tmp_path / "o" / "02-aflite" / "kept")).manifest.rows
    assert "  reads: input" in run_cli("run", tmp_path / "p.yaml", "--print-config").stdout
    spec["stages"][1]["reads"] = "confidence"
    (tmp_path / "bad.yaml").write_text(yaml.safe_dump(spec))
    refused = run_cli("run", tmp_path / "bad.yaml", "--out", tmp_path / "bad", check=False)
    assert refused.returncode == 2 and "reads: 'confidence' names no earlier step" in refused.stderr
    assert refused.stderr.rstrip().endswith("[unknown-setting]")
    assert not (tmp_path / "bad").exists()
