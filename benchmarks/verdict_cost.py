"""What the verdict costs the stages that count for it as they write (confidence, weights): each stage run twice
on the same corpus, as the CLI runs it, once as shipped and once with its verdict's counting switched off (the
baseline), each a whole process. Prints both wall times, peak RSS and the verdict's share of the stage's time.

    .venv/bin/python benchmarks/verdict_cost.py TRAIN TEST [--out DIR] [--only confidence|weights]

The baseline is the stage with the counting replaced (in that process only): confidence without its
``WeightedCounts`` (``judges_itself``, as zfilter, which judges in its own pass), weights with a counter of no
words (the label totals and ``null`` only: its passes read the rows and tokenize nothing), so no cap is checked either.
"""
from __future__ import annotations

import argparse
import os
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from machine import machine_line  # noqa: E402 (benchmarks/machine.py)
from scale import run  # noqa: E402 (benchmarks/scale.py: one process, its wall time and peak RSS)

WITHOUT_VERDICT = {
    "confidence": "from refinery.methods.confidence.stage import ConfidenceStage; ConfidenceStage.judges_itself = True",
    "weights": ("from refinery.methods.weights import leakage_neutral as m\n"
                "class Uncounted(m.WeightedCounts):\n"
                "    def __init__(self, *args, **kwargs):\n"
                "        super().__init__(*args, **kwargs)\n"
                "        self.fields, self.row_families = {}, ()\n"
                "m.WeightedCounts = Uncounted"),
}


def command(stage: str, train: str, test: str, out: str, preset: str | None) -> list:
    named = ["--preset", preset] if preset else []
    if stage == "confidence":
        return ["confidence", train, *named, "--model", "ngram", "--folds", 5, "--out", out]
    return ["weights", "--input", f"train={train}", "--input", f"test={test}", *named, "--folds", 5, "--out", out]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("train")
    parser.add_argument("test")
    parser.add_argument("--out", help="Folder for the outputs and logs (default: a temporary folder).")
    parser.add_argument("--preset", help="The corpus's preset, where it is not a refinery corpus (e.g. snli).")
    parser.add_argument("--only", choices=sorted(WITHOUT_VERDICT), help="One stage only.")
    args = parser.parse_args()
    root = args.out or tempfile.mkdtemp(prefix="verdict-cost-")
    os.makedirs(root, exist_ok=True)
    print(f"{machine_line()}; {args.train}, outputs in {root}\n", flush=True)
    print("| stage | as shipped | without the verdict | verdict's share | peak RSS (shipped / without) |\n"
          "|---|---|---|---|---|", flush=True)
    for stage in [args.only] if args.only else sorted(WITHOUT_VERDICT):
        shipped = run(command(stage, args.train, args.test, f"{root}/{stage}", args.preset), f"{root}/{stage}.log")
        entry = f"import sys\n{WITHOUT_VERDICT[stage]}\nfrom refinery.cli.entry import run\nsys.exit(run())"
        without = run(command(stage, args.train, args.test, f"{root}/{stage}-without", args.preset),
                      f"{root}/{stage}-without.log",
                      program=[sys.executable, "-c", entry])
        share = (shipped[0] - without[0]) / shipped[0]
        print(f"| {stage} | {shipped[0]:.1f} s | {without[0]:.1f} s | {share:.1%} | "
              f"{shipped[1] / 1e9:.2f} / {without[1] / 1e9:.2f} GB |", flush=True)


if __name__ == "__main__":
    main()
