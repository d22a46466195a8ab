"""A comparison's figures as they are read back from a ``compare`` report.json (``methods.compare.statistics``
writes them): one record per (evaluation set, training corpus), for the pipeline's receipt and the API's table."""
from __future__ import annotations


def is_comparison(report: dict) -> bool:
    """The report of a stage that compares training corpora (accuracies per evaluation set against a baseline)."""
    return {"accuracy", "baseline"} <= set(report)


def comparison_rows(report: dict) -> list[dict]:
    """Per (evaluation set, training corpus): mean accuracy over seeds and its std (None for one seed), the gain on
    the baseline with its paired-bootstrap 95% interval and significance (None for the baseline), and the
    evaluation set's majority-class accuracy."""
    rows = []
    for name, by_corpus in report["accuracy"].items():
        majority = report["eval"][name]["majority"]["accuracy"]
        for corpus, acc in by_corpus.items():
            gain = acc.get("gain") or {}
            rows.append({"eval": name, "train": corpus, "accuracy": acc["mean"], "std": acc.get("std"),
                         "gain": gain.get("delta"), "ci95": gain.get("ci95"), "significant": gain.get("significant"),
                         "majority": majority})
    return rows
