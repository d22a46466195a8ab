import os
import signal
import socket
import subprocess
import sys
import time
from contextlib import suppress
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent
DATA = Path(os.environ.get("REFINERY_DATA", REPO.parent / "shared" / "data"))
SNLI_DEV = str(DATA / "snli" / "snli_dev.jsonl")
SNLI_TEST = str(DATA / "snli" / "snli_test.jsonl")
SNLI_HARD = str(DATA / "snli" / "snli_test_hard.jsonl")
BIN = Path(sys.executable).parent
REFINERY = str(BIN / "refinery")
RAY_ENV = {"RAY_AUTH_MODE": "disabled", "RAY_ENABLE_UV_RUN_RUNTIME_ENV": "0"}
# test modules that start Ray nodes of their own (``RayNode``): run one after another on one test worker
RAY_CLUSTER_MODULES = ("test_faults_ray", "test_pipeline", "test_remote")
# make test runs one test process per core: torch's intra-op threads, one per core in each process, contend for the
# cores (the MiniLM fine-tuning test took 222 s beside another test process, 39 s alone): one thread each
if int(os.environ.get("PYTEST_XDIST_WORKER_COUNT", "1")) > 1:
    os.environ.setdefault("OMP_NUM_THREADS", "1")


@pytest.hookimpl(tryfirst=True)
def pytest_collection_modifyitems(items):
    """Under pytest-xdist (``--dist loadgroup``, as ``make test`` runs) a module's tests stay on one worker, so
    its module fixtures are made once; the modules that start Ray nodes share one worker. First: xdist's own hook
    reads the groups to name the tests by them (a group marked after it is no group)."""
    for item in items:
        module = item.module.__name__
        item.add_marker(pytest.mark.xdist_group("ray-cluster" if module in RAY_CLUSTER_MODULES else module))


def pytest_configure(config):
    """``--dist loadgroup`` with pytest 9.2 groups no test (pytest-xdist#1386): a module's tests would run on both
    processes, its module fixtures made twice and the Ray clusters' modules side by side: refused."""
    if getattr(config.option, "dist", "no") == "loadgroup" and pytest.version_tuple[:2] >= (9, 2):
        raise pytest.UsageError("--dist loadgroup groups no test with pytest 9.2 (pytest-xdist#1386): install the "
                                "dev extra (pytest below 9.2)")


@pytest.fixture(autouse=True)
def python_terms_by_default():
    """Each test runs with messages in Python's terms, whatever a command line run in-process before it chose
    (``refinery.messages``: the CLI sets its terms for its whole process); its own patch, which a test's
    ``monkeypatch.undo()`` leaves in place."""
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("REFINERY_TERMS", "python")   # recorded as unset, so that a command line's is undone after
        patch.delenv("REFINERY_TERMS")
        yield


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def descendants(pid: int) -> dict[int, str]:
    """{pid: command line} of every process below ``pid`` (a Ray worker's line is its title: ``ray::Task``)."""
    children: dict[int, list] = {}
    listing = subprocess.run(["ps", "-ww", "-eo", "pid=,ppid=,args="], capture_output=True, text=True).stdout
    for line in listing.splitlines():
        child, parent, *args = line.split(None, 2)
        children.setdefault(int(parent), []).append((int(child), args[0] if args else ""))
    found, todo = {}, [pid]
    while todo:
        for child, args in children.get(todo.pop(), []):
            found[child] = args
            todo.append(child)
    return found


class RayNode:
    """A ``ray start --block`` node on loopback: every process of the node is below ``proc``, and
    killing the node's raylet makes ``ray start`` stop the rest of them and exit. Stopping it touches
    no other Ray on the machine (``ray stop`` would stop them all, another test worker's too)."""

    def __init__(self, log: Path, *args, cpus: int = 1, object_store: int = 300 << 20, env: dict | None = None):
        self.log = log
        ports = ["--ray-client-server-port", str(free_port())] if "--head" in args else []
        with open(log, "w") as fh:
            self.proc = subprocess.Popen(
                [str(BIN / "ray"), "start", "--block", "--node-ip-address", "127.0.0.1", "--num-cpus", str(cpus),
                 "--object-store-memory", str(object_store), "--dashboard-agent-listen-port", str(free_port()),
                 *ports, "--disable-usage-stats", *args], stdout=fh, stderr=subprocess.STDOUT,
                env={**os.environ, **RAY_ENV, **(env or {})})
        deadline = time.time() + 60
        while "Ray runtime started" not in log.read_text():
            if self.proc.poll() is not None or time.time() > deadline:
                self.stop()
                raise RuntimeError(f"ray start failed:\n{log.read_text()[-3000:]}")
            time.sleep(0.2)

    def kill_raylet(self) -> None:
        for pid, args in descendants(self.proc.pid).items():
            if args.split(" ", 1)[0].endswith("/raylet"):
                os.kill(pid, signal.SIGKILL)

    def stop(self) -> None:
        self.kill_raylet()
        try:
            self.proc.wait(30)
        except subprocess.TimeoutExpired:
            for pid in descendants(self.proc.pid):
                with suppress(ProcessLookupError):
                    os.kill(pid, signal.SIGKILL)
            self.proc.kill()
            self.proc.wait()


