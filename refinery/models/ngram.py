"""Hashed n-gram TF-IDF + logistic regression: the fast CPU classifier for probes and shallow models."""
from __future__ import annotations

import json
import os
import pickle

import numba
import numpy as np
import pyarrow as pa
from sklearn.base import BaseEstimator, TransformerMixin
from sklearn.feature_extraction.text import HashingVectorizer, TfidfTransformer
from sklearn.linear_model import LogisticRegression
from sklearn.pipeline import make_pipeline
from threadpoolctl import threadpool_limits

from refinery.messages import Refusal


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
            raise Refusal(f"inputs must be hypothesis, premise or pair, not {inputs!r}", code="invalid-setting")
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


def label_codes(labels: list) -> tuple[np.ndarray, list]:
    """(each row's label code, the labels sorted) of ``labels``, a list of string arrays in row order."""
    import pyarrow.compute as pc

    column = pa.chunked_array(labels, pa.string())
    names = sorted(pc.unique(column).to_pylist())
    y = pc.index_in(column, pa.array(names, pa.string())).to_numpy().astype(np.int64) if names else \
        np.zeros(0, np.int64)
    return y, names


def tf_idf(tf, idf: np.ndarray, in_place: bool = False):
    """TF-IDF rows of unit length: tf·idf, L2-normalized (with ``sublinear_tf``'s tf, scikit-learn's
    TfidfTransformer with ``sublinear_tf``, ``smooth_idf``, ``norm="l2"``); ``in_place``: in ``tf``'s own values
    (float32), with no array the size of them beside."""
    import scipy.sparse as sp

    if in_place and tf.data.dtype == np.float32:
        _unit_tf_idf(tf.indptr, tf.indices, tf.data, idf.astype(np.float32, copy=False))
        return tf
    lengths = np.diff(tf.indptr)
    data = tf.data * idf[tf.indices]
    norms = np.sqrt(np.bincount(np.repeat(np.arange(tf.shape[0]), lengths), weights=np.square(data),
                                minlength=tf.shape[0]))
    data /= np.repeat(np.where(norms > 0, norms, 1.0), lengths).astype(np.float32)
    return sp.csr_matrix((data, tf.indices, tf.indptr), shape=tf.shape)


@numba.njit(nogil=True, cache=True)
def _unit_tf_idf(indptr, indices, data, idf):
    """``tf_idf`` row by row in place: the same float32 products, float64 sums of their squares, float32 quotients."""
    for i in range(len(indptr) - 1):
        squares = 0.0
        for p in range(indptr[i], indptr[i + 1]):
            data[p] = data[p] * idf[indices[p]]
            squares += np.float64(data[p] * data[p])
        norm = np.float32(np.sqrt(squares) if squares > 0 else 1.0)
        for p in range(indptr[i], indptr[i + 1]):
            data[p] = data[p] / norm


def smooth_idf(document_frequency: np.ndarray, documents: int) -> np.ndarray:
    """idf(t) = ln((1 + n) / (1 + df(t))) + 1 (scikit-learn's smooth idf)."""
    return (np.log((1.0 + documents) / (1.0 + document_frequency)) + 1.0).astype(np.float32)


def fold_frequencies(rows, folds: np.ndarray, k: int) -> np.ndarray:
    """The rows of each fold holding each column (k × columns, int32): a fold's model's idf counts the other folds'
    rows only (``fold_idf``). ``rows``: ``io.stacked_rows.RowBlocks``, read once; ``folds``: each row's fold."""
    counts = np.zeros((k, rows.columns), np.int32)
    for b in range(len(rows)):
        start, stop = rows.span(b)
        indptr, indices, _ = rows.block(b)
        _count_fold_columns(indptr, indices, folds[start:stop], counts)
    return counts


@numba.njit(nogil=True, cache=True)
def _count_fold_columns(indptr, indices, folds, counts):
    """counts[fold of r, j] += 1 for each value in column j of each row r."""
    for r in range(len(indptr) - 1):
        for p in range(indptr[r], indptr[r + 1]):
            counts[folds[r], indices[p]] += 1


def fold_idf(fold: int, folds: np.ndarray, document_frequency: np.ndarray, fold_frequency: np.ndarray
             ) -> tuple[np.ndarray, int]:
    """(the idf of fold ``fold``'s model, its training rows): TF-IDF's idf counts the training rows only
    (``document_frequency`` counts all rows; the fold's own, ``fold_frequency[fold]``, are taken off)."""
    train_rows = len(folds) - int(np.count_nonzero(folds == fold))
    return smooth_idf(document_frequency - fold_frequency[fold], train_rows), train_rows


