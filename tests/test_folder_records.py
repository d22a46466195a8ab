"""A folder's records (a corpus's manifest, refinery's marker, a run's ``_SUCCESS``, the tables attached to a corpus)
are typed and checked as one schema (``refinery.io.records``): a record with a field of the wrong type, an entry
named twice, a path out of the folder (by name or through a symbolic link) or JSON cut short is refused in one line
naming the record and the field, exit 2, before anything is read or removed; a copy made with ``cp -L`` still reads.
The hand-made cases are issue 64's; the property-based fuzz at the end crafts records of every kind and runs every
verb that reads them, and the overwrite of a folder by a filter, against each."""
import hashlib
import json
import os
import re
import shutil
import subprocess
import tempfile
import time
from pathlib import Path

import pytest
from click.testing import CliRunner
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from conftest import SNLI_HARD

from refinery.cli.main import main
from refinery.messages import CODES, Refusal

ROWS = 400   # the small corpus's lines of SNLI's hard test set (a few are rejected: no gold label)


def cli(*args) -> tuple[int, str, str]:
    """A verb run in this process as a user runs it: (exit code, stdout, stderr)."""
    result = CliRunner().invoke(main, [str(a) for a in args])
    return result.exit_code, result.stdout, result.stderr


def refused(code: int, err: str, *named: str, kind: str = "bad-input") -> None:
    """The verb ended with exit 2 and one line on stderr, no traceback, naming each of ``named``, a refusal of
    ``kind`` (its code, ``refinery.messages.CODES``: a record refinery did not write as it is, by default)."""
    assert code == 2 and err.count("\n") == 1 and "Traceback" not in err, (code, err)
    assert err.rstrip().endswith(f" [{kind}]"), (kind, err)
    for text in named:
        assert text in err, (text, err)


@pytest.fixture(scope="module")
def base(tmp_path_factory) -> Path:
    """A small corpus (``corpus``), a filter's run folder of it (``zf``: kept/, rejected/, report/, ``_SUCCESS``) and
    the corpus's rows, made once; each test works on copies."""
    root = tmp_path_factory.mktemp("records")
    with open(SNLI_HARD, encoding="utf-8") as fh:
        (root / "small.jsonl").write_text("".join(line for _, line in zip(range(ROWS), fh)))
    code, out, err = cli("convert", root / "small.jsonl", "--preset", "snli", "--out", root / "corpus")
    assert code == 0, err
    code, out, err = cli("zfilter", root / "corpus", "--out", root / "zf", "--k", 5)
    assert code == 0, err
    return root


def _rows(path) -> int:
    from refinery.io.corpus import Corpus

    return Corpus.open(str(path)).manifest.rows


def _copy(base: Path, where: Path, name: str) -> Path:
    shutil.copytree(base / name, where / name, symlinks=True)
    return where / name


def _rewrite(path: Path, change) -> None:
    body = json.loads(path.read_text())
    change(body)
    path.write_text(json.dumps(body))


# ---------------------------------------------------------------- issue 64's cases

def test_a_manifest_that_lists_each_shard_twice_is_refused_by_every_verb(base, tmp_path):
    """Case 4: a manifest listing its shards twice made every verb read each row twice; now no entry twice."""
    corpus = _copy(base, tmp_path, "corpus")
    _rewrite(corpus / ".refinery" / "manifest.json", lambda m: m.update(files=m["files"] * 2))
    for args in (("inspect", corpus), ("inspect", "--verify", corpus), ("audit", corpus, "--out", tmp_path / "a")):
        refused(*cli(*args)[::2], "manifest.json: 'files' entry 2 'part-00000.parquet' is named twice")
    assert not (tmp_path / "a").exists()

    stats = _copy(base, tmp_path / "s", "corpus")   # a shard's record twice, or rows that are not its shards' sum
    _rewrite(stats / ".refinery" / "manifest.json", lambda m: m.update(file_stats=m["file_stats"] * 2))
    refused(*cli("inspect", stats)[::2], "'file_stats' entry")
    _rewrite(stats / ".refinery" / "manifest.json", lambda m: m.update(file_stats=m["file_stats"][:1],
                                                                      rows=m["rows"] * 2))
    refused(*cli("inspect", stats)[::2], "manifest.json: 'rows' is", "sum to")


