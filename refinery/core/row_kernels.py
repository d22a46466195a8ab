"""The compiled kernels of each row's features (z-filtering, METHODS §2): listing a batch's rows' distinct
features as packed keys (``row_feature_keys``, for ``row_features``), counting (feature, label) pairs by id
(``add_cells``; row by row, ``add_row_cells`` and ``add_rows_passing``: for ``incremental_counts``),
and grouping the features of rows by row (``lists_by_row``, for a z-filter's decisions)."""
from __future__ import annotations

import numba
import numpy as np

from refinery.core.kernels import EMPTY, mix64


# A feature of a row as one uint64 (``row_features``): its kind's code in the top 4 bits (per text field: 2 × field
# for unigrams, + 1 for bigrams; 2 × fields for a row-level feature), the first token id (or the row-level feature's
# index) in the next 30, the second token id plus one (0: none) in the lowest 30.
ROW_KEY_CODE_SHIFT, ROW_KEY_WORD_BITS = np.uint64(60), 30


@numba.njit(nogil=True, cache=True, inline="always")
def _row_key(code, first, second):
    return (np.uint64(code) << ROW_KEY_CODE_SHIFT) | (np.uint64(first) << np.uint64(ROW_KEY_WORD_BITS)) \
        | np.uint64(second + 1)


@numba.njit(nogil=True, cache=True)
def _bigram_slot(table, key):
    """Slot of ``key`` in a linear-probing table of rows ``[key, index · 2³² + last row listed]`` (or the empty slot
    where it goes): one cache line a probe."""
    mask = np.uint64(len(table) - 1)
    slot = mix64(np.uint64(key)) & mask
    while table[slot, 0] != EMPTY and table[slot, 0] != key:
        slot = (slot + np.uint64(1)) & mask
    return slot


@numba.njit(nogil=True, cache=True)
def row_feature_keys(tokens, token_rows, field_starts, dense_sizes, orders, extra, n_rows):
    """Each row's distinct features in the order of ``features.extract``: per text field its unigrams, then its
    bigrams (``orders``: (unigrams?, bigrams?)), then the row's ``extra`` features; each as an index into the batch's
    features, numbered in the order of their first use; each feature's key (``_row_key``) kept for its name.

    ``tokens``/``token_rows``: every field's token ids and rows, field after field (``field_starts``, one more than
    the fields), in row order within a field; ``dense_sizes``: each field's distinct tokens, then the row-level
    features' (unigrams and row-level features are found by their id in a dense array, bigrams in a hash table);
    ``extra``: (offsets, one more than the rows; indices of row-level features). Returns (feature indices, offsets
    per row, the keys)."""
    extra_offsets, extra_ids = extra
    fields = len(field_starts) - 1
    most = (field_starts[fields] - field_starts[0]) * 2 + len(extra_ids)
    values = np.empty(most, np.int32)
    offsets = np.empty(n_rows + 1, np.int64)
    keys = np.empty(max(most, 1), np.uint64)
    dense_base = np.zeros(fields + 2, np.int64)
    for f in range(fields + 1):
        dense_base[f + 1] = dense_base[f] + dense_sizes[f]
    dense_index = np.full(dense_base[fields + 1], EMPTY, np.int64)
    dense_stamp = np.full(dense_base[fields + 1], EMPTY, np.int64)
    capacity = 1 << 16
    while capacity < 2 * (field_starts[fields] - field_starts[0]) // 4:
        capacity *= 2
    table = np.full((capacity, 2), EMPTY, np.int64)
    held = 0   # keys in the table
    size = 0
    at = 0
    cursor = field_starts[:-1].copy()
    for row in range(n_rows):
        offsets[row] = at
        for f in range(fields + 1):
            if f < fields:
                start = cursor[f]
                end = start
                while end < field_starts[f + 1] and token_rows[end] == row:
                    end += 1
                cursor[f] = end
            else:
                start, end = extra_offsets[row], extra_offsets[row + 1]
            for order in range(2 if f < fields else 1):
                if f < fields and not orders[order]:
                    continue
                for i in range(start, end - order):
                    if order == 0:
                        d = dense_base[f] + (tokens[i] if f < fields else extra_ids[i])
                        index = dense_index[d]
                        if index == EMPTY:
                            index = dense_index[d] = size
                            keys[size] = _row_key(2 * f, tokens[i] if f < fields else extra_ids[i], -1)
                            size += 1
                        if dense_stamp[d] != row:
                            dense_stamp[d] = row
                            values[at] = index
                            at += 1
                        continue
                    key = np.int64(_row_key(2 * f + 1, tokens[i], tokens[i + 1]))
                    slot = _bigram_slot(table, key)
                    if table[slot, 0] == EMPTY:
                        if 2 * (held + 1) > len(table):   # past half full: twice the slots, every key placed again
                            old = table
                            table = np.full((2 * len(old), 2), EMPTY, np.int64)
                            for k in range(len(old)):
                                if old[k, 0] != EMPTY:
                                    s = _bigram_slot(table, old[k, 0])
                                    table[s, 0], table[s, 1] = old[k, 0], old[k, 1]
                            slot = _bigram_slot(table, key)
                        table[slot, 0], table[slot, 1] = key, (np.int64(size) << 32) | 0xFFFFFFFF
                        keys[size] = np.uint64(key)
                        size += 1
                        held += 1
                    if (table[slot, 1] & 0xFFFFFFFF) != row:
                        table[slot, 1] = (table[slot, 1] & ~np.int64(0xFFFFFFFF)) | row
                        values[at] = np.int32(table[slot, 1] >> 32)
                        at += 1
    offsets[n_rows] = at
    return values[:at], offsets, keys[:size]