def sgd_fold_model(fold: int, rows, y: np.ndarray, folds: np.ndarray, num_classes: int,
                   document_frequency: np.ndarray, fold_frequency: np.ndarray, *, C: float = 1.0, epochs: int = 3,
                   seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    """(averaged weights, averaged intercepts) of fold ``fold``'s one-vs-rest model, fit on the other folds' rows,
    streamed a block at a time (each block's rows gathered once for every weight vector).

    The model minimizes (1/n) Σ_{i ∉ fold} log-loss_i + (α/2)‖w‖² with α = 1/(C·n), which is
    ``NGramClassifier``'s objective C·Σ log-loss + ½‖w‖² divided by C·n, one-vs-rest: averaged SGD with
    scikit-learn's "optimal" step size 1/(α(t + t0)) (``sgd.OneVsRestSGD``, its ``partial_fit`` compiled),
    ``epochs`` passes over the training rows, each pass through the blocks of ``rows`` — the corpus's
    ``sublinear_tf`` rows in a seeded random order, cut into blocks (``io.stacked_rows.RowBlocks``) — in a fresh
    order, and through each block's rows in a fresh order; TF-IDF by ``fold_idf``.
    """
    from refinery.models.sgd import OneVsRestSGD

    idf, train_rows = fold_idf(fold, folds, document_frequency, fold_frequency)
    model = OneVsRestSGD(num_classes, len(document_frequency), 1.0 / (C * train_rows))
    rng = np.random.default_rng([seed, fold])
    for _ in range(epochs):
        for b in rng.permutation(len(rows)):
            start, stop = rows.span(b)
            train = np.flatnonzero(folds[start:stop] != fold)
            train = train[rng.permutation(len(train))]
            model.partial_fit(rows.block(b), train, y[start + train], idf)
    return model.averages, model.average_intercepts


def frequency_ranks(frequency: np.ndarray, quantum: int = 64) -> tuple[np.ndarray, int, np.ndarray]:
    """(each column's new number, the columns, each new column's document frequency): columns renumbered by
    document ``frequency``, the most frequent first, the columns that hold no value dropped. Renumbered, each row's
    values keep their order, so every per-column computation over the rows (TF-IDF, a linear model's steps and
    scores) gives what it gives over the hashed columns; the weights a model touches most sit together in the
    CPU's cache. The columns are padded with empty ones to a multiple of ``quantum``, so that vector routines
    (BLAS) see whole SIMD blocks, as over the 2^k hashed columns."""
    used = np.flatnonzero(frequency)
    order = used[np.argsort(-frequency[used], kind="stable")]
    rank = np.zeros(len(frequency), np.int32)
    rank[order] = np.arange(len(order), dtype=np.int32)
    columns = max(quantum, -(-len(order) // quantum) * quantum)
    counts = np.zeros(columns, np.int64)
    counts[:len(order)] = frequency[order]
    return rank, columns, counts


class HashedCorpus:
    """A corpus read batch by batch into what an SGD model over its hashed n-grams needs: its ``sublinear_tf`` rows
    (2^``bits`` columns a field) hashed once and laid out in ``rows`` (``io.stacked_rows.RowBlocks``: files of the
    scratch folder, read a block at a time) in blocks of ``block_rows`` rows drawn in a seeded random order (so a
    block samples the corpus even when its rows come sorted by label), each block's rows in their reading order (a
    corpus of one block keeps its order; ``seed`` None: every row in reading order). Row i of ``rows`` is the
    corpus's row ``order[i]``; ``y``, each row's
    label code (``classes`` sorted), and ``folds`` (``k`` folds, None: not drawn) are in the same order.
    ``by_frequency``: the columns numbered by document frequency (``frequency_ranks``); ``unit_tf_idf``: the values
    made unit-length TF-IDF rows by the idf of every row (``tf_idf``); either way ``document_frequency`` holds each
    column's rows.

    No batch's text is kept, and the hashed rows (about 35 values a pair) wait on disk: the process holds about
    14 bytes a row (its label, fold, order and row start) and the blocks being read.
    """

    def __init__(self, batches, seed: int | None = 0, inputs: str = "pair", block_rows: int = 65_536, *,
                 k: int | None = None, bits: int = 20, by_frequency: bool = True, unit_tf_idf: bool = False,
                 desc: str = "n-grams"):
        import pyarrow.compute as pc

        from refinery.core.folds import fold_of
        from refinery.io.memory import return_freed_memory
        from refinery.io.stacked_rows import StackedRows
        from refinery.progress import progress

        stacked = StackedRows(2 ** bits * (2 if inputs == "pair" else 1), prefix="ngrams-", count_columns=True)
        codes, folds, index = [], [], {}
        with progress(desc=desc, unit=" rows") as bar:
            for batch in batches:
                encoded = pc.dictionary_encode(batch["label"].cast(pa.string())).combine_chunks()
                local = np.array([index.setdefault(v, len(index)) for v in encoded.dictionary.to_pylist()], np.int64)
                codes.append(local[encoded.indices.to_numpy(zero_copy_only=False)])
                if k is not None:
                    folds.append(fold_of(batch["id"], k, seed).astype(np.int8 if k < 128 else np.int32))
                for start in range(0, batch.num_rows, block_rows):   # the scanner's buffers grow with the text
                    stacked.append(sublinear_tf(batch.slice(start, block_rows), inputs, (1, 2), 2 ** bits))
                bar.update(batch.num_rows)
        self.classes = sorted(index)
        rank = np.argsort(np.argsort(np.array(list(index), dtype=object)))
        y = rank[np.concatenate(codes)] if codes else np.zeros(0, np.int64)
        small = np.int32 if len(y) < 2 ** 31 else np.int64
        if seed is None:
            self.order = np.arange(len(y), dtype=small)
        else:
            drawn = np.random.default_rng(seed).permutation(len(y))
            self.order = np.concatenate([np.sort(drawn[start:start + block_rows]) for start in
                                         range(0, len(drawn), block_rows)] or [drawn]).astype(small)
            del drawn
        self.y = y[self.order].astype(np.int8 if len(index) < 128 else np.int32)
        self.folds = np.concatenate(folds)[self.order] if folds else None
        del y, codes, folds
        return_freed_memory()   # the reading's buffers
        relabel, columns, transform = None, None, None
        self.document_frequency = stacked.document_frequency
        if by_frequency:
            relabel, columns, self.document_frequency = frequency_ranks(stacked.document_frequency)
        if unit_tf_idf:
            idf = smooth_idf(self.document_frequency, len(self.y))

            def transform(indptr, indices, data):   # ``tf_idf(…, in_place=True)`` of a block's rows
                _unit_tf_idf(indptr, indices, data, idf)
        self.rows = stacked.blocks(self.order, block_rows, relabel, columns, transform)
        return_freed_memory()

    def y_as_read(self) -> np.ndarray:
        """Each row's label code in the order the rows were read (int64)."""
        y = np.empty(len(self.y), np.int64)
        y[self.order] = self.y
        return y


def cross_fit_sgd(batches, k: int = 5, seed: int = 0, *, inputs: str = "pair", C: float = 1.0,
                  epochs: int = 3, block_rows: int = 65_536, engine: str = "local"
                  ) -> tuple[np.ndarray, list, np.ndarray]:
    """Out-of-fold p(y | x) of every row of ``batches`` (Arrow tables, or one table): (probabilities, classes, each
    row's class index). Each row is scored by the model of its fold (``sgd_fold_model``), fit on the others.

    The rows are hashed once and laid out on disk (``HashedCorpus``); the K fold models then train side by side
    (threads, or Ray tasks on this machine, reading the blocks from the files; on a cluster of several nodes, Ray
    tasks reading one copy of the rows from the object store),
    and each row is scored by its fold's model (``sgd.ovr_proba``) in one more pass over the blocks.
    """
    from refinery.models.sgd import ovr_proba
    from refinery.pipeline.engine import map_calls, single_node

    corpus = HashedCorpus([batches] if isinstance(batches, pa.Table) else batches, seed, inputs, block_rows, k=k,
                          desc="confidence: n-grams")
    rows, labels = corpus.rows, len(corpus.classes)
    try:
        fold_frequency = fold_frequencies(rows, corpus.folds, k)
        shared = {"rows": rows if engine == "local" or single_node() else rows.in_memory(), "y": corpus.y,
                  "folds": corpus.folds, "num_classes": labels, "C": C, "epochs": epochs, "seed": seed,
                  "document_frequency": corpus.document_frequency, "fold_frequency": fold_frequency}
        present = [f for f in range(k) if (corpus.folds == f).any()]
        fitted = map_calls(sgd_fold_model, [{"fold": f} for f in present], shared, engine,
                           desc=f"confidence: {len(present)} fold models, {epochs} epochs")
        del shared
        models = {fold: (*model, fold_idf(fold, corpus.folds, corpus.document_frequency, fold_frequency)[0])
                  for fold, model in zip(present, fitted)}
        del fitted
        proba = np.zeros((len(corpus.y), labels), np.float32)   # the models' float32 probabilities, as they come
        for b in range(len(rows)):   # each row scored by its fold's model, a block at a time
            start, stop = rows.span(b)
            block, block_folds = rows.matrix(b), corpus.folds[start:stop]
            for fold, (weights, intercepts, idf) in models.items():
                part = np.flatnonzero(block_folds == fold)
                if len(part):
                    proba[corpus.order[start + part]] = ovr_proba(tf_idf(block[part], idf, in_place=True), weights,
                                                                  intercepts, labels)
    finally:
        rows.close()
    classes, y = corpus.classes, corpus.y_as_read()
    del corpus, models
    return proba.astype(np.float64), classes, y
