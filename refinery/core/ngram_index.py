"""The n-grams a training row shares with evaluation rows (``NgramIndex``: decontaminate's matcher, and compare's,
which counts the evaluation rows a training corpus contaminates).

A row's text is its fields normalized (``minhash.normalized``: NFKC, case, punctuation and whitespace folded, so
``man .`` and ``man.`` are one word) and joined in order (``joined``). Its n-grams G_N are the runs of N consecutive
words of that text (``minhash.shingles`` with k = N; a text of fewer than N words is one n-gram, whole, which only an
equal text of as few words shares). A training row x and an evaluation row e overlap when

    G_N(x) ∩ G_N(e) ≠ ∅

(Brown et al. 2020, Appendix C; datatrove's n-gram decontamination). ``NgramIndex`` holds the evaluation rows'
n-grams once, sorted; the training rows are looked up ``BATCH`` rows at a time, so a large corpus is never held as
n-grams whole.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from refinery.core import minhash

BATCH = 100_000    # training rows looked up at a time


def joined(fields: list) -> pa.Array:
    """Each row's fields normalized and joined with a space (an empty field adds no word)."""
    normal = [minhash.normalized(f).cast(pa.large_string()) for f in fields]
    text = normal[0] if len(normal) == 1 else pc.binary_join_element_wise(*normal, pa.scalar(" ", pa.large_string()))
    return pc.utf8_trim_whitespace(pc.replace_substring(text, "  ", " "))


@dataclass
class Overlap:
    """Which training and evaluation rows share an n-gram: from the training side, each matched row (ascending),
    the first evaluation row it shares its first n-gram with, and whether it was matched whole (fewer than N
    words); from the evaluation side, per row, the first training row it shares an n-gram with (-1: none)."""

    train_rows: np.ndarray
    eval_rows: np.ndarray
    whole: np.ndarray
    eval_partner: np.ndarray


class NgramIndex:
    """The n-grams G_N of the evaluation rows, sorted, each with the evaluation rows that hold it."""

    def __init__(self, eval_fields: list, n: int):
        e = minhash.shingles(joined(eval_fields), n)
        self.n, self.rows = n, len(e)
        self.keys, first, inverse = np.unique(e.values, return_index=True, return_inverse=True)
        self.owner = np.repeat(np.arange(len(e)), e.sizes())     # each (row, n-gram) value's evaluation row
        self.first_owner = self.owner[first]                      # each key's first evaluation row
        self.inverse = inverse.ravel()                            # each (row, n-gram) value's key

    def overlap(self, train_fields: list) -> Overlap:
        """The overlap of the training rows (their fields, in the order of the evaluation rows' fields) with the
        evaluation rows, looked up ``BATCH`` rows at a time."""
        rows, eval_rows, whole = [], [], []
        key_partner = np.full(len(self.keys), -1, np.int64)   # each key's first training row
        total = len(train_fields[0])
        for start in range(0, total, BATCH):
            text = joined([f.slice(start, BATCH) for f in train_fields])
            t = minhash.shingles(text, self.n)
            at = np.minimum(np.searchsorted(self.keys, t.values), max(len(self.keys) - 1, 0))
            hit = self.keys[at] == t.values if len(self.keys) else np.zeros(len(t.values), bool)
            row_of = np.repeat(np.arange(len(t)), t.sizes())
            matched, where = np.unique(row_of[hit], return_index=True)
            keys_hit = at[np.flatnonzero(hit)[where]]
            words = np.asarray(pc.add(pc.count_substring(text, " "), 1).to_numpy(zero_copy_only=False))
            rows.append(matched + start)
            eval_rows.append(self.first_owner[keys_hit])
            whole.append(words[matched] < self.n)
            new, first = np.unique(at[hit], return_index=True)
            fresh = key_partner[new] < 0
            key_partner[new[fresh]] = row_of[hit][first[fresh]] + start
        held = key_partner[self.inverse]                     # each (row, n-gram) value's first training row
        has = held >= 0
        partner = np.full(self.rows, total, np.int64)
        np.minimum.at(partner, self.owner[has], held[has])   # each evaluation row's first training row
        partner[partner == total] = -1
        return Overlap(_concat(rows, np.int64), _concat(eval_rows, np.int64), _concat(whole, bool), partner)


def _concat(parts: list, dtype) -> np.ndarray:
    return np.concatenate(parts) if parts else np.zeros(0, dtype)
