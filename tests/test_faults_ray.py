"""Ray faults (#34): a killed worker's task is retried and the output equals an uninterrupted run;
past the retry budget the stage fails with one line naming it; a two-node job whose second node
dies mid-stage completes on the head or fails without marking the stage finished.

Real Ray and real processes: workers and raylets are killed with signals, and only processes
that descend from the test's own children are ever touched.
"""
import os
import signal
import socket
import subprocess
import sys
import time
from contextlib import suppress
from pathlib import Path

import pyarrow as pa
import pyarrow.compute as pc
import pytest
import yaml
from conftest import RAY_ENV, REFINERY, REPO, SNLI_DEV, RayNode, descendants, free_port, run_cli

from refinery.io.corpus import Corpus, is_corpus
from refinery.pipeline.engine import TASK_RETRIES, StageFailed, actor_map, stream_map

pytestmark = pytest.mark.ray

STAGE_TASKS = ("ray::ReadParquet", "ray::MapBatches")  # titles of the workers running a stage's Ray Data tasks


def workers_running(pid: int, *titles: str) -> list[int]:
    """Ray workers below ``pid`` running a task whose title starts with one of ``titles``."""
    return [p for p, args in descendants(pid).items() if args.startswith(titles)]


def refinery(*args, env=None) -> subprocess.Popen:
    return subprocess.Popen([REFINERY, *map(str, args)], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            env={**os.environ, **RAY_ENV, **(env or {})}, cwd=REPO)


def kill_workers(proc: subprocess.Popen, title: str, times: int) -> int:
    """SIGKILL up to ``times`` of ``proc``'s Ray workers while they run a ``title`` task; how many died."""
    killed: set[int] = set()
    while proc.poll() is None and len(killed) < times:
        for pid in workers_running(proc.pid, title):
            if pid not in killed and len(killed) < times:
                with suppress(ProcessLookupError):  # it may have finished its task and exited since
                    os.kill(pid, signal.SIGKILL)
                    killed.add(pid)
        time.sleep(0.05)
    return len(killed)


def zfilter_parts(out: Path) -> dict[str, pa.Table]:
    return {part: Corpus.open(str(out / part)).read() for part in ("kept", "rejected")}


@pytest.fixture(scope="module")
def corpus(tmp_path_factory) -> Path:
    """200,000 synthetic pairs in 10 shards: a zfilter run on Ray takes several seconds of worker tasks."""
    path = tmp_path_factory.mktemp("faults") / "synth"
    run_cli("synth", "--rows", 200_000, "--shard-rows", 20_000, "--out", path)
    return path


@pytest.fixture(scope="module")
def uninterrupted(corpus, tmp_path_factory) -> dict[str, pa.Table]:
    """zfilter's kept and rejected rows from a local run: what every Ray run must give."""
    out = tmp_path_factory.mktemp("faults") / "local"
    run_cli("zfilter", corpus, "--out", out, "--engine", "local")
    return zfilter_parts(out)


def test_zfilter_on_ray_survives_a_killed_worker(corpus, uninterrupted, tmp_path):
    """A worker killed while it maps a batch: the task is rerun and the rows equal a local run's."""
    out = tmp_path / "z"
    proc = refinery("zfilter", corpus, "--out", out, "--engine", "ray")
    killed = kill_workers(proc, "ray::MapBatches", 1)
    stdout, stderr = proc.communicate(timeout=300)
    assert killed == 1, "the run ended before a worker could be killed"
    assert proc.returncode == 0, stdout + stderr
    assert (out / "_SUCCESS").exists()
    for part, table in zfilter_parts(out).items():
        assert table.equals(uninterrupted[part]), part


