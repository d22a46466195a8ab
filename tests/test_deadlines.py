"""One deadline a store call, and a store's failures in one line (issue 64, cases 7 and 8): a silent S3 endpoint ends
every kind of verb within --io-timeout + a few seconds, exit 2, one line naming the URL and the operation; a store
that dies while a stage reads its shards for DuckDB ends the same, not as refinery's fault (exit 1) nor in a hang;
Ctrl-C ends as an interrupt (130) whatever the store does meanwhile."""
import http.client
import http.server
import os
import re
import signal
import socket
import subprocess
import threading
import time

import pytest
import yaml
from conftest import REFINERY, REPO, SNLI_DEV, SNLI_HARD, free_port, run_cli
from test_remote import s3  # noqa: F401 — the real S3 server (rclone) on loopback

from refinery.cli.base import ended
from refinery.io import queries
from refinery.io.corpus import Corpus
from refinery.io.corpus_writer import convert
from refinery.io.location import get_fs, on_store
from refinery.io.schema import PRESETS

IO_TIMEOUT = 2
SLACK_S = 5          # the process's start, its imports and its one line, beyond the I/O timeout
CORPUS = "s3://bucket/corpus"


@pytest.fixture
def silent_store():
    """An S3 endpoint on 127.0.0.1 that accepts connections and never answers: (its listening socket, the
    environment that points refinery at it)."""
    port = free_port()
    listener = socket.socket()
    listener.bind(("127.0.0.1", port))
    listener.listen(64)
    env = {"AWS_ACCESS_KEY_ID": "k", "AWS_SECRET_ACCESS_KEY": "s", "AWS_DEFAULT_REGION": "us-east-1",
           "AWS_ENDPOINT_URL": f"http://127.0.0.1:{port}", "REFINERY_IO_TIMEOUT": str(IO_TIMEOUT)}
    yield listener, env
    listener.close()


@pytest.fixture
def store_silent_on_writes(s3):
    """The S3 server behind a proxy on 127.0.0.1 that passes every request on but a write (PUT), which it accepts and
    never answers: the environment that points refinery at the proxy."""
    stalled = threading.Event()

    class Proxy(http.server.BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def _pass_on(self):
            body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
            if self.command == "PUT":
                stalled.wait()
                return
            upstream = http.client.HTTPConnection("127.0.0.1", s3.port, timeout=30)
            upstream.request(self.command, self.path, body, dict(self.headers))
            answer = upstream.getresponse()
            data = answer.read()
            self.send_response(answer.status)
            for key, value in answer.getheaders():   # a HEAD's length is the object's
                if key.lower() not in ("transfer-encoding", "connection") and (
                        key.lower() != "content-length" or self.command == "HEAD"):
                    self.send_header(key, value)
            if self.command != "HEAD":
                self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)
            upstream.close()

        do_GET = do_HEAD = do_PUT = do_POST = do_DELETE = _pass_on

        def log_message(self, *args):
            pass

    server = http.server.ThreadingHTTPServer(("127.0.0.1", free_port()), Proxy)
    server.daemon_threads = True
    threading.Thread(target=server.serve_forever, daemon=True).start()
    yield {**s3.env, "AWS_ENDPOINT_URL": f"http://127.0.0.1:{server.server_port}",
           "REFINERY_IO_TIMEOUT": str(IO_TIMEOUT)}
    stalled.set()
    server.shutdown()


def test_a_store_silent_on_writes_ends_a_run_within_the_io_timeout_naming_the_write(store_silent_on_writes):
    """A store that answers every read and never a write: a file a run writes (its parts, its records) is sent
    through s3fs's own ``call_s3``, which went around the deadline and the naming (one read timeout per try, then
    botocore's error in no words of refinery's)."""
    convert([SNLI_HARD], CORPUS, PRESETS["snli"])
    started = time.monotonic()
    proc = run_cli("zfilter", CORPUS, "--out", "s3://bucket/out", env=store_silent_on_writes, check=False)
    elapsed = time.monotonic() - started
    lines = proc.stderr.strip().splitlines()
    assert proc.returncode == 2 and len(lines) == 1 and "Traceback" not in proc.stderr, proc.stderr
    assert re.match(r"error: s3://bucket/out\S*: writing (\S+ )?failed: ", lines[0]), lines[0]
    assert f"no answer within {IO_TIMEOUT} s (--io-timeout)" in lines[0], lines[0]
    assert lines[0].endswith("[storage]"), lines[0]
    assert elapsed < IO_TIMEOUT + SLACK_S, f"{elapsed:.1f} s"


def _pipeline(tmp_path) -> str:
    spec = tmp_path / "pipeline.yaml"
    spec.write_text(yaml.safe_dump({"input": {"paths": [CORPUS], "preset": "snli"}, "out": str(tmp_path / "run"),
                                    "stages": [{"zfilter": {}}]}))
    return str(spec)


SILENT = {   # a verb, reading the silent store or writing to it: (its arguments, the URL its line names)
    "inspect": (lambda tmp: ["inspect", CORPUS], CORPUS),
    "audit": (lambda tmp: ["audit", CORPUS, "--preset", "snli", "--out", tmp / "audit"], CORPUS),
    "a filter": (lambda tmp: ["zfilter", CORPUS, "--preset", "snli", "--out", tmp / "zf"], CORPUS),
    "upsample": (lambda tmp: ["upsample", CORPUS, "--preset", "snli", "--out", tmp / "up"], CORPUS),
    "a pipeline": (lambda tmp: ["run", _pipeline(tmp)], CORPUS),
    "a filter writing there": (lambda tmp: ["zfilter", SNLI_HARD, "--preset", "snli", "--out", "s3://bucket/out"],
                               "s3://bucket/out"),
}


