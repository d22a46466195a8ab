"""How well the leakage features alone predict the label (Zhang et al. 2019, Tables 1–2), as figures: the record
``models.sentence_graph.predictability`` gives (with its predictions) and the leakage stage's report begins with.
Light to import: the stage's report module reads it without loading the graph's DuckDB."""
from __future__ import annotations

from dataclasses import dataclass

from refinery.core.report_record import ReportRecord


@dataclass(frozen=True, kw_only=True)
class PredictabilityFigures(ReportRecord):
    """The splits a forest trained and was tested on, the rows of each split, the accuracy of the basic and advanced
    features' forests, the majority class's (the label commonest in the training splits), each ablation's
    (``without:F``, ``only:F``) and the forests' feature importances."""

    train_splits: list
    test_split: str
    rows: dict
    leakage_accuracy: float
    advanced_accuracy: float
    majority_label: str
    majority_accuracy: float
    ablations: dict
    importances: dict
