"""Refinery never deletes or alters what it did not write: a user's folder given as --out is refused by every
verb before any work, and a refinery output a user has put files into keeps them when it is overwritten."""
import json
import os

import pytest

from conftest import SNLI_DEV, SNLI_HARD, run_cli

SNLI_HARD_ARGS = (SNLI_HARD, "--preset", "snli")
TRAIN_TEST = ("--input", f"train={SNLI_HARD}", "--input", f"test={SNLI_DEV}", "--preset", "snli")

# every verb that writes OUT, with the least work it takes on real data
VERBS = {
    "convert": ("convert", *SNLI_HARD_ARGS),
    "audit": ("audit", *SNLI_HARD_ARGS),
    "zfilter": ("zfilter", *SNLI_HARD_ARGS, "--k", "5"),
    "confidence": ("confidence", *SNLI_HARD_ARGS, "--model", "ngram", "--folds", "2"),
    "upsample": ("upsample", *SNLI_HARD_ARGS, "--iterations", "2"),
    "leakage": ("leakage", *TRAIN_TEST, "--trees", "10"),
    "weights": ("weights", *TRAIN_TEST, "--trees", "10", "--folds", "2"),
    "probe": ("probe", SNLI_HARD, "--eval", SNLI_DEV, "--preset", "snli"),
    "compare": ("compare", "--train", f"hard={SNLI_HARD}", "--eval", f"dev={SNLI_DEV}", "--preset", "snli",
                "--bootstrap", "100"),
    "synth": ("synth", "--rows", "500"),
    "generate": ("generate", *SNLI_HARD_ARGS, "--limit", "1"),
    "razor": ("razor", *SNLI_HARD_ARGS, "--score-only"),
    "ibadr": ("ibadr", *SNLI_HARD_ARGS),
}
CHEAP = ("convert", "audit", "zfilter", "upsample", "leakage", "weights", "compare", "synth")


def _user_folder(root):
    """A folder as users have them: a file, a subfolder with a file, and a symlink."""
    root.mkdir(parents=True, exist_ok=True)
    (root / "paper.tex").write_text("\\documentclass{article}\n")
    (root / "figs").mkdir()
    (root / "figs" / "plot.pdf").write_bytes(b"%PDF-1.4\n")
    os.symlink("paper.tex", root / "main.tex")
    return _snapshot(root)


def _snapshot(root):
    files = {}
    for dirpath, dirnames, filenames in os.walk(root):
        for name in filenames + [d for d in dirnames if os.path.islink(os.path.join(dirpath, d))]:
            path = os.path.join(dirpath, name)
            rel = os.path.relpath(path, root)
            files[rel] = os.readlink(path) if os.path.islink(path) else open(path, "rb").read()
    return files


@pytest.mark.parametrize("verb", sorted(VERBS))
def test_a_users_folder_is_refused_by_every_verb_before_any_work(tmp_path, verb):
    before = _user_folder(tmp_path / "myproj")
    proc = run_cli(*VERBS[verb], "--out", tmp_path / "myproj", check=False)
    assert proc.returncode == 2, proc.stderr
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and "refinery did not write" in lines[0] and "paper.tex" in lines[0], proc.stderr
    assert lines[0].endswith("[not-refinerys]"), proc.stderr
    assert _snapshot(tmp_path / "myproj") == before
    assert sorted(os.listdir(tmp_path)) == ["myproj"]            # no temporary folder beside it either


def test_a_pipeline_refuses_a_users_folder(tmp_path):
    before = _user_folder(tmp_path / "myproj")
    spec = tmp_path / "p.yaml"
    spec.write_text(json.dumps({"input": {"paths": [SNLI_HARD], "preset": "snli"}, "stages": [{"audit": {}}]}))
    proc = run_cli("run", spec, "--out", tmp_path / "myproj", check=False)
    assert proc.returncode == 2 and "refinery did not write" in proc.stderr, proc.stderr
    assert proc.stderr.rstrip().endswith("[not-refinerys]"), proc.stderr
    assert _snapshot(tmp_path / "myproj") == before