def test_zfilter_fails_in_one_line_naming_the_stage_when_retries_are_spent(corpus, uninterrupted, tmp_path):
    """Every worker that picks up a batch is killed: the batch's task dies 1 + TASK_RETRIES times."""
    out = tmp_path / "z"
    proc = refinery("zfilter", corpus, "--out", out, "--engine", "ray")
    killed = kill_workers(proc, "ray::MapBatches", 100)
    stdout, stderr = proc.communicate(timeout=300)
    assert proc.returncode == 1 and killed >= TASK_RETRIES + 1, (killed, stdout, stderr)
    assert stderr.strip().splitlines()[-1].startswith(
        f"error: stage zfilter: a Ray worker or node died running its batches, past {TASK_RETRIES} retries "
        "(WorkerCrashedError: "), stderr
    assert "Traceback" not in stdout + stderr
    assert not (out / "_SUCCESS").exists() and not is_corpus(str(out / "kept"))
    proc = refinery("zfilter", corpus, "--out", out, "--engine", "ray")   # the rerun over what the failure left
    stdout, stderr = proc.communicate(timeout=300)
    assert proc.returncode == 0, stdout + stderr
    for part, table in zfilter_parts(out).items():
        assert table.equals(uninterrupted[part]), part


def test_audit_on_ray_survives_a_worker_killed_while_it_counts(corpus, tmp_path):
    """A worker killed while it counts a unit of rows (a map task of ``engine.map_reduce``, whose parts the
    reducers sum): the task is rerun and the figures equal a local audit's."""
    run_cli("audit", corpus, "--out", tmp_path / "local")
    out = tmp_path / "ray"
    proc = refinery("audit", corpus, "--out", out, "--engine", "ray")
    killed = kill_workers(proc, "ray::_flat", 1)
    stdout, stderr = proc.communicate(timeout=300)
    assert killed == 1, "the run ended before a worker could be killed"
    assert proc.returncode == 0, stdout + stderr
    for name in ("summary.json", "topk.json"):
        assert (out / "report" / name).read_text() == (tmp_path / "local" / "report" / name).read_text(), name


def test_two_node_job_whose_second_node_dies_mid_stage_never_marks_it_finished(corpus, uninterrupted, tmp_path):
    """``refinery run`` on a head and a second node (one CPU each); the second node's raylet is
    killed while a stage task runs there. The job completes on the head with the uninterrupted
    rows, or fails in one line with the stage unmarked and the input stage intact, and its rerun
    gives the uninterrupted rows."""
    port = free_port()
    head = RayNode(tmp_path / "head.log", "--head", "--port", str(port), "--include-dashboard=false")
    second = None
    try:
        second = RayNode(tmp_path / "second.log", "--address", f"127.0.0.1:{port}")
        spec = tmp_path / "pipeline.yaml"
        spec.write_text(yaml.safe_dump({"input": {"paths": [str(corpus)]}, "stages": [{"zfilter": {}}]}))
        out = tmp_path / "run"
        job = ("run", spec, "--out", out, "--engine", "ray")
        cluster = {"RAY_ADDRESS": f"127.0.0.1:{port}"}
        proc = refinery(*job, env=cluster)
        while proc.poll() is None and not workers_running(second.proc.pid, *STAGE_TASKS):
            time.sleep(0.05)
        assert proc.poll() is None, "the job ended before the second node ran a task"
        second.kill_raylet()
        assert second.proc.wait(30) != 0   # the node is gone: its ray start saw the raylet die and stopped the rest
        stdout, stderr = proc.communicate(timeout=300)
        if proc.returncode:
            assert stderr.strip().splitlines()[-1].startswith("error: stage zfilter: "), stderr
            assert "Traceback" not in stdout + stderr
            assert not (out / "01-zfilter" / "_SUCCESS").exists() and (out / "00-input" / "_SUCCESS").exists()
            proc = refinery(*job, env=cluster)
            stdout, stderr = proc.communicate(timeout=300)
        assert proc.returncode == 0, stdout + stderr
        assert (out / "01-zfilter" / "_SUCCESS").exists()
        for part, table in zfilter_parts(out / "01-zfilter").items():
            assert table.equals(uninterrupted[part]), part
    finally:
        for node in (second, head):
            if node is not None:
                node.stop()


