"""The classifier protocol and the K-fold cross-fitting helper."""
from __future__ import annotations

import json
import os
from typing import Protocol, runtime_checkable

import numpy as np
import pyarrow as pa

from refinery.core.folds import fold_of
from refinery.messages import Refusal, Setting


@runtime_checkable
class Classifier(Protocol):
    """sklearn-like: fit on canonical rows, predict label probabilities, persist to a folder."""

    classes_: list

    def fit(self, table: pa.Table) -> "Classifier": ...

    def predict_proba(self, table: pa.Table) -> np.ndarray: ...

    def save(self, path: str) -> None: ...


def label_proba(proba: np.ndarray, classes, labels) -> np.ndarray:
    """p(y_i | x_i): each row's probability of its own label (0 for a label the model never saw)."""
    index = {c: j for j, c in enumerate(classes)}
    cols = np.array([index.get(l, -1) for l in labels], dtype=np.int64)
    return np.where(cols >= 0, proba[np.arange(len(cols)), np.maximum(cols, 0)], 0.0)


def own_label_proba(model: Classifier, table: pa.Table) -> np.ndarray:
    """A fitted classifier's p(y_i | x_i) for each row of ``table`` (its own label)."""
    return label_proba(model.predict_proba(table), model.classes_, table["label"].to_pylist())


def predict(model: Classifier, table: pa.Table) -> list:
    proba = model.predict_proba(table)
    return [model.classes_[i] for i in proba.argmax(axis=1)]


def cross_fit_proba(make_model, table: pa.Table, k: int = 5, seed: int = 0, checkpoints=None
                    ) -> tuple[np.ndarray, list]:
    """Out-of-fold probabilities: row i is scored by a model fit on the other k−1 folds.

    With ``checkpoints`` (``io.checkpoints.Checkpoints``) each finished fold's scores are kept, and a rerun
    after a kill fits only the folds that had not finished.
    """
    folds = fold_of(table["id"], k, seed)
    classes = sorted(set(table["label"].to_pylist()))
    proba = np.zeros((table.num_rows, len(classes)))
    for f in range(k):
        test = folds == f
        if not test.any():
            continue
        scores = checkpoints.get(f"fold-{f}") if checkpoints is not None else None
        if scores is None:
            model = make_model().fit(table.filter(pa.array(~test)))
            p = model.predict_proba(table.filter(pa.array(test)))
            scores = pa.table({str(c): p[:, j] for j, c in enumerate(model.classes_)})
            if checkpoints is not None:
                checkpoints.put(f"fold-{f}", scores)
        cols = [classes.index(c) for c in scores.column_names]
        proba[np.ix_(np.nonzero(test)[0], cols)] = np.column_stack([scores[c].to_numpy() for c in scores.column_names])
    return proba, classes


CLASSIFIERS = ("ngram", "transformer")   # make_classifier's backends


def make_classifier(backend: str, inputs: str = "pair", **params) -> Classifier:
    """A fresh classifier: ``ngram`` (hashed n-grams + logistic regression) or ``transformer`` (fine-tuned encoder)."""
    if backend == "ngram":
        from refinery.models.ngram import NGramClassifier

        return NGramClassifier(inputs, **params)
    if backend == "transformer":
        from refinery.models.transformer import TransformerClassifier

        return TransformerClassifier(inputs=inputs, **params)
    raise Refusal(f"unknown classifier backend {backend!r} ({', '.join(CLASSIFIERS)})", code="invalid-setting")


def load_classifier(path: str) -> Classifier:
    if not os.path.isfile(os.path.join(path, "classifier.json")):
        raise Refusal(Setting("model", path), ": no saved classifier there (no classifier.json); give ngram, "
                      "transformer, or the folder a classifier was saved to", code="model")
    with open(os.path.join(path, "classifier.json")) as fh:
        kind = json.load(fh)["kind"]
    if kind == "ngram":
        from refinery.models.ngram import NGramClassifier

        return NGramClassifier.load(path)
    if kind == "transformer":
        from refinery.models.transformer import TransformerClassifier

        return TransformerClassifier.load(path)
    raise Refusal(f"{path}: unknown classifier kind {kind!r}", code="model")