@pytest.mark.parametrize("verb", list(SILENT))
def test_a_silent_store_ends_every_verb_within_the_io_timeout(silent_store, tmp_path, verb):
    """Each call, its retries included, ends within --io-timeout (it took one timeout per try: 3 × 60 s)."""
    args, url = SILENT[verb]
    started = time.monotonic()
    proc = run_cli(*args(tmp_path), env=silent_store[1], check=False)
    elapsed = time.monotonic() - started
    lines = proc.stderr.strip().splitlines()
    assert proc.returncode == 2 and len(lines) == 1 and "Traceback" not in proc.stderr, proc.stderr
    assert lines[0].startswith(f"error: {url}") and " failed: " in lines[0], lines[0]
    assert f"no answer within {IO_TIMEOUT} s (--io-timeout)" in lines[0], lines[0]
    assert lines[0].endswith("[storage]"), lines[0]
    assert elapsed < IO_TIMEOUT + SLACK_S, f"{verb}: {elapsed:.1f} s"


def test_a_store_that_dies_before_duckdb_reads_it_ends_in_one_line_naming_it(s3, capsys):
    """A stage's DuckDB reads a store's shards from local copies, made before the query: the store's failure is one
    line naming the shard and the operation (DuckDB scanning the store through Arrow ended with exit 1 and no
    operation named, ``reading the stream registered as '__shard_1' failed: IOError: …``, or hung)."""
    convert([SNLI_HARD], "s3://bucket/hard", PRESETS["snli"], shard_rows=1000)
    files = Corpus.open("s3://bucket/hard").files
    s3.stop()
    with pytest.raises(Exception) as raised:
        queries.load_rows(queries.connect(), {"": files})
    s3.start()
    assert ended(raised.value) == 2
    lines = capsys.readouterr().err.strip().splitlines()
    assert len(lines) == 1 and re.match(r"error: s3://bucket/hard/part-\S+\.parquet: reading failed: ", lines[0]), lines
    assert lines[0].endswith("[storage]"), lines


def test_upsample_ends_in_one_line_when_its_store_dies_while_it_reads_the_shards(s3, tmp_path):
    """The command line end to end: the real server stopped once upsample has asked it for the third of the
    corpus's 20 shards (the server's own log of its requests)."""
    convert([SNLI_DEV], CORPUS, PRESETS["snli"], shard_rows=500)
    log = tmp_path / "rclone.log"
    s3.stop()
    s3.start(log)
    proc = subprocess.Popen([REFINERY, "upsample", CORPUS, "--iterations", "2", "--out", tmp_path / "up"],
                            env={**os.environ, **s3.env}, cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True)
    deadline = time.time() + 60
    while len(re.findall(r"GET OBJECT Bucket: bucket Object: corpus/part-", log.read_text())) < 3 \
            and proc.poll() is None and time.time() < deadline:
        time.sleep(0.005)
    s3.stop()
    _, err = proc.communicate(timeout=60)
    s3.start()
    lines = err.strip().splitlines()
    assert proc.returncode == 2 and len(lines) == 1 and "Traceback" not in err, err
    assert re.match(rf"error: {CORPUS}/part-\S+\.parquet: reading failed: ", lines[0]), lines[0]
    assert lines[0].endswith("[storage]"), lines[0]


def test_ctrl_c_while_the_store_refuses_ends_as_an_interrupt(silent_store, tmp_path):
    """Ctrl-C that comes while a store call waits, the store then refusing every connection (the clean-up's
    calls fail): exit 130 in one line, not the clean-up's store error (exit 2)."""
    listener, env = silent_store
    proc = subprocess.Popen([REFINERY, "convert", SNLI_DEV, "--preset", "snli", "--out", "s3://bucket/x",
                             "--io-timeout", "30"], env={**os.environ, **env}, cwd=REPO, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)
    listener.settimeout(30)
    connection, _ = listener.accept()   # the run waits on the store's answer
    listener.close()                    # from now on the store refuses
    connection.close()
    proc.send_signal(signal.SIGINT)
    _, err = proc.communicate(timeout=60)
    lines = err.strip().splitlines()
    assert proc.returncode == 130 and len(lines) == 1 and lines[0].startswith("interrupted: "), err


def test_an_interrupt_a_clean_up_turned_into_a_store_error_ends_as_the_interrupt(s3, capsys):
    """The clean-up after Ctrl-C calls a store that refuses: the store's error, raised while the interrupt was
    handled, ended the run with exit 2 instead of 130."""
    s3.stop()
    with pytest.raises(OSError) as raised:
        try:
            raise KeyboardInterrupt
        except KeyboardInterrupt:
            with on_store("s3://bucket/out", "removing the run's files"):
                get_fs("s3://bucket/out")[0].rm("bucket/out/part-0.parquet")
    s3.start()
    assert ended(raised.value) == 130
    assert capsys.readouterr().err.startswith("interrupted: "), "the line of an interrupt"
