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


def hashed_rows(tables, inputs: str = "pair", bits: int = 20, desc: str = "n-grams"):
    """(``sublinear_tf`` of every row of ``tables`` in order with 2^``bits`` columns per field, each row's label
    code, the labels sorted): what a model over the whole corpus reads (AFLite's Φ, a data map's task model). The
    rows are stacked once (``io.stacked_rows.StackedRows``: past 256 MiB the blocks wait on disk, not beside the
    matrix)."""
    from refinery.io.spill import return_freed_memory
    from refinery.io.stacked_rows import StackedRows
    from refinery.progress import progress

    stacked, labels = StackedRows(2 ** bits * (2 if inputs == "pair" else 1), prefix="ngrams-"), []
    with progress(desc=desc, unit=" rows") as bar:
        for table in tables:
            stacked.append(sublinear_tf(table, inputs, (1, 2), 2 ** bits))
            labels.append(table["label"].cast(pa.string()))
            bar.update(table.num_rows)
    y, names = label_codes(labels)
    del labels
    return_freed_memory()   # the batches' and the hashing's freed memory: not held beside the matrix being stacked
    matrix = stacked.matrix()
    return_freed_memory()   # nor carried through the model's loop
    return matrix, y, names


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


def document_frequency(tf, chunk: int = 1 << 24) -> np.ndarray:
    """Rows with each column (``tf``: CSR, canonical), counted a chunk of values at a time (``np.bincount`` widens
    the whole index array to int64 first)."""
    counts = np.zeros(tf.shape[1], np.int64)
    for start in range(0, tf.nnz, chunk):
        counts += np.bincount(tf.indices[start:start + chunk], minlength=tf.shape[1])
    return counts


def smooth_idf(document_frequency: np.ndarray, documents: int) -> np.ndarray:
    """idf(t) = ln((1 + n) / (1 + df(t))) + 1 (scikit-learn's smooth idf)."""
    return (np.log((1.0 + documents) / (1.0 + document_frequency)) + 1.0).astype(np.float32)


def fold_idf(fold: int, rows: tuple, folds: np.ndarray, document_frequency: np.ndarray) -> tuple[np.ndarray, int]:
    """(the idf of fold ``fold``'s model, its training rows): TF-IDF's idf counts the training rows only
    (``document_frequency`` counts all rows; the fold's own are taken off)."""
    indptr, indices, _ = rows
    held_out = np.flatnonzero(folds == fold)
    fold_df = np.zeros_like(document_frequency)
    _count_columns(indptr, indices, held_out, fold_df)
    train_rows = len(folds) - len(held_out)
    return smooth_idf(document_frequency - fold_df, train_rows), train_rows


def sgd_fold_model(fold: int, rows: tuple, blocks: list, y: np.ndarray, folds: np.ndarray, num_classes: int,
                   document_frequency: np.ndarray, *, C: float = 1.0, epochs: int = 3, seed: int = 0
                   ) -> tuple[np.ndarray, np.ndarray]:
    """(averaged weights, averaged intercepts) of fold ``fold``'s one-vs-rest model, fit on the other folds' rows,
    streamed in blocks (each block's rows gathered once for every weight vector).

    The model minimizes (1/n) Σ_{i ∉ fold} log-loss_i + (α/2)‖w‖² with α = 1/(C·n), which is
    ``NGramClassifier``'s objective C·Σ log-loss + ½‖w‖² divided by C·n, one-vs-rest: averaged SGD with
    scikit-learn's "optimal" step size 1/(α(t + t0)) (``sgd.OneVsRestSGD``, its ``partial_fit`` compiled),
    ``epochs`` passes over the training rows, each pass through ``blocks`` — the row numbers of the corpus in a
    seeded random order, cut into blocks — in a fresh order, and through each block's rows in a fresh order.
    ``rows``: the corpus's ``sublinear_tf`` rows as (indptr, indices, data), TF-IDF by ``fold_idf``.
    """
    from refinery.models.sgd import OneVsRestSGD

    idf, train_rows = fold_idf(fold, rows, folds, document_frequency)
    model = OneVsRestSGD(num_classes, len(document_frequency), 1.0 / (C * train_rows))
    rng = np.random.default_rng([seed, fold])
    for _ in range(epochs):
        for b in rng.permutation(len(blocks)):
            train = blocks[b][folds[blocks[b]] != fold]
            train = train[rng.permutation(len(train))]
            model.partial_fit(rows, train, y[train], idf)
    return model.averages, model.average_intercepts


