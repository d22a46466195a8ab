"""One front door: each stage's verb is its one-stage pipeline (same files, part names and accounting), the
verb's options are its config's fields, and a stage written outside refinery gets a verb and a pipeline key."""
import json
import re
from pathlib import Path
from dataclasses import dataclass

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from click.testing import CliRunner
from conftest import SNLI_DEV, SNLI_TEST, run_cli
from short_text_plugin import ShortText, ShortTextConfig

from refinery.core.validation import at_least, setting
from refinery.io.corpus_writer import write_table
from refinery.pipeline.config import load_pipeline

ACCOUNTING = re.compile(r"rows in [\d,]+ = .*\((?:ok|MISMATCH)\)")


@pytest.fixture(scope="module")
def snli_small(snli_pair, tmp_path_factory):
    """2,000 SNLI rows (a third of them a 'test' split) as a corpus, and 600 as a raw JSONL file with a bad line."""
    folder = tmp_path_factory.mktemp("front")
    rows = snli_pair.slice(0, 2000)
    rows = rows.append_column("split", pa.array(["train"] * 1400 + ["test"] * 600))
    write_table(rows, str(folder / "corpus"))
    lines = open(SNLI_DEV).read().splitlines()[:600]
    (folder / "raw.jsonl").write_text("\n".join(lines[:300] + ['{"gold_label": "neutral"'] + lines[300:]) + "\n")
    return folder


def tree(root) -> dict:
    return {str(p.relative_to(root)): p for p in sorted(root.rglob("*")) if p.is_file()}


def assert_same_outputs(verb_out, stage_out, verb_input: str, stage_input: str, named_only: str = "") -> None:
    """The verb's folder and the pipeline stage's hold the same files with the same content (the inputs they
    name aside: the raw files, and the pipeline's 00-input; files ending in ``named_only``: their names only)."""
    verb_files, stage_files = tree(verb_out), tree(stage_out)
    assert sorted(verb_files) == sorted(stage_files)
    for name, path in verb_files.items():
        other = stage_files[name]
        if named_only and name.endswith(named_only):
            continue
        if name.endswith(".parquet"):
            assert pq.read_table(path).equals(pq.read_table(other)), name
            assert path.read_bytes() == other.read_bytes(), name
        elif name.endswith("_SUCCESS"):
            a, b = (json.loads(p.read_text()) for p in (path, other))
            assert (a["rows_in"], a["accounting"], a["parts"]) == (b["rows_in"], b["accounting"], b["parts"]), name
        elif name.endswith("manifest.json"):
            a, b = (json.loads(p.read_text()) for p in (path, other))
            for key in ("rows", "rejected", "labels", "files", "rejects", "file_stats"):
                assert a.get(key) == b.get(key), (name, key)
        elif name.endswith("key.json"):   # a checkpoint's: its settings alike, its inputs' fingerprints their own
            a, b = (json.loads(p.read_text()) for p in (path, other))
            assert (a or {}).get("settings") == (b or {}).get("settings") and (a is None) == (b is None), name
        elif name.endswith((".json", ".html", ".svg")) and not name.endswith(".refinery.json"):  # not run ids
            texts = [re.sub(r"<time>[^<]*</time>", "", p.read_text()).replace(verb_input, "INPUT")
                     .replace(stage_input, "INPUT") for p in (path, other)]   # a report's header has its date
            assert texts[0] == texts[1], name


