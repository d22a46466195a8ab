"""p_M(label | text) of every row (the confidence filter's scores; ``stage``'s docstring tells the method): from a
column, a saved classifier, or K-fold cross-fitting (the SGD n-gram model streaming the input, the others on the
whole input, their finished folds checkpointed), and the rows split by it against τ, each dropped row with its
reason."""
from __future__ import annotations

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from refinery.methods.confidence.config import ConfidenceConfig
from refinery.models.base import CLASSIFIERS
from refinery.pipeline.stage import StageInput, set_column


def label_confidence(table: pa.Table, model=None, proba_column: str | None = None) -> np.ndarray:
    """p_M(label | text) per row: from a fitted classifier, or from a column holding that probability."""
    if (model is None) == (proba_column is None):
        raise ValueError("give exactly one of a model or a probability column")
    if proba_column is not None:
        if proba_column not in table.column_names:
            raise KeyError(f"no column {proba_column!r}; columns: {table.column_names}")
        return _probabilities(table, proba_column)
    from refinery.models.base import label_proba

    return label_proba(model.predict_proba(table), model.classes_, table["label"].to_pylist())


def _probabilities(table: pa.Table, column: str) -> np.ndarray:
    """The probabilities of ``column``, numbers or their text (a CSV's), a missing value (null, NaN, empty text) as
    0; a value that is no number or outside [0, 1] is refused naming its row (an id) and the fix."""
    values = table[column]
    if pa.types.is_string(values.type) or pa.types.is_large_string(values.type):
        values = pc.if_else(pc.equal(pc.utf8_trim_whitespace(values), ""), pa.scalar(None, values.type), values)
        try:
            values = values.cast(pa.float64())
        except (pa.ArrowInvalid, pa.ArrowNotImplementedError):
            bad = next(i for i, v in enumerate(values.to_pylist()) if v is not None and not _is_number(v))
            raise ValueError(f"--proba-column {column}: row {table['id'][bad].as_py()!r} holds {values[bad].as_py()!r}, "
                             "not a number; give p_M(label | text) as a number in [0, 1]") from None
    elif not (pa.types.is_floating(values.type) or pa.types.is_integer(values.type) or pa.types.is_null(values.type)):
        raise ValueError(f"--proba-column {column} holds {values.type}, not numbers in [0, 1]")
    p = values.cast(pa.float64()).to_numpy(zero_copy_only=False)
    p = np.where(np.isnan(p), 0.0, p)   # null and NaN: missing
    outside = np.flatnonzero((p < 0) | (p > 1))
    if len(outside):
        i = int(outside[0])
        raise ValueError(f"--proba-column {column}: row {table['id'][i].as_py()!r} holds {p[i]:g}, outside [0, 1] "
                         f"({len(outside):,} of {len(p):,} rows); give p_M(label | text), a probability")
    return p


def _is_number(text: str) -> bool:
    try:
        float(text)
        return True
    except ValueError:
        return False


def config_confidence(table: pa.Table, config: ConfidenceConfig, engine: str = "local", checkpoints=None
                      ) -> np.ndarray:
    """p_M(label | text) as ``config`` says: a column, a saved classifier, or K-fold cross-fitting (its
    finished folds kept in ``checkpoints``, an ``io.checkpoints.Checkpoints``)."""
    if config.proba_column is not None:
        return label_confidence(table, proba_column=config.proba_column)
    from refinery.models.base import (
        cross_fit_proba,
        label_proba,
        load_classifier,
        make_classifier,
    )

    if config.streams:
        return sgd_confidence(table, config, engine)
    if config.model in CLASSIFIERS:
        proba, classes = cross_fit_proba(lambda: make_classifier(config.model), table, config.folds, config.seed,
                                         checkpoints)
        return label_proba(proba, classes, table["label"].to_pylist())
    model = load_classifier(config.model)
    refuse_unknown_labels(table, model.classes_, config.model)
    return label_confidence(table, model=model)


def refuse_unknown_labels(table: pa.Table, classes, model: str) -> None:
    """A saved classifier gives a label it was never trained on p = 0: every row of it would be dropped, whatever
    the model thinks of its text. Refused in one line naming the labels and the fix."""
    counts = pc.value_counts(table["label"]).to_pylist()
    unknown = sorted(((c["counts"], c["values"]) for c in counts if c["values"] not in set(classes)), reverse=True)
    if unknown:
        named = ", ".join(f"{label!r} ({n:,} rows)" for n, label in unknown[:3])
        label, be = ("labels", "are") if len(unknown) > 1 else ("label", "is")
        raise ValueError(f"--model {model} was trained on the labels {', '.join(map(str, classes))}; the input's "
                         f"{label} {named} {be} none of them, so its rows would all score 0 and be dropped: give a "
                         "model trained on this corpus's labels, or read the input with the preset or --map whose "
                         "labels the model knows")


def split_by_confidence(table: pa.Table, conf: np.ndarray, tau: float):
    """(kept rows, rejected rows with ``reason``): kept iff p_M(label | text) > τ; both get ``confidence``."""
    keep = conf > tau
    scored = set_column(table, "confidence", pa.array(conf))
    rejected = scored.filter(pa.array(~keep))
    return scored.filter(pa.array(keep)), set_column(rejected, "reason", pa.array(
        [_reason(c, tau) for c in conf[~keep]], pa.string()))


def _reason(confidence: float, tau: float) -> str:
    return f"p_M(label | text) = {confidence:.3f} <= tau {tau}"


class Reasons:
    """Each row's reason, written only for the rows a filter drops (the many kept rows need none)."""

    def __init__(self, confidence: np.ndarray, tau: float):
        self.confidence, self.tau = confidence, tau

    def __getitem__(self, i: int) -> str:
        return _reason(self.confidence[i], self.tau)


def sgd_confidence(batches, config: ConfidenceConfig, engine: str = "local") -> np.ndarray:
    """p_M(label | text) of every row of ``batches`` (tables, or one) by the cross-fitted SGD n-gram model."""
    from refinery.models.ngram import cross_fit_sgd

    proba, _, y = cross_fit_sgd(batches, config.folds, config.seed, epochs=config.epochs, engine=engine)
    return proba[np.arange(len(y)), y]


def source_confidence(source: StageInput, config: ConfidenceConfig, checkpoints=None) -> np.ndarray:
    """p_M(label | text) of every row of ``source``, in its batches' order (the SGD model reads them one at a
    time; the others see the whole input at once, and keep finished folds in ``checkpoints``)."""
    if config.streams:
        return sgd_confidence((b.rows for b in source.iter_batches() if b.rows.num_rows), config, source.engine)
    table, _ = source.load()
    return config_confidence(table, config, source.engine, checkpoints)


def confidence_filter(table: pa.Table, tau: float = 0.95, model=None, proba_column: str | None = None):
    """(kept rows, rejected rows with ``reason``) by a fitted model or a probability column."""
    return split_by_confidence(table, label_confidence(table, model, proba_column), tau)
