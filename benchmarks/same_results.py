"""Does a change keep every method's results? Every method run on SNLI dev by this checkout and by an earlier
commit, and what they wrote compared: the ids (and weights) of every corpus each wrote, and every figure of its
report.json (times, paths and versions aside; numbers equal to 1e-6 relative).

The earlier commit's `refinery/` is taken with `git archive` into a temporary folder and run from there by the
same Python (``PYTHONPATH``, from a folder outside the checkout so that the installed refinery does not shadow it).
A method the earlier commit lacks is run by this checkout alone and named so. With ``--pipeline`` the demo's
pipeline (examples/snli.yaml, on Ray as `make demo` runs it) is compared too, step by step, and its receipt.json.
A figure that differs is printed with both values::

    .venv/bin/python benchmarks/same_results.py --baseline 0f8cd8e
    .venv/bin/python benchmarks/same_results.py --baseline HEAD~3 --pipeline --keep /tmp/same
"""
from __future__ import annotations

import argparse
import glob
import json
import os
import shutil
import subprocess
import sys
import tempfile

import pyarrow.parquet as pq

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from machine import machine_line  # noqa: E402 (benchmarks/machine.py)

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SNLI = os.path.join(REPO, "..", "shared", "data", "snli")
IGNORED = {"seconds", "time", "inputs", "input", "out", "path", "paths", "train", "url", "report_file", "version",
           "peak_rss", "task_peak_rss", "phases", "passes_on", "report"}
PARTS = ("kept", "rejected", "corpus")


def methods(d0: str) -> dict:
    """Each method's arguments (its output folder is added): defaults, on SNLI dev; compose filters z-filtered rows
    against D0, the dev set as a corpus (``d0``)."""
    dev, test, hard = (os.path.join(SNLI, f) for f in ("snli_dev.jsonl", "snli_test.jsonl", "snli_test_hard.jsonl"))
    return {"audit": ["audit", dev, "--preset", "snli"], "zfilter": ["zfilter", dev, "--preset", "snli"],
            "confidence": ["confidence", dev, "--preset", "snli"], "upsample": ["upsample", dev, "--preset", "snli"],
            "leakage": ["leakage", "--input", f"train={dev}", "--input", f"test={test}", "--preset", "snli"],
            "weights": ["weights", dev, "--preset", "snli"], "aflite": ["aflite", dev, "--preset", "snli"],
            "datamap": ["datamap", dev, "--preset", "snli"],
            "probe": ["probe", dev, "--preset", "snli", "--eval", f"hard={hard}:snli"],
            "compose": ["compose", "{zfilter}/kept", "--original", d0],
            "dedup": ["dedup", dev, "--preset", "snli"],
            "decontaminate": ["decontaminate", dev, "--preset", "snli", "--against", f"test={test}:snli"],
            "razor": ["razor", dev, "--preset", "snli", "--score-only"],
            "compare": ["compare", "--train", f"dev={dev}", "--train", f"zfiltered={{zfilter}}/kept", "--preset",
                        "snli", "--eval", f"hard={hard}:snli"]}


# a verb whose command line changed: how an earlier commit spells the same run (probe's training corpus was its
# --train option before 2f215e3), tried there when the new spelling fails
EARLIER_SPELLING = {"probe": lambda args: ["probe", "--train", *args[1:]]}


def run(tree: str | None, args: list, out: str) -> bool:
    """``refinery ARGS --out OUT`` by the refinery in ``tree`` (None: this checkout's); its output in OUT.log."""
    env = {**os.environ, **({"PYTHONPATH": tree} if tree else {})}
    code = "import sys; from refinery.cli.entry import run; sys.argv[0] = 'refinery'; sys.exit(run())"
    with open(f"{out}.log", "w") as log:
        done = subprocess.run([sys.executable, "-c", code, "-q", *args, "--out", out], env=env,
                              cwd=tempfile.gettempdir(), stdout=log, stderr=subprocess.STDOUT)
    return done.returncode == 0


def figures(value, path: str = ""):
    """(path, value) of every leaf of a report, the ``IGNORED`` keys aside."""
    if isinstance(value, dict):
        for key, item in value.items():
            if key not in IGNORED and not key.endswith("_seconds"):
                yield from figures(item, f"{path}.{key}")
    elif isinstance(value, list):
        for i, item in enumerate(value):
            yield from figures(item, f"{path}[{i}]")
    else:
        yield path, value


def rows(folder: str) -> list | None:
    files = sorted(glob.glob(os.path.join(folder, "*.parquet")))
    if not files:
        return None
    table = pq.ParquetDataset(files).read()
    return table.select([c for c in ("id", "weight") if c in table.column_names]).to_pylist()


