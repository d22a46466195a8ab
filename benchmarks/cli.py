"""The CLI as a user runs it: whole processes with default options, from a raw JSONL file to finished outputs.

Each command is timed as a separate process (median of --repeat runs, taken in turn), next to its baseline
over the same file in the same run:

* ``refinery audit raw.jsonl --preset snli`` against a naive Python script (json.loads, a regex tokenizer and
  a Counter of (feature, label), then z* and the top features) and against the floor: a bare Arrow read of
  the file plus Arrow's tokenizer over both text columns;
* ``refinery convert`` against ``pyarrow.json.read_json`` of the file, and against the least work its output
  needs (the read, the rows' sha1 ids and zstd Parquet, without any of its checks);
* ``refinery zfilter`` with its defaults (batch size 1,000, k = 20).

    .venv/bin/python benchmarks/cli.py [--rows 1000000] [--repeat 3] [--skip-naive]
"""
from __future__ import annotations

import argparse
import json
import math
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from collections import Counter

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
REFINERY = os.path.join(os.path.dirname(sys.executable), "refinery")


def naive_audit(path: str, k: int = 20, min_count: int = 10) -> dict:
    """The script a researcher writes first: per-line json, regex tokens, a Counter, then z* (uniform prior)."""
    from audit import naive_row_features   # benchmarks/audit.py: the same features as its naive baseline

    counts: Counter = Counter()
    labels: Counter = Counter()
    with open(path, encoding="utf-8") as fh:
        for line in fh:
            row = json.loads(line)
            label = row["gold_label"]
            labels[label] += 1
            for f in naive_row_features(row["sentence1"], row["sentence2"]):
                counts[(f, label)] += 1
    n: Counter = Counter()
    for (f, _), c in counts.items():
        n[f] += c
    p0 = 1 / len(labels)
    top = {}
    for label in labels:
        z = [((counts[(f, label)] / n[f] - p0) / math.sqrt(p0 * (1 - p0) / n[f]), f) for f in n if n[f] >= min_count]
        top[label] = [f for _, f in sorted(z, reverse=True)[:k]]
    return top


def bare_read(path: str) -> int:
    """The floor: Arrow reads the file and tokenizes both text columns."""
    import pyarrow.json as pajson

    from refinery.core.features import FeatureConfig

    table = pajson.read_json(path)
    tokenizer = FeatureConfig().tokenizer
    return sum(len(tokenizer.tokenize(table[c]).flatten()) for c in ("sentence1", "sentence2"))


def arrow_read(path: str) -> int:
    import pyarrow.json as pajson

    return pajson.read_json(path).num_rows


def convert_work(path: str) -> int:
    """The least work behind convert's output, with none of its checks: Arrow reads the file, DuckDB hashes
    the rows' ids (``sql/_row_ids.sql``, on all cores) and Arrow writes them as zstd Parquet into memory."""
    import duckdb
    import pyarrow as pa
    import pyarrow.json as pajson
    import pyarrow.parquet as pq

    from refinery.io.db import load_sql

    table = pajson.read_json(path)
    rows = pa.table({"line": pa.array(range(1, table.num_rows + 1), pa.int64()), "text_a": table["sentence1"],
                     "text_b": table["sentence2"], "label": table["gold_label"]})
    ids = duckdb.connect().sql(load_sql("_row_ids"), params=[os.path.basename(path)]).to_arrow_table()["id"]
    sink = pa.BufferOutputStream()
    pq.write_table(rows.drop_columns(["line"]).add_column(0, "id", ids), sink, compression="zstd",
                   use_dictionary=["label"], write_statistics=["label"])
    return sink.getvalue().size


