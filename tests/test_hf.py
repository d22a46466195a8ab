"""Hugging Face interop on real ``datasets`` objects: ClassLabel columns read as their names (-1 and integers
outside the names rejected with a reason), every corpus's dataset card loaded by ``datasets.load_dataset``, and
``refinery convert --format hf`` writing a ``save_to_disk`` folder with its rejects and accounting."""
import json
import os
import re
import subprocess
import sys

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
import yaml
from conftest import REPO, SNLI_DEV, run_cli

from refinery.io.corpus import CARD, Corpus
from refinery.io.corpus_writer import CorpusWriter, write_table
from refinery.io.inputs import expand_paths
from refinery.io.schema import NLI3

datasets = pytest.importorskip("datasets")
ENV = {"HF_DATASETS_DISABLE_PROGRESS_BARS": "1"}
MAP = ["--map", "text_a=premise,text_b=hypothesis,label=label"]
ROWS = 600
NO_GOLD = {i for i in range(ROWS) if i % 40 == 7}   # rows without a gold label, as SNLI's Hub release marks them: -1


@pytest.fixture(scope="module")
def snli(tmp_path_factory):
    """600 SNLI dev rows as a ``datasets.Dataset`` with a ClassLabel label (-1 on ``NO_GOLD``) and a ClassLabel
    column the mapping does not read (-1 on every 50th row), written with save_to_disk (a Dataset and a
    DatasetDict of validation = the first 200 rows, test = the rest) and to_parquet."""
    datasets.disable_progress_bars()
    root = tmp_path_factory.mktemp("hf")
    rows = [json.loads(line) for line in open(SNLI_DEV)][:ROWS]
    features = datasets.Features({"premise": datasets.Value("string"), "hypothesis": datasets.Value("string"),
                                  "label": datasets.ClassLabel(names=list(NLI3)),
                                  "length": datasets.ClassLabel(names=["short", "long"])})
    ds = datasets.Dataset.from_dict({
        "premise": [r["sentence1"] for r in rows], "hypothesis": [r["sentence2"] for r in rows],
        "label": [-1 if i in NO_GOLD else NLI3.index(r["gold_label"]) for i, r in enumerate(rows)],
        "length": [-1 if i % 50 == 0 else int(len(r["sentence1"]) > 60) for i, r in enumerate(rows)]},
        features=features)
    ds.save_to_disk(str(root / "dataset"))
    datasets.DatasetDict({"validation": ds.select(range(200)), "test": ds.select(range(200, ROWS))}) \
        .save_to_disk(str(root / "dataset_dict"))
    ds.to_parquet(str(root / "snli.parquet"))
    return root, rows


def _accounting(stdout: str) -> tuple[int, int, int]:
    rows_in, out, rejected = map(lambda s: int(s.replace(",", "")), re.search(
        r"rows in ([\d,]+) = ([\d,]+) out \+ ([\d,]+) rejected \(ok\)", stdout).groups())
    return rows_in, out, rejected


@pytest.mark.parametrize("layout", ["dataset", "dataset_dict", "snli.parquet"])
def test_class_label_columns_are_read_as_their_names(snli, layout, tmp_path):
    root, rows = snli
    out = tmp_path / "c"
    assert _accounting(run_cli("convert", root / layout, *MAP, "--out", out).stdout) == \
        (ROWS, ROWS - len(NO_GOLD), len(NO_GOLD))
    corpus = Corpus.open(str(out))
    table, rejects = corpus.read(), corpus.read_rejects()
    kept = [i for i in range(ROWS) if i not in NO_GOLD]
    assert table["label"].to_pylist() == [rows[i]["gold_label"] for i in kept]
    assert table["text_a"].to_pylist() == [rows[i]["sentence1"] for i in kept]
    lengths = table["length"].to_pylist()   # not mapped: decoded, its -1 a null, no row rejected for it
    assert lengths == [None if i % 50 == 0 else ["short", "long"][len(rows[i]["sentence1"]) > 60] for i in kept]
    if layout == "dataset_dict":
        assert table["split"].to_pylist() == ["validation" if i < 200 else "test" for i in kept]
    lines = [i + 1 - (200 if layout == "dataset_dict" and i >= 200 else 0) for i in sorted(NO_GOLD)]
    assert rejects["line"].to_pylist() == lines     # record numbers, per split file for the DatasetDict
    assert set(rejects["reason"].to_pylist()) == {"label -1 in column 'label' (no label in the ClassLabel feature)"}
    assert all(json.loads(raw)["label"] == -1 for raw in rejects["raw"].to_pylist())


