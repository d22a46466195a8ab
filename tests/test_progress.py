"""Progress bars: drawn on a terminal with rows and a rate, never in a pipe or under --quiet, and the same
counts kept for the pipeline's report."""
import fcntl
import json
import os
import pty
import re
import struct
import subprocess
import termios
import time

import pytest

from conftest import REFINERY, SNLI_DEV, run_cli
from test_ibadr import tiny_generator  # noqa: F401 (the fixture)

from refinery.io.corpus import Corpus


def on_a_terminal(*args, env=None) -> str:
    """What ``refinery ARGS`` shows on a 120-column pseudo-terminal (stdout and stderr together)."""
    master, terminal = pty.openpty()
    fcntl.ioctl(terminal, termios.TIOCSWINSZ, struct.pack("HHHH", 40, 120, 0, 0))
    proc = subprocess.Popen([REFINERY, *map(str, args)], stdin=terminal, stdout=terminal, stderr=terminal,
                            env={**os.environ, **(env or {})})
    os.close(terminal)
    shown = b""
    while True:
        try:
            data = os.read(master, 1 << 16)
        except OSError:   # the terminal closed with the process
            break
        if not data:
            break
        shown += data
    assert proc.wait() == 0, shown.decode(errors="replace")
    return shown.decode(errors="replace")


def test_bars_show_rows_and_rate_on_a_terminal_only(tmp_path):
    args = ["zfilter", SNLI_DEV, "--preset", "snli", "--mode", "overwrite", "--out", tmp_path / "z"]
    shown = on_a_terminal(*args)
    assert "zfilter: 9842 rows" in shown and "rows/s" in shown, shown[-800:]
    for quiet in (on_a_terminal("--quiet", *args), on_a_terminal(*args, env={"REFINERY_QUIET": "1"})):
        assert "rows/s" not in quiet and "rows in 9,842" in quiet
    piped = run_cli(*args)
    assert "\r" not in piped.stderr and "rows/s" not in piped.stderr


def test_pipeline_keeps_each_steps_phases_in_its_marker_and_report(tmp_path):
    pipeline = tmp_path / "p.yaml"
    pipeline.write_text(f"input: {{paths: [{SNLI_DEV}], preset: snli}}\nout: {tmp_path / 'out'}\n"
                        "stages:\n  - zfilter: {}\n  - confidence: {model: ngram, folds: 3, tau: 0.2}\n"
                        "report: {audit_steps: false}\n")
    run_cli("run", pipeline)
    marker = json.loads((tmp_path / "out" / "01-zfilter" / "_SUCCESS").read_text())
    assert [(p["what"], p["count"], p["unit"]) for p in marker["phases"]] == [("zfilter", 9842, "rows")]
    receipt = json.loads((tmp_path / "out" / "pipeline" / "receipt.json").read_text())
    confidence = next(s for s in receipt["steps"] if s["step"] == "02-confidence")
    kept = Corpus.open(str(tmp_path / "out" / "01-zfilter" / "kept")).manifest.rows
    assert [(p["what"], p["count"]) for p in confidence["phases"]] == [
        ("confidence: n-grams", kept), ("confidence: 3 fold models, 3 epochs", 3)]
    assert "Where the time went" in (tmp_path / "out" / "pipeline" / "report.html").read_text()
    rerun = run_cli("run", pipeline)                 # a reused step keeps the phases it ran with
    assert "unchanged, skipped" in rerun.stdout
    again = json.loads((tmp_path / "out" / "pipeline" / "receipt.json").read_text())
    assert next(s for s in again["steps"] if s["step"] == "01-zfilter")["phases"] == marker["phases"]


def test_a_stage_run_as_a_ray_task_relays_its_bars_and_raises_its_own_errors(ray_local):
    from refinery.pipeline.ray_task import run_as_task
    from refinery.progress import progress, recording

    def _counts(steps: int) -> int:   # defined here: Ray pickles it by value (workers cannot import tests)
        for _ in progress(range(steps), desc="counting", unit=" step"):
            time.sleep(0.2)
        return steps

    def _refuses(value: str):
        from refinery.messages import Refusal

        raise Refusal(f"column {value!r} is not in the input", code="missing-columns")

    with recording() as phases:
        value, task_peak = run_as_task(_counts, (6,), desc="counting")
    assert value == 6 and task_peak > 2**20
    assert [(p["what"], p["count"], p["unit"]) for p in phases] == [("counting", 6, "step")]
    assert phases[0]["seconds"] >= 1.0                        # the task's own time, not the mirror's
    with pytest.raises(ValueError) as refused:                # the stage's error itself, not Ray's wrapper
        run_as_task(_refuses, ("lable",), desc="refusing")
    assert str(refused.value) == "column 'lable' is not in the input" and refused.value.code == "missing-columns"