def fresh_audit(corpus, out, *options) -> dict:
    """``refinery audit`` of ``corpus`` with its defaults (and ``options``), as a user runs it next, in this process:
    its report.json."""
    import json

    from click.testing import CliRunner

    from refinery.cli.main import main

    result = CliRunner().invoke(main, ["audit", str(corpus), "--out", str(out), *map(str, options)])
    assert result.exit_code == 0, result.output
    return json.loads((Path(out) / "report" / "report.json").read_text())


def assert_verdict_is_two_audits(verdict: dict, before: dict, after: dict) -> None:
    """A stage's verdict (report.json's) holds the figures of two fresh audits (``fresh_audit``), its input's and
    its output's: the thresholds, each label's max z* and rows, the features over the threshold."""
    import pytest

    assert verdict["threshold_before"] == pytest.approx(before["threshold"], abs=1e-4)
    assert verdict["threshold"] == pytest.approx(after["threshold"], abs=1e-4)
    assert verdict["prior"].split(" ")[0] == before["prior"].split(" ")[0] == after["prior"].split(" ")[0]
    for label, m in verdict["max_z"].items():
        for side, audit in (("before", before), ("after", after)):
            expected = audit["max_z"].get(label)
            assert (m[side] is None) == (expected is None) and (
                m[side] is None or m[side] == pytest.approx(expected, abs=1e-3)), (label, side, m, expected)
        if verdict["label_rows"]:
            assert verdict["label_rows"][label]["after"] == pytest.approx(after["labels"][label])
    assert verdict["remaining_total"] == after["significant"]


def assert_kept_audit_is_a_fresh_one(corpus, audit_folder) -> None:
    """The audit a stage kept with ``corpus`` (``AuditRecord``, its verdict's after side) is the one ``refinery
    audit`` made of it into ``audit_folder`` (``fresh_audit``): every tested feature's counts, the threshold, the
    prior and its figures."""
    import json

    import pyarrow.parquet as pq
    import pytest

    from refinery.core import audit_record
    from refinery.core.audit_record import AuditRecord
    from refinery.io.corpus import Corpus

    table = Corpus.open(str(corpus)).attached(audit_record.KEY)
    assert table is not None, f"{corpus} keeps no audit"
    record = AuditRecord.from_table(table)
    fresh = json.loads((Path(audit_folder) / "report" / "report.json").read_text())
    figures = record.figures(fresh["config"]["k"]).to_json()
    for key in ("rows", "labels", "prior", "significant"):
        assert figures[key] == fresh[key], (key, figures[key], fresh[key])
    assert figures["threshold"] == pytest.approx(fresh["threshold"], abs=1e-9)
    assert figures["max_z"] == pytest.approx(fresh["max_z"], abs=1e-3)
    long = record.stats.to_table().select(["feature", "label", "n", "count"]).sort_by([("feature", "ascending"),
                                                                                       ("label", "ascending")])
    counted = pq.read_table(Path(audit_folder) / "report" / "stats.parquet").select(["feature", "label", "n", "count"])
    assert long.to_pylist() == counted.sort_by([("feature", "ascending"), ("label", "ascending")]).to_pylist()


