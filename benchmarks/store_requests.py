"""Requests to an object store (issue 66): each command and pipeline run S3 → S3 on an rclone S3 server on loopback,
counted in the server's own log of the requests it answered (``tests/store_log.py``: rclone logs no removal; a run
removes an earlier run's files in one request per 1,000), beside the files the command read and wrote (the bound is
their sum + 10). The suite asserts the same bounds (tests/test_store_requests.py)::

    .venv/bin/python benchmarks/store_requests.py
"""
from __future__ import annotations

import os
import subprocess
import sys
import tempfile
from pathlib import Path

import yaml

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
sys.path.insert(0, os.path.join(os.path.dirname(HERE), "tests"))
from machine import machine_line  # noqa: E402
from store_log import requests  # noqa: E402 (tests/store_log.py)
from test_remote import S3Server  # noqa: E402

REFINERY = os.path.join(os.path.dirname(sys.executable), "refinery")
DEV = os.path.join(os.path.dirname(HERE), "..", "shared", "data", "snli", "snli_dev.jsonl")


def main() -> None:
    root = Path(tempfile.mkdtemp(prefix="refinery-store-requests-"))
    server, log = S3Server(root / "s3"), root / "requests.log"
    server.start(log)
    env = {**os.environ, **server.env}

    def row(label: str, *args) -> None:
        before = log.read_text()
        proc = subprocess.run([REFINERY, *map(str, args)], env=env, capture_output=True, text=True)
        if proc.returncode:
            sys.exit(f"{' '.join(map(str, args))}: exit {proc.returncode}: {proc.stderr}")
        asked = requests(log.read_text()[len(before):], server.root)
        shown = ", ".join(f"{asked.kinds[k]}" for k in ("HEAD", "GET", "LIST", "CREATE"))
        print(f"| {label} | {asked.total} | {shown} | {asked.read} + {asked.written} | {asked.bound} |", flush=True)

    subprocess.run([REFINERY, "convert", DEV, "--preset", "snli", "--out", "s3://bucket/dev"], env=env, check=True,
                   capture_output=True)
    print(f"{machine_line()}; SNLI dev (9,842 rows, one shard) on `rclone serve s3` on loopback\n")
    print("| command | requests | of them (HEAD, GET, LIST, CREATE) | files read + written | bound (+ 10) |")
    print("|---|---|---|---|---|")
    row("`audit dev --out a`", "audit", "s3://bucket/dev", "--out", "s3://bucket/a")
    row("`zfilter dev --out z`", "zfilter", "s3://bucket/dev", "--out", "s3://bucket/z")
    row("the same, `--mode skip`", "zfilter", "s3://bucket/dev", "--out", "s3://bucket/z", "--mode", "skip")
    row("the same, `--mode overwrite`", "zfilter", "s3://bucket/dev", "--out", "s3://bucket/z")
    subprocess.run([REFINERY, "convert", DEV, "--preset", "snli", "--out", "s3://bucket/shards", "--shard-rows", "50"],
                   env=env, check=True, capture_output=True)
    row("`zfilter` of the same rows in 197 shards", "zfilter", "s3://bucket/shards", "--out", "s3://bucket/z197")
    for steps in (["zfilter"], ["zfilter", "audit", "upsample"]):
        spec = root / f"p{len(steps)}.yaml"
        spec.write_text(yaml.safe_dump({"input": {"paths": ["s3://bucket/dev"]}, "out": f"s3://bucket/p{len(steps)}",
                                        "stages": [{step: {}} for step in steps]}))
        row(f"`refinery run` ({' → '.join(steps)})", "run", spec)
        row("the same again (every step skipped)", "run", spec)
    server.stop()


if __name__ == "__main__":
    main()
