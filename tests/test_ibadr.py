"""IBADR: the pieces, a killed-and-resumed run against an uninterrupted one, and the Table 5 ablations."""
import json
import os
import signal
import subprocess
import time

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
import yaml
from conftest import (REFINERY, REPO, assert_kept_audit_is_a_fresh_one, assert_verdict_is_two_audits, fresh_audit,
                      run_cli)

from refinery.io.corpus import Corpus
from refinery.io.corpus_writer import write_table
from refinery.methods.ibadr import iteration as ibadr_iteration
from refinery.methods.ibadr.audit import ShortcutAudit
from refinery.methods.ibadr.config import IbadrConfig
from refinery.methods.ibadr.pool import Grown, iterations_of, report_of
from refinery.methods.ibadr.report import TITLE, console_lines, report_page, top_z_text
from refinery.methods.ibadr.stage import IbadrStage
from refinery.models.precision import resolve_precision
from refinery.pipeline.config import from_dict
from refinery.pipeline.output import StageOutput
from refinery.pipeline.stage_input import StageInput


@pytest.fixture(scope="module")
def snli_sample(snli_pair, tmp_path_factory):
    """60 SNLI dev rows as a corpus."""
    path = tmp_path_factory.mktemp("ibadr") / "sample"
    rows = snli_pair.take(pa.array(np.random.default_rng(0).choice(snli_pair.num_rows, 60, replace=False)))
    write_table(rows, str(path))
    return path


@pytest.fixture(scope="module")
def tiny_generator(tmp_path_factory):
    """A 1-layer causal LM with SmolLM2's tokenizer, randomly initialized: IBADR trains it on the pool."""
    from kill_matrix import make_tiny_generator

    return make_tiny_generator(str(tmp_path_factory.mktemp("tiny") / "generator"))


def test_indicator_groups_parse_and_diversity():
    groups = ibadr_iteration.indicator_groups(np.array([0.9, 0.1, 0.5, 0.3, 0.7, 0.2, 0.95, 0.4, 0.6, 0.8]), list("abcdefghij"), 5)
    assert groups.tolist() == [5, 1, 3, 2, 4, 1, 5, 2, 3, 4]
    assert ibadr_iteration.parse("[P] A dog runs . [H] An animal moves .", True) == ("A dog runs .", "An animal moves .", None)
    assert ibadr_iteration.parse("A dog runs .", True)[2] == "no [P] … [H] … structure"
    assert ibadr_iteration.parse("[P] A dog . [H] ", True)[2] == "empty premise or hypothesis"
    assert ibadr_iteration.parse(ibadr_iteration.serialize("only text", None), False) == ("only text", None, None)
    assert ibadr_iteration.distinct_n(["a b a b"], 1) == 0.5 and ibadr_iteration.distinct_n(["a b a b"], 2) == 2 / 3


def _tiny(snli_sample, generator, out, *flags):
    """The CLI's configuration for ``flags`` (``--print-config``), run in this process (one torch import)."""
    printed = yaml.safe_load(run_cli(
        "ibadr", snli_sample, "--out", out, "--generator", generator, "--iterations", 2, "--per-iteration", 12,
        "--lr", 1e-3, "--max-new-tokens", 16, "--tau", 0, "--usm-rows", 30, "--first-epochs", 1, *flags,
        "--print-config").stdout)
    config = from_dict(IbadrConfig, printed["stages"][0]["ibadr"])
    IbadrStage(config).run(StageInput({"": [str(snli_sample)]}), StageOutput(str(out), inputs=[str(snli_sample)]))


def _generated(out, iteration):
    return pq.read_table(os.path.join(out, "checkpoints", f"iter-{iteration:03d}", "generated.parquet")).to_pylist()


def test_ablation_switches_change_what_the_paper_says(snli_sample, tiny_generator, tmp_path):
    full, no_usm, lowest, no_ind, no_iter = (tmp_path / n for n in ("full", "no_usm", "b1", "no_ind", "no_iter"))
    _tiny(snli_sample, tiny_generator, full)
    _tiny(snli_sample, tiny_generator, no_usm, "--no-usm")
    _tiny(snli_sample, tiny_generator, lowest, "--lowest-indicator")
    _tiny(snli_sample, tiny_generator, no_ind, "--no-indicator")
    _tiny(snli_sample, tiny_generator, no_iter, "--no-iteration")
    report = {p.name: json.loads((p / "report" / "report.json").read_text()) for p in
              (full, no_usm, lowest, no_ind, no_iter)}
    # USM: the shallow model's bias degrees change between iterations only when it is updated
    prints = {name: [h["shallow_fingerprint"] for h in report[name]["iterations"]] for name in ("full", "no_usm")}
    assert prints["full"][0] != prints["full"][1] and prints["no_usm"][0] == prints["no_usm"][1]
    # b_r with r in 1..⌊5/2⌋ by default; only b1 under the ablation; none without indicators
    default = {r["indicator"] for i in (1, 2) for r in _generated(full, i)}
    assert default == {"b1", "b2"}
    assert {r["indicator"] for i in (1, 2) for r in _generated(lowest, i)} == {"b1"}
    assert all(r["indicator"] is None and not r["prompt"].startswith("<b") for r in _generated(no_ind, 1))
    assert all(r["prompt"].startswith("<b") for r in _generated(full, 1))
    # no iteration: one round generating N_iter × per-iteration samples
    assert [h["generated"] for h in report["no_iter"]["iterations"]] == [24]
    assert [h["generated"] for h in report["full"]["iterations"]] == [12, 12]
    expected = resolve_precision("auto", "cpu").to_dict()
    for r in report.values():
        assert r["train_precision"] == expected  # the report says which precision the generator was tuned in
        generated = r["generated"]
        assert sum(r["by_status"].values()) == generated
        assert r["pool_rows"] == r["original_rows"] + r["accepted"]
    assert_verdict_is_two_audits(report["full"]["verdict"], fresh_audit(snli_sample, tmp_path / "audit-in"),
                                 fresh_audit(full / "pool", tmp_path / "audit-pool"))   # the audits a user runs next
    assert_kept_audit_is_a_fresh_one(full / "pool", tmp_path / "audit-pool")


