"""Audit benchmark: exact counting vs a naive Python Counter and vs a bare read+tokenize pass
(1M synthetic pairs), and sketch mode on 10M rows (peak RSS, top-50 recall vs exact, n ≥ 1,000), with
and without the exact recount of the sketches' candidates.

    .venv/bin/python benchmarks/audit.py [--rows 1000000] [--sketch-rows 10000000] [--repeat 5] [--skip-sketch]
"""
from __future__ import annotations

import argparse
import json
import os
import re
import subprocess
import sys
import tempfile
import time
from collections import Counter

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from refinery.core.features import FeatureConfig  # noqa: E402
from refinery.io import synth  # noqa: E402
from refinery.io.corpus import Corpus  # noqa: E402
from refinery.methods.audit.config import AuditConfig  # noqa: E402
from refinery.core.table_audit import audit_table
from refinery.methods.audit.counting import audit  # noqa: E402
from machine import machine_line  # noqa: E402  (benchmarks/machine.py)


NAIVE_TOKENS = re.compile(r"\w+|[^\w\s]")


def naive_row_features(premise: str, hypothesis: str) -> set:
    """The features of one pair as a first script computes them: regex tokens, unigrams and bigrams per field."""
    feats = {"null"}
    for text, name in ((premise, "premise"), (hypothesis, "hypothesis")):
        toks = NAIVE_TOKENS.findall(text.lower())
        feats.update(f"{t}@{name}" for t in toks)
        feats.update(f"{x} {y}@{name}" for x, y in zip(toks, toks[1:]))
    return feats


def naive_counts(corpus: Corpus) -> Counter:
    """The baseline: per-row Python tokenization and a Counter of (feature, label)."""
    counts: Counter = Counter()
    for table in corpus.iter_tables(["text_a", "text_b", "label"]):
        for a, b, label in zip(*(table[c].to_pylist() for c in ("text_a", "text_b", "label"))):
            for f in naive_row_features(a, b):
                counts[(f, label)] += 1
    return counts


def bare_pass(corpus: Corpus) -> int:
    """Read + tokenize only (the floor any counting pass pays)."""
    cfg = FeatureConfig()
    n = 0
    for table in corpus.iter_tables(["text_a", "text_b", "label"]):
        for col in ("text_a", "text_b"):
            n += len(cfg.tokenizer.tokenize(table[col]).flatten())
    return n


def timed(fn, *args, **kwargs):
    t = time.perf_counter()
    out = fn(*args, **kwargs)
    return out, time.perf_counter() - t


def peak_rss_mb() -> float:
    """This process's peak RSS since its exec (VmHWM): ``ru_maxrss`` would carry over the parent's
    peak from before the fork."""
    with open("/proc/self/status") as fh:
        return next(int(line.split()[1]) for line in fh if line.startswith("VmHWM:")) / 1024


def child(mode: str, path: str, lg_k: int) -> dict:
    """One measurement in a fresh process, so allocator state left by another cannot skew it.

    1M timings: ``exact`` (after a one-batch warm-up that loads or compiles the counting kernels),
    ``bare``, ``naive`` (then checks it against exact). 10M: ``exact-10m``, ``sketch`` (sketches
    then an exact recount of their candidates), ``sketch-1pass``: peak RSS and top-50 features.
    """
    if mode == "exact":
        _, warm = timed(audit_table, next(Corpus.open(path).iter_tables(["id", "text_a", "text_b", "label"])))
        res, t = timed(audit, [path], config=AuditConfig())
        return {"time": t, "warmup": warm, "rows": res.rows, "features": len(res.stats.n)}
    if mode == "bare":
        return {"time": timed(bare_pass, Corpus.open(path))[1]}
    if mode == "naive":
        naive, t = timed(naive_counts, Corpus.open(path))
        d = audit([path]).counter.counts().to_pydict()
        exact_counts = {(f, l): c for f, l, c in zip(d["feature"], d["label"], d["count"])}
        return {"time": t, "agree": all(exact_counts.get(k) == v for k, v in list(naive.items())[:200_000])}
    config = AuditConfig(counting="exact" if mode == "exact-10m" else "sketch", sketch_lg_k=lg_k, min_count=1000,
                         k=50, sketch_recount=mode == "sketch")
    res = audit([path], config=config)
    return {"top": {l: [e["feature"] for e in es] for l, es in res.top_k(50).items()}, "rss_mb": peak_rss_mb()}


