"""The Python API (``import refinery as rf``) over the data a notebook holds: the same statistics and kept rows
from every kind of input as from the CLI on the file, results in the caller's kind, and the mistakes a
notebook user makes answered in one clear sentence."""
import inspect
import json

import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

import refinery as rf
from conftest import DATA, SNLI_DEV, SNLI_HARD, SNLI_TEST, run_cli
from refinery.pipeline.config import ConfigError
from refinery.messages import Refusal

HANS = str(DATA / "hans" / "hans_regenerated.tsv")


@pytest.fixture(scope="module")
def dev():
    return pd.read_json(SNLI_DEV, lines=True)


@pytest.fixture(scope="module")
def dev_test():
    return {"train": pd.read_json(SNLI_DEV, lines=True), "test": pd.read_json(SNLI_TEST, lines=True)}


def test_audit_gives_the_same_statistics_from_every_kind_of_input(dev, tmp_path):
    import datasets
    import polars

    table = pa.Table.from_pandas(dev)
    kinds = {"path": SNLI_DEV, "arrow": table, "reader": pa.RecordBatchReader.from_batches(table.schema,
                                                                                           table.to_batches(1000)),
             "hf": datasets.Dataset.from_pandas(dev), "polars": polars.from_pandas(dev)}
    first = rf.audit(dev, preset="snli", k=20)
    assert first.rows_in == len(dev) == 9842 and first.parts == {"counted": 9842, "input rejects": 0}
    stats = first.stats
    assert len(stats) > 10_000 and set(stats["label"]) == {"entailment", "neutral", "contradiction"}
    for name, data in kinds.items():
        other = rf.audit(data, preset="snli", k=20)
        pd.testing.assert_frame_equal(other.stats, stats, obj=name)
    top = first.top(3)
    assert list(top.columns) == ["label", "rank", "feature", "z", "n", "count", "p_hat"]
    assert top.groupby("label")["rank"].apply(list).tolist() == [[1, 2, 3]] * 3
    assert (top["z"] > first.threshold).all() and "null" not in set(first.top(50)["feature"])
    assert top[top.label == "contradiction"].feature.iloc[0] == "sleeping@hypothesis"


def test_zfilter_on_a_dataframe_keeps_the_rows_the_cli_keeps(dev, tmp_path):
    result = rf.zfilter(dev, preset="snli", k=20)
    assert isinstance(result.data, pd.DataFrame)
    run_cli("zfilter", SNLI_DEV, "--preset", "snli", "--k", "20", "--out", tmp_path / "cli")
    cli = pq.read_table(tmp_path / "cli" / "kept" / "part-00000.parquet").to_pandas()
    rows = ["text_a", "text_b", "label"]
    canonical = result.to_pandas(canonical=True)                   # ids of rows without one: hashes salted by file
    pd.testing.assert_frame_equal(canonical[rows], cli[rows])
    assert list(result.data.columns) == ["sentence1", "sentence2", "gold_label", "source_stage"]
    with_ids = dev.assign(pairID=[f"dev-{i}" for i in range(len(dev))])
    with_ids.to_json(tmp_path / "dev.jsonl", orient="records", lines=True)
    run_cli("zfilter", tmp_path / "dev.jsonl", "--preset", "snli", "--k", "20", "--out", tmp_path / "ids")
    kept = pq.read_table(tmp_path / "ids" / "kept" / "part-00000.parquet")["id"].to_pylist()
    assert rf.zfilter(with_ids, preset="snli", k=20).data["pairID"].tolist() == kept
    assert len(kept) == len(result.data) < len(dev)
    assert result.rows_in == len(dev) == len(result.data) + len(result.rejected)
    assert result.rejected["reason"].str.match(r"hits B_Z|over the threshold z\* > [\d.]+ in the kept rows").all()
    assert result.accounting == f"rows in 9,842 = {len(result.data):,} kept + {len(result.rejected):,} filtered out " \
                                "+ 0 input rejects (ok)"
    assert isinstance(result.to_arrow(), pa.Table) and len(result.to_hf()) == len(result.data)