def test_killed_run_resumes_to_the_same_pool(snli_sample, tiny_generator, tmp_path):
    """2 iterations: kill -9 during iteration 2, run again, compare with an uninterrupted run."""
    sample = tmp_path / "sample"
    write_table(Corpus.open(str(snli_sample)).read().slice(0, 30), str(sample))
    args = ["ibadr", str(sample), "--generator", tiny_generator, "--iterations", 2, "--per-iteration", 8,
            "--max-new-tokens", 40, "--first-epochs", 1, "--lr", 1e-3, "--tau", 0]
    run_cli(*args, "--out", tmp_path / "straight")
    killed = tmp_path / "killed"
    proc = subprocess.Popen([REFINERY, *map(str, args), "--out", str(killed)], cwd=REPO,
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True)
    checkpoints = killed / "checkpoints"
    while not list(checkpoints.glob("iter-002.tmp-*")):  # iteration 2 has begun writing its checkpoint
        assert proc.poll() is None, "the run ended before its second iteration"
        time.sleep(0.01)
    os.killpg(proc.pid, signal.SIGKILL)
    proc.wait()
    assert (checkpoints / "iter-001" / "state.json").exists() and not (checkpoints / "iter-002").exists()
    run_cli(*args, "--out", killed)
    for name in ("pool", "generated"):   # the same pool, and the same sampled text token for token
        straight = pq.read_table(tmp_path / "straight" / "checkpoints" / "iter-002" / f"{name}.parquet")
        assert pq.read_table(checkpoints / "iter-002" / f"{name}.parquet").equals(straight), name
    assert straight.num_rows == 8 and len(set(straight["generated"].to_pylist())) > 1
    report = json.loads((killed / "report" / "report.json").read_text())
    assert [h["iteration"] for h in report["iterations"]] == [1, 2]
    assert not list(checkpoints.glob("*.tmp-*"))                                # the dead run's temp is gone
    assert not (checkpoints / "iter-001" / "generator").exists()   # only the last generator is kept


def test_bf16_autocast_fine_tuning_learns_like_float32(snli_sample, tiny_generator):
    """bf16 mixed-precision fine-tuning (what ``auto`` picks on hardware with native bf16) follows float32's
    loss: only the forward pass is autocast, never the optimizer step."""
    import torch

    rows = Corpus.open(str(snli_sample)).read().to_pylist()[:24]  # 9 steps: a CPU without bf16 emulates it
    heads = [ibadr_iteration.conditioning(r["label"], 1) for r in rows]
    targets = [ibadr_iteration.serialize(r["text_a"], r["text_b"]) for r in rows]

    def loss(generator):
        enc = generator.tokenizer([h + t for h, t in zip(heads, targets)], return_tensors="pt", padding=True)
        labels = enc["input_ids"].masked_fill(enc["attention_mask"] == 0, -100)
        with torch.inference_mode():
            return float(generator.model(**enc, labels=labels).loss)

    before = loss(_loaded(tiny_generator))
    after = {precision: loss(_loaded(tiny_generator).fit(heads, targets, epochs=3, lr=1e-2, batch_size=8,
                                                         precision=precision))
             for precision in ("float32", "bfloat16")}
    assert after["float32"] < before - 1.0
    assert abs(after["bfloat16"] - after["float32"]) < 0.1 * (before - after["float32"])


def _loaded(path):
    from refinery.models.generate import TransformersGenerator

    generator = TransformersGenerator(path, chat=False)
    generator._load()
    return generator


