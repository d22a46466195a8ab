"""Counts of hashed word n-grams per row, for linear models on large corpora.

The tokens are ``TokenizerOptions.tokenize``'s (the audit's), hashed by the compiled byte scanner as it reads
(FNV-1a); an n-gram's hash chains its tokens' hashes, and its column is the hash's top bits after a Fibonacci
multiply. No Python string is built per row or token, so a million pairs hash in about a second.
"""
from __future__ import annotations

import numpy as np
import pyarrow as pa
import scipy.sparse as sp

from refinery.core.features import TokenizerOptions
from refinery.core.vocabulary import token_hashes

_GOLDEN = np.uint64(0x9E3779B97F4A7C15)
_CHAIN = np.uint64(0x100000001B3)       # FNV prime: h(w1 … wn) = h(w1 … wn−1)·p ⊕ h(wn)


def ngram_hashes(hashes: np.ndarray, rows: np.ndarray, ngram_range=(1, 2)) -> tuple[np.ndarray, np.ndarray]:
    """(hash, row) of every n-gram, n in ``ngram_range``, of the tokens ``hashes`` of rows ``rows`` (row order)."""
    low, high = ngram_range
    out_hashes, out_rows = [], []
    current = hashes
    for n in range(1, high + 1):
        if n > 1:   # extend each (n−1)-gram by the next token of the same row
            same_row = rows[n - 1:] == rows[:len(rows) - n + 1]
            current = (current[:-1] * _CHAIN) ^ hashes[n - 1:]
            current = np.where(same_row, current, 0)
        if n >= low:
            valid = np.ones(len(current), bool) if n == 1 else rows[n - 1:] == rows[:len(rows) - n + 1]
            out_hashes.append(current[valid] ^ np.uint64(n))
            out_rows.append(rows[:len(current)][valid])
    with np.errstate(over="ignore"):
        return np.concatenate(out_hashes), np.concatenate(out_rows)


def ngram_counts(texts: pa.Array, num_rows: int, n_features: int = 2 ** 20, ngram_range=(1, 2),
                 options: TokenizerOptions = TokenizerOptions()) -> sp.csr_matrix:
    """CSR (float32) of each row's n-gram counts in ``n_features`` hashed columns."""
    if n_features & (n_features - 1):
        raise RuntimeError(f"n_features must be a power of 2, not {n_features}")
    with np.errstate(over="ignore"):
        grams, rows = ngram_hashes(*token_hashes(texts, options), ngram_range)
        columns = ((grams * _GOLDEN) >> np.uint64(64 - n_features.bit_length() + 1)).astype(np.int64)
    counts = sp.coo_matrix((np.ones(len(rows), np.float32), (rows, columns)), shape=(num_rows, n_features))
    return counts.tocsr()