CASES = {
    "audit": ("raw", ["--k", "5", "--features", "unigram,null"], "- audit: {k: 5, features: {families: [unigram, 'null']}}"),
    "zfilter": ("raw", ["--k", "5", "--batch-size", "200"], "- zfilter: {k: 5, batch_size: 200}"),
    "confidence": ("raw", ["--model", "ngram", "--tau", "0.4", "--folds", "3"],
                   "- confidence: {model: ngram, tau: 0.4, folds: 3}"),
    "upsample": ("corpus", ["--k", "5", "--band-min", "0.005"], "- upsample: {k: 5, band_min: 0.005}"),
    "leakage": ("corpus", ["--trees", "10"], "- leakage: {forest: {trees: 10}}"),
    "weights": ("corpus", ["--trees", "10", "--folds", "3", "--clip", "20"],
                "- weights: {folds: 3, clip: 20, forest: {trees: 10}}"),
    "compose": ("corpus", ["--composition", "parz", "--original", "CORPUS", "--k", "5"],
                "- compose: {composition: parz, original: [CORPUS], zfilter: {k: 5}}"),
    "razor": ("corpus", ["--score-only"], "- razor: {score_only: true}"),
    "aflite": ("raw", ["--partitions", "8", "--slice-share", "0.1"], "- aflite: {partitions: 8, slice_share: 0.1}"),
    "datamap": ("raw", ["--epochs", "3", "--keep", "hard"], "- datamap: {epochs: 3, keep: hard}"),
    "dedup": ("corpus", ["--threshold", "0.6", "--prefer-split", "test"], "- dedup: {threshold: 0.6, prefer_split: test}"),
    "decontaminate": ("corpus", ["--against", f"test={SNLI_TEST}:snli", "--ngram", "6"],
                      f"- decontaminate: {{against: ['test={SNLI_TEST}:snli'], ngram: 6}}"),
}


@pytest.mark.parametrize("name", list(CASES))
def test_verb_is_its_one_stage_pipeline(name, snli_small, tmp_path):
    kind, options, stage_yaml = CASES[name]
    corpus = str(snli_small / "corpus")
    source = [str(snli_small / "raw.jsonl"), "--preset", "snli"] if kind == "raw" else [corpus]
    options = [corpus if o == "CORPUS" else o for o in options]
    # in the terms of a pipeline's messages, so that its remedies read as the pipeline's (max_copies: 2)
    verb = run_cli(name, *source, *options, "--out", tmp_path / "verb", env={"REFINERY_TERMS": "pipeline"}).stdout
    where = (f"paths: [{snli_small / 'raw.jsonl'}]\n  preset: snli" if kind == "raw" else f"paths: [{corpus}]")
    (tmp_path / "p.yaml").write_text(f"input:\n  {where}\nstages:\n  {stage_yaml.replace('CORPUS', corpus)}\n")
    piped = run_cli("run", tmp_path / "p.yaml", "--out", tmp_path / "pipe").stdout
    assert_same_outputs(tmp_path / "verb", tmp_path / "pipe" / f"01-{name}", source[0],
                        str(tmp_path / "pipe" / "00-input"))
    verb_line = ACCOUNTING.search(verb).group(0)
    assert verb_line.endswith("(ok)") and verb_line == ACCOUNTING.findall(piped)[1]
    if kind == "raw":   # the bad line is counted: rows in = the file's lines
        assert verb_line.startswith("rows in 601 =") and "1 input rejects" in verb_line
    # --print-config: the pipeline run above, whole (every input option and stage setting spelled out)
    printed = run_cli(name, *source, *options, "--out", tmp_path / "pipe", "--print-config").stdout
    (tmp_path / "printed.yaml").write_text(printed)
    said, written = (load_pipeline(str(tmp_path / f)) for f in ("printed.yaml", "p.yaml"))
    assert (said.input, said.stages, said.engine, said.out) == (written.input, written.stages, "local",
                                                                str(tmp_path / "pipe"))


def test_mode_skip_reuses_and_error_refuses(snli_small, tmp_path):
    args = ["zfilter", snli_small / "corpus", "--k", "5", "--out", tmp_path / "z"]
    run_cli(*args)
    before = (tmp_path / "z" / "kept" / "part-00000.parquet").stat().st_mtime_ns
    assert "skipped" in run_cli(*args, "--mode", "skip").stdout
    assert (tmp_path / "z" / "kept" / "part-00000.parquet").stat().st_mtime_ns == before
    changed = run_cli(*args[:-4], "--k", "6", *args[-2:], "--mode", "skip", check=False)
    assert changed.returncode == 2 and "other inputs or options" in changed.stderr
    assert changed.stderr.rstrip().endswith("[output-exists]") and "--mode overwrite" in changed.stderr, changed.stderr
    refused = run_cli(*args, "--mode", "error", check=False)
    assert refused.returncode == 2 and "already holds a finished result" in refused.stderr
    assert refused.stderr.rstrip().endswith("[output-exists]") and "--mode overwrite" in refused.stderr, refused.stderr


# ---------------------------------------------------------------- a stage from outside refinery