def test_results_in_the_kind_given(dev):
    import datasets

    hf = rf.zfilter(datasets.Dataset.from_pandas(dev), preset="snli", k=20)
    assert isinstance(hf.data, datasets.Dataset) and hf.data.num_rows == len(hf.to_pandas())
    arrow = rf.upsample(pa.Table.from_pandas(dev), preset="snli", k=5, iterations=1)
    assert isinstance(arrow.data, pa.Table) and arrow.data.num_rows > len(dev)
    on_disk = rf.zfilter(SNLI_DEV, preset="snli", k=20)
    assert on_disk.data == on_disk.corpus and on_disk.corpus.endswith("/kept")
    audit = rf.audit(dev, preset="snli")
    assert audit.data is dev and audit.corpus is None


def test_a_result_shows_one_line_and_its_report_inline(dev):
    audit = rf.audit(dev, preset="snli", k=20)
    line = repr(audit)
    assert "\n" not in line and line.startswith("<refinery audit: rows in 9,842 = 9,842 counted")
    page = audit._repr_html_()
    assert "<svg" in page and "sleeping@hypothesis" in page and "<html" not in page
    zf = rf.zfilter(dev, preset="snli", k=20)
    assert zf._repr_html_().count("<svg") == 2 and "z-statistics of the kept rows" in zf._repr_html_()


def test_named_splits_from_a_datasetdict_in_memory_and_on_disk(dev_test, tmp_path):
    import datasets

    dd = datasets.DatasetDict({s: datasets.Dataset.from_pandas(df) for s, df in dev_test.items()})
    dd.save_to_disk(str(tmp_path / "snli_dd"))
    in_memory = rf.leakage(dd, preset="snli")
    from_dict = rf.leakage(dev_test, preset="snli")
    assert in_memory.report["test_split"] == "test" and in_memory.rows_in == 19_666
    assert in_memory.report["leakage_accuracy"] == from_dict.report["leakage_accuracy"]
    run_cli("leakage", tmp_path / "snli_dd", "--preset", "snli", "--out", tmp_path / "leak")
    cli = json.loads((tmp_path / "leak" / "report" / "report.json").read_text())
    assert cli["leakage_accuracy"] == in_memory.report["leakage_accuracy"] > cli["majority_accuracy"]
    weights = rf.weights(str(tmp_path / "snli_dd"), preset="snli", folds=3, split=["train", "test"])
    assert weights.corpus and isinstance(rf.weights(dd, preset="snli", folds=3).data, datasets.DatasetDict)
    assert set(weights.to_pandas()["split"]) == {"train", "test"}
    with pytest.warns(rf.SplitsNotice, match="passed 'test' through untouched"):   # a DatasetDict on disk too
        assert set(rf.weights(str(tmp_path / "snli_dd"), preset="snli", folds=3).to_pandas()["split"]) == {"train"}
    run_cli("compare", "--train", f"snli={tmp_path / 'snli_dd'}@train", "--eval", f"hard={SNLI_HARD}:snli",
            "--preset", "snli", "--out", tmp_path / "cmp", "--bootstrap", "200")
    trained = json.loads((tmp_path / "cmp" / "report" / "report.json").read_text())["train"]["snli"]
    assert trained["rows"] == len(dev_test["train"])


def test_dedup_with_a_preferred_split_reads_every_split_of_a_datasetdict(dev_test):
    """``prefer_split="test"`` dedups across the splits: every split of the DatasetDict is read (no notice), and the
    training copies of test rows are the ones removed; without it, train alone, the others passed through."""
    import warnings

    import datasets

    train, test = dev_test["train"].iloc[:300], dev_test["test"].iloc[:40]
    copied = pd.concat([train, test.iloc[:10]], ignore_index=True)   # ten test rows copied into train
    dd = datasets.DatasetDict({"train": datasets.Dataset.from_pandas(copied), "test": datasets.Dataset.from_pandas(test)})
    with warnings.catch_warnings():
        warnings.simplefilter("error", rf.SplitsNotice)
        both = rf.dedup(dd, preset="snli", prefer_split="test")
    assert both.splits == ("train", "test") and both.untouched == ()
    kept = both.to_pandas()
    pairs = lambda frame: set(zip(frame["sentence1"], frame["sentence2"]))   # noqa: E731
    assert pairs(kept[kept["split"] == "test"]) == pairs(test)   # every test row kept, its training copy removed
    assert not pairs(kept[kept["split"] == "train"]) & pairs(test.iloc[:10]) and len(kept) == len(train) + len(test)
    with pytest.warns(rf.SplitsNotice, match="passed 'test' through untouched"):
        assert rf.dedup(dd, preset="snli").splits == ("train",)


