"""Does it help? The docs' effect tables (docs/benchmarks.md), regenerated from one command.

Each refining stage runs on a corpus with the settings its row names, a task model is trained on every corpus by
`refinery compare` (its seeds, its paired bootstrap intervals over the evaluation rows), and the accuracies are
printed as the docs' tables, with the machine:

- ``planted``: where the truth is known. `refinery synth --signal-words 200` plants six shortcut words and a genuine
  cue word per row; its anti-shortcut split reverses the shortcuts. A model that learned the shortcuts scores near
  0 there, one that learned the cues near 80%.
- ``snli``: SNLI dev refined, evaluated on SNLI test, SNLI-hard, MNLI-hard (matched, mismatched) and HANS.
- ``leaks``: SNLI test (which holds every row of SNLI-hard, in another tokenization) before and after `refinery
  dedup` then `refinery decontaminate` against the evaluation sets, evaluated on SNLI dev, SNLI-hard, MNLI-hard and
  HANS: what a leak does to a score, and what removing it leaves.

Each table compares the default of a stage with the paper's letter where they differ (z-filtering's biased set,
AUDAC's guard), so the trade-off each default makes is measured, not asserted::

    .venv/bin/python benchmarks/effect.py                              # both tables, n-gram model
    .venv/bin/python benchmarks/effect.py --table planted --rows 30000 --seeds 3 --keep /tmp/effect
"""
from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from machine import machine_line  # noqa: E402 (benchmarks/machine.py)

REFINERY = os.path.join(os.path.dirname(sys.executable), "refinery")
DATA = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "..", "shared", "data")
ZFILTER_LETTER = ("--biased-set", "top-k", "--no-settle")
AUDAC_LETTER = ("--prior", "uniform", "--max-copies", "1000", "--no-guard")


def refinery(*args, log: str) -> None:
    """One `refinery` process; its output to ``log``; a failure ends the benchmark naming the log."""
    with open(log, "w") as out:
        if subprocess.run([REFINERY, *map(str, args)], stdout=out, stderr=subprocess.STDOUT).returncode:
            raise SystemExit(f"refinery {' '.join(map(str, args[:2]))} failed; see {log}")


def refined(root: str, source: list, preset: list, stages: dict) -> dict:
    """{row name: the corpus it trains on}: ``stages`` ({name: (verb, options, the part it passes on)}) each run on
    ``source`` under ``root``."""
    corpora = {}
    for name, (verb, options, part) in stages.items():
        out = f"{root}/{name}"
        started = time.perf_counter()
        refinery(verb, *source, *preset, *options, "--out", out, "--mode", "skip", log=f"{out}.log")
        print(f"  {name}: {verb} {' '.join(map(str, options))} ({time.perf_counter() - started:.0f} s)", flush=True)
        corpora[name] = f"{out}/{part}"
    return corpora


def compare(root: str, train: dict, evals: dict, preset: list, seeds: int) -> dict:
    """`refinery compare` of ``train`` ({name: corpus}; the first the baseline) on ``evals``: its report."""
    args = [a for name, path in train.items() for a in ("--train", f"{name}={path}")]
    args += [a for name, path in evals.items() for a in ("--eval", f"{name}={path}")]
    refinery("compare", *args, *preset, "--seeds", seeds, "--out", f"{root}/compare", "--mode", "overwrite",
             log=f"{root}/compare.log")
    with open(f"{root}/compare/report/report.json") as fh:
        return json.load(fh)


