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
    def fit(cls, tokens: pa.ListArray, block_rows: int = 1 << 18) -> "Vocabulary":
        """df of every token, counting the distinct tokens of ``block_rows`` rows at a time."""
        enc = pc.dictionary_encode(pc.list_flatten(tokens))
        codes = enc.indices.to_numpy(zero_copy_only=False)
        V = len(enc.dictionary)
        df = np.zeros(V, np.int64)
        offsets = tokens.offsets.to_numpy() - tokens.offsets[0].as_py()
        for start in range(0, len(tokens), block_rows):
            block = tokens.slice(start, block_rows)
            lo, hi = offsets[start], offsets[min(start + block_rows, len(tokens))]
            parents = pc.list_parent_indices(block).to_numpy().astype(np.int64)
            df += np.bincount(np.unique(parents * V + codes[lo:hi]) % V, minlength=V)
        return cls(enc.dictionary, df, len(tokens))

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
    """γ for every row and the objective, over the scored field (``scored_field``).

    The rows are embedded ``SCORE_BLOCK_ROWS`` at a time, twice: once for the per-label sums, once for each
    row's γ against them, so memory holds the tokens and one block's embeddings, never all of them.
    """
    from refinery.progress import progress

    field_tokens = config.tokenizer.tokenize(table[scored_field(table)])
    if isinstance(field_tokens, pa.ChunkedArray):
        field_tokens = field_tokens.combine_chunks()
    vocab = Vocabulary.fit(field_tokens, SCORE_BLOCK_ROWS)
    blocks = range(0, table.num_rows, SCORE_BLOCK_ROWS)

    def unit(start: int) -> np.ndarray:
        return unit_rows(surface_embeddings(field_tokens.slice(start, SCORE_BLOCK_ROWS), vocab, config.dim))

    def labels(start: int) -> np.ndarray:
        return np.asarray(table["label"].slice(start, SCORE_BLOCK_ROWS).to_pylist(), dtype=object)

    names = sorted(set(pc.unique(table["label"]).to_pylist()))
    sums = LabelSums(names, np.zeros((len(names), config.dim)), np.zeros(len(names), np.int64))
    for start in progress(blocks, desc="razor: label sums", unit=" block"):
        sums.add(unit(start), labels(start))
    gamma = np.concatenate([np.zeros(0)] + [sums.gamma(unit(start), labels(start))
                                            for start in progress(blocks, desc="razor: γ", unit=" block")])
    return Scores(gamma, sums.objective(), vocab, sums)


def candidate_gamma(texts: list[str], labels: list[str], scores: Scores, config: RazorConfig) -> np.ndarray:
    """γ a candidate text would have in the current corpus (its idf from the corpus's df)."""
    tokens = config.tokenizer.tokenize(pa.array(texts, pa.string()))
    unit = unit_rows(surface_embeddings(tokens, scores.vocab, config.dim))
    return scores.sums.gamma(unit, np.asarray(labels, dtype=object))


def gamma_summary(gamma: np.ndarray) -> dict:
    q = np.quantile(gamma, [0, 0.25, 0.5, 0.75, 0.9, 0.99, 1]) if len(gamma) else [float("nan")] * 7
    return dict(zip(["min", "p25", "median", "p75", "p90", "p99", "max"], map(float, q)))