def test_an_integer_outside_the_names_is_a_reject_with_its_reason(snli, tmp_path):
    root, rows = snli
    table = pq.read_table(root / "snli.parquet")   # datasets' own file and metadata; one label corrupted
    labels = table["label"].to_pylist()
    labels[3] = 3
    pq.write_table(table.set_column(2, "label", pa.array(labels, pa.int64())), tmp_path / "bad.parquet")
    assert b"ClassLabel" in pq.read_schema(tmp_path / "bad.parquet").metadata[b"huggingface"]
    stdout = run_cli("convert", tmp_path / "bad.parquet", *MAP, "--out", tmp_path / "c").stdout
    assert _accounting(stdout) == (ROWS, ROWS - len(NO_GOLD) - 1, len(NO_GOLD) + 1)
    rejects = Corpus.open(str(tmp_path / "c")).read_rejects().to_pylist()
    assert rejects[0]["line"] == 4 and rejects[0]["column"] == "label" \
        and rejects[0]["reason"] == "label 3 in column 'label' is outside the ClassLabel feature's 3 names"
    inspected = json.loads(run_cli("inspect", tmp_path / "bad.parquet", *MAP, "--json").stdout)
    assert set(inspected["labels"]) == set(NLI3) and inspected["rejects_by_reason"] == {
        "label -1 in column 'label' (no label in the ClassLabel feature)": len(NO_GOLD),
        "label 3 in column 'label' is outside the ClassLabel feature's 3 names": 1}


# ---------------------------------------------------------------- the dataset card of every corpus

def _card(folder) -> tuple[dict, str]:
    text = (folder / CARD).read_text()
    _, front, body = text.split("---\n", 2)
    return yaml.safe_load(front), body


def test_every_corpus_carries_a_card_that_datasets_loads(snli, tmp_path):
    root, _ = snli
    run_cli("convert", root / "dataset_dict", *MAP, "--out", tmp_path / "c", "--shard-rows", "250")
    folder = tmp_path / "c"
    manifest = Corpus.open(str(folder)).manifest
    front, body = _card(folder)
    assert front["configs"] == [{"config_name": "default",
                                 "data_files": [{"split": "train", "path": manifest.files}]}]
    assert len(manifest.files) == 3 and front["dataset_info"]["splits"][0]["num_examples"] == manifest.rows
    loaded = datasets.load_dataset(str(folder), split="train")
    by_glob = datasets.load_dataset("parquet", data_files=str(folder / "part-*.parquet"), split="train")
    shard = pq.read_schema(folder / manifest.files[0])
    assert loaded.features == by_glob.features == datasets.Features.from_arrow_schema(shard)
    assert loaded.num_rows == by_glob.num_rows == manifest.rows == ROWS - len(NO_GOLD)
    assert {lab: loaded["label"].count(lab) for lab in NLI3} == manifest.labels
    splits = {s: loaded["split"].count(s) for s in ("test", "validation")}
    for label, n in manifest.labels.items():
        assert f"| {label} | {n:,} | {n / manifest.rows:.1%} |" in body
    for split, n in splits.items():
        assert f"| {split} | {n:,} | {n / manifest.rows:.1%} |" in body
    assert f": {ROWS:,} rows in = {manifest.rows:,} + {len(NO_GOLD)}." in body
    assert "refinery convert" in body and "text_a=premise" in body
    assert "README.md" not in " ".join(expand_paths([str(folder)]))   # never read as data
    run_cli("convert", folder, "--out", tmp_path / "again")         # nor as part of the corpus
    assert Corpus.open(str(tmp_path / "again")).manifest.rows == manifest.rows


