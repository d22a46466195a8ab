"""Hashed n-gram TF-IDF + logistic regression: the fast CPU classifier for probes and shallow models."""
from __future__ import annotations

import json
import os
import pickle

import numpy as np
import pyarrow as pa
from sklearn.base import BaseEstimator, TransformerMixin
from sklearn.feature_extraction.text import HashingVectorizer, TfidfTransformer
from sklearn.linear_model import LogisticRegression
from sklearn.pipeline import make_pipeline
from threadpoolctl import threadpool_limits


class SeenColumns(TransformerMixin, BaseEstimator):
    """Keeps the hashed columns that occur in the training rows.

    A column never seen in training has zero gradient and its L2-penalized weight stays 0, so the
    logistic regression is the same on the seen columns alone; L-BFGS then works on vectors of the
    corpus's vocabulary size instead of ``n_features`` × classes (2.4 s → 0.1 s on 60 rows).
    """

    def fit(self, X, y=None):
        self.columns_ = np.unique(X.indices)
        return self

    def transform(self, X):
        return X[:, self.columns_]


class NGramClassifier:
    """Logistic regression on hashed word n-grams of the chosen input.

    ``inputs``: ``hypothesis`` (text_b only; text_a for single-text corpora), ``premise``,
    or ``pair`` (both texts, each field's n-grams kept apart).
    """

    kind = "ngram"

    def __init__(self, inputs: str = "pair", ngram_range=(1, 2), n_features: int = 2 ** 20, C: float = 1.0,
                 max_iter: int = 1000):
        if inputs not in ("hypothesis", "premise", "pair"):
            raise ValueError(f"inputs must be hypothesis, premise or pair, not {inputs!r}")
        self.inputs, self.ngram_range, self.n_features = inputs, tuple(ngram_range), n_features
        self.C, self.max_iter = C, max_iter
        self.pipeline = None
        self.classes_: list = []

    def _texts(self, table: pa.Table) -> list[str]:
        a = table["text_a"].to_pylist()
        b = table["text_b"].to_pylist() if "text_b" in table.column_names else [None] * len(a)
        if self.inputs == "hypothesis":
            return [y if y is not None else x for x, y in zip(a, b)]
        if self.inputs == "premise":
            return a
        # pair: mark premise tokens so the two fields stay apart in feature space
        return [" ".join("p_" + w for w in x.split()) + " " + (y or "") for x, y in zip(a, b)]

    def fit(self, table: pa.Table, sample_weight: np.ndarray | None = None) -> "NGramClassifier":
        """Fit on ``table``'s rows (``sample_weight``: per-row weights of the logistic loss, e.g. IPS weights).

        BLAS runs on one thread here: L-BFGS-B makes a few hundred level-1 BLAS calls per
        iteration on vectors of the vocabulary's size, where OpenBLAS's thread hand-offs cost
        more than the arithmetic (15k planted rows on 2 cores: 14.0 s → 5.5 s, same optimum).
        """
        self.pipeline = make_pipeline(
            HashingVectorizer(ngram_range=self.ngram_range, n_features=self.n_features, alternate_sign=False,
                              token_pattern=r"(?u)\b\w+\b|[^\w\s]", lowercase=True),
            TfidfTransformer(sublinear_tf=True),
            SeenColumns(),
            LogisticRegression(C=self.C, max_iter=self.max_iter),
        )
        with threadpool_limits(limits=1, user_api="blas"):
            self.pipeline.fit(self._texts(table), table["label"].to_pylist(),
                              logisticregression__sample_weight=sample_weight)
        self.classes_ = list(self.pipeline.classes_)
        return self

    def predict_proba(self, table: pa.Table) -> np.ndarray:
        if self.pipeline is None:
            raise RuntimeError("NGramClassifier is not fitted")
        return self.pipeline.predict_proba(self._texts(table))

    def save(self, path: str) -> None:
        os.makedirs(path, exist_ok=True)
        with open(os.path.join(path, "classifier.json"), "w") as fh:
            json.dump({"kind": self.kind, "inputs": self.inputs, "ngram_range": self.ngram_range,
                       "n_features": self.n_features, "C": self.C, "classes": self.classes_}, fh)
        with open(os.path.join(path, "pipeline.pkl"), "wb") as fh:
            pickle.dump(self.pipeline, fh)

    @classmethod
    def load(cls, path: str) -> "NGramClassifier":
        with open(os.path.join(path, "classifier.json")) as fh:
            meta = json.load(fh)
        obj = cls(meta["inputs"], meta["ngram_range"], meta["n_features"], meta["C"])
        with open(os.path.join(path, "pipeline.pkl"), "rb") as fh:
            obj.pipeline = pickle.load(fh)
        obj.classes_ = meta["classes"]
        return obj


def sublinear_tf(table: pa.Table, inputs: str = "pair", ngram_range=(1, 2), n_features: int = 2 ** 20):
    """1 + ln tf of each row's hashed word n-grams (CSR, float32): one block of ``n_features`` columns per field
    read, so a premise's n-grams and a hypothesis's never share a column (``inputs`` as in ``NGramClassifier``)."""
    import pyarrow.compute as pc
    import scipy.sparse as sp

    from refinery.core.hashed_ngrams import ngram_counts

    a = table["text_a"]
    b = pc.coalesce(table["text_b"], a) if "text_b" in table.column_names else a
    fields = {"premise": [a], "hypothesis": [b], "pair": [a, b]}[inputs]
    counts = sp.hstack([ngram_counts(f, table.num_rows, n_features, ngram_range) for f in fields], format="csr")
    counts.data = 1.0 + np.log(counts.data)
    return counts