def timed_process(args: list[str]) -> tuple[float, float]:
    """(wall seconds, CPU seconds: user + system) of one whole process."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    start = time.perf_counter()
    subprocess.run(args, check=True, stdout=subprocess.DEVNULL, cwd=REPO)
    wall = time.perf_counter() - start
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    return wall, (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)


def median_of(runs: list[list[str]], repeat: int) -> list[list[tuple[float, float]]]:
    """Each command ``repeat`` times, the commands taken in turn (so drift of the machine hits all alike)."""
    times = [[] for _ in runs]
    for _ in range(repeat):
        for i, args in enumerate(runs):
            times[i].append(timed_process(args))
    return times


def show(name: str, times: list[tuple[float, float]]) -> tuple[float, float]:
    """Prints and returns the median wall and CPU seconds."""
    wall, cpu = statistics.median(t[0] for t in times), statistics.median(t[1] for t in times)
    print(f"  {name:48s} {wall:8.2f} s  {cpu:6.2f} CPU-s   (runs: {', '.join(f'{t[0]:.2f}' for t in times)})")
    return wall, cpu


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--rows", type=int, default=1_000_000)
    p.add_argument("--repeat", type=int, default=3)
    p.add_argument("--skip-naive", action="store_true", help="the naive script takes about 2 minutes per 1M rows")
    p.add_argument("--child", nargs=2, metavar=("WHAT", "PATH"))
    args = p.parse_args()
    if args.child:
        what, path = args.child
        {"naive": naive_audit, "bare": bare_read, "arrow": arrow_read, "work": convert_work}[what](path)
        return
    py = [sys.executable, os.path.abspath(__file__), "--child"]
    os.environ.setdefault("OPENBLAS_THREAD_TIMEOUT", "4")   # every child alike: what the refinery CLI sets
    from machine import cpu_name   # benchmarks/machine.py

    print(f"{cpu_name()}, {os.cpu_count()} cores; {args.rows:,} synthetic pairs as raw JSONL; "
          f"median of {args.repeat} whole-process runs each")
    with tempfile.TemporaryDirectory(prefix="refinery-cli-bench-") as work:
        raw = os.path.join(work, "raw.jsonl")
        subprocess.run([REFINERY, "synth", "--rows", str(args.rows), "--seed", "1", "--out", os.path.join(work, "syn")],
                       check=True, stdout=subprocess.DEVNULL)
        from refinery.io.corpus import Corpus

        with open(raw, "w", encoding="utf-8") as fh:
            for table in Corpus.open(os.path.join(work, "syn")).iter_tables(["text_a", "text_b", "label"]):
                for a, b, label in zip(*(table[c].to_pylist() for c in ("text_a", "text_b", "label"))):
                    fh.write(json.dumps({"sentence1": a, "sentence2": b, "gold_label": label}) + "\n")
        print(f"  raw file: {os.path.getsize(raw) / 1e6:,.0f} MB\n")

        def out(name):
            return os.path.join(work, name)

        print("audit (refinery audit RAW --preset snli --out DIR)")
        times = median_of([[REFINERY, "audit", raw, "--preset", "snli", "--out", out("audit")], py + ["bare", raw]],
                          args.repeat)
        t_audit, _ = show("refinery audit", times[0])
        t_bare, _ = show("floor: Arrow read + tokenize", times[1])
        print(f"  -> audit / floor = {t_audit / t_bare:.2f}x (goal <= 3x)")
        if not args.skip_naive:   # one run: it takes minutes
            t_naive, _ = show("naive Python script (json + Counter)", median_of([py + ["naive", raw]], 1)[0])
            print(f"  -> speed-up over the naive script = {t_naive / t_audit:.1f}x (goal >= 20x: "
                  f"{t_naive / 20:.2f} s, {t_naive / 20 / t_bare:.2f}x the floor)")

        print("\nconvert (refinery convert RAW --preset snli --out DIR)")
        times = median_of([[REFINERY, "convert", raw, "--preset", "snli", "--out", out("corpus")],
                           py + ["arrow", raw], py + ["work", raw]], args.repeat)
        (t_convert, c_convert), (t_arrow, _) = show("refinery convert", times[0]), show("pyarrow.json.read_json",
                                                                                       times[1])
        _, c_work = show("its least work: read, sha1 ids, zstd Parquet", times[2])
        cores = os.cpu_count() or 1
        print(f"  -> convert / Arrow read = {t_convert / t_arrow:.2f}x (goal <= 2x); convert uses "
              f"{c_convert / c_work:.2f}x the CPU of its least work, which on {cores} cores takes at least "
              f"{c_work / cores:.2f} s = {c_work / cores / t_arrow:.2f}x the Arrow read")

        print("\nzfilter (refinery zfilter RAW --preset snli --out DIR: batch 1,000, k = 20)")
        times = median_of([[REFINERY, "zfilter", raw, "--preset", "snli", "--out", out("zf")]], args.repeat)
        show("refinery zfilter", times[0])
        kept = Corpus.open(os.path.join(out("zf"), "kept")).manifest.rows
        print(f"  kept {kept:,} of {args.rows:,} rows (goal: <= 60 s)")


if __name__ == "__main__":
    main()
