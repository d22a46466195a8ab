"""Every built-in stage held to the contract by ``refinery.testing.check_stage`` (docs/extending.md): accounting,
whole corpora, a filter's rows and reasons, the verdict against a fresh audit, the same corpora on Ray, killed and
rerun, killed mid-overwrite; on planted corpora of 2,000 rows, the generating stages with a tiny generator.

    .venv/bin/python benchmarks/check_stages.py [--only zfilter,generate] [--local-only] [--no-kill]
"""
from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
sys.path.insert(0, os.path.join(HERE, "..", "tests"))
from machine import machine_line  # noqa: E402 (benchmarks/machine.py)


def commands(generator: str) -> dict:
    """Each stage's command, ``{input}`` its input and ``{evaluation}`` an evaluation corpus."""
    tiny = ("--max-new-tokens", 8)
    return {
        "audit": ["audit", "{input}"], "zfilter": ["zfilter", "{input}"],
        "compose": ["compose", "{input}", "--original", "{evaluation}"],
        "confidence": ["confidence", "{input}", "--folds", 2], "aflite": ["aflite", "{input}"],
        "datamap": ["datamap", "{input}", "--epochs", 2], "dedup": ["dedup", "{input}"],
        "decontaminate": ["decontaminate", "{input}", "--against", "test={evaluation}"],
        "upsample": ["upsample", "{input}"], "weights": ["weights", "{input}", "--folds", 2],
        "leakage": ["leakage", "--input", "train={input}", "--input", "test={evaluation}", "--trees", 10],
        "razor": ["razor", "{input}", "--score-only"],
        "razor --rewrite": ["razor", "{input}", "--model", generator, "--top-k", 4, "--candidates", 2, "--rounds", 1,
                            *tiny],
        "probe": ["probe", "{input}", "--eval", "test={evaluation}"],
        "compare": ["compare", "--train", "a={input}", "--eval", "test={evaluation}", "--allow-overlap",
                    "--bootstrap", 100],
        "generate": ["generate", "{input}", "--model", generator, "--limit", 4, "--target-labels", "all",
                     "--batch-size", 2, "--shard-rows", 4, *tiny],
        "ibadr": ["ibadr", "{input}", "--generator", generator, "--iterations", 1, "--per-iteration", 4,
                  "--max-new-tokens", 16, "--first-epochs", 1, "--tau", 0],
    }


def main() -> None:
    from kill_matrix import make_tiny_generator   # tests/kill_matrix.py

    from refinery.testing import check_stage

    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--only", default="", help="Comma-separated stages (default: every one).")
    parser.add_argument("--local-only", action="store_true", help="Not on Ray.")
    parser.add_argument("--no-kill", action="store_true", help="Not killed and rerun (the quick checks only).")
    args = parser.parse_args()
    root = tempfile.mkdtemp(prefix="check-stages-")
    generator = make_tiny_generator(os.path.join(root, "generator"))
    only = {s.strip() for s in args.only.split(",") if s.strip()}
    print(f"{machine_line()}\n\n| stage | checks | failed | seconds |\n|---|---|---|---|", flush=True)
    failed = []
    for name, command in commands(generator).items():
        if only and name not in only:
            continue
        start = time.perf_counter()
        result = check_stage(command, engines=("local",) if args.local_only else ("local", "ray"),
                             folder=os.path.join(root, name.replace(" ", "")), kill=not args.no_kill)
        print(f"| {name} | {len(result.checks)} | {', '.join(c.name for c in result.failures) or 'none'} | "
              f"{time.perf_counter() - start:.0f} |", flush=True)
        if not result.ok:
            failed.append(str(result))
    print("\n".join(["", *failed]))
    sys.exit(1 if failed else 0)


if __name__ == "__main__":
    main()
