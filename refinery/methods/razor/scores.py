"""RAZOR's shortcut scores (METHODS §5), vectorized over Arrow token lists, any number of labels:
    S(t, d) = n(t, d) / |d| · log(|D| / df(t))                       (TF-IDF token importance)
    τ(j)_k  = sin(j / 10000^(2k/λ)) for even k, cos(j / 10000^(2k/λ)) for odd k
    ĝ(d)    = Σ_j S(t_j, d) · τ(j) / (|d| − 1)                        (surface embedding)
    γ(d)    = 1 − mean_{d′ : y(d′) ≠ y(d)} cos(ĝ(d), ĝ(d′))           (shortcut score)
With unit vectors u(d) and per-label sums U_y = Σ_{d ∈ D_y} u(d), the mean cosine against the
other labels is u(d)·(Σ_y′ U_y′ − U_y(d)) / (|D| − |D_y(d)|): O(n·λ) instead of O(n²·λ). The loop's
objective Σ_{y<y′} Σ_{d∈D_y} Σ_{d′∈D_y′} cos(ĝ(d), ĝ(d′)) = Σ_{y<y′} U_y·U_y′.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
from scipy import sparse

from refinery.io.schema import is_pair
from refinery.methods.razor.config import RazorConfig


def positional_encoding(length: int, dim: int) -> np.ndarray:
    """τ(j) for j = 0 … length−1 as a (length × λ) matrix (METHODS §5)."""
    j = np.arange(length, dtype=np.float64)[:, None]
    k = np.arange(dim)[None, :]
    angle = j / np.power(10000.0, 2 * k / dim)
    return np.where(k % 2 == 0, np.sin(angle), np.cos(angle))


@dataclass
class Vocabulary:
    """Document frequencies of a corpus: idf(t) = log(|D| / df(t)); an unseen token counts df = 1."""

    tokens: pa.Array
    df: np.ndarray
    docs: int

    @classmethod
    def fit(cls, blocks) -> "Vocabulary":
        """df of every token of ``blocks`` (token lists of the rows, block by block), each block's distinct tokens
        per row counted and summed by token."""
        counted, docs = None, 0
        for tokens in blocks:
            enc = pc.dictionary_encode(pc.list_flatten(tokens))
            codes = enc.indices.to_numpy(zero_copy_only=False).astype(np.int64)
            V = len(enc.dictionary)
            parents = pc.list_parent_indices(tokens).to_numpy().astype(np.int64)
            df = np.bincount(np.unique(parents * V + codes) % V, minlength=V) if V else np.zeros(0, np.int64)
            block = pa.table({"token": enc.dictionary, "df": pa.array(df, pa.int64())})
            if counted is not None:
                summed = pa.concat_tables([counted, block]).group_by("token").aggregate([("df", "sum")])
                block = pa.table({"token": summed["token"], "df": summed["df_sum"]})
            counted = block
            docs += len(tokens)
        if counted is None:
            return cls(pa.array([], pa.string()), np.zeros(0, np.int64), 0)
        return cls(counted["token"].combine_chunks(), counted["df"].to_numpy(), docs)

    def idf(self, flat: pa.Array) -> np.ndarray:
        at = pc.index_in(flat, value_set=self.tokens).to_numpy(zero_copy_only=False)
        df = np.ones(len(flat))
        known = ~np.isnan(at.astype(float))
        df[known] = self.df[at[known].astype(np.int64)]
        return np.log(max(self.docs, 1) / df)


def surface_embeddings(tokens: pa.ListArray, vocab: Vocabulary, dim: int) -> np.ndarray:
    """ĝ(d) for every row (n × λ): a sparse (row × position) matrix of S(t_j, d) times τ."""
    n = len(tokens)
    flat = pc.list_flatten(tokens)
    parents = pc.list_parent_indices(tokens).to_numpy().astype(np.int64)
    lengths = pc.list_value_length(tokens).to_numpy(zero_copy_only=False).astype(np.int64)
    if len(flat) == 0:
        return np.zeros((n, dim))
    starts = np.concatenate([[0], np.cumsum(lengths)[:-1]])
    position = np.arange(len(flat)) - starts[parents]
    enc = pc.dictionary_encode(flat)
    codes = enc.indices.to_numpy(zero_copy_only=False).astype(np.int64)
    _, inverse, tf = np.unique(parents * len(enc.dictionary) + codes, return_inverse=True, return_counts=True)
    importance = tf[inverse] / lengths[parents] * vocab.idf(flat)
    weights = sparse.csr_matrix((importance, (parents, position)), shape=(n, int(lengths.max())))
    g = weights @ positional_encoding(int(lengths.max()), dim)
    return g / np.maximum(lengths - 1, 1)[:, None]


def unit_rows(g: np.ndarray) -> np.ndarray:
    norm = np.linalg.norm(g, axis=1, keepdims=True)
    return np.divide(g, norm, out=np.zeros_like(g), where=norm > 0)


@dataclass
class LabelSums:
    """Per-label sums of unit surface embeddings: all γ and the objective follow from them."""

    labels: list
    sums: np.ndarray      # C × λ
    sizes: np.ndarray     # C

    def add(self, unit: np.ndarray, labels: np.ndarray) -> None:
        """Add the unit embeddings of rows with ``labels`` (each one of ``self.labels``)."""
        codes = np.searchsorted(self.labels, labels)
        for c in np.unique(codes):
            self.sums[c] += unit[codes == c].sum(axis=0)
        self.sizes += np.bincount(codes, minlength=len(self.labels))

    def gamma(self, unit: np.ndarray, labels: np.ndarray) -> np.ndarray:
        """γ = 1 − u·(Σ U − U_y) / (|D| − |D_y|)."""
        codes = np.searchsorted(self.labels, labels)
        other = self.sums.sum(axis=0)[None, :] - self.sums[codes]
        n_other = np.maximum(self.sizes.sum() - self.sizes[codes], 1)
        return 1.0 - (unit * other).sum(axis=1) / n_other

    def objective(self) -> float:
        """Σ_{y<y′} U_y·U_y′ = Σ over cross-label pairs of cos(ĝ(d), ĝ(d′))."""
        gram = self.sums @ self.sums.T
        return float(np.triu(gram, k=1).sum())


def scored_field(table: pa.Table) -> str:
    """The text RAZOR scores and rewrites: the hypothesis/claim of a pair, else the single text."""
    return "text_b" if is_pair(table) else "text_a"


@dataclass
class Scores:
    gamma: np.ndarray
    objective: float
    vocab: Vocabulary
    sums: LabelSums


SCORE_BLOCK_ROWS = 1 << 18   # rows embedded at a time: an n × λ float64 matrix is 5 GB at 10M rows


def score(table: pa.Table, config: RazorConfig = RazorConfig()) -> Scores:
    """γ for every row and the objective, over the scored field (``scored_field``) of an in-memory table."""
    field = scored_field(table)

    def blocks():
        for start in range(0, table.num_rows, SCORE_BLOCK_ROWS):
            yield table.slice(start, SCORE_BLOCK_ROWS).select([field, "label"])

    vocab, sums = fit(blocks, field, config)
    gamma = np.concatenate([np.zeros(0)] + [g for _, g in gammas(blocks, field, vocab, sums, config)])
    return Scores(gamma, sums.objective(), vocab, sums)


def fit(blocks, field: str, config: RazorConfig) -> tuple[Vocabulary, LabelSums]:
    """The corpus's token document frequencies and per-label sums of unit surface embeddings, in two passes over
    ``blocks()`` (each call: the rows, ``SCORE_BLOCK_ROWS`` at a time, with ``field`` and ``label``); memory holds
    the vocabulary and one block's embeddings."""
    from refinery.progress import progress

    labels = set()

    def tokens():
        for block in blocks():
            labels.update(pc.unique(block["label"]).to_pylist())
            yield _tokens(block[field], config)

    vocab = Vocabulary.fit(tokens())
    names = sorted(labels)
    sums = LabelSums(names, np.zeros((len(names), config.dim)), np.zeros(len(names), np.int64))
    for block in progress(blocks(), desc="razor: label sums", unit=" block"):
        sums.add(_unit(block[field], vocab, config), _labels(block))
    return vocab, sums