def test_a_new_stage_is_a_verb_and_a_pipeline_key(snli_small, tmp_path, monkeypatch):
    from refinery.cli.group import RefineryGroup
    from refinery.cli.main import main
    from refinery.pipeline import stage

    monkeypatch.setattr(stage, "REGISTRY", dict(stage.REGISTRY))
    cls = stage.register(ShortText)   # docs/extending.md's example (tests/short_text_plugin.py)
    group = RefineryGroup("refinery", commands={"run": main.commands["run"]})
    runner = CliRunner()
    verb = runner.invoke(group, ["short-text", SNLI_TEST, "--preset", "snli", "--min-words", "6",
                                 "--out", str(tmp_path / "verb")])
    assert verb.exit_code == 0, verb.output
    kept = pq.read_table(tmp_path / "verb" / "kept" / "part-00000.parquet")
    assert min(len(t.split()) for t in kept["text_b"].to_pylist()) >= 6
    line = ACCOUNTING.search(verb.output).group(0)
    assert line.startswith("rows in 9,824 =") and line.endswith("(ok)")
    report = json.loads((tmp_path / "verb" / "report" / "report.json").read_text())
    assert report["kept"] == kept.num_rows and report["reasons"]
    (tmp_path / "p.yaml").write_text(f"input: {{paths: [{SNLI_TEST}], preset: snli}}\n"
                                     "stages: [{short-text: {min_words: 6}}]\n")
    piped = runner.invoke(group, ["run", str(tmp_path / "p.yaml"), "--out", str(tmp_path / "pipe")])
    assert piped.exit_code == 0, piped.output
    assert_same_outputs(tmp_path / "verb", tmp_path / "pipe" / "01-short-text", SNLI_TEST,
                        str(tmp_path / "pipe" / "00-input"))
    bad = runner.invoke(group, ["short-text", SNLI_TEST, "--preset", "snli", "--min-words", "0",
                                "--out", str(tmp_path / "bad")])
    assert bad.exit_code == 2 and "--min-words must be a positive integer, got 0" in bad.output
    assert bad.output.rstrip().endswith("[invalid-setting]"), bad.output
    assert cls.name == "short-text"


def test_a_new_config_field_is_a_new_option():
    from refinery.cli.config_options import leaves

    @dataclass
    class Grown(ShortTextConfig):
        max_words: int = setting(40, at_least(1), "Most words a hypothesis may have.")

    options = {name for leaf in leaves(Grown) for name in leaf.names}
    assert options == {"--min-words", "--max-words"}


def test_every_verb_option_is_a_config_field():
    """No stage verb has an option that is not its config's or the input's (or one of the common few)."""
    from refinery.cli.config_options import leaves
    from refinery.cli.main import main
    from refinery.pipeline.config import InputSpec
    from refinery.pipeline.stage import REGISTRY, stage_class

    common = {"--input", "--out", "--mode", "--in-place", "--engine", "--memory-budget", "--print-config",
              "--io-timeout", "--profile", "--help", "-h"}
    for name in REGISTRY:
        cls = stage_class(name)
        fields = {o for leaf in leaves(cls.Config) + leaves(InputSpec) for o in leaf.names}
        command = main.get_command(None, name)
        options = {o for p in command.params for o in p.opts + p.secondary_opts if o.startswith("-")}
        assert options - common == fields, name


def test_every_stage_key_is_in_the_pipeline_reference():
    """docs/pipelines.md has a row for every key of every stage's config (nested keys dotted), under the stage's
    own heading, with the verb's option where the key has one."""
    from refinery.cli.config_options import leaves
    from refinery.pipeline.stage import REGISTRY, stage_class

    from conftest import REPO

    sections = re.split(r"^### ", (REPO / "docs" / "pipelines.md").read_text(), flags=re.M)
    tables = {s.split("\n", 1)[0].strip(): s for s in sections}
    for name in REGISTRY:
        documented = dict(re.findall(r"^\| `([\w.]+)` \| [^|]*\| ([^|]*) \|", tables[name], flags=re.M))
        for leaf in leaves(stage_class(name).Config):
            key = ".".join(leaf.path)
            assert key in documented, f"{name}: {key} is not in docs/pipelines.md"
            assert documented[key].strip().startswith(f"`{leaf.names[0]}"), (name, key, documented[key])