class _Zygote:
    """This test process's ``tests/cli_zygote.py``: each command a process forked from one that has imported the
    command line already (``REFINERY_TEST_ZYGOTE=0``: a fresh interpreter per command)."""

    def __init__(self):
        import threading

        self.proc, self.lock = None, threading.Lock()

    def _started(self) -> subprocess.Popen:
        import json

        if self.proc is None or self.proc.poll() is not None:
            self.proc = subprocess.Popen([sys.executable, str(Path(__file__).with_name("cli_zygote.py"))],
                                         stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True, cwd=REPO)
            ready = self.proc.stdout.readline()
            assert ready and "ready" in json.loads(ready), "the command zygote did not start"
        return self.proc

    def run(self, args: list, env: dict, cwd) -> subprocess.CompletedProcess:
        import json
        import tempfile

        with self.lock, tempfile.TemporaryDirectory(prefix="refinery-cli-") as streams:
            out, err = Path(streams) / "stdout", Path(streams) / "stderr"
            proc = self._started()
            proc.stdin.write(json.dumps({"args": args, "env": env, "cwd": str(cwd), "stdout": str(out),
                                         "stderr": str(err)}) + "\n")
            proc.stdin.flush()
            answer = proc.stdout.readline()
            assert answer, "the command zygote ended"
            code = json.loads(answer)["returncode"]
            read = lambda p: p.read_text(encoding="utf-8", errors="replace") if p.exists() else ""   # noqa: E731
            return subprocess.CompletedProcess([REFINERY, *args], code, read(out), read(err))


_ZYGOTE = _Zygote() if os.environ.get("REFINERY_TEST_ZYGOTE", "1") != "0" else None


def run_cli(*args, check=True, env=None, cwd=REPO):
    """Run the installed ``refinery`` CLI as a user would (in ``cwd``, the repository's root unless given): a process
    of its own, its exit code, stdout and stderr (forked from ``_ZYGOTE``, which has imported the command line)."""
    args, env = [str(a) for a in args], {**os.environ, **(env or {})}
    if _ZYGOTE is not None:
        proc = _ZYGOTE.run(args, env, cwd)
    else:
        proc = subprocess.run([REFINERY, *args], capture_output=True, text=True, env=env, cwd=cwd)
    if check and proc.returncode != 0:
        raise AssertionError(f"refinery {' '.join(args)} failed:\n{proc.stdout}\n{proc.stderr}")
    return proc


@pytest.fixture(scope="session")
def snli_pair():
    from refinery.io.corpus import load
    from refinery.io.schema import PRESETS

    table, rejects = load([SNLI_DEV, SNLI_TEST], PRESETS["snli"])
    return table


@pytest.fixture
def ray_local():
    """A local Ray in the test process for each test that asks for it: started once for the tests in a row that
    ask (a start costs some 6 s of CPU), shut down before the first that does not (``pytest_runtest_teardown``:
    an idle Ray takes some 7% of a core, and the suite's cost is its CPU); a test that sets another memory budget
    starts it again (``ray_init``). A test that runs a stage with ``engine="ray"`` in this process asks for it."""
    from refinery.pipeline.engine import ray_init

    ray_init(num_cpus=2)
    yield


@pytest.hookimpl(wrapper=True)
def pytest_runtest_teardown(item, nextitem):
    """After a test's own teardown: the Ray this test process started, shut down unless the next test here asks
    for ``ray_local``."""
    yield
    if "ray" in sys.modules and (nextitem is None or "ray_local" not in nextitem.fixturenames):
        from refinery.pipeline.engine import ray_shutdown

        ray_shutdown()


def killed_when(args, out, finished: str, at_least: int = 1, url: str | None = None) -> list:
    """Start ``refinery ARGS --out OUT`` in its own process group, kill -9 it once ``at_least`` files under
    OUT match the glob ``finished`` (e.g. a stage's first checkpoint), and return those files' names. ``url``: the
    output as the run names it where OUT is the folder an S3 server on loopback keeps it in."""
    import signal
    import time

    proc = subprocess.Popen([REFINERY, *map(str, args), "--out", url or str(out)], stdout=subprocess.DEVNULL,
                            stderr=subprocess.DEVNULL, start_new_session=True, cwd=REPO)
    while len(list(Path(out).glob(finished))) < at_least:
        assert proc.poll() is None, f"the run ended before {finished} appeared under {out}"
        time.sleep(0.01)
    os.killpg(proc.pid, signal.SIGKILL)
    proc.wait()
    assert not (Path(out) / "_SUCCESS").exists()
    return sorted(p.name for p in Path(out).glob(finished))


@pytest.fixture(scope="session")
def snli_dev_head(tmp_path_factory):
    """The first 300 rows of SNLI dev as a JSONL file (its preset: snli): a small real corpus for the model-based
    stages' tests."""
    path = tmp_path_factory.mktemp("snli_head") / "snli_dev_head.jsonl"
    with open(SNLI_DEV, encoding="utf-8") as fh:
        path.write_text("".join(line for _, line in zip(range(300), fh)), encoding="utf-8")
    return path