def table(report: dict, labels: dict) -> str:
    """The accuracies as the docs print them: mean ± std over seeds, the gain over the baseline in points with its
    paired bootstrap 95% interval, **bold** where the interval lies above 0."""
    evals = list(report["accuracy"])
    lines = ["| training corpus | rows | " + " | ".join(evals) + " |", "|---|---|" + "---|" * len(evals)]
    for name, label in labels.items():
        cells = []
        for ev in evals:
            acc = report["accuracy"][ev][name]
            text = f"{100 * acc['mean']:.1f}%" + (f" ± {100 * acc['std']:.1f}" if acc["std"] is not None else "")
            if "gain" in acc:
                g = acc["gain"]
                delta = f"{100 * g['delta']:+.1f} [{100 * g['ci95'][0]:+.1f}, {100 * g['ci95'][1]:+.1f}]"
                text += f" (**{delta}**)" if g["significant"] and g["delta"] > 0 else f" ({delta})"
            if acc.get("one_label"):
                text += " one label"
            cells.append(text)
        lines.append(f"| {label} | {report['train'][name]['rows']:,} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def planted(root: str, rows: int, seeds: int) -> None:
    print(f"\nplanted shortcuts: {rows:,} training rows, seed 3, 200 signal words; n-gram model, {seeds} seeds",
          flush=True)
    common = ("--seed", 3, "--signal-words", 200)
    for split, n in (("train", rows), ("test", 2000), ("anti-shortcut", 2000)):
        refinery("synth", "--out", f"{root}/{split}", "--rows", n, *common, "--split", split, "--mode", "skip",
                 log=f"{root}/synth-{split}.log")
    stages = {
        "zfilter": ("zfilter", ("--k", 20), "kept"),
        "zfilter-letter": ("zfilter", ("--k", 20, *ZFILTER_LETTER), "kept"),
        "audac": ("upsample", ("--k", 10), "corpus"),
        "audac-letter": ("upsample", ("--k", 10, "--band-min", 0.01, "--band-max", 0.2, "--iterations", 20,
                                      *AUDAC_LETTER), "corpus"),
    }
    train = {"original": f"{root}/train", **refined(root, [f"{root}/train"], [], stages)}
    report = compare(root, train, {"test": f"{root}/test", "anti": f"{root}/anti-shortcut"}, [], seeds)
    print(table(report, {"original": "original", "zfilter": "z-filtered, k = 20 (default: significant features, "
                         "settled)", "zfilter-letter": "z-filtered, Algorithm 1's letter (--biased-set top-k "
                         "--no-settle)", "audac": "AUDAC, k = 10 (defaults: guard, band widened where empty)",
                         "audac-letter": "AUDAC, the paper's letter (band 0.01–0.2, 20 iterations, --prior uniform "
                         "--max-copies 1000 --no-guard)"}), flush=True)


def snli(root: str, seeds: int) -> None:
    print(f"\nSNLI dev (9,842 rows) refined; n-gram model, {seeds} seeds", flush=True)
    dev, preset = os.path.join(DATA, "snli", "snli_dev.jsonl"), ["--preset", "snli"]
    stages = {
        "zfilter": ("zfilter", ("--k", 20), "kept"),
        "zfilter-letter": ("zfilter", ("--k", 20, *ZFILTER_LETTER), "kept"),
        "audac": ("upsample", ("--k", 10), "corpus"),
        "weights": ("weights", ("--clip", 10), "corpus"),
    }
    train = {"dev": dev, **refined(root, [dev], preset, stages)}
    evals = {"test": os.path.join(DATA, "snli", "snli_test.jsonl"),
             "hard": os.path.join(DATA, "snli", "snli_test_hard.jsonl"),
             "mnli-hard-m": os.path.join(DATA, "mnli", "mnli_dev_matched_hard.jsonl") + ":mnli",
             "mnli-hard-mm": os.path.join(DATA, "mnli", "mnli_dev_mismatched_hard.jsonl") + ":mnli",
             "hans": os.path.join(DATA, "hans", "hans_regenerated.tsv") + ":hans"}
    report = compare(root, train, evals, preset, seeds)
    print(table(report, {"dev": "SNLI dev", "zfilter": "z-filter k = 20 (default)",
                         "zfilter-letter": "z-filter k = 20, Algorithm 1's letter", "audac": "AUDAC k = 10",
                         "weights": "leakage-neutral weights, clip 10"}), flush=True)


def leaks(root: str, seeds: int) -> None:
    print(f"\nSNLI test (9,824 rows) before and after dedup and decontamination; n-gram model, {seeds} seeds",
          flush=True)
    test, preset = os.path.join(DATA, "snli", "snli_test.jsonl"), ["--preset", "snli"]
    evals = {"dev": os.path.join(DATA, "snli", "snli_dev.jsonl") + ":snli",
             "hard": os.path.join(DATA, "snli", "snli_test_hard.jsonl") + ":snli",
             "mnli-hard-m": os.path.join(DATA, "mnli", "mnli_dev_matched_hard.jsonl") + ":mnli",
             "hans": os.path.join(DATA, "hans", "hans_regenerated.tsv") + ":hans"}
    deduped = refined(root, [test], preset, {"dedup": ("dedup", (), "kept")})["dedup"]
    against = [a for name, path in evals.items() for a in ("--against", f"{name}={path}")]
    clean = refined(root, [deduped], [], {"decontaminated": ("decontaminate", against, "kept")})["decontaminated"]
    train = {"test": test, "dedup": deduped, "decontaminated": clean}
    report = compare(root, train, evals, [*preset, "--allow-overlap"], seeds)
    print(table(report, {"test": "SNLI test", "dedup": "dedup (defaults)",
                         "decontaminated": "dedup, then decontaminate against the four sets"}), flush=True)
    print("\nevaluation rows each training corpus contaminates (a shared run of 13 words; compare's rule):",
          flush=True)
    for ev, entry in report["eval"].items():
        print(f"  {ev} ({entry['rows']:,} rows): " + ", ".join(
            f"{name} {c['rows']:,} ({100 * c['share']:.1f}%)" for name, c in entry["contaminated"].items()),
            flush=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--table", choices=("planted", "snli", "leaks", "all"), default="all")
    parser.add_argument("--rows", type=int, default=30_000, help="Training rows of the planted corpus.")
    parser.add_argument("--seeds", type=int, default=3, help="Training seeds per corpus.")
    parser.add_argument("--keep", help="Folder for the corpora and reports (default: a temporary folder); a rerun "
                                       "into it reuses the finished stages.")
    args = parser.parse_args()
    root = args.keep or tempfile.mkdtemp(prefix="refinery-effect-")
    print(f"{machine_line()}; outputs in {root}", flush=True)
    if args.table in ("planted", "all"):
        os.makedirs(f"{root}/planted", exist_ok=True)
        planted(f"{root}/planted", args.rows, args.seeds)
    if args.table in ("snli", "all"):
        os.makedirs(f"{root}/snli", exist_ok=True)
        snli(f"{root}/snli", args.seeds)
    if args.table in ("leaks", "all"):
        os.makedirs(f"{root}/leaks", exist_ok=True)
        leaks(f"{root}/leaks", args.seeds)


if __name__ == "__main__":
    main()
