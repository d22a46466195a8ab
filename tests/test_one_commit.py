"""One commit per output: an overwrite of a stage's folder cut at any storage call (the store, or the process, gone
from that call on) leaves every reader the finished run before it or the new one, whole, never a mix of the two,
and a rerun ends as an uninterrupted run does. On the local disk and on an S3 server on loopback."""
from __future__ import annotations

import json
import re
import shutil
import subprocess

import fsspec
import pytest
from click.testing import CliRunner
from conftest import REFINERY, SNLI_DEV
from refinery.testing.storage_faults import StorageFaults
from test_remote import s3   # noqa: F401 — the S3 server on loopback

from refinery.cli.main import main
from refinery.io.corpus import Corpus

OLD, NEW = ("--alpha", "0.5"), ("--alpha", "0.9", "--k", "5")   # two zfilter runs whose kept and rejected differ


@pytest.fixture(scope="module")
def tiny(tmp_path_factory):
    """400 SNLI dev rows: a zfilter run of each setting writes kept/, rejected/ and report/ in a second."""
    path = tmp_path_factory.mktemp("tiny") / "tiny.jsonl"
    with open(SNLI_DEV) as fh:
        path.write_text("".join(line for _, line in zip(range(400), fh)))
    return path


def _zfilter(tiny, out: str, setting, faults: StorageFaults | None = None, at: int | None = None):
    if faults is not None:
        faults.watch(out if out.startswith("s3://") else str(out).rsplit("/", 1)[0], at)
    try:
        return CliRunner().invoke(main, ["zfilter", str(tiny), "--preset", "snli", "--out", out, *setting])
    finally:
        if faults is not None:
            faults.stop()


def _pair(out: str) -> tuple:
    """What a reader of the folder finds: the ids of kept/ and rejected/ and the counts _SUCCESS records."""
    fs_out = out.removeprefix("s3://")
    ids = tuple(tuple(sorted(Corpus.open(f"{out}/{part}").read()["id"].to_pylist())) for part in ("kept", "rejected"))
    fs = fsspec.filesystem("s3", skip_instance_cache=True) if out.startswith("s3://") else fsspec.filesystem("file")
    done = json.loads(fs.cat_file(f"{fs_out}/_SUCCESS"))
    return ids, (done["accounting"]["kept"], done["accounting"]["filtered out"])


AROUND_THE_COMMIT = 12   # the last storage calls of an overwrite (its commit, the exchange, the clean-up): each cut


def _overwrites_cut_at_its_calls(tiny, out: str, reference: str, snapshot, restore, after_cut=lambda at: None):
    """The overwrite OLD → NEW of ``out``, cut in turn at every other one of its storage calls and at each of the last
    ``AROUND_THE_COMMIT`` (every call: ``benchmarks/kill_matrix.py --every 1``): a reader finds the old pair or the
    new one (and ``after_cut(at)`` holds), and the rerun's pair and files are an uninterrupted run's."""
    faults = StorageFaults()
    assert _zfilter(tiny, out, OLD).exit_code == 0
    old = _pair(out)
    saved = snapshot()
    assert _zfilter(tiny, out, NEW, faults).exit_code == 0   # counted, uncut
    calls, new = faults.count, _pair(out)
    assert new != old and calls > 5, (calls, faults.calls)
    assert _pair(reference) == new
    for at in sorted({*range(1, calls + 1, 2), *range(max(1, calls - AROUND_THE_COMMIT + 1), calls + 1)}):
        restore(saved)
        assert _pair(out) == old, f"the old run restored before the cut at call {at}"
        cut = _zfilter(tiny, out, NEW, faults, at)
        found = _pair(out)
        # exit 0 only where the cut missed the run or came after its commit, in its best-effort clean-up
        assert cut.exit_code != 0 or faults.count < at or found == new, (at, faults.calls[-1], cut.output)
        assert found in (old, new), f"cut at call {at} ({faults.calls[at - 1]}): a mix of two runs"
        after_cut(at)
        assert _zfilter(tiny, out, NEW).exit_code == 0
        assert _pair(out) == new, f"the rerun after a cut at call {at}"
    return calls


USER_FILES = {"notes.txt": "mine", "kept/why.txt": "beside refinery's shards", "drafts/a/b.txt": "deep"}


