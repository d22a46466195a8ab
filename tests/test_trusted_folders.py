"""A folder is trusted within itself only: a corpus manifest or refinery's marker that names a path outside its
folder (absolute, '..', another store), or no path at all, is refused in one line naming the record, within
seconds, and nothing outside the folder is read or removed; a shard replaced or cut behind refinery's back is
named, not read."""
import json
import shutil
import time

import pytest

from conftest import SNLI_HARD, run_cli

# crafted entries: each must end in one line naming the record (exit 2), never be read or removed
CRAFTED = {
    "absolute": "/etc/passwd",
    "parent": "../elsewhere/big.parquet",
    "parent-inside": "part/../../x.parquet",
    "other-store": "s3://other-bucket/part-00000.parquet",
    "file-url": "file:///etc/passwd",
    "windows": "C:\\data\\part.parquet",
    "dot": "./part-00000.parquet",
    "empty": "",
    "number": 7,
    "null": None,
    "nested": ["part-00000.parquet"],
    "nul": "part\x00.parquet",
}


@pytest.fixture(scope="module")
def corpus(tmp_path_factory):
    root = tmp_path_factory.mktemp("trusted")
    run_cli("convert", SNLI_HARD, "--preset", "snli", "--out", root / "corpus")
    return root / "corpus"


def _crafted_copy(corpus, tmp_path, change) -> str:
    copy = tmp_path / "copy"
    shutil.copytree(corpus, copy)
    path = copy / ".refinery" / "manifest.json"
    manifest = json.loads(path.read_text())
    change(manifest)
    path.write_text(json.dumps(manifest))
    return str(copy)


@pytest.mark.parametrize("entry", CRAFTED.values(), ids=CRAFTED.keys())
def test_a_manifest_naming_a_path_outside_its_folder_is_refused_naming_it(corpus, tmp_path, entry):
    from refinery.io.contained import OutsideFolder
    from refinery.io.corpus import Corpus

    copy = _crafted_copy(corpus, tmp_path, lambda m: m["files"].append(entry))
    with pytest.raises(OutsideFolder, match=r"manifest\.json: 'files' entry 2 .* not a file inside the folder") as e:
        Corpus.open(copy)
    assert e.value.code == "bad-input"


@pytest.mark.parametrize("change", [
    lambda m: m.update(files="part-00000.parquet"),                      # a string, not a list
    lambda m: m.update(rejects={"a": 1}),                                # a mapping
    lambda m: m.update(file_stats=[{"path": "/etc/passwd", "bytes": 1}]),
    lambda m: m.update(file_stats="x"),
], ids=["files-string", "rejects-dict", "stats-absolute", "stats-string"])
def test_a_manifest_of_the_wrong_types_is_refused_naming_it(corpus, tmp_path, change):
    from refinery.io.contained import BadRecord
    from refinery.io.corpus import Corpus

    with pytest.raises(BadRecord, match=r"manifest\.json: .* rewrite .*manifest\.json") as e:
        Corpus.open(_crafted_copy(corpus, tmp_path, change))
    assert e.value.code == "bad-input"


def test_a_huge_manifest_ends_within_seconds(corpus, tmp_path):
    from refinery.cli.base import error_code
    from refinery.io.corpus import Corpus

    copy = _crafted_copy(corpus, tmp_path, lambda m: m["files"].extend(f"part-{i:07d}.parquet" for i in range(10**6)))
    started = time.monotonic()
    with pytest.raises(FileNotFoundError, match="part-0000000.parquet: listed in .* but missing") as e:
        Corpus.open(copy)
    assert time.monotonic() - started < 10
    assert error_code(e.value) == "bad-input"   # the code the command line gives a missing file


def test_the_cli_reads_no_file_outside_the_corpus_and_names_a_cut_shard(corpus, tmp_path):
    outside = tmp_path / "elsewhere.parquet"
    shutil.copy(next(corpus.glob("part-*.parquet")), outside)   # a real shard, outside the folder
    copy = _crafted_copy(corpus, tmp_path, lambda m: m.update(files=["../elsewhere.parquet"]))
    proc = run_cli("inspect", copy, check=False)
    assert proc.returncode == 2 and proc.stderr.count("\n") == 1, proc.stderr
    assert "manifest.json: 'files' entry 1 '../elsewhere.parquet'" in proc.stderr and not proc.stdout
    assert proc.stderr.rstrip().endswith("[bad-input]"), proc.stderr

    cut = tmp_path / "cut"
    shutil.copytree(corpus, cut)
    shard = next(cut.glob("part-*.parquet"))
    shard.write_bytes(shard.read_bytes()[:-10])
    proc = run_cli("audit", cut, "--out", tmp_path / "audit", check=False)
    assert proc.returncode == 2 and proc.stderr.count("\n") == 1, proc.stderr
    assert f"{shard.name}: " in proc.stderr and "bytes where" in proc.stderr, proc.stderr
    assert proc.stderr.rstrip().endswith("[bad-input]"), proc.stderr
    assert not (tmp_path / "audit").exists()
    assert "match the sha256" in run_cli("inspect", corpus, "--verify").stderr


