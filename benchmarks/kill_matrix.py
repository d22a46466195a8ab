"""The kill matrix at every call (issue 64): each stage's overwrite of its own output cut at each of its storage calls
(local disk; ``--store s3``: an rclone S3 server on loopback), counting what each cut left — the old run, the new
one, or (a pipeline) old and new steps, each whole — and that every rerun equalled an uninterrupted run. The suite
runs a sample of the same cuts (tests/test_kill_matrix.py); a cut that leaves a mix fails here as there::

    .venv/bin/python benchmarks/kill_matrix.py                         # every stage, every call, local disk
    .venv/bin/python benchmarks/kill_matrix.py --stages zfilter,dedup --store s3 --every 3
"""
from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
sys.path.insert(0, os.path.join(os.path.dirname(HERE), "tests"))
from kill_matrix import STAGES, kill_matrix, make_tiny_generator, slices  # noqa: E402 (tests/kill_matrix.py)
from machine import machine_line  # noqa: E402

DATA = os.path.join(os.path.dirname(HERE), "..", "shared", "data", "snli")


def _s3(root: Path):
    """An S3 server on loopback (tests/test_remote.py's), its credentials in the environment, and the snapshot and
    restore of an output through it."""
    import fsspec
    from test_remote import S3Server

    server = S3Server(root)
    server.start()
    os.environ.update(server.env)
    store = fsspec.filesystem("s3", skip_instance_cache=True)

    def copy(source: str, target: str):
        for key in store.find(source):
            store.copy(key, target + key.removeprefix(source))

    def snapshot(out: str) -> str:
        store.rm("bucket/saved", recursive=True) if store.exists("bucket/saved") else None
        copy(out.removeprefix("s3://"), "bucket/saved")
        return "bucket/saved"

    def restore(saved: str, out: str) -> None:
        store.rm(out.removeprefix("s3://"), recursive=True)
        copy(saved, out.removeprefix("s3://"))

    return server, snapshot, restore


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--stages", default=",".join(STAGES), help="Comma-separated (default: every stage).")
    parser.add_argument("--store", choices=("local", "s3"), default="local")
    parser.add_argument("--every", type=int, default=1, help="Cut at every n-th call (and at the commit's).")
    args = parser.parse_args()
    root = Path(tempfile.mkdtemp(prefix="refinery-kill-matrix-"))
    inputs = slices(str(root), os.path.join(DATA, "snli_dev.jsonl"), os.path.join(DATA, "snli_test.jsonl"),
                    make_tiny_generator(str(root / "generator")))
    server, snapshot, restore = _s3(root / "s3") if args.store == "s3" else (None, None, None)
    print(f"{machine_line()}; store: {args.store}; every {args.every} call(s)\n", flush=True)
    print("| stage | storage calls | cuts | left the old run | left the new | old and new steps | reruns equal | "
          "time |\n|---|---|---|---|---|---|---|---|", flush=True)
    failed = []
    try:
        for stage in args.stages.split(","):
            started = time.perf_counter()
            out = f"s3://bucket/{stage.replace(' ', '-')}" if server else str(root / stage.replace(" ", "-"))
            try:
                m = kill_matrix(stage, inputs, out, args.every, snapshot, restore)
            except AssertionError as e:
                failed.append(stage)
                print(f"| {stage} | | | **failed**: {str(e)[:200]} | | | | |", flush=True)
                continue
            left = Counter(m.cuts.values())
            print(f"| {stage} | {m.calls} | {len(m.cuts)} | {left['old']} | {left['new']} | "
                  f"{left['old and new steps']} | {len(m.cuts)} of {len(m.cuts)} | "
                  f"{time.perf_counter() - started:.0f} s |", flush=True)
    finally:
        if server:
            server.stop()
    sys.exit(1 if failed else 0)


if __name__ == "__main__":
    main()
