"""Exact counting of a corpus larger than memory allows: ``refinery audit`` with its default memory
budget (half of the machine's memory) on N synthetic rows (default 100M), as one process: time, peak
RSS and the spill runs it wrote. Its baseline in the same run: the same command on a tenth of the
rows twice, in memory and under a budget small enough to spill (the cost of spilling).

    .venv/bin/python benchmarks/memory.py [--rows 100000000] [--keep DIR]
"""
from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time

from machine import machine_line   # benchmarks/machine.py

REFINERY = os.path.join(os.path.dirname(sys.executable), "refinery")


def run(args: list[str]) -> tuple[float, float]:
    """(seconds, peak RSS in GB) of one child process: its own rusage from ``wait4`` (``RUSAGE_CHILDREN``
    would give the largest of every child so far)."""
    start = time.perf_counter()
    child = subprocess.Popen(args, stdout=subprocess.DEVNULL)
    _, status, usage = os.wait4(child.pid, 0)
    seconds = time.perf_counter() - start
    child.returncode = os.waitstatus_to_exitcode(status)
    if child.returncode:
        raise subprocess.CalledProcessError(child.returncode, args)
    return seconds, usage.ru_maxrss / 2**20


def audit(corpus: str, out: str, *budget: str) -> dict:
    seconds, rss = run([REFINERY, "audit", corpus, "--out", out, *budget])
    with open(os.path.join(out, "summary.json")) as fh:
        summary = json.load(fh)
    return {"seconds": seconds, "rss_gb": rss, **summary}


def show(name: str, r: dict) -> None:
    print(f"  {name:34s} {r['seconds']:8.1f} s  peak RSS {r['rss_gb']:6.2f} GB  {r['rows']:,} rows, "
          f"{r['features']:,} features, {r['spilled_runs']} spill runs")


def within(peak_gb: float, budget_gb: float) -> str:
    return "within" if peak_gb <= budget_gb else "OVER"


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--rows", type=int, default=100_000_000)
    p.add_argument("--keep", help="generate the corpora here (and keep them) instead of a temporary folder")
    args = p.parse_args()
    print(machine_line())
    total = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    print(f"memory {total / 2**30:.1f} GB: default budget {total / 2**31:.1f} GB")
    with tempfile.TemporaryDirectory(prefix="refinery-memory-bench-") as tmp:
        work = args.keep or tmp
        small, big = os.path.join(work, f"synth{args.rows // 10}"), os.path.join(work, f"synth{args.rows}")
        for path, rows in ((small, args.rows // 10), (big, args.rows)):
            if not os.path.exists(os.path.join(path, "manifest.json")):
                start = time.perf_counter()
                subprocess.run([REFINERY, "synth", "--rows", str(rows), "--seed", "3", "--out", path], check=True,
                               stdout=subprocess.DEVNULL)
                print(f"generated {rows:,} rows in {time.perf_counter() - start:.0f} s")
        print(f"\nbaseline: {args.rows // 10:,} rows")
        base = audit(small, os.path.join(tmp, "a-small"))
        show("in memory (default budget)", base)
        spill = audit(small, os.path.join(tmp, "a-small-spill"), "--memory-budget", "4G")
        show("spilled (--memory-budget 4G)", spill)
        print(f"  -> cost of spilling: {spill['seconds'] / base['seconds']:.2f}x time, "
              f"{spill['rss_gb'] / base['rss_gb']:.2f}x peak RSS; {within(spill['rss_gb'], 4.0)} the 4 GB budget")
        print(f"\n{args.rows:,} rows, exact, default budget")
        r = audit(big, os.path.join(tmp, "a-big"))
        show("refinery audit", r)
        print(f"  -> {args.rows / r['seconds']:,.0f} rows/s; peak RSS {r['rss_gb']:.2f} GB of "
              f"{total / 2**30:.1f} GB; per row {r['seconds'] / args.rows * 1e6:.2f} µs against "
              f"{base['seconds'] / (args.rows // 10) * 1e6:.2f} µs at a tenth of the rows")
        print(f"  -> peak RSS {within(r['rss_gb'], total / 2**31)} the default budget of {total / 2**31:.1f} GB")


if __name__ == "__main__":
    main()
