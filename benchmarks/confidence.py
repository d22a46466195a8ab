"""The confidence filter's cross-fitted n-gram model: averaged SGD (``solver: sgd``, the default) against
L-BFGS run to convergence (``solver: lbfgs``), on the same rows and folds in one run.

Per corpus and solver: the out-of-fold log-loss and accuracy of p_M(label | text), the rows kept at τ, the
share of rows both solvers keep or drop alike at τ, the rows whose most likely class has p > τ and how often
that class is right (a calibrated model is right at least a share τ of the time there), and the cross-fitting's wall time with its ratio to
L-BFGS's. Corpora: SNLI dev + test (../shared/data) and a planted-bias synthetic corpus of ``--rows``.

    .venv/bin/python benchmarks/confidence.py [--rows 100000] [--folds 5] [--tau 0.95]
"""
from __future__ import annotations

import argparse
import os
import sys
import time

import numpy as np
import pyarrow as pa

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from refinery.io import synth  # noqa: E402
from refinery.io.corpus import load  # noqa: E402
from refinery.io.schema import resolve_mapping  # noqa: E402
from refinery.models.base import cross_fit_proba  # noqa: E402
from refinery.models.ngram import NGramClassifier, cross_fit_sgd  # noqa: E402

from machine import machine_line  # noqa: E402  (benchmarks/machine.py)

DATA = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "..", "shared", "data", "snli")


def out_of_fold(table: pa.Table, solver: str, folds: int) -> dict:
    """The confidence stage's cross-fitted n-gram model with ``solver``: probabilities, classes, seconds."""
    start = time.perf_counter()
    if solver == "sgd":
        proba, classes, _ = cross_fit_sgd(table, folds, 0)
    else:
        proba, classes = cross_fit_proba(lambda: NGramClassifier(), table, folds, 0)
    return {"proba": proba, "classes": classes, "seconds": time.perf_counter() - start}


def quality(table: pa.Table, run: dict, tau: float) -> dict:
    """Out-of-fold log-loss and accuracy, and the rows whose p(label | text) exceeds τ."""
    y = np.searchsorted(np.array(run["classes"], dtype=object), table["label"].to_numpy(zero_copy_only=False))
    p = run["proba"][np.arange(len(y)), y]
    sure = run["proba"].max(axis=1) > tau
    return {"log_loss": float(-np.log(np.clip(p, 1e-15, 1)).mean()),
            "accuracy": float((run["proba"].argmax(axis=1) == y).mean()), "keep": p > tau,
            "sure": int(sure.sum()), "sure_accuracy": float((run["proba"].argmax(axis=1) == y)[sure].mean())
            if sure.any() else float("nan")}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rows", type=int, default=100_000, help="Rows of the planted corpus.")
    parser.add_argument("--folds", type=int, default=5)
    parser.add_argument("--tau", type=float, default=0.95)
    args = parser.parse_args()
    print(machine_line(), flush=True)
    snli = [os.path.join(DATA, f"snli_{split}.jsonl") for split in ("dev", "test")]
    planted = synth.SynthSpec(rows=args.rows, premise_pool=max(args.rows // 20, 100))
    corpora = {"SNLI dev+test": load(snli, resolve_mapping("snli", None))[0],
               f"planted {args.rows:,}": pa.concat_tables(synth.generate(planted))}
    print(f"| corpus | rows | solver | log-loss | accuracy | kept at τ={args.tau} | same decision | "
          f"max p > τ | their accuracy | time | × L-BFGS |")
    print("|---|---|---|---|---|---|---|---|---|---|---|")
    for name, table in corpora.items():
        runs = {solver: out_of_fold(table, solver, args.folds) for solver in ("lbfgs", "sgd")}
        scored = {solver: quality(table, r, args.tau) for solver, r in runs.items()}
        same = float((scored["sgd"]["keep"] == scored["lbfgs"]["keep"]).mean())
        for solver, r in runs.items():
            q = scored[solver]
            print(f"| {name} | {table.num_rows:,} | {solver} | {q['log_loss']:.4f} | {q['accuracy']:.4f} | "
                  f"{int(q['keep'].sum()):,} | {same:.1%} | {q['sure']:,} | {q['sure_accuracy']:.3f} | {r['seconds']:.1f} s | "
                  f"{r['seconds'] / runs['lbfgs']['seconds']:.3f}× |", flush=True)


if __name__ == "__main__":
    main()
