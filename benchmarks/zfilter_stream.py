"""Algorithm 1's stream alone (Wu et al. 2022; METHODS §2), this checkout against an earlier commit in one run: the
sequential part of z-filtering, which runs in the driver on any engine, timed in two parts over a planted corpus's
featurized rows held in memory: interning each featurized batch's feature strings (``ZFilter.interned``, which since
dd853be counts the input too, in a thread of its own during a run) and deciding the batches of 1,000 rows
(``ZFilter.filter``: Z's counts, B_Z, the hits; before dd853be the input's counts too), their kernels compiled
before. No settle, no reading or writing. Each side prints a digest of every batch's keep and hits: equal digests,
equal decisions.

    .venv/bin/python benchmarks/zfilter_stream.py --baseline 7cf2388 [--rows 2000000] [--corpus FOLDER]

The corpus is `refinery synth --rows N --premise-pool N/20` (made once into ``--corpus`` when it is missing).
"""
from __future__ import annotations

import argparse
import hashlib
import json
import os
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from machine import machine_line  # noqa: E402 (benchmarks/machine.py)
from same_results import baseline_tree  # noqa: E402
from scale import run  # noqa: E402


def stream(corpus: str) -> dict:
    """In a child process of the code on its ``PYTHONPATH``: the two parts' seconds, the rows and the digest."""
    import numpy as np
    import pyarrow as pa
    import pyarrow.dataset as ds

    from refinery.core.stats import rows_per_label
    from refinery.io.raw import rebatch
    from refinery.methods.zfilter.algorithm import ZFilter, with_features
    from refinery.methods.zfilter.config import ZFilterConfig

    config = ZFilterConfig()
    tables = [pa.Table.from_batches([b]) for b in ds.dataset(corpus, format="parquet").to_batches(
        columns=["text_a", "text_b", "label"], batch_size=65_536)]
    labels: dict = {}
    for table in tables:
        for label, n in rows_per_label(table["label"]).items():
            labels[label] = labels.get(label, 0) + n
    labels = dict(sorted(labels.items()))
    featurized = list(with_features(iter(tables), config.features))
    del tables
    warm = ZFilter(list(labels), config, labels)   # the kernels compiled (a fresh tree has no cache) before timing
    for batch in rebatch(iter([warm.interned(featurized[0].slice(0, 5_000))]), config.batch_size):
        warm.filter(batch)
    zf = ZFilter(list(labels), config, labels)
    start = time.perf_counter()
    interned = [zf.interned(table) for table in featurized]
    interning = time.perf_counter() - start
    digest, rows, start = hashlib.sha256(), 0, time.perf_counter()
    for batch in rebatch(iter(interned), config.batch_size):
        keep, hits = zf.filter(batch)
        rows += batch.num_rows
        for part in (np.packbits(keep), hits.rows.astype(np.int64), hits.feature_ids.astype(np.int64)):
            digest.update(part.tobytes())
    return {"rows": rows, "interning": interning, "batches": time.perf_counter() - start,
            "digest": digest.hexdigest()[:16]}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--baseline", required=True, help="The earlier commit (any git revision).")
    parser.add_argument("--rows", type=int, default=2_000_000)
    parser.add_argument("--corpus", help="Folder of the planted corpus (default: a temporary one).")
    parser.add_argument("--child", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        print(json.dumps(stream(args.child)))
        return
    root = tempfile.mkdtemp(prefix="zfilter-stream-")
    corpus = args.corpus or os.path.join(root, "corpus")
    if not os.path.exists(corpus):
        run(["synth", "--rows", args.rows, "--premise-pool", args.rows // 20, "--out", corpus], f"{root}/synth.log")
    tree = baseline_tree(args.baseline, os.path.join(root, "baseline-tree"))
    print(f"# Algorithm 1's stream: {args.baseline} against this checkout, {corpus} ({machine_line()})\n")
    print("| code | rows | interning | the batches | rows/s of the batches | rows/s of both | digest |")
    print("|---|---|---|---|---|---|---|")
    figures = {}
    for side, path in ((args.baseline, tree), ("this checkout", None)):
        env = {**os.environ, **({"PYTHONPATH": path} if path else {})}
        done = subprocess.run([sys.executable, os.path.abspath(__file__), "--baseline", args.baseline, "--child",
                               corpus], env=env, cwd=root, capture_output=True, text=True, check=True)
        f = figures[side] = json.loads(done.stdout.strip().splitlines()[-1])
        print(f"| {side} | {f['rows']:,} | {f['interning']:.2f} s | {f['batches']:.2f} s | "
              f"{f['rows'] / f['batches']:,.0f} | {f['rows'] / (f['interning'] + f['batches']):,.0f} | "
              f"{f['digest']} |", flush=True)
    before, after = figures.values()
    print(f"\nthe batches: {before['batches'] / after['batches']:.2f}× faster; interning: "
          f"{before['interning'] / after['interning']:.2f}×; decisions equal: {before['digest'] == after['digest']}")


if __name__ == "__main__":
    main()