def test_symbolic_links_out_of_a_folder_are_refused_and_a_copy_made_with_cp_L_reads(base, tmp_path):
    """Case 5: a shard that is a link to a file elsewhere, or ``kept`` a link to another corpus, was read; a corpus
    copied with its links followed (``cp -rL``) is a corpus like any other."""
    elsewhere = _copy(base, tmp_path / "elsewhere", "corpus")
    corpus = _copy(base, tmp_path, "corpus")
    shard = corpus / "part-00000.parquet"
    shard.unlink()
    shard.symlink_to(elsewhere / "part-00000.parquet")
    for args in (("inspect", corpus), ("inspect", "--verify", corpus), ("audit", corpus, "--out", tmp_path / "a")):
        refused(*cli(*args)[::2], "'files' entry 1 'part-00000.parquet' is a symbolic link out of the folder")
    assert not (tmp_path / "a").exists()

    inner = _copy(base, tmp_path / "inner", "corpus")   # a link that stays inside the folder is the folder's own
    os.rename(inner / "part-00000.parquet", inner / ".refinery" / "shard.parquet")
    (inner / "part-00000.parquet").symlink_to(Path(".refinery") / "shard.parquet")
    assert cli("inspect", "--verify", inner)[0] == 0

    zf = _copy(base, tmp_path, "zf")
    shutil.rmtree(zf / "kept")
    (zf / "kept").symlink_to(elsewhere)
    for args in (("inspect", zf / "kept"), ("inspect", "--verify", zf / "kept"), ("inspect", zf),
                 ("audit", zf / "kept", "--out", tmp_path / "b")):
        refused(*cli(*args)[::2], "symbolic link out of", str(elsewhere))

    for linked, copied in ((corpus, tmp_path / "copied"), (zf / "kept", tmp_path / "zf-copied" / "kept")):
        copied.parent.mkdir(exist_ok=True)
        subprocess.run(["cp", "-rL", str(linked), str(copied)], check=True)
        code, out, err = cli("inspect", "--verify", copied)
        assert code == 0 and "match the sha256" in err, err
        assert f"rows      {_rows(elsewhere):,}" in out, out


@pytest.mark.parametrize("change, named", [
    (lambda m: m.update(rows="lots"), "manifest.json: 'rows' is 'lots', not a count"),
    (lambda m: m.update(labels=["entailment"]), "manifest.json: 'labels' is a JSON list, not an object of counts"),
    (lambda m: m.update(attached={"audit": {"path": "../x", "bytes": 1}}), "'attached' entry 1 '../x'"),
    (lambda m: m.update(attached={"audit": "x"}), "'attached' entry 'audit' is 'x', not a record of a file"),
    (lambda m: m["file_stats"][0].update(sha256=7), "'file_stats' entry 1: 'sha256' is 7, not a sha256"),
    (lambda m: m.update(format="another-tool/2"), "manifest.json: 'format' is 'another-tool/2'"),
], ids=["rows-text", "labels-list", "attached-outside", "attached-text", "sha-number", "format"])
def test_every_field_of_a_manifest_is_typed(base, tmp_path, change, named):
    """Case 6: ``rows: "lots"`` or an attached table named ``../x`` were accepted without a word."""
    corpus = _copy(base, tmp_path, "corpus")
    _rewrite(corpus / ".refinery" / "manifest.json", change)
    for args in (("inspect", corpus), ("audit", corpus, "--out", tmp_path / "a")):
        refused(*cli(*args)[::2], named)