def test_card_lists_every_shards_columns_names_no_storage_options_and_is_deterministic(snli_pair, tmp_path):
    rows = snli_pair.slice(0, 300)
    extra = rows.slice(200).append_column("tags", pa.array([["a", "b"]] * 100, pa.list_(pa.string())))
    secret = {"key": "AKIAEXAMPLE", "secret": "hunter2", "client_kwargs": {"endpoint_url": "http://10.1.2.3:9000"}}
    cards = []
    for name in ("a", "b"):
        with CorpusWriter(str(tmp_path / name), shard_rows=150,
                          config={"input": {"paths": ["s3://bucket/snli"], "storage_options": secret}}) as writer:
            writer.write(rows.slice(0, 200))
            writer.write(extra)          # other columns: a shard of their own
            writer.commit()
        cards.append((tmp_path / name / CARD).read_bytes())
    assert cards[0] == cards[1]
    text = cards[0].decode()
    assert not any(s in text for s in ("storage_options", "AKIAEXAMPLE", "hunter2", "10.1.2.3", "client_kwargs"))
    assert "s3://bucket/snli" in text
    front, _ = _card(tmp_path / "a")   # every shard's columns, the extra one's too
    assert [f["name"] for f in front["dataset_info"]["features"]] == [*rows.column_names, "tags"]
    assert {"name": "tags", "list": "string"} in front["dataset_info"]["features"]

    write_table(rows.slice(0, 0), str(tmp_path / "empty"))
    front, body = _card(tmp_path / "empty")
    assert "0 rows in 1 Parquet shard(s)" in body   # an empty shard: the corpus keeps its columns
    assert [f["name"] for f in front["dataset_info"]["features"]] == rows.column_names


# ---------------------------------------------------------------- convert --format hf

def test_convert_format_hf_writes_a_save_to_disk_folder_with_its_rejects(snli, tmp_path):
    root, rows = snli
    out = tmp_path / "hf"
    stdout = run_cli("convert", root / "dataset_dict", *MAP, "--out", out, "--format", "hf", "--shard-rows", "150",
                     env=ENV).stdout
    assert _accounting(stdout) == (ROWS, ROWS - len(NO_GOLD), len(NO_GOLD))
    assert "a Hugging Face DatasetDict (validation, test)" in stdout
    loaded = datasets.load_from_disk(str(out))
    assert list(loaded) == ["validation", "test"]
    assert [loaded[s].num_rows for s in loaded] == [200 - 5, 400 - 10]
    assert loaded["validation"].column_names == ["id", "text_a", "text_b", "label", "length"]
    assert loaded["test"]["label"] == [rows[i]["gold_label"] for i in range(200, ROWS) if i not in NO_GOLD]
    assert len(list((out / "test").glob("data-*.arrow"))) == 3            # 390 rows, 150 a file
    rejects = pq.read_table(out / "rejects.parquet")
    assert rejects.num_rows == len(NO_GOLD) and set(rejects["column"].to_pylist()) == {"label"}

    back = run_cli("convert", out, "--map", "text_a=text_a,text_b=text_b,label=label,id=id", "--out",
                   tmp_path / "back").stdout       # refinery reads it back: its splits, not its rejects
    assert _accounting(back) == (ROWS - len(NO_GOLD),) * 2 + (0,)
    assert Corpus.open(str(tmp_path / "back")).read()["split"].to_pylist() == \
        ["validation"] * 195 + ["test"] * 390

    single = tmp_path / "single"     # rows without splits: a Dataset
    run_cli("convert", SNLI_DEV, "--preset", "snli", "--out", single, "--format", "hf", env=ENV)
    assert datasets.load_from_disk(str(single)).num_rows == 9842
    assert pq.read_table(single / "rejects.parquet").num_rows == 0


