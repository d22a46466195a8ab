"""compare's report record: what report.json holds of a comparison (``statistics.summarize`` makes it)."""
from __future__ import annotations

from dataclasses import dataclass

from refinery.core.report_record import ReportRecord


@dataclass(frozen=True, kw_only=True)
class CompareReport(ReportRecord):
    """A comparison's report (``summarize``; ``core.records.Comparison`` reads its answer from the JSON): the task
    model's settings (``config``), the baseline corpus, the training labels, each training corpus ({name: rows,
    rejected, other_splits_left_out, weighted}), each evaluation set ({name: rows, rejected, labels, label_map,
    training_labels_unscored, labels_merged, majority, leaked_rows, contaminated, pairs_read_as_one_text,
    inputs_with_several_labels}), the accuracies ({set: {corpus: mean, std, seeds, breakdown, …, gain, ci95,
    one_label}}), what the models read (``task_model.READS``' key), the bias slices (``slices.bias_slices``), and
    what the comparison warns (a set scored on part of its rows, a label's collapse) and notes."""

    config: dict
    baseline: str
    training_labels: list
    train: dict
    eval: dict
    accuracy: dict
    reads: str
    bias_slices: dict
    warnings: list
    notes: list