def interrupted_when(args, finished: str) -> tuple[int, str]:
    """Run ``refinery ARGS`` in a pipe, press Ctrl-C (SIGINT) once a file matches the glob ``finished``:
    its exit code and what it said on stderr."""
    import glob
    import signal

    proc = subprocess.Popen([REFINERY, *map(str, args)], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    while not glob.glob(str(finished)):
        assert proc.poll() is None, f"the run ended before {finished} appeared: {proc.communicate()}"
        time.sleep(0.01)
    proc.send_signal(signal.SIGINT)
    return proc.wait(60), proc.stderr.read()


@pytest.fixture(scope="module")
def small_test_set(tmp_path_factory):
    """The first 200 pairs of SNLI's test set."""
    from conftest import SNLI_TEST

    path = tmp_path_factory.mktemp("small") / "test.jsonl"
    path.write_text("".join(open(SNLI_TEST).readlines()[:200]))
    return path


def test_an_interrupt_between_two_parts_publishes_neither_and_keeps_the_finished_pieces(tiny_generator, small_test_set,
                                                                                         tmp_path):
    """RAZOR interrupted in its rewrite rounds, once its scores/ are written: the run is one commit, so nothing of it is
    published (scores/ stood alone in the folder, beside no corpus/ and no _SUCCESS), and the finished pieces stay
    for the rerun."""
    out = tmp_path / "rz"
    code, said = interrupted_when(["razor", small_test_set, "--preset", "snli", "--model", tiny_generator,
                                   "--top-k", 100, "--rounds", 3, "--max-new-tokens", 8, "--out", out],
                                  out / "_checkpoints" / "razor" / "key.json")   # made once scores/ is written
    assert code == 130 and said == "interrupted: nothing was published; a finished output in --out is as it was\n"
    assert sorted(p.name for p in out.iterdir()) == [".refinery.json", "_checkpoints"]


def test_generation_counts_prompts_within_a_batch_and_announces_a_resume_as_it_starts(tiny_generator, small_test_set,
                                                                                 tmp_path):
    """In a pipe transformers' 'Loading weights' bar is not drawn; on a terminal one bar counts prompts across the
    checkpointed shards (it sat at shard 0/1), within a batch too, and a resume is said before the work, not at the
    end."""
    out = tmp_path / "gen"
    args = ["generate", small_test_set, "--preset", "snli", "--limit", 4, "--target-labels", "all", "--model",
            tiny_generator, "--max-new-tokens", 4, "--batch-size", 3, "--shard-rows", 6, "--out", out]
    code, said = interrupted_when(args, out / "_checkpoints" / "generate" / "shard-00000" / "key.json")
    assert code == 130 and said == "interrupted: nothing was published; a finished output in --out is as it was\n"
    shown = on_a_terminal(*args)
    assert shown.startswith(f"generate: resuming after 1 finished shard(s) of an interrupted run (checkpoints in "
                            f"{out}/_checkpoints)"), shown[:300]
    assert re.search(r"generate: +\d+%\|[^|]*\| ([7-9]|1[01])/12 ", shown), shown   # mid-shard
    assert "resumed: 1 finished shard(s)" in shown


def test_in_a_pipe_a_long_bar_prints_a_status_line_now_and_then(monkeypatch, capsys):
    """No bar in a pipe, but a stage longer than ``STATUS_SECONDS`` says what it is doing and how far, one line
    at a time (a job's log shows life without a line per update); never under --quiet."""
    from refinery import progress as bars

    monkeypatch.setattr(bars, "STATUS_SECONDS", 0.05)
    with bars.progress(total=3_000_000, desc="zfilter", unit=" rows") as bar:   # pytest's stderr: no terminal
        for _ in range(3):
            time.sleep(0.06)
            bar.update(1_000_000)
    lines = capsys.readouterr().err.splitlines()
    assert len(lines) == 3 and all(line.startswith("zfilter: ") for line in lines), lines
    assert lines[0].startswith("zfilter: 1,000,000 of 3,000,000 rows (33%), ") and "\r" not in "".join(lines)
    monkeypatch.setenv("REFINERY_QUIET", "1")
    with bars.progress(total=2, desc="quiet", unit=" rows") as bar:
        time.sleep(0.06)
        bar.update(2)
    assert capsys.readouterr().err == ""


def test_generations_bar_moves_within_a_batch_of_prompts():
    """A batch of prompts is one call of the model: the bar moved once per batch (60 s at 0% on a CPU); it moves with
    the tokens decoded, and ends at the prompts done."""
    import pyarrow as pa

    from refinery.models.generate import Sampling
    from refinery.models.actors import generate_table

    class Recording:
        def __init__(self):
            self.updates = []

        def update(self, n=1):
            self.updates.append(n)

    bar = Recording()
    prompts = pa.table({"prompt": ["Write a long story about a dog who learns to swim."] * 4})
    out = generate_table(prompts, "transformers", {"batch_size": 4}, Sampling(max_new_tokens=12, temperature=0),
                         batch_size=4, bar=bar)
    assert out.num_rows == 4 and sum(bar.updates) == 4
    assert len(bar.updates) >= 3, bar.updates   # one batch, moved step by step