def test_a_manifest_that_is_a_list_or_cut_short_ends_in_one_line(base, tmp_path):
    """Case 6: a manifest that is a JSON list made ``audit`` exit 1 (``'list' object has no attribute 'get'``)."""
    corpus = _copy(base, tmp_path, "corpus")
    manifest = corpus / ".refinery" / "manifest.json"
    text = manifest.read_text()
    for body, named in ((json.dumps([json.loads(text)]), "not a corpus manifest (a JSON list)"),
                        (text[: len(text) // 2], "manifest.json: not JSON (cut short"),
                        (text[:-1] + ', "rows": 1}', "the key 'rows' is given twice")):
        manifest.write_text(body)
        for args in (("inspect", corpus), ("audit", corpus, "--out", tmp_path / "a")):
            refused(*cli(*args)[::2], named)


def test_an_attached_table_changed_is_named_not_trusted(base, tmp_path):
    """The audit a filter keeps with its corpus is read only with the size and sha256 its manifest records."""
    from refinery.io.corpus import Corpus

    kept = _copy(base, tmp_path, "zf") / "kept"
    table = next(kept.glob(".refinery/*.parquet"))
    table.write_bytes(table.read_bytes()[:-1] + b"\0")   # the same size, another checksum
    with pytest.raises(Refusal, match=r"\.parquet: its sha256 differs from the one .*manifest\.json records") as e:
        Corpus.open(str(kept)).attached("audit")
    assert e.value.code == "bad-input"
    refused(*cli("inspect", "--verify", kept)[::2], table.name)
    table.write_bytes(b"cut")
    refused(*cli("inspect", kept)[::2], f"{table.name}: 3 bytes where")


@pytest.mark.parametrize("change, named", [
    (lambda s: s.update(parts=["../decoy"]), "_SUCCESS: 'parts' entry 1 '../decoy' is not a file inside the folder"),
    (lambda s: s.update(parts=["kept", "kept"]), "_SUCCESS: 'parts' entry 2 'kept' is named twice"),
    (lambda s: s.update(parts=["kept/x"]), "_SUCCESS: 'parts' entry 1 'kept/x' is not a folder of the run's own"),
    (lambda s: s.update(run=7), "_SUCCESS: 'run' is 7, not a text"),
    (lambda s: s.update(root="/elsewhere"), "_SUCCESS: 'root' entry 1 '/elsewhere'"),
], ids=["parent", "twice", "nested", "run-number", "root-absolute"])
def test_a_run_record_is_typed_for_every_verb_that_reads_or_replaces_its_folder(base, tmp_path, change, named):
    """Case 6: ``_SUCCESS`` naming ``../decoy`` was accepted; a filter overwriting the folder refuses it too, and
    removes nothing."""
    zf = _copy(base, tmp_path, "zf")
    _rewrite(zf / "_SUCCESS", change)
    before = sorted(p.name for p in zf.iterdir())
    for args in (("inspect", zf / "kept"), ("audit", zf / "kept", "--out", tmp_path / "a"),
                 ("zfilter", base / "corpus", "--out", zf, "--k", 5)):
        refused(*cli(*args)[::2], named)
    assert sorted(p.name for p in zf.iterdir()) == before and _rows(base / "zf" / "kept") > 0


def test_a_run_record_cut_short_is_refused_but_another_tools_success_is_not_a_record(base, tmp_path):
    """Case 6: a truncated ``_SUCCESS`` in refinery's folder was taken for no record; Spark's empty ``_SUCCESS`` beside
    a folder of Parquet files refinery did not write is no record of refinery's and reads as it did."""
    zf = _copy(base, tmp_path, "zf")
    text = (zf / "_SUCCESS").read_text()
    (zf / "_SUCCESS").write_text(text[: len(text) // 2])
    for args in (("inspect", zf / "kept"), ("zfilter", base / "corpus", "--out", zf, "--k", 5)):
        refused(*cli(*args)[::2], "_SUCCESS: not JSON (cut short")

    spark = tmp_path / "spark"
    spark.mkdir()
    shutil.copy(next((base / "corpus").glob("part-*.parquet")), spark / "part-00000.parquet")
    (spark / "_SUCCESS").write_text("")
    code, out, err = cli("inspect", spark)
    assert code == 0, err


def test_a_marker_cut_short_or_typed_wrong_is_refused_before_an_overwrite_removes_anything(base, tmp_path):
    """Refinery's marker says what an overwrite may remove: cut short, of the wrong types or naming a file twice, it
    is refused before anything is removed (it was taken for another tool's file: the folder refused as foreign)."""
    zf = _copy(base, tmp_path, "zf")
    marker = zf / ".refinery.json"
    text = marker.read_text()
    for body, named in ((text[:-3], ".refinery.json: not JSON (cut short"),
                        (json.dumps({**json.loads(text), "run": ["x"]}), ".refinery.json: 'run' is a JSON list"),
                        (json.dumps({**json.loads(text), "files": json.loads(text)["files"] * 2}), "named twice")):
        marker.write_text(body)
        refused(*cli("zfilter", base / "corpus", "--out", zf, "--k", 5)[::2], named)
        assert (zf / "kept" / ".refinery.json").exists() and (zf / "_SUCCESS").exists()


def test_a_parts_marker_crafted_is_refused_when_the_folder_is_claimed_before_any_work(base, tmp_path):
    """An overwrite reads the markers of the folder's parts (kept/, report/) to tell refinery's files from the
    user's: one naming a file out of its folder is refused as the verb starts, before the run's work, and a
    marker-named pipe is no record (a read of it would never end)."""
    zf = _copy(base, tmp_path, "zf")
    _rewrite(zf / "kept" / ".refinery.json", lambda m: m["files"].append("../../decoy"))
    started = time.monotonic()
    refused(*cli("zfilter", base / "corpus", "--out", zf, "--k", 5)[::2],
            "kept/.refinery.json: 'files' entry", "'../../decoy' is not a file inside the folder")
    assert time.monotonic() - started < 2 and not list(tmp_path.glob("zf.tmp-*"))

    piped = _copy(base, tmp_path / "piped", "zf")
    (piped / ".refinery.json").unlink()
    os.mkfifo(piped / ".refinery.json")
    refused(*cli("zfilter", base / "corpus", "--out", piped, "--k", 5)[::2], "refinery did not write",
            kind="not-refinerys")


def _listing_a_million(marker: Path) -> None:
    _rewrite(marker, lambda m: m["files"].extend(f"gone/part-{i:07d}.parquet" for i in range(10**6)))


def test_an_overwrite_under_a_marker_of_a_million_files_takes_seconds(base, tmp_path):
    """Case 9: an overwrite of a folder whose marker lists 1M files (long gone) took 27 s; the target is ≤ 5 s more
    than the same overwrite of the folder as refinery left it: a verb's output replaced, and a pipeline's step that
    the pipeline no longer has removed."""
    two = {"input": {"paths": [str(base / "small.jsonl")], "preset": "snli"},
           "stages": [{"audit": {}}, {"zfilter": {}}]}
    (tmp_path / "two.yaml").write_text(json.dumps(two))
    (tmp_path / "one.yaml").write_text(json.dumps({**two, "stages": [{"audit": {}}]}))
    timings = {}
    for listed in (False, True):
        out = tmp_path / f"audit-{listed}"
        assert cli("audit", base / "corpus", "--out", out)[0] == 0
        if listed:
            _listing_a_million(out / ".refinery.json")
        started = time.monotonic()
        code, _, err = cli("audit", base / "corpus", "--out", out)
        timings["audit", listed] = time.monotonic() - started
        assert code == 0 and len(json.loads((out / ".refinery.json").read_text())["files"]) < 10, err

        out = tmp_path / f"pipeline-{listed}"
        assert cli("run", tmp_path / "two.yaml", "--out", out)[0] == 0
        if listed:
            _listing_a_million(out / "02-zfilter" / ".refinery.json")
        started = time.monotonic()
        code, _, err = cli("run", tmp_path / "one.yaml", "--out", out)
        timings["pipeline", listed] = time.monotonic() - started
        assert code == 0 and not (out / "02-zfilter").exists(), err
    for what in ("audit", "pipeline"):
        assert timings[what, True] - timings[what, False] <= 5, timings


# ---------------------------------------------------------------- the fuzz: records crafted by hypothesis

OUTSIDE = st.sampled_from(["../decoy", "/etc/passwd", "a/../../decoy", "s3://other/x", "file:///etc/passwd",
                           "C:\\decoy", "./part-00000.parquet", "", "kept/", "x\x00y"])
JSON = st.recursive(st.none() | st.booleans() | st.integers(-2, 10**12) | st.floats(allow_nan=False) |
                    st.text(max_size=8) | OUTSIDE, lambda inner: st.lists(inner, max_size=3) |
                    st.dictionaries(st.text(max_size=5), inner, max_size=3), max_leaves=6)
# each record, where it lies in the folders crafted, the fields it has and which of them hold paths
RECORDS = {
    "manifest": ("corpus/.refinery/manifest.json", ["format", "rows", "rejected", "labels", "files", "rejects",
                                                     "file_stats", "attached", "inputs", "config", "extra"],
                 ["files", "rejects"]),
    "kept manifest": ("zf/kept/.refinery/manifest.json", ["rows", "labels", "files", "file_stats", "attached"],
                      ["files", "file_stats"]),
    "run record": ("zf/_SUCCESS", ["run", "parts", "root", "finished", "stage", "extra"], ["parts"]),
    "marker": ("zf/.refinery.json", ["format", "files", "run", "emptied", "hf", "extra"], ["files"]),
}


@st.composite
def crafted_records(draw):
    """(record, how, field, value): a field set to any JSON value, an entry of a list named twice or one out of the
    folder added, the JSON cut short, the whole record another JSON value, or a file it names made a link out."""
    record = draw(st.sampled_from(sorted(RECORDS)))
    _, fields, paths = RECORDS[record]
    how = draw(st.sampled_from(["set", "twice", "outside", "cut", "whole", "link"]))
    field = draw(st.sampled_from(paths if how in ("twice", "outside") else fields))
    value = draw({"set": JSON, "outside": OUTSIDE, "cut": st.floats(0, 0.99), "whole": JSON,
                  "twice": st.integers(0, 5), "link": st.just(None)}[how])
    return record, how, field, value


def _craft(folder: Path, record: str, how: str, field: str, value) -> bool:
    """Craft the record in ``folder`` as ``crafted_records`` drew it: whether it was changed (a list named twice
    only where it holds an entry)."""
    path = folder / RECORDS[record][0]
    body = json.loads(path.read_text())
    if how == "set":
        body[field] = value
    elif how == "twice":
        if not body.get(field):
            return False
        body[field].insert(value % (len(body[field]) + 1), body[field][value % len(body[field])])
    elif how == "outside":
        listed = body.setdefault(field, [])
        listed.append({"path": value, "rows": 0} if field == "file_stats" else value)
    elif how == "whole":
        body = value
    elif how == "link":   # the first file it names (or the record itself) a link to the decoy corpus's
        target = folder / {"manifest": "corpus/part-00000.parquet", "kept manifest": "zf/kept/part-00000.parquet",
                           "run record": "zf/kept", "marker": "zf/_SUCCESS"}[record]
        target = target if target.exists() else path
        if target.is_dir():
            shutil.rmtree(target)
        else:
            target.unlink()
        decoy = folder.parent / "decoy" / "corpus"
        target.symlink_to(decoy if target.name == "kept" else decoy / "part-00000.parquet")
        return True
    text = json.dumps(body)
    path.write_text(text[: int(len(text) * value)] if how == "cut" else text)
    return True


def _refused_for_certain(record: str, how: str, verb: str) -> bool:
    """Whether a record crafted so breaks the schema for ``verb`` whatever was drawn: a reading verb reads the
    corpus's manifest, and ``_SUCCESS`` above ``kept``; a filter's overwrite reads the folder's marker first."""
    if verb == "zfilter":
        return record == "marker" and how in ("twice", "outside", "cut")
    return (record != "marker" and how in ("twice", "outside", "cut", "link")) or (record, how) == ("marker", "link")


def _fingerprint(folder: Path) -> dict:
    return {str(p.relative_to(folder)): hashlib.sha256(p.read_bytes()).hexdigest()
            for p in sorted(folder.rglob("*")) if p.is_file()}


@pytest.fixture(scope="module")
def decoy(base, tmp_path_factory) -> Path:
    """Beside every crafted folder: a decoy file and a decoy corpus (a copy of the real one: read through a link, it
    would read), which no verb may read into a result, alter or remove."""
    root = tmp_path_factory.mktemp("fuzz")
    (root / "decoy").mkdir()
    shutil.copytree(base / "corpus", root / "decoy" / "corpus")
    (root / "decoy" / "notes.txt").write_text("the user's")
    (root / "decoy" / "part-00000.parquet").write_text("not parquet")
    return root


@settings(max_examples=40, deadline=None, database=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])
@given(crafted=crafted_records())
def test_fuzz_crafted_records_are_read_whole_or_refused_in_one_line(base, decoy, crafted):
    """Every verb that reads a folder with a crafted record (inspect, inspect --verify, audit) and a filter that
    overwrites it either reads it as refinery wrote it (the corpus's rows, no more) or ends with exit 2 in one line,
    no traceback; none reads, alters or removes the decoy beside it."""
    record, how, field, value = crafted
    decoys = _fingerprint(decoy / "decoy")
    work = Path(tempfile.mkdtemp(dir=decoy))
    try:
        for name in ("corpus", "zf"):
            _copy(base, work, name)
        changed = _craft(work, record, how, field, value)
        target = work / ("corpus" if record == "manifest" else "zf/kept")
        rows = f"{_rows(base / ('corpus' if record == 'manifest' else 'zf/kept')):,}"
        for args in (("inspect", target), ("inspect", "--verify", target),
                     ("audit", target, "--out", work / "audit"),
                     ("zfilter", base / "corpus", "--out", work / "zf", "--k", 5)):
            code, out, err = cli(*args)
            assert code in (0, 2) and "Traceback" not in err + out, (crafted, args, code, err)
            if code == 2:   # one line, ending with the kind of refusal it is
                assert err.count("\n") == 1, (crafted, args, err)
                assert re.search(r" \[([a-z-]+)\]$", err.rstrip())[1] in CODES, (crafted, args, err)
            elif args[0] == "inspect":
                assert f"rows      {rows}\n" in out, (crafted, args, out)
            if changed and _refused_for_certain(record, how, args[0]):   # a record not as refinery wrote it
                assert code == 2 and err.rstrip().endswith(" [bad-input]"), (crafted, args, out, err)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    assert _fingerprint(decoy / "decoy") == decoys, crafted
