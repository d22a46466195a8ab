"""Audit benchmark: exact counting vs a naive Python Counter and vs a bare read+tokenize pass
(1M synthetic pairs), and sketch mode on 10M rows (peak RSS, top-50 recall vs exact, n ≥ 1,000), with
and without the exact recount of the sketches' candidates.

    .venv/bin/python benchmarks/audit.py [--rows 1000000] [--sketch-rows 10000000]
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

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from refinery import synth  # noqa: E402
from refinery.audit import AuditConfig, audit, audit_table  # noqa: E402
from refinery.corpus import Corpus  # noqa: E402
from refinery.features import FeatureConfig  # noqa: E402


def naive_counts(corpus: Corpus) -> Counter:
    """The baseline: per-row Python tokenization and a Counter of (feature, label)."""
    counts: Counter = Counter()
    split = re.compile(r"\w+|[^\w\s]")
    for table in corpus.iter_tables(["text_a", "text_b", "label"]):
        for a, b, label in zip(*(table[c].to_pylist() for c in ("text_a", "text_b", "label"))):
            feats = {"null"}
            for text, name in ((a, "premise"), (b, "hypothesis")):
                toks = split.findall(text.lower())
                feats.update(f"{t}@{name}" for t in toks)
                feats.update(f"{x} {y}@{name}" for x, y in zip(toks, toks[1:]))
            for f in feats:
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


def sketch_child(path: str, out_json: str, mode: str, lg_k: int) -> None:
    """``exact``, ``sketch`` (sketches then an exact recount of their candidates) or ``sketch-1pass``."""
    config = AuditConfig(mode="exact" if mode == "exact" else "sketch", sketch_lg_max_k=lg_k, min_count=1000, k=50,
                         sketch_recount=mode == "sketch")
    res = audit([path], config=config)
    top = {l: [e["feature"] for e in es] for l, es in res.top_k(50).items()}
    with open(out_json, "w") as fh:
        json.dump({"top": top, "rss_mb": peak_rss_mb()}, fh)


def run_child(path, mode, lg_k, workdir):
    out = os.path.join(workdir, f"{mode}.json")
    t = time.perf_counter()
    subprocess.run([sys.executable, __file__, "--child", path, out, mode, str(lg_k)], check=True)
    wall = time.perf_counter() - t
    with open(out) as fh:
        return json.load(fh), wall


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--rows", type=int, default=1_000_000)
    p.add_argument("--sketch-rows", type=int, default=10_000_000)
    p.add_argument("--lg-k", type=int, default=19)
    p.add_argument("--skip-naive", action="store_true")
    p.add_argument("--skip-sketch", action="store_true")
    p.add_argument("--child", nargs=4)
    args = p.parse_args()
    if args.child:
        sketch_child(args.child[0], args.child[1], args.child[2], int(args.child[3]))
        return
    with tempfile.TemporaryDirectory(prefix="refinery-bench-") as work:
        path = os.path.join(work, "synth1m")
        _, t_gen = timed(synth.write, synth.SynthSpec(rows=args.rows, seed=1), path)
        corpus = Corpus.open(path)
        print(f"generated {args.rows:,} synthetic pairs in {t_gen:.1f}s")
        _, t_warm = timed(audit_table, next(corpus.iter_tables(["id", "text_a", "text_b", "label"])))
        print(f"warm-up (loads or compiles the counting kernels, one batch): {t_warm:.1f}s")
        _, t_bare = timed(bare_pass, corpus)
        res, t_exact = timed(audit, [path], config=AuditConfig())
        print(f"exact audit:           {t_exact:8.1f}s  ({res.rows:,} rows, {len(res.stats.n):,} features)")
        print(f"read+tokenize only:    {t_bare:8.1f}s  -> exact / bare = {t_exact / t_bare:.2f}x")
        if not args.skip_naive:
            naive, t_naive = timed(naive_counts, corpus)
            print(f"naive Python Counter:  {t_naive:8.1f}s  -> speed-up {t_naive / t_exact:.1f}x")
            d = res.counter.counts().to_pydict()
            exact_counts = {(f, l): c for f, l, c in zip(d["feature"], d["label"], d["count"])}
            agree = all(exact_counts.get(k) == v for k, v in list(naive.items())[:200_000])
            print(f"naive and exact counts agree on a 200k sample: {agree}")

        if args.skip_sketch:
            return
        big = os.path.join(work, "synth_big")
        _, t_gen = timed(synth.write, synth.SynthSpec(rows=args.sketch_rows, seed=2), big)
        print(f"\ngenerated {args.sketch_rows:,} rows in {t_gen:.1f}s")
        ex, t_ex = run_child(big, "exact", args.lg_k, work)
        print(f"exact mode:                      {t_ex:7.1f}s  peak RSS {ex['rss_mb']:,.0f} MB")
        for mode in ("sketch", "sketch-1pass"):
            sk, t_sk = run_child(big, mode, args.lg_k, work)
            recalls = {l: len(set(sk["top"][l]) & set(ex["top"][l])) / max(len(ex["top"][l]), 1) for l in ex["top"]}
            print(f"{mode:13s} (lg_k={args.lg_k}):      {t_sk:7.1f}s  peak RSS {sk['rss_mb']:,.0f} MB; "
                  "top-50 recall vs exact (n >= 1,000): " + ", ".join(f"{l} {r:.2f}" for l, r in recalls.items())
                  + f"; mean {sum(recalls.values()) / len(recalls):.3f}")


if __name__ == "__main__":
    main()