@numba.njit(nogil=True, cache=True, inline="always")
def _count_cell(counts, f, label, step, marks, mark, out, n):
    """``counts[f, label] += step``, and f listed at ``out[n]`` the first time the call ``mark`` counts it
    (``marks[f] == mark`` from then on); returns how many are listed."""
    counts[f, label] += step
    if marks[f] != mark:
        marks[f] = mark
        out[n] = f
        n += 1
    return n


@numba.njit(nogil=True, cache=True)
def add_cells(counts, feature_ids, label_ids, step, marks, mark):
    """``counts[feature_ids[i], label_ids[i]] += step`` for every pair; returns the distinct features, in the order
    of their first pair (``marks[f] == mark`` once f is listed: ``mark`` new for each call)."""
    out = np.empty(len(feature_ids), np.int64)
    n = 0
    for i in range(len(feature_ids)):
        n = _count_cell(counts, feature_ids[i], label_ids[i], step, marks, mark, out, n)
    return out[:n]


@numba.njit(nogil=True, cache=True)
def add_row_cells(counts, feature_ids, offsets, row_labels, keep, marks, mark):
    """``counts[f, row_labels[r]] += 1`` for every feature f of every row r with ``keep[r]`` (row r's features:
    ``feature_ids[offsets[r]:offsets[r + 1]]``); returns the distinct features, in the order of their first pair
    (``marks`` and ``mark`` as ``add_cells``'s)."""
    out = np.empty(offsets[len(offsets) - 1] - offsets[0], np.int64)
    n = 0
    for r in range(len(offsets) - 1):
        if not keep[r]:
            continue
        for i in range(offsets[r], offsets[r + 1]):
            n = _count_cell(counts, feature_ids[i], row_labels[r], 1, marks, mark, out, n)
    return out[:n]


@numba.njit(nogil=True, cache=True)
def add_rows_missing(counts, feature_ids, offsets, row_labels, flagged, cells, marks, mark):
    """``add_row_cells`` of the rows none of whose features f has its cell ``f · C + label`` among ``cells`` (sorted;
    C the columns of ``counts``; ``flagged[f]``: f is in some cell, so that most pairs cost one lookup): a batch of
    Algorithm 1 (Wu et al. 2022) in one pass over its pairs. Returns (keep; the hits as pairs (row, feature), in row
    order; the distinct features counted, in the order of their first pair, as ``add_cells``; the kept rows'
    features in order, int32)."""
    num_labels = counts.shape[1]
    rows = len(offsets) - 1
    pairs = offsets[rows] - offsets[0]
    keep = np.ones(rows, dtype=np.bool_)
    hit_rows, hit_features = np.empty(pairs, np.int64), np.empty(pairs, np.int64)
    touched, kept = np.empty(pairs, np.int64), np.empty(pairs, np.int32)
    hits = n = k = 0
    for r in range(rows):
        label = row_labels[r]
        for i in range(offsets[r], offsets[r + 1]):
            f = feature_ids[i]
            if not flagged[f]:
                continue
            cell = f * num_labels + label
            at = np.searchsorted(cells, cell)
            if at < len(cells) and cells[at] == cell:
                keep[r] = False
                hit_rows[hits], hit_features[hits] = r, f
                hits += 1
        if keep[r]:
            for i in range(offsets[r], offsets[r + 1]):
                n = _count_cell(counts, feature_ids[i], label, 1, marks, mark, touched, n)
                kept[k] = feature_ids[i]
                k += 1
    return keep, hit_rows[:hits], hit_features[:hits], touched[:n], kept[:k]


@numba.njit(nogil=True, cache=True)
def add_rows_passing(counts, feature_ids, offsets, row_labels, min_count, reached):
    """``add_row_cells`` of every row, for counts that only grow; ``reached[r]``: how many features' n(f) (the sum of
    their row of ``counts``) reached ``min_count`` in rows 0 … r (in one pass: each does once, at the pair that brings
    it there)."""
    n = 0
    for r in range(len(offsets) - 1):
        label = row_labels[r]
        for i in range(offsets[r], offsets[r + 1]):
            f = feature_ids[i]
            counts[f, label] += 1
            total = 0
            for j in range(counts.shape[1]):
                total += counts[f, j]
            if total == min_count:
                n += 1
        reached[r] = n


@numba.njit(nogil=True, cache=True)
def lists_by_row(rows, values, n_rows):
    """(offsets, grouped) of the pairs (``rows[i]``, ``values[i]``): each row's values, ascending, at
    ``grouped[offsets[r]:offsets[r + 1]]`` (rows in 0 … n_rows − 1, in any order; int32 throughout): a counting sort
    by row, then each row's few values sorted in place."""
    offsets = np.zeros(n_rows + 1, np.int32)
    for i in range(len(rows)):
        offsets[rows[i] + 1] += 1
    for r in range(n_rows):
        offsets[r + 1] += offsets[r]
    filled = offsets[:n_rows].copy()
    grouped = np.empty(len(rows), np.int32)
    for i in range(len(rows)):
        r = rows[i]
        grouped[filled[r]] = values[i]
        filled[r] += 1
    for r in range(n_rows):
        a, b = offsets[r], offsets[r + 1]
        if b - a > 1:
            grouped[a:b] = np.sort(grouped[a:b])
    return offsets, grouped
