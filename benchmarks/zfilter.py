"""z-filter benchmark on a planted-bias synthetic corpus, in one run:

1. Algorithm 1 on the local engine and on Ray (features on workers, Z in the driver), each in a
   child process of its own so its peak driver RSS is its own: wall time, rows/s, peak RSS, and
   whether both engines kept the same rows;
2. the incremental update of Z against the naive baseline that recounts Z from the kept rows
   before every batch (``--recount-rows``, 0 to skip).

    .venv/bin/python benchmarks/zfilter.py [--rows 1000000] [--engine local|ray|both] [--batch-size 10000]
    .venv/bin/python benchmarks/zfilter.py --engine ray --rows 10000000 --recount-rows 0
"""
from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys
import tempfile
import time

import pyarrow as pa

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from refinery.io import synth  # noqa: E402
from refinery.io.corpus import Corpus  # noqa: E402
from refinery.io.raw import rebatch  # noqa: E402
from refinery.methods.zfilter.algorithm import ZFilter, add_features, run_in_memory, with_features  # noqa: E402
from refinery.methods.zfilter.config import ZFilterConfig  # noqa: E402
from refinery.methods.zfilter.stage import ZFilterStage  # noqa: E402
from refinery.pipeline.output import StageOutput  # noqa: E402
from refinery.pipeline.stage import StageInput  # noqa: E402

from machine import machine_line  # noqa: E402  (benchmarks/machine.py)


def recount_filter(tables, config: ZFilterConfig) -> int:
    """The naive baseline: recount Z from all kept rows before every batch."""
    kept: list[pa.Table] = []
    labels = ["contradiction", "entailment", "neutral"]
    n_kept = 0
    for batch in rebatch(with_features(tables, config.features), config.batch_size):
        zf = ZFilter(labels, config)
        if kept:
            zf.seed(add_features(pa.concat_tables(kept), config.features))
        keep, _ = zf.filter(batch)
        k = batch.filter(pa.array(keep)).drop_columns(["features"])
        kept.append(k)
        n_kept += k.num_rows
    return n_kept


def child(corpus: str, out: str, engine: str, batch_size: int) -> None:
    """One engine's run of the zfilter stage; prints its figures as JSON (peak RSS of this driver process only)."""
    stage = ZFilterStage(ZFilterConfig(k=20, batch_size=batch_size))
    t = time.perf_counter()
    report = stage.run(StageInput({"": [corpus]}, engine=engine), StageOutput(out)).report
    wall = time.perf_counter() - t
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
    print(json.dumps({"engine": engine, "wall": wall, "peak_rss": peak, "kept": report["kept"],
                      "rejected": report["rejected"], "max_z_before": report["max_z_before"],
                      "max_z_after": report["max_z_after"]}))


def run_child(corpus: str, out: str, engine: str, batch_size: int) -> dict:
    proc = subprocess.run([sys.executable, __file__, "--child", corpus, "--out", out, "--engine", engine,
                           "--batch-size", str(batch_size)], capture_output=True, text=True)
    if proc.returncode:
        sys.exit(f"{engine} run failed:\n{proc.stderr[-3000:]}")
    return json.loads(proc.stdout.strip().splitlines()[-1])


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--rows", type=int, default=1_000_000)
    p.add_argument("--engine", choices=["local", "ray", "both"], default="both",
                   help="ray: the Ray run against a local run of the same corpus (both are run).")
    p.add_argument("--batch-size", type=int, default=10_000)
    p.add_argument("--recount-rows", type=int, default=100_000)
    p.add_argument("--child", help=argparse.SUPPRESS)
    p.add_argument("--out", help=argparse.SUPPRESS)
    args = p.parse_args()
    if args.child:
        return child(args.child, args.out, args.engine, args.batch_size)
    print(machine_line())
    with tempfile.TemporaryDirectory(prefix="refinery-bench-") as work:
        src = os.path.join(work, "synth")
        t = time.perf_counter()
        synth.write(synth.SynthSpec(rows=args.rows, seed=9), src)
        print(f"synthesized {args.rows:,} planted rows in {time.perf_counter() - t:.0f}s")
        engines = ["local"] if args.engine == "local" else ["local", "ray"]
        runs = {e: run_child(src, os.path.join(work, f"z-{e}"), e, args.batch_size) for e in engines}
        for e, r in runs.items():
            print(f"zfilter --engine {e:<5} {args.rows:,} rows (k=20, batch {args.batch_size:,}): {r['wall']:.1f}s "
                  f"({args.rows / r['wall']:,.0f} rows/s), peak driver RSS {r['peak_rss'] / 2**30:.2f} GiB; "
                  f"kept {r['kept']:,}, rejected {r['rejected']:,}")
        print(f"max z* before {runs['local']['max_z_before']}\nmax z* after  {runs['local']['max_z_after']}")
        if "ray" in runs:
            same = all(Corpus.open(os.path.join(work, f"z-{e}", "kept")).manifest.rows == runs["local"]["kept"]
                       for e in runs) and _same_rows(work)
            print(f"ray / local throughput: {runs['local']['wall'] / runs['ray']['wall']:.2f}x; "
                  f"same kept rows: {same}")
        if args.recount_rows:
            sub = next(Corpus.open(src).iter_tables(batch_rows=args.recount_rows))
            config = ZFilterConfig(k=20, batch_size=args.batch_size)
            t = time.perf_counter()
            inc = run_in_memory(sub, config)
            t_inc = time.perf_counter() - t
            t = time.perf_counter()
            naive = recount_filter(iter([sub]), config)
            t_naive = time.perf_counter() - t
            assert inc == naive, (inc, naive)
            print(f"{args.recount_rows:,} rows: incremental {t_inc:.1f}s vs recount-per-batch {t_naive:.1f}s "
                  f"-> {t_naive / t_inc:.1f}x (same {inc:,} rows kept)")


def _same_rows(work: str) -> bool:
    """The kept ids of both engines, shard by shard, without holding either corpus whole."""
    a, b = (Corpus.open(os.path.join(work, f"z-{e}", "kept")) for e in ("local", "ray"))
    ids_a = (t["id"] for t in a.iter_tables(columns=["id"]))
    ids_b = (t["id"] for t in b.iter_tables(columns=["id"]))
    return pa.chunked_array(list(ids_a)).equals(pa.chunked_array(list(ids_b)))


if __name__ == "__main__":
    main()