def test_compare_reads_dataframes_results_and_files(dev, dev_test):
    zf = rf.zfilter(dev, preset="snli", k=20)
    result = rf.compare(train={"snli": dev_test, "z-filtered": zf},   # named splits: the train split's rows
                        evals={"hard": (SNLI_HARD, "snli"), "hans": (HANS, "hans")}, preset="snli", bootstrap=200)
    assert result.report["train"]["snli"]["rows"] == len(dev)
    table = result.table
    assert list(table["eval"]) == ["hard", "hard", "hans", "hans"]
    assert list(table["train"][:2]) == ["snli", "z-filtered"]
    assert table["accuracy"].between(0, 1).all() and table["gain"].isna().tolist() == [True, False, True, False]
    assert table.loc[0, "majority"] == pytest.approx(0.348, abs=0.01)
    own = rf.compare(zf.data, train={"snli": dev}, evals={"hard": (SNLI_HARD, "snli")}, preset="snli", bootstrap=100)
    assert list(own.table["train"]) == ["snli", "input"]   # the data, trained last, named as a pipeline's input


def test_a_pipeline_over_a_dataframe(dev):
    spec = {"stages": [{"audit": {"k": 5}}, {"zfilter": {"k": 20}}]}
    done = rf.run(spec, data=dev, preset="snli")
    assert list(done.stages) == ["01-audit", "02-zfilter"]
    assert done["zfilter"].to_pandas(canonical=True)["id"].tolist() == \
        rf.zfilter(dev, preset="snli", k=20).to_pandas(canonical=True)["id"].tolist()
    assert isinstance(done.data, pd.DataFrame) and done["audit"].top(1)["feature"].tolist()
    with pytest.raises(KeyError, match="no stage 'zfiltre'; stages: 01-audit, 02-zfilter") as no_stage:
        done["zfiltre"]                                                      # a mapping's KeyError, and a refusal
    with pytest.raises(Refusal, match="no label 'maybe'; labels: ") as no_label:
        done["audit"].top(1, label="maybe")
    assert (no_stage.value.code, no_label.value.code) == ("unknown-setting", "invalid-setting")
    steps = {s["step"]: s for s in done.receipt["steps"]}                 # the pipeline report, as data
    assert steps["02-zfilter"]["rows"] == len(done.data) and "<svg" in done._repr_html_()
    assert max(steps["02-zfilter"]["audit"]["max_z"].values()) < max(steps["00-input"]["audit"]["max_z"].values())