@pytest.mark.parametrize("verb", CHEAP)
def test_overwriting_a_refinery_output_keeps_what_the_user_added(tmp_path, verb):
    out = tmp_path / "out"
    run_cli(*VERBS[verb], "--out", out)
    ours = set(_snapshot(out))
    (out / "notes.md").write_text("my notes\n")                    # a user adds things to refinery's folder
    (out / "mine").mkdir()
    (out / "mine" / "keep.txt").write_text("keep\n")
    os.symlink("notes.md", out / "notes-link")
    added = {k: v for k, v in _snapshot(out).items() if k not in ours}
    run_cli(*VERBS[verb], "--out", out, "--mode", "overwrite")
    after = _snapshot(out)
    assert {k: after.get(k) for k in added} == added               # the user's files, as they were
    assert set(after) - set(added) - {".refinery.json"} <= ours | {".refinery.json"}
    assert not [p for p in os.listdir(tmp_path) if p != "out"]     # no temporary or stale folder left


def test_modes_skip_and_error_mean_the_same_in_every_verb(tmp_path):
    out = tmp_path / "a"
    run_cli("audit", *SNLI_HARD_ARGS, "--out", out, "--k", "3")
    stamp = (out / "report" / "summary.json").stat().st_mtime_ns
    skipped = run_cli("audit", *SNLI_HARD_ARGS, "--out", out, "--k", "3", "--mode", "skip")
    assert "skipped" in skipped.stdout and (out / "report" / "summary.json").stat().st_mtime_ns == stamp
    other = run_cli("audit", *SNLI_HARD_ARGS, "--out", out, "--k", "4", "--mode", "skip", check=False)
    assert other.returncode == 2 and "other inputs or options" in other.stderr
    assert other.stderr.rstrip().endswith("[output-exists]"), other.stderr
    refused = run_cli("audit", *SNLI_HARD_ARGS, "--out", out, "--mode", "error", check=False)
    assert refused.returncode == 2 and "already holds a finished result" in refused.stderr
    assert refused.stderr.rstrip().endswith("[output-exists]"), refused.stderr
    assert (out / "report" / "summary.json").stat().st_mtime_ns == stamp
    corpus = tmp_path / "c"
    run_cli("convert", *SNLI_HARD_ARGS, "--out", corpus)
    refused = run_cli("convert", *SNLI_HARD_ARGS, "--out", corpus, "--mode", "error", check=False)
    assert refused.returncode == 2 and "already holds a finished" in refused.stderr
    assert refused.stderr.rstrip().endswith("[output-exists]"), refused.stderr


def test_a_file_as_out_is_refused(tmp_path):
    target = tmp_path / "report.txt"
    target.write_text("mine\n")
    proc = run_cli("convert", *SNLI_HARD_ARGS, "--out", target, check=False)
    assert proc.returncode == 2 and "is a file" in proc.stderr
    assert proc.stderr.rstrip().endswith("[not-refinerys]"), proc.stderr
    assert target.read_text() == "mine\n"


def test_every_option_of_every_verb_has_help_and_summaries_are_whole_sentences():
    import click

    from refinery.cli.main import main

    bare = [(name, p.name) for name, cmd in main.commands.items() for p in cmd.params
            if isinstance(p, click.Option) and not p.help]
    assert bare == []
    listing = run_cli("--help").stdout
    assert "(Wu et al. 2022, Algorithm 1)" in " ".join(listing.split())
    for name, cmd in main.commands.items():
        assert cmd.get_short_help_str().endswith((".", "?", ")")), (name, cmd.get_short_help_str())


def test_a_closed_pipe_ends_quietly(tmp_path):
    import subprocess

    from conftest import REFINERY

    proc = subprocess.run(f"'{REFINERY}' audit '{SNLI_HARD}' --preset snli --out '{tmp_path / 'a'}' | head -1",
                          shell=True, capture_output=True, text=True, executable="/bin/bash")
    assert proc.stdout.startswith("rows in 3,261 = ") and proc.stderr == "", proc.stderr