@pytest.mark.parametrize("deaths", [1, TASK_RETRIES + 1], ids=["once", "past-the-budget"])
def test_a_task_or_actor_whose_worker_dies_is_retried_up_to_the_budget(ray_local, tmp_path, deaths):
    """A driver-side stream's task and an actor pool's actor whose process kills itself on its first
    ``deaths`` attempts (each leaves a file named by its pid): one death is retried and gives every
    row; 1 + TASK_RETRIES deaths end the stage with ``StageFailed`` naming it."""
    table = pa.table({"text": ["a", "bb", "ccc"]})

    def dying(attempts: Path):
        def add_length(batch: pa.Table) -> pa.Table:
            attempts.mkdir(exist_ok=True)
            if len(list(attempts.iterdir())) < deaths:
                (attempts / str(os.getpid())).touch()
                os.kill(os.getpid(), signal.SIGKILL)
            return batch.append_column("n", pc.utf8_length(batch["text"]))
        return add_length

    class Length:
        def __init__(self):
            self.add_length = dying(tmp_path / "actor")

        def __call__(self, batch: pa.Table) -> pa.Table:
            return self.add_length(batch)

    runs = {"task": lambda: list(stream_map(iter([table]), dying(tmp_path / "task"), engine="ray", stage="length"))[0],
            "actor": lambda: actor_map(table, Length, {}, engine="ray", batch_size=len(table), desc="length")}
    failed = (f"^stage length: a Ray worker or node died running its batches, past {TASK_RETRIES} retries "
              "\\((WorkerCrashedError|ActorDiedError): ")
    for path, run in runs.items():
        if deaths <= TASK_RETRIES:
            assert run().equals(table.append_column("n", pc.utf8_length(table["text"]))), path
        else:
            with pytest.raises(StageFailed, match=failed):
                run()
        assert len(list((tmp_path / path).iterdir())) == deaths, path


def test_a_ray_address_that_does_not_answer_fails_in_one_line_before_any_work(tmp_path):
    """RAY_ADDRESS at a closed port (Ray's own ray.init retried it for minutes): a verb, ``refinery run`` and
    jobs/run.py each exit 2 at once with one line naming the address, and write nothing; at a port that accepts
    connections but is no Ray head (silent, or another service that speaks gRPC: an S3 server or a proxy on HTTP/2
    hung Ray's connect for ten minutes), within --ray-timeout seconds; RAY_AUTH_MODE=token with no token, at once."""
    import grpc
    from concurrent import futures

    rows = tmp_path / "rows.jsonl"
    rows.write_text("".join(open(SNLI_DEV).readlines()[:50]))
    spec = tmp_path / "pipeline.yaml"
    spec.write_text(yaml.safe_dump({"input": {"paths": [str(rows)], "preset": "snli"}, "stages": [{"zfilter": {}}]}))
    closed = f"127.0.0.1:{free_port()}"
    other = grpc.server(futures.ThreadPoolExecutor(1))   # speaks gRPC, serves no Ray service
    other_address = f"127.0.0.1:{other.add_insecure_port('127.0.0.1:0')}"
    other.start()
    zfilter = [REFINERY, "--ray-timeout", "5", "zfilter", rows, "--preset", "snli", "--engine", "ray", "--out"]
    with socket.create_server(("127.0.0.1", 0)) as silent:   # accepts connections, never speaks gRPC
        commands = {
            "verb": ([REFINERY, "zfilter", rows, "--preset", "snli", "--engine", "ray", "--out", tmp_path / "z"],
                     closed),
            "run": ([REFINERY, "run", spec, "--engine", "ray", "--out", tmp_path / "r"], closed),
            "job": ([sys.executable, "jobs/run.py", spec, "--out", tmp_path / "j"], closed),
            "silent": ([REFINERY, "--ray-timeout", "2", "zfilter", rows, "--preset", "snli", "--engine", "ray",
                        "--out", tmp_path / "s"], f"127.0.0.1:{silent.getsockname()[1]}"),
            "other-service": ([*zfilter, tmp_path / "o"], other_address),
            "token-mode-without-token": ([*zfilter, tmp_path / "t"], closed)}
        said = {"silent": "error: RAY_ADDRESS=", "other-service": "error: RAY_ADDRESS=",
                "token-mode-without-token": "error: RAY_AUTH_MODE asks for token authentication, but no token is set"}
        for name, (command, address) in commands.items():
            started = time.monotonic()
            token = {"RAY_AUTH_MODE": "token", "HOME": str(tmp_path / "no-home")} if name.startswith("token") else {}
            proc = subprocess.run(list(map(str, command)), capture_output=True, text=True, timeout=60, cwd=REPO,
                                  env={**os.environ, **RAY_ENV, "RAY_ADDRESS": address, **token})
            assert proc.returncode == 2 and time.monotonic() - started < 30, (name, proc.stderr)
            assert proc.stderr.count("\n") == 1 and proc.stderr.rstrip().endswith("[cluster]"), (name, proc.stderr)
            assert proc.stderr.startswith(said.get(name, "error: the Ray cluster at ")), proc.stderr
            assert name.startswith("token") or f"RAY_ADDRESS={address}" in proc.stderr, proc.stderr
    other.stop(None)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["pipeline.yaml", "rows.jsonl"]


