"""Confidence filter (Wu et al. 2022 §2.2.2; IBADR step 4): keep a row only if p_M(label | text) > τ.

p_M comes from a column, a saved classifier, or a classifier cross-fitted on the input itself
(``model: ngram`` or ``transformer``): each row is scored by a model fit on the other K−1 folds,
so no row is judged by a model that saw it. The n-gram model is a logistic regression on hashed
TF-IDF n-grams, fit by averaged SGD in a few passes over the rows (``solver: sgd``, the K fold models
side by side, on Ray tasks under the Ray engine) or by L-BFGS to convergence (``solver: lbfgs``).
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from refinery.core.validation import NAME_OR_FOLDER, NOT_EMPTY, SEED, at_least, number_in, one_of, setting, validate
from refinery.pipeline.config import to_dict
from refinery.models.base import CLASSIFIERS
from refinery.pipeline.executor import row_numbers
from refinery.pipeline.filter import FilterStage, split
from refinery.pipeline.output import StageOutput
from refinery.pipeline.stage import StageInput, set_column

SOLVERS = ("sgd", "lbfgs")


@dataclass
class ConfidenceConfig:
    tau: float = setting(0.95, number_in(0, 1, open_high=True), "τ: the least p_M(label | text) a kept row exceeds.")
    model: str | None = setting(None, NOT_EMPTY.or_none(), "ngram or transformer (cross-fitted on the input), or a "
                                                           "saved classifier's folder (none and no --proba-column: "
                                                           "ngram).", path=NAME_OR_FOLDER)
    proba_column: str | None = setting(None, NOT_EMPTY.or_none(), "Or a column holding p_M(label | text).")
    folds: int = setting(5, at_least(2), "K of the cross-fitting.")
    seed: int = setting(0, SEED, "Seed of the folds (and of SGD's order).")
    solver: str = setting("sgd", one_of(*SOLVERS), "How the ngram model is fit: averaged SGD in a few passes "
                                                     "(streams millions of rows), or L-BFGS to convergence.")
    epochs: int = setting(3, at_least(1), "Passes of SGD over the rows (solver sgd).")

    @property
    def streams(self) -> bool:
        """Whether p_M comes from the n-gram model fit by SGD, which reads the input a batch at a time."""
        return self.model == "ngram" and self.solver == "sgd"

    @property
    def fits_per_fold(self) -> bool:
        """Whether p_M comes from a model fit per fold to convergence (checkpointed fold by fold)."""
        return self.model == "transformer" or (self.model == "ngram" and self.solver == "lbfgs")

    def __post_init__(self):
        validate(self)
        if self.model is None and self.proba_column is None:
            self.model = "ngram"   # the n-gram model cross-fitted on the input: what needs nothing else
        if self.model is not None and self.proba_column is not None:
            raise ValueError("give one of --model (model: ngram, transformer or a saved classifier's folder) and "
                             "--proba-column (proba_column: a column holding p_M(label | text)), not both")

    def in_effect(self) -> dict:
        """The settings that shape p_M: a column's name, a saved classifier's folder, or the cross-fitting's."""
        if self.proba_column is not None:
            return {"tau": self.tau, "proba_column": self.proba_column}
        if self.model not in CLASSIFIERS:
            return {"tau": self.tau, "model": self.model}
        fitting = {"tau": self.tau, "model": self.model, "folds": self.folds, "seed": self.seed}
        if self.model == "ngram":
            fitting["solver"] = self.solver
        return {**fitting, "epochs": self.epochs} if self.streams else fitting


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


class _Reasons:
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


class ConfidenceStage(FilterStage):
    """Keep the rows whose task-model confidence in their label exceeds tau.

    Writes kept/ (with the input's rejects) and rejected/, each row with its confidence, and report/.
    """

    name, Config = "confidence", ConfidenceConfig
    needs = ("id", "text_a", "label")
    adds = ("confidence",)

    def prepare(self, source: StageInput, out: StageOutput) -> None:
        """p_M(label | text) of every row, in the order the batches come (cross-fitting sees the whole input).

        A cross-fitting that fits a model per fold keeps each finished fold's scores under ``out``, so a
        killed run continues from them. On Ray the input is read and the models fit on the cluster: the
        driver receives the scores only.
        """
        from refinery.io.corpus import input_fingerprints

        self.checkpoints, self.resumed = None, ""
        if self.config.fits_per_fold:
            key = {"config": to_dict(self.config), "inputs": input_fingerprints(source.splits,
                                                                                 source.opts.storage_options)}
            self.checkpoints = out.checkpoints(self.name, key)
            done = len(self.checkpoints.done())
            if done:
                self.resumed = f"resumed: {done} of {self.config.folds} folds' scores from the interrupted run before"
        args = {"source": source, "config": self.config, "checkpoints": self.checkpoints}
        if source.engine == "ray":
            from refinery.pipeline.engine import map_calls

            [confidence] = map_calls(source_confidence, [{}], args, "ray", desc="confidence", cpus=0)
        else:
            confidence = source_confidence(**args)
        self._confidence = confidence

    def annotate(self, batch: pa.Table, keep: np.ndarray) -> tuple[pa.Table, pa.Table]:
        return split(set_column(batch, "confidence", pa.array(self._scores(batch))), keep)

    def decide(self, batch: pa.Table) -> tuple[np.ndarray, list]:
        conf = self._scores(batch)
        return conf > self.config.tau, _Reasons(conf, self.config.tau)

    def settings_in_effect(self) -> dict:
        return self.config.in_effect()

    def few_kept_hint(self) -> str:
        """Where p_M lies against τ: the rows' median and highest confidence."""
        if not len(self._confidence):
            return ""
        median = float(np.median(self._confidence))
        half = np.floor(median * 100) / 100
        return (f": p_M(label | text) has median {median:.3f} and reaches "
                f"{self._confidence.max():.3f}, against tau {self.config.tau:g}"
                + (f"; --tau {half:.2f} keeps about half the rows" if half > 0 else ""))

    def reason_kind(self, reason: str) -> str:
        return f"p_M(label | text) <= tau {self.config.tau}"

    def remedy(self) -> str:
        return (f"a model is most confident where a shortcut gives the label away, so the rows it keeps carry the "
                f"shortcut more often: lower --tau (now {self.config.tau:g}), or z-filter the kept rows "
                "(refinery zfilter OUT/kept).")

    def _scores(self, batch: pa.Table) -> np.ndarray:
        """p_M(label | text) of the batch's rows (scored in ``prepare``, in the input's order)."""
        return self._confidence[row_numbers(batch)]
