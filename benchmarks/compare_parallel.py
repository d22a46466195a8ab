"""``compare --engine ray`` against in-process: its corpus × seed models trained as Ray tasks side by side, on planted
corpora; wall time of each, the ratio, and whether the accuracies and predictions are the same.

    .venv/bin/python benchmarks/compare_parallel.py [--rows 200000] [--seeds 2]

Two training corpora (the planted corpus and another draw of it), an in-distribution test set and its anti-shortcut
set (2,000 rows each), the compare verb's defaults.
"""
from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from machine import machine_line  # noqa: E402 (benchmarks/machine.py)
from scale import run  # noqa: E402


def main() -> None:
    import pyarrow.parquet as pq

    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rows", type=int, default=200_000)
    parser.add_argument("--seeds", type=int, default=2)
    args = parser.parse_args()
    root = tempfile.mkdtemp(prefix="compare-parallel-")
    for name, rows, split, seed in (("a", args.rows, "train", 3), ("b", args.rows, "train", 4),
                                    ("test", 2000, "test", 3), ("anti", 2000, "anti-shortcut", 3)):
        run(["synth", "--rows", rows, "--signal-words", 200, "--split", split, "--seed", seed, "--out",
             f"{root}/{name}"], f"{root}/synth-{name}.log")
    compare = ["compare", "--train", f"a={root}/a", "--train", f"b={root}/b", "--eval", f"test={root}/test",
               "--eval", f"anti={root}/anti", "--seeds", args.seeds]
    local, local_peak = run([*compare, "--out", f"{root}/local"], f"{root}/local.log")
    ray, ray_peak = run([*compare, "--engine", "ray", "--out", f"{root}/ray"], f"{root}/ray.log")
    reports = [json.load(open(f"{root}/{out}/report/report.json")) for out in ("local", "ray")]
    same = reports[0]["accuracy"] == reports[1]["accuracy"] and all(
        pq.read_table(f"{root}/local/report/predictions.parquet").equals(
            pq.read_table(f"{root}/ray/report/predictions.parquet")) for _ in (0,))
    print(f"{machine_line()}\n\n| compare, 2 corpora × {args.seeds} seeds of {args.rows:,} planted rows | in-process "
          "| --engine ray | Ray ÷ in-process | results equal |\n|---|---|---|---|---|")
    print(f"| wall time (peak RSS of the driver) | {local:.1f} s ({local_peak / 1e9:.2f} GB) | {ray:.1f} s "
          f"({ray_peak / 1e9:.2f} GB) | {ray / local:.2f} | {same} |")


if __name__ == "__main__":
    main()
