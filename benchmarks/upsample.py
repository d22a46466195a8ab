"""AUDAC benchmark: 1M synthetic rows, k = 10 (goal ≤ 30 s on 2 cores).

    .venv/bin/python benchmarks/upsample.py [--rows 1000000]
"""
from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

import refinery as rf  # noqa: E402
from refinery.io import synth  # noqa: E402
from machine import machine_line  # noqa: E402  (benchmarks/machine.py)


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--rows", type=int, default=1_000_000)
    args = p.parse_args()
    print(machine_line())
    with tempfile.TemporaryDirectory(prefix="refinery-bench-") as work:
        src = os.path.join(work, "synth")
        # planted shortcuts inside AUDAC's count band (0.2%–2% of rows)
        planted = {w: (lab, 0.03) for w, (lab, _) in synth.DEFAULT_PLANTED.items()}
        synth.write(synth.SynthSpec(rows=args.rows, seed=5, planted=planted), src)
        t = time.perf_counter()
        report = rf.upsample(src, out=os.path.join(work, "out"), k=10).report
        wall = time.perf_counter() - t
        print(f"AUDAC on {args.rows:,} rows, k=10: {wall:.1f}s; {report['rows_before']:,} -> "
              f"{report['rows_after']:,} rows (+{report['growth']:.1%}), {report['iterations_run']} iterations")
        print("max p̂ after: " + ", ".join(f"{t} {v:.3f}" for t, v in report["max_p_after"].items()))


if __name__ == "__main__":
    main()
