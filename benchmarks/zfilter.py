"""z-filter benchmark: Algorithm 1 on 1M synthetic rows with planted biases (wall time), and the
incremental update of Z against recounting Z from scratch every batch, in the same run.

    .venv/bin/python benchmarks/zfilter.py [--rows 1000000] [--batch-size 10000] [--recount-rows 100000]
"""
from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time

import pyarrow as pa

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from refinery import synth, zfilter  # noqa: E402
from refinery.corpus import Corpus  # noqa: E402


def recount_filter(tables, config: zfilter.ZFilterConfig) -> int:
    """The naive baseline: recount Z from all kept rows before every batch."""
    kept: list[pa.Table] = []
    labels = ["contradiction", "entailment", "neutral"]
    n_kept = 0
    for batch in zfilter.with_features(zfilter.rebatch(tables, config.batch_size), config.features):
        zf = zfilter.ZFilter(labels, config)
        if kept:
            whole = pa.concat_tables(kept)
            zf.seed(whole.append_column("features", zfilter.row_feature_lists(whole, config.features)))
        keep, _ = zf.filter(batch)
        k = batch.filter(pa.array(keep)).drop_columns(["features"])
        kept.append(k)
        n_kept += k.num_rows
    return n_kept


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--rows", type=int, default=1_000_000)
    p.add_argument("--batch-size", type=int, default=10_000)
    p.add_argument("--recount-rows", type=int, default=100_000)
    args = p.parse_args()
    config = zfilter.ZFilterConfig(k=20, batch_size=args.batch_size)
    with tempfile.TemporaryDirectory(prefix="refinery-bench-") as work:
        src = os.path.join(work, "synth")
        synth.write(synth.SynthSpec(rows=args.rows, seed=9), src)
        t = time.perf_counter()
        report = zfilter.run([src], os.path.join(work, "z"), config=config)
        wall = time.perf_counter() - t
        print(f"zfilter on {args.rows:,} rows (k=20, batch {args.batch_size:,}): {wall:.1f}s "
              f"({args.rows / wall:,.0f} rows/s); kept {report['kept']:,}, rejected {report['rejected']:,}")
        print(f"max z* before {report['max_z_before']}\nmax z* after  {report['max_z_after']}")

        sub = list(Corpus.open(src).iter_tables(batch_rows=args.recount_rows))[0]
        t = time.perf_counter()
        inc = zfilter.run_in_memory(sub, config)
        t_inc = time.perf_counter() - t
        t = time.perf_counter()
        naive = recount_filter(iter([sub]), config)
        t_naive = time.perf_counter() - t
        assert inc == naive, (inc, naive)
        print(f"{args.recount_rows:,} rows: incremental {t_inc:.1f}s vs recount-per-batch {t_naive:.1f}s "
              f"-> {t_naive / t_inc:.1f}x (same {inc:,} rows kept)")


if __name__ == "__main__":
    main()