def test_convert_format_hf_modes_and_a_users_folder(snli, tmp_path):
    root, _ = snli
    args = ["convert", root / "snli.parquet", *MAP, "--format", "hf"]
    out = tmp_path / "hf"
    run_cli(*args, "--out", out, env=ENV)
    before = (out / "state.json").stat().st_mtime_ns
    assert "skipped" in run_cli(*args, "--out", out, "--mode", "skip", env=ENV).stdout
    assert (out / "state.json").stat().st_mtime_ns == before
    refused = run_cli(*args, "--out", out, "--mode", "error", check=False)
    assert refused.returncode == 2 and "already holds a finished result" in refused.stderr
    assert refused.stderr.rstrip().endswith("[output-exists]"), refused.stderr
    other = run_cli("convert", root / "snli.parquet", *MAP, "--out", out, "--mode", "skip", check=False)
    assert other.returncode == 2 and "another configuration" in other.stderr   # a corpus is not this Dataset
    assert other.stderr.rstrip().endswith("[output-exists]"), other.stderr
    (out / "notes.txt").write_text("mine\n")
    run_cli(*args, "--out", out, env=ENV)                                     # overwrite: the user's file stays
    assert (out / "notes.txt").read_text() == "mine\n" and datasets.load_from_disk(str(out)).num_rows == 585
    assert sorted(p.name for p in tmp_path.iterdir()) == ["hf"]               # no temporary folder left

    mine = tmp_path / "mine"
    mine.mkdir()
    (mine / "data.txt").write_text("mine\n")
    refused = run_cli(*args, "--out", mine, check=False)
    assert refused.returncode == 2 and "refinery did not write" in refused.stderr
    assert refused.stderr.rstrip().endswith("[not-refinerys]"), refused.stderr
    assert [p.name for p in mine.iterdir()] == ["data.txt"]


def test_save_to_disk_on_an_object_store_replaces_the_previous_version(snli_pair):
    """fsspec's memory filesystem is an object store to refinery: no rename, versioned Arrow files."""
    import fsspec

    from refinery.io.hf import save_to_disk

    table = snli_pair.slice(0, 500).append_column("split", pa.array(["train"] * 300 + ["test"] * 200))
    fs = fsspec.filesystem("memory")
    first = save_to_disk(table, "memory://bucket/hf", shard_rows=100)
    assert first == {"train": 300, "test": 200}
    assert len(fs.glob("/bucket/hf/train/data-*.arrow")) == 3
    save_to_disk(table.slice(0, 400), "memory://bucket/hf")
    loaded = datasets.load_from_disk("memory://bucket/hf")
    assert {s: loaded[s].num_rows for s in loaded} == {"train": 300, "test": 100}
    assert len(fs.glob("/bucket/hf/*/data-*.arrow")) == 2                    # the first version's files are gone
    assert loaded["test"]["id"] == table["id"].to_pylist()[300:400]
    fs.rm("/bucket/hf", recursive=True)


def test_without_datasets_format_hf_says_how_to_install_it(tmp_path):
    blocked = ("import sys; sys.modules['datasets'] = None; sys.argv[0] = 'refinery'; "
               "from refinery.cli.main import run; run()")
    proc = subprocess.run([sys.executable, "-c", blocked, "convert", SNLI_DEV, "--preset", "snli", "--out",
                           str(tmp_path / "hf"), "--format", "hf"], capture_output=True, text=True, cwd=REPO,
                          env={**os.environ, **ENV})
    assert proc.returncode == 2
    assert proc.stderr.strip() == ("error: --format hf needs the datasets package: pip install 'refinery[hf]' "
                                   "[missing-package]")
    assert not (tmp_path / "hf").exists()