@pytest.mark.parametrize("name, options", [
    ("generate", ["--limit", 6, "--max-new-tokens", 8, "--target-labels", "all"]),
    ("razor", ["--top-k", 4, "--candidates", 2, "--rounds", 1, "--max-new-tokens", 8]),
    ("ibadr", ["--iterations", 1, "--per-iteration", 4, "--max-new-tokens", 16, "--first-epochs", 1, "--tau", 0]),
])
def test_model_stage_verbs_are_their_one_stage_pipelines(name, options, snli_sample, tiny_generator, tmp_path):
    """The generating stages too: the verb and the pipeline its --print-config prints write the same files."""
    from test_front_door import ACCOUNTING, assert_same_outputs

    model = ["--generator" if name == "ibadr" else "--model", tiny_generator]
    args = [name, snli_sample, *model, *options]
    verb = run_cli(*args, "--out", tmp_path / "verb").stdout
    (tmp_path / "p.yaml").write_text(run_cli(*args, "--out", tmp_path / "x", "--print-config").stdout)
    piped = run_cli("run", tmp_path / "p.yaml", "--out", tmp_path / "pipe").stdout
    assert_same_outputs(tmp_path / "verb", tmp_path / "pipe" / f"01-{name}", str(snli_sample),
                        str(tmp_path / "pipe" / "00-input"))
    assert ACCOUNTING.search(verb).group(0) == ACCOUNTING.findall(piped)[1]


def _pseudo_samples(rows):
    """Accepted pseudo samples (text_a, text_b, label) as the pool holds them."""
    return pa.Table.from_pylist([{"id": f"ibadr-1-{i}", "text_a": a, "text_b": b, "label": y, "source": "generated",
                                  "iteration": 1} for i, (a, b, y) in enumerate(rows)], schema=ibadr_iteration.POOL_SCHEMA)


def test_report_figures_agree_and_the_verdict_is_right_both_ways(snli_pair, tmp_path):
    """A tiny pool, no generation: samples of one label that carry a new shortcut are caught (and the original's top
    features, absent from them, gave nan: the other labels' p0 was 0); counter-examples of the original's
    significant hypothesis words, one copy per label, are credited. The console and the page say the same."""
    import html
    import re

    from refinery.core.features import FeatureConfig

    table = snli_pair.slice(0, 1500)
    config = IbadrConfig(tau=0.4)

    def outputs(accepted, name):
        audit = ShortcutAudit(table, FeatureConfig())
        pool = pa.concat_tables([ibadr_iteration.initial_pool(table), accepted])
        out = StageOutput(str(tmp_path / name))
        grown = Grown(table, table.num_rows, pool, [], audit, iterations_of(out.checkpoints, config, table), 0)
        verdict, _ = audit.judge_pool(grown.accepted(), config)
        report = report_of(grown, verdict, grown.generated(), config, 0)
        return audit, report, report_page(report, verdict, out.report_page(TITLE)).html(), \
            "\n".join(console_lines(report))

    audit, report, page, console = outputs(_pseudo_samples([("A man walks.", "Nobody is sleeping.",
                                                              "contradiction")] * 40), "worse")
    verdict, mean = report.verdict, report.mean_top_z
    assert not verdict["ok"] and "nobody@hypothesis" in {c["feature"] for c in verdict["worsened"]}
    assert "lower tau=… (now 0.4" in verdict["remedy"] and verdict["warnings"][0] in console
    assert mean["accepted_rows"] == 40 and 0 < mean["absent"] < mean["features"] == 30
    sentence = top_z_text(mean)
    assert f"in the 40 accepted pseudo samples ({mean['absent']} of these 30 absent from them, counted as 0)" \
        in sentence
    assert sentence in console and html.escape(sentence) in page and verdict["line"] in console
    assert not re.search(r"\bnan\b", console + json.dumps(report.to_json()), re.I)
    assert type(report).from_json(json.loads(json.dumps(report.to_json()))) == report

    significant = {e["feature"].split("@")[0] for entries in audit.top.values() for e in entries
                   if e["z"] > audit.before.threshold and re.fullmatch(r"\w+@hypothesis", e["feature"])}
    counter = [(r["text_a"], r["text_b"], label) for r in table.to_pylist()
               if significant & set(r["text_b"].lower().split())
               for label in ("contradiction", "entailment", "neutral")]
    _, report, page, console = outputs(_pseudo_samples(counter), "counter")
    verdict = report.verdict
    assert verdict["ok"] and verdict["fixed_total"] == verdict["significant_before"] > 0, verdict["line"]
    assert console.count("verdict ok") == 1 and "WARNING" not in page


def test_the_iterations_of_other_rows_are_not_reused(snli_pair, tmp_path):
    """An IBADR run over other rows into the same output starts over (``check_stage`` found an overwrite on another
    corpus that read the first corpus's finished iterations back)."""
    import pyarrow as pa

    config, out = IbadrConfig(), StageOutput(str(tmp_path / "out"))
    first, other = snli_pair.slice(0, 500), snli_pair.slice(500, 500)
    with iterations_of(out.checkpoints, config, first).folder("iteration-001") as piece:
        piece.write_parquet("pool.parquet", pa.table({"x": [1]}))
    assert iterations_of(out.checkpoints, config, first).done() == ["iteration-001"]
    assert iterations_of(out.checkpoints, config, other).done() == []