def test_keywords_are_the_config_and_validate_as_everywhere(dev):
    from refinery.methods.zfilter.stage import ZFilterConfig

    params = inspect.signature(rf.zfilter).parameters
    assert params["k"].default == ZFilterConfig().k and "preset" in params and "band_min" in inspect.signature(
        rf.upsample).parameters
    with pytest.raises(TypeError, match=r"unknown keyword 'kk'; did you mean 'k'\?"):
        rf.zfilter(dev, preset="snli", kk=20)
    with pytest.raises(ConfigError, match=r"zfilter\.k: expected an integer, got '20'") as invalid:
        rf.zfilter(dev, preset="snli", k="20")
    assert invalid.value.code == "invalid-setting"
    with pytest.raises(Refusal, match=r"name the data's columns: preset=.*try preset='snli'") as unnamed:
        rf.audit(dev)
    assert unnamed.value.code == "missing-columns"
    with pytest.raises(ValueError, match="unknown preset|one of") as no_preset:
        rf.audit(dev, preset="snil")
    assert no_preset.value.code == "invalid-setting" and "did you mean 'snli'" in str(no_preset.value)
    with pytest.raises(TypeError, match="cannot read a builtins.int"):
        rf.audit(42, preset="snli")
    mixed = dev.assign(extra=[1, "a"] * (len(dev) // 2))
    with pytest.raises(Refusal, match=r"column 'extra' holds values of more than one type") as mixed_types:
        rf.audit(mixed, preset="snli")
    assert mixed_types.value.code == "bad-input"
    flat = rf.audit(dev, preset="snli", lowercase=False, min_count=5)        # a nested config's field by its flat name
    nested = rf.audit(dev, preset="snli", features={"tokenizer": {"lowercase": False}}, min_count=5)
    assert flat.report["config"]["features"]["tokenizer"]["lowercase"] is False
    assert flat.report["config"] == nested.report["config"]
    pd.testing.assert_frame_equal(flat.stats, nested.stats)


def test_errors_name_the_callers_keywords_and_data_and_rejects_it_can_still_read(dev, tmp_path):
    """'--preset or --map' read as preset='or'; a DataFrame was named by the scratch file it passed through; the
    rejects of a call whose rows were all rejected were named in a folder already removed; an --in-place hint the
    API has no keyword for; a Ctrl-C DuckDB answered came out as RuntimeError, which ``except KeyboardInterrupt``
    misses."""
    import glob
    import re

    import duckdb

    from refinery.api.errors import python_terms
    from refinery.io.corpus import AllRejected

    with pytest.raises(AllRejected) as raised:
        rf.zfilter(dev.head(50).assign(gold_label=0), preset="snli")
    message = str(raised.value)
    assert raised.value.code == "all-rejected"
    assert message.startswith("no good rows in pandas.DataFrame (in memory): all 50 rejected: label not in the label ")
    assert message.endswith("; check preset=… or map=… and labels=…")
    assert len(glob.glob(re.search(r"are in (\S+);", message).group(1))) == 1
    (tmp_path / "in").mkdir()
    (tmp_path / "in" / "d.jsonl").write_text("".join(open(SNLI_DEV).readlines()[:20]))
    with pytest.raises(ValueError) as raised:
        rf.zfilter(str(tmp_path / "in" / "d.jsonl"), preset="snli", out=tmp_path / "in")
    assert raised.value.code == "output-overlaps-input"
    assert str(raised.value).endswith("refinery would write among the data it reads; give a folder outside it")
    with pytest.raises(KeyboardInterrupt):
        with python_terms(None):
            raise duckdb.InterruptException("INTERRUPT Error: Interrupted!")


def test_canonical_columns_need_no_preset_and_bad_rows_are_accounted(dev):
    table = pa.table({"text_a": ["a dog runs", "a cat", None, "two men"], "text_b": ["an animal moves", "x", "y", "z"],
                      "label": ["entailment", "neutral", "neutral", None]})
    corpus = rf.read(table)
    assert corpus.rows_in == 4 and corpus.parts == {"rows": 2, "rejected": 2}
    bad = corpus.input_rejects
    assert sorted(bad["line"]) == [3, 4] and bad["reason"].str.len().gt(0).all()
    assert corpus.to_pandas()["text_a"].tolist() == ["a dog runs", "a cat"]


def test_a_ray_dataset_in_and_out_on_either_engine(dev, ray_local):
    import ray

    ds = ray.data.from_pandas(dev)
    key = ["feature", "label"]
    local = rf.audit(dev, preset="snli").stats.sort_values(key, ignore_index=True)
    on_ray = rf.audit(ds, preset="snli", engine="ray").stats.sort_values(key, ignore_index=True)
    pd.testing.assert_frame_equal(on_ray, local)
    kept = rf.zfilter(ds, preset="snli", k=20)
    assert kept.rows_in == len(dev) and type(kept.data).__module__.startswith("ray.data")
    assert kept.data.count() == len(rf.zfilter(dev, preset="snli", k=20).data)


NLI = {"entailment": 0, "neutral": 1, "contradiction": 2}
COLS = {"text_a": "premise", "text_b": "hypothesis", "label": "label"}


@pytest.fixture(scope="module")
def notebook_frames():
    """SNLI rows as a notebook holds them: the user's own column names, integer labels, an extra column;
    3,000 training rows (enough for the z-filter to remove some) and 300 test rows."""
    def frame(path, rows):
        raw = pd.read_json(path, lines=True).head(rows)
        return pd.DataFrame({"premise": raw.sentence1, "hypothesis": raw.sentence2,
                             "label": raw.gold_label.map(NLI).astype("int64"), "note": "mine"})
    return {"train": frame(SNLI_DEV, 3000), "test": frame(SNLI_TEST, 300)}


@pytest.fixture(scope="module")
def class_label_dict(notebook_frames):
    """A ``DatasetDict`` whose labels are a ClassLabel; three test rows have no gold label (-1)."""
    import datasets

    features = datasets.Features({"premise": datasets.Value("string"), "hypothesis": datasets.Value("string"),
                                  "label": datasets.ClassLabel(names=list(NLI))})
    parts = {s: df.drop(columns="note").assign(label=[-1] * 3 + df.label.tolist()[3:]) if s == "test"
             else df.drop(columns="note") for s, df in notebook_frames.items()}
    return datasets.DatasetDict({s: datasets.Dataset.from_pandas(df, features=features, preserve_index=False)
                                 for s, df in parts.items()})


def test_int_labels_and_the_callers_columns_come_back_as_they_came(notebook_frames):
    train = notebook_frames["train"]
    audit = rf.audit(train, map=COLS, labels=[0, 1, 2], k=5)        # integer labels: was a TypeError
    assert audit.parts == {"counted": 3000, "input rejects": 0} and set(audit.stats["label"]) == {"0", "1", "2"}
    assert rf.audit(train, map=COLS, labels=[0, 1]).parts["input rejects"] == (train.label == 2).sum()
    kept = rf.zfilter(train, map=COLS, k=20)
    data = kept.data
    assert list(data.columns) == ["premise", "hypothesis", "label", "note", "source_stage"]
    assert data["label"].dtype == "int64" and set(data["label"]) == {0, 1, 2} and 0 < len(data) < 3000
    merged = data.merge(train, on=["premise", "hypothesis"], suffixes=("", "_given"))
    assert (merged["label"] == merged["label_given"]).all() and (merged["note"] == "mine").all()
    canonical = kept.to_pandas(canonical=True)
    assert {"id", "text_a", "text_b", "label"} <= set(canonical.columns) and set(canonical["label"]) == {"0", "1", "2"}
    assert set(kept.rejected.columns) >= {"premise", "label", "reason"} and kept.rejected["label"].dtype == "int64"
    upsampled = rf.upsample(train, map=COLS, k=5, iterations=1).data
    assert upsampled["label"].dtype == "int64" and len(upsampled) > 3000
    own = rf.zfilter(train.assign(text_b="mine"), map=COLS, k=20).data   # a column of refinery's name: was dropped
    assert list(own.columns) == ["premise", "hypothesis", "label", "note", "text_b", "source_stage"]
    assert (own["text_b"] == "mine").all() and len(own) == len(data)


def test_a_datasetdict_keeps_its_splits_and_its_class_labels(class_label_dict):
    import datasets

    dd = class_label_dict
    with pytest.warns(rf.SplitsNotice, match=r"zfilter read split 'train' and passed 'test' through untouched"):
        kept = rf.zfilter(dd, map=COLS, k=20)
    assert kept.rows_in == 3000 and kept.splits == ("train",) and kept.untouched == ("test",)
    assert "[split train; test untouched]" in repr(kept)
    data = kept.data
    assert isinstance(data, datasets.DatasetDict) and data["test"] is dd["test"]    # the test split as given
    assert 0 < data["train"].num_rows < 3000 and data["train"].features["label"] == dd["train"].features["label"]
    assert set(data["train"]["label"]) == {0, 1, 2}
    with pytest.warns(rf.SplitsNotice):
        audit = rf.audit(dd, map=COLS)                                     # train, by default
    assert audit.parts == {"counted": 3000, "input rejects": 0}
    assert "datasets.DatasetDict-train.parquet" in open(audit.report_path).read()   # the header names the split
    with pytest.warns(rf.SplitsNotice):
        test = rf.audit(dd, map=COLS, split="test", labels=[0, 1, 2])      # ClassLabel ints name the classes
    assert test.parts == {"counted": 297, "input rejects": 3}
    assert test.input_rejects["reason"].str.startswith("label not in the label set entailment|neutral").all()
    pooled = rf.audit(dd, map=COLS, split=["train", "test"])
    assert pooled.parts["counted"] == 3297 and pooled.untouched == ()
    with pytest.raises(Refusal, match=r"no split 'dev'; the data's splits: train, test") as no_split:
        rf.audit(dd, map=COLS, split="dev")
    with pytest.raises(Refusal, match=r"splits a, b and none named 'train': .*split='a'") as no_train:
        rf.audit({"a": dd["train"], "b": dd["test"]}, map=COLS)
    assert no_split.value.code == no_train.value.code == "missing-split"


def test_a_split_column_keeps_its_splits(notebook_frames):
    frame = pd.concat([df.assign(split=s) for s, df in notebook_frames.items()], ignore_index=True)
    with pytest.warns(rf.SplitsNotice):
        kept = rf.zfilter(frame, map=COLS, k=20).data
    test = frame[frame.split == "test"].reset_index(drop=True)
    assert list(kept.columns) == ["premise", "hypothesis", "label", "note", "split", "source_stage"]
    pd.testing.assert_frame_equal(kept[kept.split == "test"][test.columns].reset_index(drop=True), test)
    assert 0 < (kept.split == "train").sum() < 3000
    with pytest.warns(rf.SplitsNotice):
        up = rf.upsample(frame, map=COLS, k=5, iterations=1).data
    assert (up.split == "test").sum() == 300 and (up.split == "train").sum() > 3000
    assert rf.leakage(frame, map=COLS).report["test_split"] == "test"      # a stage that needs splits reads all
    with pytest.raises(ValueError, match=r"name the splits: \{'train': data, 'test': data\}") as unnamed:
        rf.leakage(notebook_frames["train"], map=COLS)
    assert unnamed.value.code == "missing-columns"


def test_temporary_folders_are_removed(notebook_frames, tmp_path, monkeypatch):
    """A call's scratch (in the process's folder under the temporary directory) goes with its result, or when it
    fails; the process's folder at its exit."""
    import gc
    import subprocess
    import sys
    import tempfile

    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    train = notebook_frames["train"].head(300)
    result = rf.zfilter(train, map=COLS, k=20)
    process, = tmp_path.iterdir()
    held = lambda: sorted(p.name for p in process.iterdir() if p.name not in (".refinery-owner", "duckdb"))  # noqa: E731
    assert [p.startswith("zfilter-") for p in held()] == [True]
    data = result.data
    del result
    gc.collect()
    assert not held() and len(data) == 300                                  # gone with its result; the data stays
    with pytest.raises(ValueError, match="'nope'") as refused:
        rf.audit(train, map={"text_a": "premise", "label": "nope"})      # a failed call leaves nothing
    assert refused.value.code == "missing-columns"
    assert not held()
    script = ("import refinery as rf, tempfile; tempfile.tempdir = %r\n"
              "kept = rf.zfilter(%r, preset='snli', k=20).data\nprint(kept)") % (str(tmp_path), SNLI_TEST)
    printed = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, check=True).stdout
    assert printed.startswith(str(tmp_path)) and list(tmp_path.iterdir()) == [process]   # a path's corpus: until exit


def test_in_memory_data_is_named_as_what_it_is_in_everything_published(notebook_frames, tmp_path):
    """Reports, manifests, cards and rejects named the scratch file a DataFrame passed through (gone at exit)."""
    train = notebook_frames["train"].head(300).copy()
    train.loc[3, "premise"] = ""                                            # one input reject
    out = tmp_path / "a"
    result = rf.audit(train, map=COLS, out=out)
    assert result.report["inputs"] == ["pandas.DataFrame (in memory)"]
    assert result.input_rejects["source_file"].tolist() == ["pandas.DataFrame (in memory)"]
    published = [p for p in out.rglob("*") if p.is_file() and p.suffix in (".json", ".md", ".html")]
    assert len(published) >= 5 and not [p for p in published if "refinery-audit-" in p.read_text()]


def test_a_result_refuses_a_folder_a_later_run_replaced(dev, tmp_path):
    first = rf.zfilter(dev, preset="snli", k=20, out=tmp_path / "z")
    kept = len(first.data)
    second = rf.zfilter(dev, preset="snli", k=5, out=tmp_path / "z")
    assert len(second.data) != kept
    with pytest.raises(RuntimeError, match="now holds a later run than this result's"):
        first.data
    with pytest.raises(FileExistsError, match=r"already holds a finished result \(use mode='overwrite' or mode='skip'\)"
                       ) as exists:
        rf.zfilter(dev, preset="snli", k=5, out=tmp_path / "z", mode="error")
    assert exists.value.code == "output-exists"