def test_compare_and_probe_write_the_same_finished_folder_by_every_front_door(snli_small, tmp_path):
    """refinery compare, rf.compare and a pipeline's compare step (and the same for probe) run the stage through the
    runner: each writes the same finished folder (_SUCCESS, report, runs)."""
    import refinery as rf

    from refinery.io.corpus import Corpus

    corpus, raw = snli_small / "corpus", str(tmp_path / "ev.jsonl")
    (tmp_path / "ev.jsonl").write_text("".join(open(SNLI_TEST).readlines()[:300]))   # rows no corpus trains on
    write_table(Corpus.open(str(corpus)).read().slice(0, 1000), str(tmp_path / "small"))
    small = str(tmp_path / "small")
    run_cli("compare", "--train", f"small={small}", "--train", f"all={corpus}", "--eval", f"ev={raw}:snli",
            "--bootstrap", 100, "--out", tmp_path / "verb")
    rf.compare(train={"small": small, "all": str(corpus)}, evals={"ev": (raw, "snli")}, bootstrap=100,
               out=str(tmp_path / "api"))
    (tmp_path / "p.yaml").write_text(f"input: {{paths: ['{corpus}']}}\nstages:\n  - compare: {{evals: ['ev={raw}:snli'], "
                                     f"train: {{small: '{small}', all: input}}, model: {{bootstrap: 100}}}}\n"
                                     f"  - probe: {{evaluate: ['ev={raw}:snli']}}\n")
    run_cli("run", tmp_path / "p.yaml", "--out", tmp_path / "pipe")
    for door in ("verb", "api"):
        assert (tmp_path / door / "_SUCCESS").exists()
        assert_same_outputs(tmp_path / door, tmp_path / "pipe" / "01-compare", str(corpus),
                            str(tmp_path / "pipe" / "00-input"), "key.json")   # a run's key: its input's checksum
    run_cli("probe", corpus, "--eval", f"ev={raw}:snli", "--out", tmp_path / "probe-verb")
    rf.probe(str(corpus), evaluate=[f"ev={raw}:snli"], out=str(tmp_path / "probe-api"))
    pipe = tmp_path / "pipe" / "02-probe"
    for door in ("probe-verb", "probe-api"):
        assert sorted(tree(tmp_path / door)) == sorted(tree(pipe)) and (tmp_path / door / "_SUCCESS").exists()
        assert pq.read_table(tmp_path / door / "predictions.parquet").equals(pq.read_table(pipe / "predictions.parquet"))
        reports = [json.loads((p / "report.json").read_text()) for p in (tmp_path / door, pipe)]
        assert [{k: v for k, v in r.items() if k not in ("fit_seconds", "train")} for r in reports] == \
            [{k: v for k, v in reports[1].items() if k not in ("fit_seconds", "train")}] * 2   # the time it took aside


def test_a_plugins_code_is_part_of_its_fingerprint(tmp_path, monkeypatch):
    """Editing a plugin's decide (without raising its version) runs its step again; an unchanged plugin is
    reused."""
    import importlib
    import sys

    from refinery.cli.group import RefineryGroup
    from refinery.cli.main import main
    from refinery.pipeline import stage

    source = (tmp_path / "edited_plugin.py")
    plugin = (Path(__file__).parent / "short_text_plugin.py").read_text()
    source.write_text(plugin)
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.setattr(stage, "REGISTRY", dict(stage.REGISTRY))
    (tmp_path / "p.yaml").write_text(f"input: {{paths: [{SNLI_TEST}], preset: snli}}\n"
                                     "stages: [{short-text: {min_words: 6}}]\n")
    group = RefineryGroup("refinery", commands={"run": main.commands["run"]})

    def run() -> str:
        stage.register(importlib.import_module("edited_plugin").ShortText)
        done = CliRunner().invoke(group, ["run", str(tmp_path / "p.yaml"), "--out", str(tmp_path / "o")])
        assert done.exit_code == 0, done.output
        return done.output

    run()
    assert "01-short-text: unchanged, skipped" in run()
    source.write_text(plugin.replace("words >= self.config.min_words", "words > self.config.min_words"))
    sys.modules.pop("edited_plugin")
    again = run()
    assert "01-short-text: unchanged" not in again and "== 01-short-text" in again
    kept = pq.read_table(tmp_path / "o" / "01-short-text" / "kept")
    assert min(len(t.split()) for t in kept["text_b"].to_pylist()) > 6   # the edited decide's rows