def run_child(mode, path, workdir, lg_k=0):
    out = os.path.join(workdir, f"{mode}.json")
    t = time.perf_counter()
    subprocess.run([sys.executable, __file__, "--child", mode, path, out, str(lg_k)], check=True)
    wall = time.perf_counter() - t
    with open(out) as fh:
        return json.load(fh), wall


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--rows", type=int, default=1_000_000)
    p.add_argument("--sketch-rows", type=int, default=10_000_000)
    p.add_argument("--lg-k", type=int, default=16, help="the CLI's default --sketch-lg-k")
    p.add_argument("--repeat", type=int, default=5, help="fresh-process runs of the exact audit (median)")
    p.add_argument("--skip-naive", action="store_true")
    p.add_argument("--skip-sketch", action="store_true")
    p.add_argument("--child", nargs=4, metavar=("MODE", "PATH", "OUT", "LG_K"))
    args = p.parse_args()
    if args.child:
        mode, path, out, lg_k = args.child
        with open(out, "w") as fh:
            json.dump(child(mode, path, int(lg_k)), fh)
        return
    print(machine_line())
    with tempfile.TemporaryDirectory(prefix="refinery-bench-") as work:
        path = os.path.join(work, "synth1m")
        _, t_gen = timed(synth.write, synth.SynthSpec(rows=args.rows, seed=1), path)
        print(f"generated {args.rows:,} synthetic pairs in {t_gen:.1f}s; each figure below from a fresh process")
        runs = [run_child("exact", path, work)[0] for _ in range(args.repeat)]
        times = [r["time"] for r in runs]
        t_exact = float(np.median(times))
        print(f"exact audit:           {t_exact:8.2f}s  median of {', '.join(f'{t:.2f}' for t in times)}; "
              f"{runs[0]['rows']:,} rows, {runs[0]['features']:,} features; warm-up (one batch, loads or compiles "
              f"the kernels) {runs[0]['warmup']:.1f}s")
        t_bare = run_child("bare", path, work)[0]["time"]
        print(f"read+tokenize only:    {t_bare:8.2f}s  -> exact / bare = {t_exact / t_bare:.2f}x")
        if not args.skip_naive:
            naive = run_child("naive", path, work)[0]
            print(f"naive Python Counter:  {naive['time']:8.1f}s  -> speed-up {naive['time'] / t_exact:.1f}x")
            print(f"naive and exact counts agree on a 200k sample: {naive['agree']}")

        if args.skip_sketch:
            return
        big = os.path.join(work, "synth_big")
        _, t_gen = timed(synth.write, synth.SynthSpec(rows=args.sketch_rows, seed=2), big)
        print(f"\ngenerated {args.sketch_rows:,} rows in {t_gen:.1f}s")
        ex, t_ex = run_child("exact-10m", big, work, args.lg_k)
        print(f"exact mode:                      {t_ex:7.1f}s  peak RSS {ex['rss_mb']:,.0f} MB")
        for mode in ("sketch", "sketch-1pass"):
            sk, t_sk = run_child(mode, big, work, args.lg_k)
            recalls = {l: len(set(sk["top"][l]) & set(ex["top"][l])) / max(len(ex["top"][l]), 1) for l in ex["top"]}
            print(f"{mode:13s} (lg_k={args.lg_k}):      {t_sk:7.1f}s  = {t_sk / t_ex:.2f}x exact; peak RSS "
                  f"{sk['rss_mb']:,.0f} MB; top-50 recall vs exact (n >= 1,000): "
                  + ", ".join(f"{l} {r:.2f}" for l, r in recalls.items())
                  + f"; mean {sum(recalls.values()) / len(recalls):.3f}")
        print("goal (sketch, the default with its recount): <= 3x exact, peak RSS <= 2,048 MB, recall >= 0.95")


if __name__ == "__main__":
    main()