def report(folder: str) -> dict | None:
    for name in ("report/report.json", "report.json", "receipt.json"):
        if os.path.exists(os.path.join(folder, name)):
            with open(os.path.join(folder, name)) as fh:
                return dict(figures(json.load(fh)))
    return None


def same(a, b) -> bool:
    number = (int, float)
    if isinstance(a, number) and isinstance(b, number) and not isinstance(a, bool) and not isinstance(b, bool):
        return abs(a - b) <= 1e-6 * max(1.0, abs(a))
    return a == b


def compare(before: str, after: str) -> list[str]:
    """What differs between two outputs of one method: its corpora's rows, its report's figures."""
    lines = []
    for part in PARTS:
        a, b = rows(os.path.join(before, part)), rows(os.path.join(after, part))
        if a is not None or b is not None:
            lines.append(f"{part}: {'the same' if a == b else 'DIFFERENT'} rows ({len(a or [])} and {len(b or [])})")
    a, b = report(before), report(after)
    if a is not None and b is not None:
        differ = sorted(k for k in a.keys() & b.keys() if not same(a[k], b[k]))
        lines.append(f"report: {len(a.keys() & b.keys())} figures, {len(differ)} differ; only before "
                     f"{len(a.keys() - b.keys())}, only after {len(b.keys() - a.keys())}")
        lines += [f"    {k}: {str(a[k])[:60]} → {str(b[k])[:60]}" for k in differ[:12]]
    return lines


def baseline_tree(revision: str, tree: str) -> str:
    """``tree``, a fresh folder holding ``refinery/`` as it was at ``revision`` (``git archive``): a ``PYTHONPATH``
    that runs the earlier code."""
    shutil.rmtree(tree, ignore_errors=True)
    os.makedirs(tree)
    archive = subprocess.run(["git", "archive", revision, "refinery"], cwd=REPO, capture_output=True, check=True)
    subprocess.run(["tar", "-x", "-C", tree], input=archive.stdout, check=True)
    return tree


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--baseline", required=True, help="The earlier commit (any git revision).")
    parser.add_argument("--pipeline", action="store_true", help="Compare the demo's pipeline on Ray too.")
    parser.add_argument("--keep", help="Keep the outputs in this folder (default: a temporary one, removed).")
    args = parser.parse_args()
    root = args.keep or tempfile.mkdtemp(prefix="same-results-")
    tree = baseline_tree(args.baseline, os.path.join(root, "baseline-tree"))
    print(f"# every method on SNLI dev: {args.baseline} against this checkout ({machine_line()})")
    for side, code in (("before", tree), ("after", None)):
        os.makedirs(os.path.join(root, side), exist_ok=True)
        run(code, ["convert", os.path.join(SNLI, "snli_dev.jsonl"), "--preset", "snli"], os.path.join(root, side, "d0"))
    for name, argv in methods("{d0}").items():
        outs = {side: os.path.join(root, side, name) for side in ("before", "after")}
        ran = {}
        for side, code in (("before", tree), ("after", None)):
            shutil.rmtree(outs[side], ignore_errors=True)
            filled = [a.format(zfilter=os.path.join(root, side, "zfilter"), d0=os.path.join(root, side, "d0"))
                      for a in argv]
            ran[side] = run(code, filled, outs[side])
            if not ran[side] and side == "before" and name in EARLIER_SPELLING:
                ran[side] = run(code, EARLIER_SPELLING[name](filled), outs[side])
        print(f"## {name}")
        if not ran["after"]:
            print(f"   FAILED in this checkout: {outs['after']}.log")
        elif not ran["before"]:
            print(f"   not in {args.baseline} (or failed there: {outs['before']}.log)")
        else:
            print("\n".join(f"   {line}" for line in compare(outs["before"], outs["after"])))
    if args.pipeline:
        pipeline = os.path.join(REPO, "examples", "snli.yaml")
        outs = {side: os.path.join(root, side, "demo") for side in ("before", "after")}
        for side, code in (("before", tree), ("after", None)):
            shutil.rmtree(outs[side], ignore_errors=True)
            os.environ["DATA"] = os.path.join(REPO, "..", "shared", "data")
            run(code, ["run", pipeline, "--engine", "ray"], outs[side])
        print("## the demo's pipeline (examples/snli.yaml, --engine ray)")
        for step in sorted(os.listdir(outs["after"])):
            if os.path.isdir(os.path.join(outs["after"], step)) and step[:2].isdigit():
                print(f"   {step}")
                print("\n".join(f"      {line}" for line in compare(*(os.path.join(outs[s], step)
                                                                    for s in ("before", "after")))))
        print("   receipt.json")
        print("\n".join(f"      {line}" for line in compare(*(os.path.join(outs[s], "pipeline")
                                                            for s in ("before", "after")))))
    if not args.keep:
        shutil.rmtree(root, ignore_errors=True)


if __name__ == "__main__":
    main()