def test_a_head_that_answers_but_never_lets_the_driver_join_ends_within_the_deadline_and_at_ctrl_c(tmp_path):
    """A head that refuses the driver's token (a wrong RAY_AUTH_TOKEN) passes the address check, and Ray's connect then
    retried it for as long as it was left, deaf to Ctrl-C (32–35 s). The deadline is kept from outside the connect:
    one line, exit 2; Ctrl-C ends it at once."""
    import grpc
    from concurrent import futures

    class Refuses(grpc.GenericRpcHandler):   # every call refused as a token head refuses a wrong token
        def service(self, details):
            return grpc.unary_unary_rpc_method_handler(
                lambda request, context: context.abort(grpc.StatusCode.UNAUTHENTICATED, "InvalidAuthToken"))

    head = grpc.server(futures.ThreadPoolExecutor(2))
    head.add_generic_rpc_handlers((Refuses(),))
    address = f"127.0.0.1:{head.add_insecure_port('127.0.0.1:0')}"
    head.start()
    rows = tmp_path / "rows.jsonl"
    rows.write_text("".join(open(SNLI_DEV).readlines()[:50]))
    env = {**os.environ, **RAY_ENV, "RAY_ADDRESS": address, "RAY_AUTH_MODE": "token", "RAY_AUTH_TOKEN": "not-the-token"}
    command = [REFINERY, "--ray-timeout", "2", "zfilter", rows, "--preset", "snli", "--engine", "ray", "--out"]
    try:
        started = time.monotonic()
        proc = subprocess.run(list(map(str, [*command, tmp_path / "a"])), capture_output=True, text=True, timeout=120,
                              env=env)
        assert proc.returncode == 2 and time.monotonic() - started < 30, proc.stderr
        assert proc.stderr.count("\n") == 1 and "answered, but joining it took longer than" in proc.stderr, proc.stderr
        assert proc.stderr.rstrip().endswith("[cluster]"), proc.stderr
        command[2] = "60"
        proc = subprocess.Popen(list(map(str, [*command, tmp_path / "b"])), stderr=subprocess.PIPE, text=True, env=env)
        time.sleep(6)   # well into the connect
        sent = time.monotonic()
        proc.send_signal(signal.SIGINT)
        _, err = proc.communicate(timeout=60)
        assert proc.returncode == 130 and time.monotonic() - sent < 3, err
        assert err.count("\n") == 1 and err.startswith("interrupted"), err
    finally:
        head.stop(None)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["rows.jsonl"]