def test_a_local_overwrite_cut_at_its_storage_calls_leaves_the_old_run_or_the_new(tiny, tmp_path):
    """... and the files the user keeps in the folder (at its top, inside a part, in a folder of their own) are in
    it, as they were, whichever call the cut falls on: before the swap, between it and the clean-up, after."""
    out, reference = tmp_path / "runs" / "zf", tmp_path / "reference"
    assert _zfilter(tiny, str(reference), NEW).exit_code == 0

    def snapshot():
        for name, text in USER_FILES.items():
            (out / name).parent.mkdir(parents=True, exist_ok=True)
            (out / name).write_text(text)
        shutil.copytree(out, tmp_path / "saved", symlinks=True)
        return tmp_path / "saved"

    def restore(saved):
        shutil.rmtree(tmp_path / "runs")
        shutil.copytree(saved, out, symlinks=True)

    def users_files_in_place(at):
        for name, text in USER_FILES.items():
            assert (out / name).read_text() == text, f"cut at call {at}: the user's {name}"

    _overwrites_cut_at_its_calls(tiny, str(out), str(reference), snapshot, restore, users_files_in_place)
    names = sorted(p.name for p in out.parent.iterdir())
    assert names == ["zf"], names                 # no temporary folder left beside it
    assert sorted(p.name for p in out.iterdir()) == sorted([*(p.name for p in reference.iterdir()), "drafts",
                                                            "notes.txt"])


def test_an_s3_overwrite_cut_at_its_storage_calls_leaves_the_old_run_or_the_new(tiny, s3, tmp_path):  # noqa: F811
    out, reference = "s3://bucket/zf", tmp_path / "reference"
    assert _zfilter(tiny, str(reference), NEW).exit_code == 0
    folder = s3.root / "bucket" / "zf"
    store = fsspec.filesystem("s3", skip_instance_cache=True)

    def copy(source: str, target: str):   # object by object: a recursive copy into a folder rclone still lists
        for key in store.find(source):      # (emptied, kept on its disk) lands in target/<source name>/, silently
            store.copy(key, target + key.removeprefix(source))

    def snapshot():   # through the server: rclone does not see a folder changed on its disk
        copy("bucket/zf", "bucket/saved")
        return "bucket/saved"

    def restore(saved):
        store.rm("bucket/zf", recursive=True)
        copy(saved, "bucket/zf")

    _overwrites_cut_at_its_calls(tiny, out, str(reference), snapshot, restore)
    runs = {key.split("/")[3] for key in store.find("bucket/zf/_runs")}   # objects, as a client sees them
    assert runs == {json.loads((folder / "_SUCCESS").read_text())["run"]}, runs   # cut runs' files are removed
    assert sorted(p.name for p in folder.iterdir()) == [".refinery.json", "_SUCCESS", "_runs"]


def _written(folder) -> int:
    """The files under the folder's ``zf.tmp-*`` (the run's, before its commit) as they are listed now."""
    try:
        return sum(1 for p in folder.glob("zf.tmp-*/**/*") if p.is_file())
    except FileNotFoundError:   # a folder renamed while it was listed
        return 0


@pytest.mark.parametrize("files", [3, 6, 10])
def test_a_sigkill_during_a_local_overwrite_leaves_the_old_run_or_the_new(tiny, tmp_path, files):
    """SIGKILL (no fault the process sees) once the overwrite wrote ``files`` files where it writes before its commit."""
    out, reference = tmp_path / "zf", tmp_path / "reference"
    assert _zfilter(tiny, str(reference), NEW).exit_code == 0 and _zfilter(tiny, str(out), OLD).exit_code == 0
    old, new = _pair(str(out)), _pair(str(reference))
    proc = subprocess.Popen([REFINERY, "zfilter", str(tiny), "--preset", "snli", "--out", str(out), *NEW],
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    while proc.poll() is None and _written(tmp_path) < files:
        pass
    proc.kill()
    proc.wait()
    assert _pair(str(out)) in (old, new)
    assert _zfilter(tiny, str(out), NEW).exit_code == 0 and _pair(str(out)) == new
    assert not [p.name for p in tmp_path.iterdir() if ".tmp-" in p.name]


def test_compose_overwrites_its_own_output_keeping_the_users_files(tmp_path):
    """``compose`` run twice with the same command into one folder: the second replaces the first (its stages/ is
    refinery's, marked), the user's files in the folder and in stages/ stay, and no temporary folder is left."""
    from conftest import SNLI_TEST

    out = tmp_path / "co"
    args = ["compose", SNLI_TEST, "--preset", "snli", "--original", SNLI_DEV, "--out", str(out)]
    assert CliRunner().invoke(main, args).exit_code == 0
    (out / "notes.txt").write_text("mine")
    (out / "stages" / "mine").mkdir()
    (out / "stages" / "mine" / "f.txt").write_text("deep")
    again = CliRunner().invoke(main, args)
    assert again.exit_code == 0, again.output
    assert (out / "notes.txt").read_text() == "mine" and (out / "stages" / "mine" / "f.txt").read_text() == "deep"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["co"]
    assert {p.name for p in (out / "stages").iterdir()} == {"mine", "z_original", "z_generated", ".refinery.json"}
