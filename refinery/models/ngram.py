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
    rows are stacked once (``io.spill.StackedRows``: past 256 MiB the blocks wait on disk, not beside the matrix)."""
    from refinery.io.spill import StackedRows, return_freed_memory
    from refinery.progress import progress

    stacked, labels = StackedRows(2 ** bits * (2 if inputs == "pair" else 1), prefix="refinery-ngrams-"), []
    with progress(desc=desc, unit=" rows") as bar:
        for table in tables:
            stacked.append(sublinear_tf(table, inputs, (1, 2), 2 ** bits))
            labels.append(table["label"].cast(pa.string()))
            bar.update(table.num_rows)
    y, names = label_codes(labels)
    matrix = stacked.matrix()
    return_freed_memory()   # the batches' and the hashing's freed memory: not carried through the model's loop
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


def sgd_fold_proba(fold: int, blocks: list, y: np.ndarray, folds: np.ndarray, num_classes: int,
                   document_frequency: np.ndarray, *, C: float = 1.0, epochs: int = 3, seed: int = 0
                   ) -> tuple[np.ndarray, np.ndarray]:
    """(rows, p(y | x)) of fold ``fold``'s rows from a model fit on the other folds' rows, streamed in blocks.

    The model minimizes (1/n) Σ_{i ∉ fold} log-loss_i + (α/2)‖w‖² with α = 1/(C·n), which is
    ``NGramClassifier``'s objective C·Σ log-loss + ½‖w‖² divided by C·n, one-vs-rest: averaged SGD with
    scikit-learn's "optimal" step size 1/(α(t + t0)), ``epochs`` passes over the training rows
    (``partial_fit``), each pass through ``blocks`` — (row numbers, ``sublinear_tf``) of the corpus in a
    seeded random order — in a fresh order, and through each block's rows in a fresh order. TF-IDF's idf
    counts the training rows only (``document_frequency`` counts all rows; the fold's own are taken off).
    """
    from sklearn.linear_model import SGDClassifier

    held_out = [folds[rows] == fold for rows, _ in blocks]
    train_rows = sum(int((~h).sum()) for h in held_out)
    fold_df = sum(np.bincount(tf[h].indices, minlength=tf.shape[1]) for (_, tf), h in zip(blocks, held_out))
    idf = smooth_idf(document_frequency - fold_df, train_rows)
    model = SGDClassifier(loss="log_loss", alpha=1.0 / (C * train_rows), learning_rate="optimal", average=True,
                          shuffle=False, random_state=seed)
    classes = np.arange(num_classes)
    rng = np.random.default_rng([seed, fold])
    for _ in range(epochs):
        for b in rng.permutation(len(blocks)):
            (rows, tf), train = blocks[b], np.nonzero(~held_out[b])[0]
            train = train[rng.permutation(len(train))]
            model.partial_fit(tf_idf(tf[train], idf), y[rows[train]], classes=classes)
    scored = [(rows[h], model.predict_proba(tf_idf(tf[h], idf))) for (rows, tf), h in zip(blocks, held_out) if h.any()]
    return np.concatenate([r for r, _ in scored]), np.concatenate([p for _, p in scored])


class HashedCorpus:
    """A corpus read batch by batch into what the SGD fold models need: ``blocks`` of (row numbers,
    ``sublinear_tf``) holding ``block_rows`` rows each, drawn in a seeded random order (so a block samples
    the corpus even when its rows come sorted by label), each row's label code (``classes`` sorted) and fold.

    No batch's text is kept: the hashed rows are the largest thing held (about 35 nonzeros a pair).
    """

    def __init__(self, batches, k: int, seed: int = 0, inputs: str = "pair", block_rows: int = 65_536):
        import pyarrow.compute as pc
        import scipy.sparse as sp

        from refinery.core.folds import fold_of
        from refinery.progress import progress

        slices, codes, folds, index = [], [], [], {}
        with progress(desc="confidence: n-grams", unit=" rows") as bar:
            for batch in batches:
                encoded = pc.dictionary_encode(batch["label"]).combine_chunks()
                local = np.array([index.setdefault(v, len(index)) for v in encoded.dictionary.to_pylist()], np.int64)
                codes.append(local[encoded.indices.to_numpy(zero_copy_only=False)])
                folds.append(fold_of(batch["id"], k, seed))
                for start in range(0, batch.num_rows, block_rows):   # the scanner's buffers grow with the text
                    slices.append(sublinear_tf(batch.slice(start, block_rows), inputs))
                bar.update(batch.num_rows)
        self.classes = sorted(index)
        rank = np.argsort(np.argsort(np.array(list(index), dtype=object)))
        self.y = rank[np.concatenate(codes)] if codes else np.zeros(0, np.int64)
        self.folds = np.concatenate(folds) if folds else np.zeros(0, np.int64)
        rows = len(self.y)
        block_of = np.empty(rows, np.int64)
        block_of[np.random.default_rng(seed).permutation(rows)] = np.arange(rows) // block_rows
        pieces: list[list] = [[] for _ in range(-(-rows // block_rows))]
        start = 0
        while slices:   # hand each slice's rows to their blocks, then let the slice go
            tf = slices.pop(0)
            mine = block_of[start:start + tf.shape[0]]
            for b in np.unique(mine):
                local_rows = np.nonzero(mine == b)[0]
                pieces[b].append((start + local_rows, tf[local_rows]))
            start += tf.shape[0]
            del tf
        self.blocks = []
        for b in range(len(pieces)):
            parts, pieces[b] = pieces[b], None
            self.blocks.append((np.concatenate([r for r, _ in parts]), sp.vstack([t for _, t in parts], format="csr")))

    @property
    def rows(self) -> int:
        return len(self.y)


def cross_fit_sgd(batches, k: int = 5, seed: int = 0, *, inputs: str = "pair", C: float = 1.0,
                  epochs: int = 3, block_rows: int = 65_536, engine: str = "local"
                  ) -> tuple[np.ndarray, list, np.ndarray]:
    """Out-of-fold p(y | x) of every row of ``batches`` (Arrow tables, or one table) by ``sgd_fold_proba``:
    (probabilities, classes, each row's class index).

    The rows are hashed once (``HashedCorpus``); the K fold models then train side by side (threads, or Ray
    tasks reading one copy of the blocks from the object store).
    """
    from refinery.pipeline.engine import map_calls

    corpus = HashedCorpus([batches] if isinstance(batches, pa.Table) else batches, k, seed, inputs, block_rows)
    document_frequency = sum(np.bincount(tf.indices, minlength=tf.shape[1]) for _, tf in corpus.blocks)
    shared = {"blocks": corpus.blocks, "y": corpus.y, "folds": corpus.folds, "num_classes": len(corpus.classes),
              "C": C, "epochs": epochs, "seed": seed, "document_frequency": document_frequency}
    present = [f for f in range(k) if (corpus.folds == f).any()]
    proba = np.zeros((corpus.rows, len(corpus.classes)))
    for rows, p in map_calls(sgd_fold_proba, [{"fold": f} for f in present], shared, engine,
                             desc=f"confidence: {len(present)} fold models, {epochs} epochs"):
        proba[rows] = p
    return proba, corpus.classes, corpus.y