@pytest.mark.parametrize("entry", ["/some/dir/file", "../sibling/keep.txt", "s3://bucket/x", 7],
                         ids=["absolute", "parent", "other-store", "number"])
def test_an_overwrite_under_a_crafted_marker_is_refused_and_removes_nothing(corpus, tmp_path, entry):
    out = tmp_path / "out"
    run_cli("audit", corpus, "--out", out)
    sibling = tmp_path / "sibling"
    sibling.mkdir()
    (sibling / "keep.txt").write_text("the user's")
    marker = json.loads((out / ".refinery.json").read_text())
    marker["files"].append(entry)
    (out / ".refinery.json").write_text(json.dumps(marker))
    started = time.monotonic()
    proc = run_cli("audit", corpus, "--out", out, check=False)
    assert time.monotonic() - started < 30
    assert proc.returncode == 2 and proc.stderr.count("\n") == 1, proc.stderr
    assert ".refinery.json: 'files' entry" in proc.stderr and "not a file inside the folder" in proc.stderr
    assert proc.stderr.rstrip().endswith("[bad-input]"), proc.stderr
    assert (sibling / "keep.txt").read_text() == "the user's" and (out / "report" / "report.json").exists()


def _run_folder(corpus, tmp_path, **pointer) -> str:
    """A run's folder as an object store holds it (copied to a disk as it is): refinery's marker, its parts under
    _runs/<run>/, and the pointer ``_SUCCESS`` naming that run."""
    from refinery.io.ownership import marker_body

    folder = tmp_path / "zf"
    shutil.copytree(corpus, folder / "_runs" / "20261127T120000-0123abcd" / "kept")
    (folder / ".refinery.json").write_text(marker_body([".refinery.json", "_SUCCESS", "_runs"], run="r"))
    (folder / "_SUCCESS").write_text(json.dumps({"run": "20261127T120000-0123abcd", "parts": ["kept"],
                                                 "root": "_runs/20261127T120000-0123abcd", **pointer}))
    return str(folder)


def test_a_run_folder_of_an_object_store_reads_through_its_pointer(corpus, tmp_path):
    from refinery.io.corpus import Corpus

    folder = _run_folder(corpus, tmp_path)
    assert Corpus.open(f"{folder}/kept").read().equals(Corpus.open(str(corpus)).read())
    assert f"read      {folder}/_runs/20261127T120000-0123abcd/kept" in run_cli("inspect", f"{folder}/kept").stdout


@pytest.mark.parametrize("entry", CRAFTED.values(), ids=CRAFTED.keys())
def test_a_run_pointer_naming_a_folder_outside_its_own_is_refused_naming_it(corpus, tmp_path, entry):
    from refinery.io.contained import OutsideFolder
    from refinery.io.corpus import Corpus

    folder = _run_folder(corpus, tmp_path, root=entry)
    with pytest.raises(OutsideFolder, match=r"_SUCCESS: 'root' entry 1 .* not a file inside the folder") as e:
        Corpus.open(f"{folder}/kept")
    assert e.value.code == "bad-input"


@pytest.mark.parametrize("parts", ["kept", {"kept": 1}, ["/etc"], ["kept"] * 100_000])
def test_a_run_pointer_of_the_wrong_types_or_huge_ends_in_one_line_within_seconds(corpus, tmp_path, parts):
    folder = _run_folder(corpus, tmp_path, parts=parts)
    started = time.monotonic()
    proc = run_cli("audit", f"{folder}/kept", "--out", tmp_path / "a", check=False)
    assert time.monotonic() - started < 30
    assert proc.returncode == 2 and proc.stderr.count("\n") == 1 and "_SUCCESS: 'parts'" in proc.stderr, proc.stderr
    assert proc.stderr.rstrip().endswith("[bad-input]"), proc.stderr
    if isinstance(parts, list) and parts[0] == "kept":   # a part named twice: a reader would take it twice
        assert "'parts' entry 2 'kept' is named twice" in proc.stderr
