"""Which training rows overlap an evaluation set, and with which of its rows.

A training row x is contaminated by an evaluation set E when G_N(x) ∩ ⋃_{e ∈ E} G_N(e) ≠ ∅, its n-grams looked up in
the evaluation rows' (``core.ngram_index``: the text normalized and joined, Brown et al. 2020, Appendix C). With ``near``, x is
also contaminated when some e ∈ E is a near-duplicate of x: a MinHash-LSH candidate whose every field reaches
Jaccard ≥ ``near`` (``minhash.min_jaccard``, as dedup verifies). Each contaminated row is named with the first evaluation set, in the order given, and the
first of its rows that it matches.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from refinery.methods.decontaminate.config import DecontaminateConfig
from refinery.core import minhash
from refinery.core.ngram_index import NgramIndex

HOW = ("n-gram", "whole text", "near-duplicate")   # how a training row matches, by its code in ``Match.how``
NGRAM, WHOLE, NEAR = range(len(HOW))


@dataclass
class Match:
    """The training rows one evaluation set contaminates: their numbers, its row each matches, how, and the
    similarity of a near-duplicate (NaN for an n-gram); and ``behind``, every evaluation row that contaminates one
    of them (a training row may match several: each is named with the first)."""

    rows: np.ndarray
    eval_rows: np.ndarray
    how: np.ndarray          # int8: NGRAM, WHOLE or NEAR (their words: ``HOW``)
    similarity: np.ndarray
    behind: np.ndarray


def near_match(train_fields: list, eval_fields: list, config: DecontaminateConfig
               ) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """(training rows, an evaluation row each is a near-duplicate of, their least Jaccard over the fields, every
    evaluation row some training row is a near-duplicate of)."""
    k = config.shingle_size
    train = [minhash.shingles(minhash.normalized(f), k, i) for i, f in enumerate(train_fields)]
    evaluation = [minhash.shingles(minhash.normalized(f), k, i) for i, f in enumerate(eval_fields)]
    bands, r = minhash.bands_for(config.near, config.permutations)
    pairs = minhash.cross_pairs(minhash.band_keys(train, config.permutations, bands, r, config.seed),
                                minhash.band_keys(evaluation, config.permutations, bands, r, config.seed))
    sim = minhash.min_jaccard(train, evaluation, pairs[:, 0], pairs[:, 1])
    close = sim >= config.near
    rows, first = np.unique(pairs[close, 0], return_index=True)
    return rows, pairs[close, 1][first], sim[close][first], np.unique(pairs[close, 1])


def contamination(train_fields: list, eval_fields: list, config: DecontaminateConfig) -> Match:
    """The training rows the evaluation rows contaminate (an n-gram first, else, with ``near``, a near-duplicate)."""
    found = NgramIndex(eval_fields, config.ngram).overlap(train_fields)
    rows, eval_rows, whole = found.train_rows, found.eval_rows, found.whole
    how = np.where(whole, WHOLE, NGRAM).astype(np.int8)
    similarity = np.full(len(rows), np.nan)
    behind = np.flatnonzero(found.eval_partner >= 0)
    if config.near is not None:
        common = min(len(train_fields), len(eval_fields))
        near, near_eval, sim, near_behind = near_match(train_fields[:common], eval_fields[:common], config)
        behind = np.union1d(behind, near_behind)
        new = ~np.isin(near, rows)
        rows, eval_rows = np.concatenate([rows, near[new]]), np.concatenate([eval_rows, near_eval[new]])
        how = np.concatenate([how, np.full(int(new.sum()), NEAR, np.int8)])
        similarity = np.concatenate([similarity, sim[new]])
        order = np.argsort(rows, kind="stable")
        rows, eval_rows, how, similarity = rows[order], eval_rows[order], how[order], similarity[order]
    return Match(rows, eval_rows, how, similarity, behind)