def tf_idf(tf, idf: np.ndarray):
    """TF-IDF rows of unit length: tf·idf, L2-normalized (with ``sublinear_tf``'s tf, scikit-learn's
    TfidfTransformer with ``sublinear_tf``, ``smooth_idf``, ``norm="l2"``)."""
    import scipy.sparse as sp

    lengths = np.diff(tf.indptr)
    data = tf.data * idf[tf.indices]
    norms = np.sqrt(np.bincount(np.repeat(np.arange(tf.shape[0]), lengths), weights=np.square(data),
                                minlength=tf.shape[0]))
    data /= np.repeat(np.where(norms > 0, norms, 1.0), lengths).astype(np.float32)
    return sp.csr_matrix((data, tf.indices, tf.indptr), shape=tf.shape)


def smooth_idf(document_frequency: np.ndarray, documents: int) -> np.ndarray:
    """idf(t) = ln((1 + n) / (1 + df(t))) + 1 (scikit-learn's smooth idf)."""
    return (np.log((1.0 + documents) / (1.0 + document_frequency)) + 1.0).astype(np.float32)


def sgd_fold_proba(fold: int, tf, y: np.ndarray, folds: np.ndarray, num_classes: int, document_frequency,
                   C: float = 1.0, epochs: int = 5, block_rows: int = 65_536, seed: int = 0, on_block=None):
    """p(y | x) of fold ``fold``'s rows from a model fit on the other folds' rows, streamed in blocks.

    The model minimizes (1/n) Σ_{i ∉ fold} log-loss_i + (α/2)‖w‖² with α = 1/(C·n), which is
    ``NGramClassifier``'s objective C·Σ log-loss + ½‖w‖² divided by C·n, one-vs-rest: SGD with
    scikit-learn's "optimal" step size 1/(α(t + t0)), ``epochs`` passes over the training rows, each in
    a fresh seeded order cut into blocks of ``block_rows`` (``partial_fit``). TF-IDF's idf counts the
    training rows only (``document_frequency``: over all rows; the fold's own are taken off).
    """
    from sklearn.linear_model import SGDClassifier

    held_out = folds == fold
    train = np.nonzero(~held_out)[0]
    fold_tf = tf[np.nonzero(held_out)[0]]
    idf = smooth_idf(document_frequency - np.bincount(fold_tf.indices, minlength=tf.shape[1]), len(train))
    model = SGDClassifier(loss="log_loss", alpha=1.0 / (C * len(train)), learning_rate="optimal", shuffle=False, average=True,
                          random_state=seed)
    classes = np.arange(num_classes)
    rng = np.random.default_rng([seed, fold])
    for _ in range(epochs):
        order = train[rng.permutation(len(train))]
        for start in range(0, len(order), block_rows):
            block = order[start:start + block_rows]
            model.partial_fit(tf_idf(tf[block], idf), y[block], classes=classes)
            if on_block is not None:
                on_block()
    return model.predict_proba(tf_idf(fold_tf, idf))


def blocks_per_fold(rows: int, k: int, block_rows: int) -> int:
    """Blocks one epoch of one fold's model reads (for progress)."""
    return -(-(rows - rows // k) // block_rows)


def cross_fit_sgd(table: pa.Table, k: int = 5, seed: int = 0, *, inputs: str = "pair", C: float = 1.0,
                  epochs: int = 5, block_rows: int = 65_536, engine: str = "local") -> tuple[np.ndarray, list]:
    """Out-of-fold p(y | x) of every row by ``sgd_fold_proba``: (probabilities, classes).

    The rows are hashed once; the K fold models then train side by side (threads, or Ray tasks reading
    the one copy of the counts from the object store), so the work is K·epochs passes of sparse SGD.
    """
    import scipy.sparse as sp

    from refinery.models.base import fold_of
    from refinery.pipeline.engine import map_calls
    from refinery.progress import progress

    labels = table["label"].to_numpy(zero_copy_only=False)
    classes = sorted(set(labels.tolist()))
    y = np.searchsorted(np.array(classes, dtype=object), labels)
    folds = fold_of(table["id"].to_pylist(), k, seed)
    with progress(total=table.num_rows, desc="confidence: n-grams", unit=" rows") as bar:
        parts = []
        for start in range(0, table.num_rows, block_rows):
            parts.append(sublinear_tf(table.slice(start, block_rows), inputs))
            bar.update(parts[-1].shape[0])
    tf = sp.vstack(parts, format="csr")
    del parts
    shared = {"tf": tf, "y": y, "folds": folds, "num_classes": len(classes), "C": C, "epochs": epochs,
              "block_rows": block_rows, "seed": seed,
              "document_frequency": np.bincount(tf.indices, minlength=tf.shape[1])}
    present = [f for f in range(k) if (folds == f).any()]
    fold_proba = map_calls(sgd_fold_proba, [{"fold": f} for f in present], shared, engine,
                           desc=f"confidence: {len(present)} fold models, {epochs} epochs")
    proba = np.zeros((table.num_rows, len(classes)))
    for f, p in zip(present, fold_proba):
        proba[folds == f] = p
    return proba, classes
