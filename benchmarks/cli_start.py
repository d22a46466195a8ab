"""How long ``refinery VERB --help`` takes to start, and which heavy dependency a verb still imports.

Issue 42's bar: every verb's help in ≤ 0.3 s, which needs the verb built without importing the methods' heavy
dependencies. Each verb's help runs as a whole process (the ``refinery`` console script) --repeat times; the
best and the median wall time are printed next to the bar, with the machine and its load. A verb whose help
imports a heavy module is named with the refinery modules on the import chain that pulled it in, nearest
first (from ``python -X importtime``).

    .venv/bin/python benchmarks/cli_start.py [--repeat 5] [VERB ...]
"""
from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import time

from machine import machine_line

REFINERY = os.path.join(os.path.dirname(sys.executable), "refinery")
BAR_SECONDS = 0.3
HEAVY = ("numba", "duckdb", "scipy", "sklearn", "torch", "transformers", "ray", "datasets", "vllm", "matplotlib")


def verbs() -> list[str]:
    import click

    from refinery.cli.main import main

    return main.list_commands(click.Context(main))


def wall_seconds(argv: list[str]) -> float:
    """Seconds the command took; it must succeed (its error's last line otherwise)."""
    started = time.perf_counter()
    done = subprocess.run(argv, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    if done.returncode:
        raise RuntimeError((done.stderr.strip().splitlines() or ["failed"])[-1])
    return time.perf_counter() - started


def heavy_imports(verb: str) -> dict[str, str]:
    """{heavy module: the refinery modules that imported it, nearest first} for ``refinery VERB --help``."""
    code = (f"import sys; sys.argv = ['refinery', {verb!r}, '--help']\nfrom refinery.cli.main import main\n"
            "try:\n    main()\nexcept SystemExit:\n    pass\n")
    lines = subprocess.run([sys.executable, "-X", "importtime", "-c", code], capture_output=True,
                           text=True).stderr.splitlines()
    found = {}
    # importtime prints a module after the modules it imported, each indented one level deeper than its importer
    rows = [(len(name) - len(name.lstrip()), name.strip()) for name in
            (line.split("|")[-1] for line in lines if line.startswith("import time:") and "|" in line)]
    for i, (depth, name) in enumerate(rows):
        if name in HEAVY and name not in found:
            chain = []
            for d, ancestor in rows[i + 1:]:   # its importer, then that one's, … : each less indented than the last
                if d < depth:
                    depth = d
                    chain += [ancestor] if ancestor.startswith("refinery.") else []
            found[name] = " < ".join(m.removeprefix("refinery.") for m in chain[:4]) or "?"
    return found


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("verbs", nargs="*", help="Verbs to time (default: every verb).")
    parser.add_argument("--repeat", type=int, default=5)
    args = parser.parse_args()
    print(machine_line())
    print(f"load average before: {' '.join(f'{x:.2f}' for x in os.getloadavg())}")
    names = args.verbs or verbs()
    slow = 0
    print(f"{'verb':<12} {'best s':>7} {'median s':>9}  heavy imports (importer)")
    for verb in [None, *names]:
        argv = [REFINERY, "--help"] if verb is None else [REFINERY, verb, "--help"]
        try:
            times = [wall_seconds(argv) for _ in range(args.repeat)]
        except RuntimeError as e:
            slow += 1
            print(f"{verb or '(group)':<12} failed: {e}")
            continue
        heavy = {} if verb is None else heavy_imports(verb)
        best, median = min(times), statistics.median(times)
        slow += best > BAR_SECONDS
        where = ", ".join(f"{m} ({by})" for m, by in heavy.items()) or "-"
        print(f"{verb or '(group)':<12} {best:7.3f} {median:9.3f}  {where}")
    print(f"load average after: {' '.join(f'{x:.2f}' for x in os.getloadavg())}")
    print(f"bar: {BAR_SECONDS} s (best of {args.repeat}); {slow} over it")


if __name__ == "__main__":
    main()
