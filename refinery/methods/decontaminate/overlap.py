"""Which training rows overlap an evaluation set, and with which of its rows.

A row's text is its fields normalized (``dedup.minhash.normalized``: case, punctuation and whitespace folded, so
``man .`` and ``man.`` are one word) and joined in order. Its n-grams are the runs of N consecutive words of that text
(``minhash.shingles`` with k = N; a text of fewer than N words is one n-gram, whole). A training row x is
contaminated by an evaluation set E when

    G_N(x) ∩ ⋃_{e ∈ E} G_N(e) ≠ ∅

(Brown et al. 2020, Appendix C; datatrove's n-gram decontamination), and, with ``near``, also when some e ∈ E is a
near-duplicate of x: a MinHash-LSH candidate whose every field reaches Jaccard ≥ ``near`` (``minhash.min_jaccard``,
as dedup verifies). Each contaminated row is named with the first evaluation set, in the order given, and the
first of its rows that it matches.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from refinery.methods.decontaminate.config import DecontaminateConfig
from refinery.methods.dedup import minhash

NGRAM, WHOLE, NEAR = "n-gram", "whole text", "near-duplicate"


@dataclass
class Match:
    """The training rows one evaluation set contaminates: their numbers, its row each matches, how, and the
    similarity of a near-duplicate (NaN for an n-gram)."""

    rows: np.ndarray
    eval_rows: np.ndarray
    how: np.ndarray          # object: NGRAM, WHOLE or NEAR
    similarity: np.ndarray


def joined(fields: list) -> pa.Array:
    """Each row's fields normalized and joined with a space (an empty field adds no word)."""
    normal = [minhash.normalized(f) for f in fields]
    text = normal[0] if len(normal) == 1 else pc.binary_join_element_wise(*normal, " ")
    return pc.utf8_trim_whitespace(pc.replace_substring(text, "  ", " "))


def ngram_match(train: pa.Array, evaluation: pa.Array, n: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(training rows sharing an n-gram with an evaluation row, the first such evaluation row, whether the match was
    of a whole text shorter than n words) of ``joined`` texts."""
    e, t = minhash.shingles(evaluation, n), minhash.shingles(train, n)
    owner = np.repeat(np.arange(len(e)), e.sizes())
    keys, first = np.unique(e.values, return_index=True)
    at = np.minimum(np.searchsorted(keys, t.values), max(len(keys) - 1, 0))
    hit = keys[at] == t.values if len(keys) else np.zeros(len(t.values), bool)
    row_of = np.repeat(np.arange(len(t)), t.sizes())
    rows, where = np.unique(row_of[hit], return_index=True)
    eval_rows = owner[first[at[np.flatnonzero(hit)[where]]]]
    words = np.asarray(pc.add(pc.count_substring(train, " "), 1).to_numpy(zero_copy_only=False))
    return rows, eval_rows, words[rows] < n


def near_match(train_fields: list, eval_fields: list, config: DecontaminateConfig
               ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(training rows, an evaluation row each is a near-duplicate of, their least Jaccard over the fields)."""
    k = config.shingle_size
    train = [minhash.shingles(minhash.normalized(f), k, i) for i, f in enumerate(train_fields)]
    evaluation = [minhash.shingles(minhash.normalized(f), k, i) for i, f in enumerate(eval_fields)]
    bands, r = minhash.bands_for(config.near, config.permutations)
    pairs = minhash.cross_pairs(minhash.band_keys(train, config.permutations, bands, r, config.seed),
                                minhash.band_keys(evaluation, config.permutations, bands, r, config.seed))
    sim = minhash.min_jaccard(train, evaluation, pairs[:, 0], pairs[:, 1])
    close = sim >= config.near
    rows, first = np.unique(pairs[close, 0], return_index=True)
    return rows, pairs[close, 1][first], sim[close][first]


def contamination(train_fields: list, eval_fields: list, config: DecontaminateConfig) -> Match:
    """The training rows the evaluation rows contaminate (an n-gram first, else, with ``near``, a near-duplicate)."""
    rows, eval_rows, whole = ngram_match(joined(train_fields), joined(eval_fields), config.ngram)
    how = np.where(whole, WHOLE, NGRAM).astype(object)
    similarity = np.full(len(rows), np.nan)
    if config.near is not None:
        common = min(len(train_fields), len(eval_fields))
        near, near_eval, sim = near_match(train_fields[:common], eval_fields[:common], config)
        new = ~np.isin(near, rows)
        rows, eval_rows = np.concatenate([rows, near[new]]), np.concatenate([eval_rows, near_eval[new]])
        how = np.concatenate([how, np.full(int(new.sum()), NEAR, object)])
        similarity = np.concatenate([similarity, sim[new]])
        order = np.argsort(rows, kind="stable")
        rows, eval_rows, how, similarity = rows[order], eval_rows[order], how[order], similarity[order]
    return Match(rows, eval_rows, how, similarity)