@pytest.mark.parametrize("sent, code, said", [("SIGINT", 130, "interrupted: "), ("SIGTERM", 143, "terminated (SIGTERM): ")])
def test_ctrl_c_or_sigterm_ends_in_one_line_and_leaves_the_finished_output_as_it_was(tmp_path, sent, code, said):
    import signal
    import subprocess
    import time

    from conftest import REFINERY, SNLI_TEST

    out = tmp_path / "conf"
    args = ["confidence", SNLI_HARD, "--preset", "snli", "--model", "ngram", "--out", out]
    run_cli(*args, "--folds", "2")
    before = _snapshot(out)
    proc = subprocess.Popen([REFINERY, *map(str, args), SNLI_DEV, SNLI_TEST, "--folds", "5", "--solver", "lbfgs"],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    time.sleep(3)          # reading done, the five cross-fitted L-BFGS models (about 15 s) under way
    proc.send_signal(getattr(signal, sent))
    _, err = proc.communicate(timeout=60)
    assert proc.returncode == code and err.startswith(said) and len(err.splitlines()) == 1, err
    after = _snapshot(out)     # the folds the interrupted run finished are kept for a rerun to resume from
    assert {k: v for k, v in after.items() if not k.startswith("_checkpoints/")} == before
    assert not [p for p in os.listdir(tmp_path) if p != "conf"]


@pytest.mark.parametrize("sent, code", [("SIGINT", 130), ("SIGTERM", 143)])
def test_an_interrupt_while_the_command_starts_is_one_line(tmp_path, sent, code):
    """Ctrl-C in the first half second, while Python imports the command, printed the cut import's traceback."""
    import signal
    import subprocess
    import time

    from conftest import REFINERY

    proc = subprocess.Popen([REFINERY, "audit", SNLI_HARD, "--preset", "snli", "--out", tmp_path / "a"],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    time.sleep(0.25)
    proc.send_signal(getattr(signal, sent))
    _, err = proc.communicate(timeout=60)
    assert proc.returncode == code and len(err.splitlines()) == 1 and "nothing was published" in err, err


def test_a_ctrl_c_that_duckdb_answers_ends_as_an_interrupt(capsys, monkeypatch):
    """Ctrl-C while DuckDB hashes row ids surfaces as its RuntimeError('Query interrupted'): exit 130, not 1; the
    same after a SIGTERM: 143."""
    import duckdb

    from refinery import termination
    from refinery.cli.base import ended
    from refinery.io import publishing

    monkeypatch.setattr(termination, "_received", [])
    monkeypatch.setattr(publishing, "_published", {})   # this test process's earlier publishing (an S3 server gone)

    for e in (RuntimeError("Query interrupted"), duckdb.InterruptException("INTERRUPT Error: Interrupted!")):
        assert ended(e) == 130 and capsys.readouterr().err.startswith("interrupted: ")
    assert ended(RuntimeError("something else")) == 1 and capsys.readouterr().err.startswith("error: ")
    termination._received.append(15)
    assert ended(RuntimeError("Query interrupted")) == 143 and capsys.readouterr().err.startswith("terminated")


def test_sigterm_stays_refinerys_through_rays_connect(monkeypatch):
    """ray.init installs a SIGTERM handler that exits with code 15: around it refinery's comes back, and a SIGTERM
    within it is refinery's Terminated (an interrupt: the same clean-up as Ctrl-C)."""
    import signal

    from refinery import termination
    from refinery.termination import Terminated, end_on_sigterm, sigterm_kept

    monkeypatch.setattr(termination, "_received", [])

    previous = signal.getsignal(signal.SIGTERM)
    try:
        end_on_sigterm()
        ours = signal.getsignal(signal.SIGTERM)
        with sigterm_kept():
            signal.signal(signal.SIGTERM, lambda signum, frame: None)   # what ray.init does
        assert signal.getsignal(signal.SIGTERM) is ours
        with pytest.raises(Terminated), sigterm_kept():
            raise SystemExit(signal.SIGTERM)                           # ray.init's handler, run
        assert signal.getsignal(signal.SIGTERM) is ours
    finally:
        signal.signal(signal.SIGTERM, previous)


def test_a_ctrl_c_while_numba_compiles_is_delivered_once_the_kernel_is_built(monkeypatch):
    """Ctrl-C that lands inside llvmlite's ctypes callback while numba compiles a kernel (the exception would be
    printed and dropped there, the run going on; or the half-registered kernel crash its next call, SIGSEGV): the
    interrupt comes once compilation is done, and the kernel built works."""
    import signal
    import sys
    import threading

    import numba
    import numpy as np

    from refinery import termination

    monkeypatch.setattr(termination, "_received", [])
    landed = []

    def in_the_callback(frame, event, arg):   # SIGINT raised inside the callback: its handler runs there
        if event == "call" and frame.f_code.co_name == "_raw_object_cache_notify" and not landed:
            landed.append(frame.f_code.co_filename)
            signal.raise_signal(signal.SIGINT)

    @numba.njit
    def kernel(x):   # new to this process: compiled here, not loaded from a cache
        return np.cumsum(x * 3)[-1]

    previous = signal.getsignal(signal.SIGINT)
    termination.end_on_interrupt()
    sys.setprofile(in_the_callback)
    try:
        with pytest.raises(KeyboardInterrupt):
            try:
                kernel(np.arange(4))
            finally:
                sys.setprofile(None)
            threading.Event().wait(10 * termination.RETRY_SECONDS)   # the interrupt, delivered again, lands here
    finally:
        sys.setprofile(None)
        signal.signal(signal.SIGINT, previous)
    assert landed and "llvmlite" in landed[0]
    assert termination._received == [signal.SIGINT] and kernel(np.arange(4)) == 18


@pytest.mark.parametrize("finalizer", ["__del__", "weakref callback"])
def test_a_ctrl_c_inside_a_finalizer_is_delivered_again_not_dropped(finalizer, monkeypatch):
    """Ctrl-C whose handler runs inside a finalizer (a ``__del__``, a weakref callback: Python prints the exception
    raised there and drops it, and the run went on to finish with exit 0) is delivered again, where it ends the run."""
    import signal
    import sys
    import threading
    import weakref

    from refinery import termination

    monkeypatch.setattr(termination, "_received", [])
    monkeypatch.setattr(sys, "unraisablehook", sys.unraisablehook)   # put back after the test

    class Freed:
        def __del__(self):
            signal.raise_signal(signal.SIGINT)

    class Plain:
        pass

    def freed_callback():
        signal.raise_signal(signal.SIGINT)

    previous = signal.getsignal(signal.SIGINT)
    termination.end_on_interrupt()
    try:
        with pytest.raises(KeyboardInterrupt):
            if finalizer == "__del__":
                Freed()
            else:
                weakref.finalize(Plain(), freed_callback)
            threading.Event().wait(10 * termination.RETRY_SECONDS)   # the interrupt, delivered again, lands here
    finally:
        signal.signal(signal.SIGINT, previous)
    assert signal.SIGINT in termination._received


@pytest.mark.parametrize("files", [
    {"notes.txt": "mine\n", "_SUCCESS": '{"mine": true}'},           # a user's _SUCCESS
    {"notes.txt": "mine\n", "manifest.json": "{}"},                   # a user's manifest.json
    {"_SUCCESS": "", "part-00000-1a2b.snappy.parquet": "PAR1"},      # a Spark job's output folder
    {".refinery.json": '{"files": ["notes.txt"]}', "notes.txt": "x"},  # a marker not in refinery's format
], ids=["success", "manifest", "spark", "fake-marker"])
def test_only_refinerys_own_marker_makes_a_folder_refinerys(tmp_path, files):
    out = tmp_path / "theirs"
    out.mkdir()
    for name, text in files.items():
        (out / name).write_text(text)
    before = _snapshot(out)
    proc = run_cli(*VERBS["zfilter"], "--out", out, check=False)
    lines = proc.stderr.strip().splitlines()
    assert proc.returncode == 2 and len(lines) == 1 and "refinery did not write" in lines[0], proc.stderr
    assert lines[0].endswith("[not-refinerys]"), proc.stderr
    assert any(name in lines[0] for name in files)
    assert _snapshot(out) == before


def test_an_output_of_refinery_0_1_is_still_refinerys(tmp_path):
    """Its marker was ``_refinery.json`` beside the files (which datasets' parquet builder took for data): a
    rerun into it replaces the files that marker lists and keeps the user's."""
    out = tmp_path / "old"
    (out / "report").mkdir(parents=True)
    (out / "report" / "report.json").write_text("{}")
    (out / "report" / "_refinery.json").write_text(json.dumps({"written_by": "refinery 0.1.0", "run": "r",
                                                                "files": ["report.json"]}))
    (out / "_refinery.json").write_text(json.dumps({"written_by": "refinery 0.1.0", "files": ["_SUCCESS"]}))
    (out / "_SUCCESS").write_text("{}")
    (out / "notes.md").write_text("mine\n")
    run_cli(*VERBS["audit"], "--out", out)
    assert (out / "notes.md").read_text() == "mine\n" and not (out / "_refinery.json").exists()
    assert json.loads((out / "report" / "summary.json").read_text())["rows"] == 3261
    assert not (out / "report" / "_refinery.json").exists() and (out / "report" / ".refinery.json").exists()


def test_out_on_around_or_inside_the_input_is_refused_and_in_place_reruns_a_stage_on_its_output(tmp_path):
    corpus = tmp_path / "corpus"
    run_cli("convert", *SNLI_HARD_ARGS, "--out", corpus)
    before = _snapshot(corpus)
    refusals = {   # --out: what the one line says
        corpus: "is the input",
        corpus / "sub": "lies inside the input",
        tmp_path: "holds the input",
    }
    for out, says in refusals.items():
        for in_place in ((), ("--in-place",)):
            proc = run_cli("upsample", corpus, "--out", out, "--iterations", "2", *in_place, check=False)
            lines = proc.stderr.strip().splitlines()
            assert proc.returncode == 2 and len(lines) == 1, (out, proc.stderr)
            assert (says in lines[0] and lines[0].endswith("[output-overlaps-input]")) or (
                in_place and "refinery did not write" in lines[0] and lines[0].endswith("[not-refinerys]")), \
                (out, proc.stderr)
    raw = tmp_path / "raw"
    raw.mkdir()
    (raw / "dev.jsonl").write_bytes(open(SNLI_HARD, "rb").read())
    proc = run_cli("zfilter", raw / "*.jsonl", "--preset", "snli", "--out", raw, check=False)   # a glob's folder
    assert proc.returncode == 2 and "holds the input" in proc.stderr
    assert proc.stderr.rstrip().endswith("[output-overlaps-input]"), proc.stderr
    assert sorted(os.listdir(raw)) == ["dev.jsonl"]
    proc = run_cli("zfilter", raw / "dev.jsonl", "--preset", "snli", "--out", raw / "dev.jsonl", "--in-place",
                   check=False)
    assert proc.returncode == 2 and "is a file" in proc.stderr
    assert proc.stderr.rstrip().endswith("[not-refinerys]"), proc.stderr
    assert _snapshot(corpus) == before and sorted(os.listdir(tmp_path)) == ["corpus", "raw"]

    zf = tmp_path / "zf"   # --in-place: a stage run again on the corpus part of its own output, replacing it
    run_cli("zfilter", corpus, "--k", "5", "--no-settle", "--biased-set", "top-k", "--out", zf)   # SNLI-hard: no
    #                                                   significant shortcut, so the letter is what filters it
    first = json.loads((zf / "_SUCCESS").read_text())["accounting"]
    proc = run_cli("zfilter", zf / "kept", "--k", "5", "--out", zf, check=False)
    assert proc.returncode == 2 and "--in-place to rerun a stage on its own output" in proc.stderr
    assert proc.stderr.rstrip().endswith("[output-overlaps-input]"), proc.stderr
    run_cli("zfilter", zf / "kept", "--k", "5", "--no-settle", "--biased-set", "top-k", "--out", zf, "--in-place")
    again = json.loads((zf / "_SUCCESS").read_text())["accounting"]
    assert again["kept"] + again["filtered out"] == first["kept"] and again["filtered out"] > 0
    assert sorted(os.listdir(tmp_path)) == ["corpus", "raw", "zf"]   # published in place, nothing left beside


def test_a_failed_run_removes_the_folders_it_created(tmp_path):
    spec = tmp_path / "p.yaml"
    spec.write_text(json.dumps({"input": {"paths": [SNLI_HARD], "preset": "qqp"}, "stages": [{"audit": {}}]}))
    empty = tmp_path / "empty"
    empty.mkdir()
    attempts = [("zfilter", SNLI_HARD, "--preset", "qqp", "--out", tmp_path / "a" / "b" / "zf"),   # wrong preset
                ("audit", SNLI_HARD, "--map", "text_a=premise,label=nope", "--out", tmp_path / "au"),  # bad --map
                ("run", spec, "--out", tmp_path / "pipe"),
                ("upsample", SNLI_HARD, "--preset", "qqp", "--out", empty)]
    for args in attempts:
        proc = run_cli(*args, check=False)
        assert proc.returncode == 2 and "Traceback" not in proc.stderr, proc.stderr
        assert proc.stderr.rstrip().endswith("[missing-columns]"), proc.stderr   # columns the preset or --map names
    assert sorted(os.listdir(tmp_path)) == ["empty", "p.yaml"] and os.listdir(empty) == []


_SPILLS = """
import sys
from refinery.io import db
con = db.connect()
con.execute("SET memory_limit = '64MB'")
con.execute("SET threads = 1")
con.execute("CREATE TABLE t AS SELECT range AS a, md5(range::VARCHAR) AS b FROM range(2000000)")
print("spilled", flush=True)
sys.stdin.readline()
"""


def test_what_a_killed_run_left_in_the_temporary_folder_goes_with_the_next_run(tmp_path):
    """kill -9 gives a run no chance to remove its scratch (DuckDB's spill files, its databases, local copies): the
    next run removes what a dead process left, and leaves a live process's and what refinery did not make."""
    import signal
    import subprocess
    import sys

    from conftest import REFINERY

    temp = tmp_path / "tmp"
    temp.mkdir()
    mine = temp / "refinery-mine"             # the user's, named like refinery's
    mine.mkdir()
    (mine / "notes.txt").write_text("mine")
    env = {**os.environ, "TMPDIR": str(temp)}

    def spilling() -> tuple:
        proc = subprocess.Popen([sys.executable, "-c", _SPILLS], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                text=True, env=env)
        assert proc.stdout.readline() == "spilled\n"
        folder, = temp.glob(f"refinery-{proc.pid}-*")
        assert len(list(folder.glob("duckdb/duckdb_temp_*"))) >= 2   # DuckDB's spill files are there
        return proc, folder

    killed, killed_folder = spilling()
    live, live_folder = spilling()
    killed.send_signal(signal.SIGKILL)
    killed.wait()
    assert killed_folder.exists()               # nobody removed it
    done = subprocess.run([REFINERY, "upsample", *SNLI_HARD_ARGS, "--iterations", "2", "--out", tmp_path / "up"],
                          env=env, capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    assert not killed_folder.exists() and live_folder.exists() and (mine / "notes.txt").read_text() == "mine"
    live.communicate("")
    assert live.returncode == 0
    assert sorted(p.name for p in temp.iterdir()) == ["refinery-mine"]   # each run's own went at its exit


def test_a_stage_folder_reads_as_the_corpus_it_made_and_a_filters_folder_names_its_parts(tmp_path):
    """upsample, weights, generate and razor publish their corpus as OUT/corpus beside OUT/report (a data folder
    holds only data); the stage's folder still reads as that corpus, and a filter's folder names its parts."""
    import pandas as pd

    small = tmp_path / "small.jsonl"
    small.write_text("".join(open(SNLI_HARD).readlines()[:400]))
    run_cli("upsample", small, "--preset", "snli", "--iterations", "2", "--out", tmp_path / "up")
    corpus = pd.read_parquet(tmp_path / "up" / "corpus")   # pandas reads the data folder as its rows
    rows = len(corpus)
    assert (corpus["source"] == "original").sum() == 400
    assert f"rows in {rows:,} = {rows:,} counted" in run_cli("audit", tmp_path / "up", "--out", tmp_path / "a").stdout
    run_cli("zfilter", small, "--preset", "snli", "--k", "5", "--out", tmp_path / "zf")
    proc = run_cli("audit", tmp_path / "zf", "--out", tmp_path / "a3", check=False)
    assert proc.returncode == 2 and proc.stderr.strip().endswith(f"{tmp_path / 'zf' / 'kept'} or "
                                                                 f"{tmp_path / 'zf' / 'rejected'} [bad-input]"), proc.stderr


def test_another_stage_or_pipeline_in_the_same_out_leaves_nothing_of_the_earlier_one(tmp_path):
    """An audit into a zfilter's folder left its kept/ and rejected/ there (read on, later, as this run's); a pipeline
    of fewer steps left the earlier one's last step, finished. Refinery's files of the earlier run go; the user's
    file inside them stays."""
    out = tmp_path / "o"
    run_cli("zfilter", SNLI_HARD, "--preset", "snli", "--out", out)
    (out / "kept" / "notes.txt").write_text("mine")
    run_cli("audit", SNLI_HARD, "--preset", "snli", "--out", out)
    assert sorted(p.name for p in out.iterdir()) == [".refinery.json", "_SUCCESS", "kept", "rejects", "report"]
    assert sorted(p.name for p in (out / "kept").iterdir()) == [".refinery.json", "notes.txt"]   # marker: itself only
    assert json.loads((out / "kept" / ".refinery.json").read_text())["files"] == [".refinery.json"]
    assert not (out / "rejected").exists()
    assert json.loads((out / "_SUCCESS").read_text())["parts"] == ["rejects", "report"]
    run_cli("zfilter", SNLI_HARD, "--preset", "snli", "--out", out)   # kept/ holds the user's file: writable still
    assert (out / "kept" / "notes.txt").read_text() == "mine" and (out / "kept" / "part-00000.parquet").exists()
    assert json.loads((out / "_SUCCESS").read_text())["parts"] == ["kept", "rejected", "report"]
    probed = tmp_path / "probed"   # a verb that writes into --out itself: its files go too
    run_cli("probe", SNLI_HARD, "--preset", "snli", "--out", probed)
    (probed / "notes.txt").write_text("mine")
    run_cli("zfilter", SNLI_HARD, "--preset", "snli", "--out", probed)
    assert sorted(p.name for p in probed.iterdir()) == [".refinery.json", "_SUCCESS", "kept", "notes.txt", "rejected",
                                                         "report"]
    steps = "input: {paths: [%s], preset: snli}\nstages:\n  - audit: {}\n" % SNLI_HARD
    (tmp_path / "two.yaml").write_text(steps + "  - confidence: {model: ngram, folds: 2, tau: 0.2}\n")
    (tmp_path / "one.yaml").write_text(steps)
    run_cli("run", tmp_path / "two.yaml", "--out", tmp_path / "p", "--no-audit-steps")
    proc = run_cli("run", tmp_path / "one.yaml", "--out", tmp_path / "p", "--no-audit-steps")
    assert f"removed {tmp_path / 'p' / '02-confidence'}: a step of an earlier pipeline" in proc.stdout
    assert sorted(p.name for p in (tmp_path / "p").iterdir()) == [".refinery.json", "00-input", "01-audit", "pipeline"]


def test_a_finished_output_reused_by_skip_drops_an_interrupted_reruns_checkpoints(tmp_path):
    """A rerun of the same confidence cut short left its folds' checkpoints; ``--mode skip`` then reused the finished
    output and left them there for good."""
    import pyarrow as pa

    from refinery.io.checkpoints import Checkpoints

    args = ("confidence", SNLI_HARD, "--preset", "snli", "--model", "ngram", "--folds", "2", "--tau", "0.2",
            "--out", tmp_path / "c")
    run_cli(*args)
    Checkpoints(str(tmp_path / "c"), "confidence", {"a": 1}).put("fold-0", pa.table({"p": [0.5]}))
    assert (tmp_path / "c" / "_checkpoints").exists()
    assert "skipped" in run_cli(*args, "--mode", "skip").stdout and not (tmp_path / "c" / "_checkpoints").exists()


def test_a_pipeline_folder_of_the_version_before_one_commit_per_output_is_rerun_in_place(tmp_path):
    """`make demo` into its folder of the version before: the input step's corpus had rewritten the folder's marker
    without its _SUCCESS, which the one-rename commit took for a file of the user's in its way."""
    out = tmp_path / "p"
    spec = tmp_path / "p.yaml"
    spec.write_text(json.dumps({"input": {"paths": [SNLI_HARD], "preset": "snli"}, "stages": [{"audit": {}}]}))
    run_cli("run", spec, "--out", out)
    for step in ("00-input", "01-audit"):   # the marker as the version before left it: no _SUCCESS listed
        marker = out / step / ".refinery.json"
        body = json.loads(marker.read_text())
        marker.write_text(json.dumps({**body, "files": [f for f in body["files"] if f != "_SUCCESS"]}))
    spec.write_text(json.dumps({"input": {"paths": [SNLI_HARD], "preset": "snli"}, "stages": [{"audit": {"k": 5}}]}))
    said = run_cli("run", spec, "--out", out).stdout
    assert "== 01-audit" in said and json.loads((out / "01-audit" / "_SUCCESS").read_text())["rows_in"] == 3261
