"""A random forest fit on distinct feature vectors weighted by their counts: the leakage features of a pair
are a few integers, so a million rows hold a few thousand distinct (vector, label) cells.

A random forest's tree t is grown on a bootstrap of the n training rows (Breiman 2001): each row drawn
c_i ~ Multinomial(n, 1/n) times, and scikit-learn grows it on the rows weighted by c_i. Rows with the same
vector and label are interchangeable to a tree, so the draw summed over a cell j is c_j ~ Multinomial(n, n_j/n)
and the tree grown on the cells weighted by c_j is the tree grown on the rows: the same forest in
distribution, at a cost set by the number of cells instead of the rows. With ``max_samples`` each tree draws
that many rows instead of n (scikit-learn's ``max_samples``: subbagging), which bounds a tree's cells when
the features are many and continuous (the advanced set). Predictions are made once per distinct vector.
A training set's cells (``Cells``) are made of its rows (``Cells.of``) or grouped where the rows lie
(``sentence_graph.GraphInput.cells``, in DuckDB): no matrix of the training rows need be held.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

TREE_DTYPE = np.float32   # scikit-learn's trees cast X to float32 to fit and to predict: the cells and the vectors
#                           to score are held in it, half their float64, and no tree copies them again


def distinct_rows(X: np.ndarray, *more: np.ndarray, dtype=None) -> tuple[np.ndarray, np.ndarray]:
    """(the distinct rows of ``X`` — with the columns ``more`` after its own — in lexicographic order, each row's index
    among them): each column coded by the rank of its value among the column's distinct values and folded into one
    key, coded in turn by its rank, a column at a time. The ranks come from hashing (``pandas.factorize`` with its
    distinct values sorted: what ``np.unique(..., return_inverse=True)`` gives, NaN last and -0.0 = 0.0, in linear
    time instead of a sort of every row; ``np.unique(axis=0)`` sorts rows as records, 5× slower still). ``more``
    is read where it is, not stacked beside ``X``: a copy of every row (1 GB for 11M pairs' twelve features).
    ``dtype``: the distinct rows in that type (distinct as given), filled a column at a time."""
    import pandas as pd

    X = np.asarray(X)
    columns = (*X.T, *map(np.asarray, more))
    key = np.zeros(len(X), np.int64)
    for column in columns:
        codes, values = pd.factorize(np.ascontiguousarray(column), sort=True, use_na_sentinel=False)
        key, _ = pd.factorize(key * len(values) + codes, sort=True)
        del codes
    key = key.astype(np.int64, copy=False)
    first = np.full(key.max() + 1 if len(key) else 0, len(key), np.int64)
    np.minimum.at(first, key, np.arange(len(key)))
    rows = np.empty((len(first), len(columns)), dtype or (np.result_type(*columns) if columns else X.dtype))
    for j, column in enumerate(columns):
        rows[:, j] = column[first]
    return rows, key


@dataclass(frozen=True)
class Cells:
    """A training set as a forest grows on it: its distinct (feature vector, label) cells in lexicographic order
    (``distinct_rows``), each cell's label as a position in ``classes`` (the training labels, ascending) and its
    rows (``counts``, float64)."""

    vectors: np.ndarray
    labels: np.ndarray
    counts: np.ndarray
    classes: np.ndarray

    @classmethod
    def of(cls, X: np.ndarray, y: np.ndarray) -> "Cells":
        """The cells of rows ``X`` labelled ``y``."""
        classes, codes = np.unique(y, return_inverse=True)
        rows, index = distinct_rows(X, codes.ravel(), dtype=TREE_DTYPE)
        return cls(rows[:, :-1], rows[:, -1].astype(np.int64), np.bincount(index, minlength=len(rows)).astype(
            np.float64), classes)


class CellForest:
    """scikit-learn's ``RandomForestClassifier`` (bootstrap, ``max_features="sqrt"``, probabilities averaged
    over trees) grown on count-weighted cells; ``fit``, ``predict_proba``, ``classes_`` and
    ``feature_importances_`` as there, and ``fit_predict_proba`` on a training set's ``Cells``, which keeps no
    tree."""

    def __init__(self, n_estimators: int = 100, min_samples_leaf: int = 1, max_depth: int | None = None,
                 max_samples: int | None = None, random_state: int = 0, n_jobs: int = -1):
        self.n_estimators, self.min_samples_leaf, self.max_depth = n_estimators, min_samples_leaf, max_depth
        self.max_samples, self.random_state, self.n_jobs = max_samples, random_state, n_jobs

    def fit(self, X: np.ndarray, y: np.ndarray) -> "CellForest":
        self.estimators_ = list(self._grown(Cells.of(X, y)))
        self.importances_ = np.array([tree.feature_importances_ for tree in self.estimators_])
        return self

    def fit_predict_proba(self, train: Cells, X_test: np.ndarray) -> np.ndarray:
        """``fit`` on the rows of ``train`` then ``predict_proba(X_test)``, the same figures, each tree dropped once it
        has scored ``X_test``'s distinct rows (its importances kept): what is held is the trees being grown, not the
        forest.
        A fully grown tree on a million distinct cells (continuous features) takes tens of MB, so a hundred of them
        took 5.8 GB beside 2M planted pairs whose sentences repeat. ``feature_importances_`` as after ``fit``; no
        tree is kept for another prediction."""
        vectors, index = distinct_rows(X_test, dtype=TREE_DTYPE)
        proba, importances = None, []
        for tree in self._grown(train):   # in the seeds' order: the sum of each row's shares as predict_proba's
            if proba is None:
                proba = np.zeros((len(vectors), len(self.classes_)))
            proba[:, tree.classes_.astype(np.int64)] += tree.predict_proba(vectors)
            importances.append(tree.feature_importances_)
        self.estimators_, self.importances_ = [], np.array(importances)
        return (proba / self.n_estimators)[index]

    def _grown(self, train: Cells):
        """The trees, one at a time in the order of their seeds, grown ``n_jobs`` at a time (joblib's generator:
        a few dispatched ahead, each handed over in order)."""
        from joblib import Parallel, delayed   # scikit-learn is loaded when a forest is grown, not with the CLI
        from sklearn.tree import DecisionTreeClassifier

        self.classes_, counts, self.cells_ = train.classes, train.counts, len(train.counts)
        rows = int(counts.sum())
        draws = rows if self.max_samples is None else min(rows, self.max_samples)
        seeds = np.random.default_rng(self.random_state).integers(0, 2 ** 31 - 1, size=(self.n_estimators, 2))

        def grow(seed):
            weight = np.random.default_rng(seed[0]).multinomial(draws, counts / counts.sum()).astype(np.float64)
            drawn = weight > 0
            tree = DecisionTreeClassifier(max_features="sqrt", min_samples_leaf=self.min_samples_leaf,
                                          max_depth=self.max_depth, random_state=int(seed[1]))
            return tree.fit(train.vectors[drawn], train.labels[drawn], sample_weight=weight[drawn])

        yield from Parallel(n_jobs=self.n_jobs, prefer="threads", return_as="generator")(
            delayed(grow)(s) for s in seeds)

    def predict_proba(self, X: np.ndarray) -> np.ndarray:
        """Mean over trees of each tree's leaf class shares, computed once per distinct row of ``X``."""
        vectors, index = distinct_rows(X, dtype=TREE_DTYPE)
        proba = np.zeros((len(vectors), len(self.classes_)))
        for tree in self.estimators_:   # a class a tree never drew has no column of its own
            proba[:, tree.classes_.astype(np.int64)] += tree.predict_proba(vectors)
        return (proba / len(self.estimators_))[index]

    @property
    def feature_importances_(self) -> np.ndarray:
        """Mean decrease in impurity, averaged over trees and normalized (as scikit-learn's forest)."""
        total = np.mean(self.importances_, axis=0)   # each tree's, kept by fit and fit_predict_proba
        return total / total.sum() if total.sum() > 0 else total