@numba.njit(nogil=True, cache=True)
def _count_columns(indptr, indices, rows, counts):
    """counts[j] += 1 for each value in column j of the ``rows`` (a document frequency over some rows)."""
    for r in rows:
        for p in range(indptr[r], indptr[r + 1]):
            counts[indices[p]] += 1


def by_frequency(matrix, quantum: int = 64):
    """(``matrix`` with its columns renumbered by document frequency, the most frequent first, and the columns
    that hold no value dropped; each new column's document frequency). The indices are rewritten in place and each
    row's values keep their order, so every per-column computation over it (TF-IDF, a linear model's steps and
    scores) gives what it gives over the hashed columns; the weights a model touches most sit together in the
    CPU's cache. The columns are padded with empty ones to a multiple of ``quantum``, so that vector routines
    (BLAS) see whole SIMD blocks, as over the 2^k hashed columns."""
    import scipy.sparse as sp

    frequency = document_frequency(matrix, chunk=1 << 22)
    used = np.flatnonzero(frequency)
    order = used[np.argsort(-frequency[used], kind="stable")]
    rank = np.zeros(matrix.shape[1], np.int32)
    rank[order] = np.arange(len(order), dtype=np.int32)
    _relabel(matrix.indices, rank)
    columns = max(quantum, -(-len(order) // quantum) * quantum)
    counts = np.zeros(columns, np.int64)
    counts[:len(order)] = frequency[order]
    return sp.csr_matrix((matrix.data, matrix.indices, matrix.indptr), shape=(matrix.shape[0], columns)), counts


@numba.njit(nogil=True, cache=True)
def _relabel(indices, rank):
    for p in range(len(indices)):
        indices[p] = rank[indices[p]]


class HashedCorpus:
    """A corpus read batch by batch into what the SGD fold models need: its ``sublinear_tf`` rows stacked once
    (``matrix``, CSR; ``io.stacked_rows.StackedRows``), its columns numbered by document frequency (``by_frequency``;
    ``document_frequency`` of each), and ``blocks`` of ``block_rows`` rows drawn in a seeded random order (so a
    block samples the corpus even when its rows come sorted by label), each block's rows in their reading order.
    The matrix holds the rows block by block (row i is the corpus's row ``order[i]``; ``y``, each row's label code,
    ``classes`` sorted, and ``folds`` in the same order), so the rows a model's step reads lie together.

    No batch's text is kept: the hashed rows are the largest thing held (about 35 values a pair).
    """

    def __init__(self, batches, k: int, seed: int = 0, inputs: str = "pair", block_rows: int = 65_536):
        import pyarrow.compute as pc

        from refinery.core.folds import fold_of
        from refinery.io.spill import return_freed_memory
        from refinery.io.stacked_rows import StackedRows
        from refinery.progress import progress

        stacked = StackedRows(2 ** 20 * (2 if inputs == "pair" else 1), prefix="ngrams-")
        codes, folds, index = [], [], {}
        with progress(desc="confidence: n-grams", unit=" rows") as bar:
            for batch in batches:
                encoded = pc.dictionary_encode(batch["label"]).combine_chunks()
                local = np.array([index.setdefault(v, len(index)) for v in encoded.dictionary.to_pylist()], np.int64)
                codes.append(local[encoded.indices.to_numpy(zero_copy_only=False)])
                folds.append(fold_of(batch["id"], k, seed).astype(np.int8 if k < 128 else np.int32))
                for start in range(0, batch.num_rows, block_rows):   # the scanner's buffers grow with the text
                    stacked.append(sublinear_tf(batch.slice(start, block_rows), inputs))
                bar.update(batch.num_rows)
        self.classes = sorted(index)
        rank = np.argsort(np.argsort(np.array(list(index), dtype=object)))
        y = rank[np.concatenate(codes)] if codes else np.zeros(0, np.int64)
        drawn = np.random.default_rng(seed).permutation(len(y))
        small = np.int32 if len(drawn) < 2 ** 31 else np.int64
        self.order = np.concatenate([np.sort(drawn[start:start + block_rows]) for start in
                                     range(0, len(drawn), block_rows)] or [drawn]).astype(small)
        del drawn
        self.y = y[self.order].astype(np.int8 if len(index) < 128 else np.int32)
        self.folds = np.concatenate(folds)[self.order] if folds else np.zeros(0, np.int8)
        del y, codes, folds
        return_freed_memory()   # the reading's buffers, before the matrix is allocated
        self.matrix, self.document_frequency = by_frequency(stacked.matrix(self.order))
        return_freed_memory()
        self.blocks = [np.arange(start, min(start + block_rows, len(self.y)), dtype=small)
                       for start in range(0, len(self.y), block_rows)]

    @property
    def rows(self) -> int:
        return len(self.y)


def cross_fit_sgd(batches, k: int = 5, seed: int = 0, *, inputs: str = "pair", C: float = 1.0,
                  epochs: int = 3, block_rows: int = 65_536, engine: str = "local"
                  ) -> tuple[np.ndarray, list, np.ndarray]:
    """Out-of-fold p(y | x) of every row of ``batches`` (Arrow tables, or one table): (probabilities, classes, each
    row's class index). Each row is scored by the model of its fold (``sgd_fold_model``), fit on the others.

    The rows are hashed once (``HashedCorpus``); the K fold models then train side by side (threads, or Ray tasks
    reading one copy of the rows from the object store), and each fold's rows are scored by its model
    (``sgd.ovr_proba``).
    """
    from refinery.models.sgd import ovr_proba
    from refinery.pipeline.engine import map_calls

    corpus = HashedCorpus([batches] if isinstance(batches, pa.Table) else batches, k, seed, inputs, block_rows)
    matrix, labels = corpus.matrix, len(corpus.classes)
    rows = (matrix.indptr, matrix.indices, matrix.data)
    shared = {"rows": rows, "blocks": corpus.blocks, "y": corpus.y, "folds": corpus.folds, "num_classes": labels,
              "C": C, "epochs": epochs, "seed": seed, "document_frequency": corpus.document_frequency}
    present = [f for f in range(k) if (corpus.folds == f).any()]
    fitted = map_calls(sgd_fold_model, [{"fold": f} for f in present], shared, engine,
                       desc=f"confidence: {len(present)} fold models, {epochs} epochs")
    proba = np.zeros((corpus.rows, labels), np.float32)   # the models' float32 probabilities, as they come
    for i, fold in enumerate(present):
        (weights, intercepts), fitted[i] = fitted[i], None   # each model let go once its rows are scored
        idf, _ = fold_idf(fold, rows, corpus.folds, corpus.document_frequency)
        held_out = np.flatnonzero(corpus.folds == fold)
        for start in range(0, len(held_out), block_rows):
            part = held_out[start:start + block_rows]
            proba[corpus.order[part]] = ovr_proba(tf_idf(matrix[part], idf, in_place=True), weights, intercepts,
                                                  labels)
    classes, y = corpus.classes, np.empty(corpus.rows, np.int64)
    y[corpus.order] = corpus.y
    del corpus, matrix, rows, shared, fitted   # the hashed rows go before the probabilities widen
    return proba.astype(np.float64), classes, y