def gammas(blocks, field: str, vocab: Vocabulary, sums: LabelSums, config: RazorConfig):
    """(block, γ of its rows) for each block of ``blocks()`` in turn, against the corpus's ``vocab`` and ``sums``."""
    from refinery.progress import progress

    for block in progress(blocks(), desc="razor: γ", unit=" block"):
        yield block, sums.gamma(_unit(block[field], vocab, config), _labels(block))


def _tokens(texts, config: RazorConfig) -> pa.ListArray:
    tokens = config.tokenizer.tokenize(texts)
    return tokens.combine_chunks() if isinstance(tokens, pa.ChunkedArray) else tokens


def _unit(texts, vocab: Vocabulary, config: RazorConfig) -> np.ndarray:
    return unit_rows(surface_embeddings(_tokens(texts, config), vocab, config.dim))


def _labels(block: pa.Table) -> np.ndarray:
    return np.asarray(block["label"].to_pylist(), dtype=object)


def candidate_gamma(texts: list[str], labels: list[str], scores: Scores, config: RazorConfig) -> np.ndarray:
    """γ a candidate text would have in the current corpus (its idf from the corpus's df)."""
    tokens = config.tokenizer.tokenize(pa.array(texts, pa.string()))
    unit = unit_rows(surface_embeddings(tokens, scores.vocab, config.dim))
    return scores.sums.gamma(unit, np.asarray(labels, dtype=object))


def gamma_summary(gamma: np.ndarray) -> dict:
    q = np.quantile(gamma, [0, 0.25, 0.5, 0.75, 0.9, 0.99, 1]) if len(gamma) else [float("nan")] * 7
    return dict(zip(["min", "p25", "median", "p75", "p90", "p99", "max"], map(float, q)))
