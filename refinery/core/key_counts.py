"""The count table of feature counting (``KeyCounts``): int64 keys (token ids, bigrams packed as ``id1 << 32 |
id2``) counted per label at most once per row, in a dense array or a linear-probing hash table of int32 rows
``[key high, key low, stamp, count per label…]`` (``kernels.count_present``); for weighted counting, float64 sums
beside the counts. ``feature_counts`` counts the audit's features with it,
``weighted_counts`` the weighted ones."""
from __future__ import annotations

from typing import Iterator

import numpy as np

from refinery.core.kernels import EMPTY, by_region, clear_slots, count_present, hash_shift, rehash, used_slots


class KeyCounts:
    """Counts per label of int64 keys ≥ 0, each counted at most once per row (see
    ``count_present``); rows and counts are int32, so one table counts fewer than 2**31 rows.

    ``dense``: keys are small ids stored at their own index; otherwise a linear-probing hash
    table, doubled whenever it would be more than ``MAX_LOAD`` full. ``values``: float64 sums held
    beside the counts, a row of ``values`` columns per slot (weighted counting).
    """

    MAX_LOAD = 0.7
    MAX_ROWS = 2**31 - 1
    CACHED_SLOTS = 1 << 14   # a region of a larger table counted at a time (~400 kB of slots: in L2)

    def __init__(self, dense: bool, labels: int, capacity: int = 1 << 12, values: int = 0):
        self.dense = dense
        self.size = 0
        self.table = self._empty(capacity, labels)
        self.values = np.zeros((capacity, values))
        self.compacted = False   # ``compact``: the used slots only, by key

    @staticmethod
    def _empty(capacity: int, labels: int) -> np.ndarray:
        table = np.zeros((capacity, 3 + labels), dtype=np.int32)
        clear_slots(table)
        return table

    def _resize(self, capacity: int, labels: int, values: int = 0) -> None:
        old, old_values = self.table, self.values
        labels, values = max(labels, old.shape[1] - 3), max(values, old_values.shape[1])
        if labels > old.shape[1] - 3:   # a label first seen: a zero column for it
            old = np.concatenate([old, np.zeros((len(old), 3 + labels - old.shape[1]), dtype=np.int32)], axis=1)
        if values > old_values.shape[1]:
            old_values = np.concatenate([old_values, np.zeros((len(old), values - old_values.shape[1]))], axis=1)
        self.table, self.values = self._empty(capacity, labels), np.zeros((capacity, values))
        if self.dense:
            self.table[:len(old)], self.values[:len(old)] = old, old_values
        else:
            rehash(old, self.table, old_values, self.values)
        self.compacted = False

    def add(self, keys: np.ndarray, rows: np.ndarray, labels: np.ndarray, first_row: int, n_labels: int,
            pairs: bool = False, *, masks: np.ndarray | None = None, weights: np.ndarray | None = None,
            grow: bool = True) -> None:
        """Count ``keys`` (with ``pairs``: the bigrams of adjacent ids of the same row) by row.

        With ``masks`` (rows × M, 0 or 1) and ``weights`` (rows × W floats), a key's row adds its masks to count
        column label × M + m and its weights to ``values`` column label × W + w (``kernels.count_present``) instead
        of 1 to its label's count. Without ``grow`` (weighted only) only the keys the table holds are counted."""
        if len(rows) and first_row + int(rows[-1]) > self.MAX_ROWS:
            raise OverflowError(f"KeyCounts counts fewer than 2**31 rows (row {first_row + int(rows[-1])})")
        weighted = masks is not None
        if masks is None:   # a plain count: one count column per label
            masks, weights = np.zeros((0, 1), np.int32), np.zeros((0, 0))
        columns, values = n_labels * masks.shape[1], n_labels * weights.shape[1]
        capacity = len(self.table)
        if self.compacted:   # spread out again: room for the keys it holds
            capacity = 1 << max(int(self.size / self.MAX_LOAD), 1).bit_length()
        # dense: room for the largest key; hashed, first batch: room for as many keys as it has
        wanted = 0 if not grow else keys.max(initial=0) + 1 if self.dense else \
            len(keys) / self.MAX_LOAD if self.size == 0 else 0
        while capacity < wanted:
            capacity *= 2
        if self.compacted or capacity > len(self.table) or 3 + columns > self.table.shape[1] \
                or values > self.values.shape[1]:
            self._resize(capacity, columns, values)
        if not self.dense and len(self.table) > self.CACHED_SLOTS:
            bits = int(len(self.table)).bit_length() - int(self.CACHED_SLOTS).bit_length()
            keys, rows = by_region(keys, rows, pairs, hash_shift(len(self.table)), bits)
            pairs = False
        done = 0
        while True:
            limit = len(self.table) if self.dense else int(self.MAX_LOAD * len(self.table))
            self.size, done = count_present((keys, rows, labels, masks, weights, first_row), (self.table, self.values),
                                            (weighted, self.dense, pairs, grow), done, self.size, limit)
            if done == len(keys):
                return
            self._resize(2 * len(self.table), columns, values)

    def compact(self) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """(keys ascending, their counts, their ``values``): views of the used slots, in key order. A hashed table
        keeps only those (its memory down to its keys, copied once); a later ``add`` spreads them out again."""
        used = slice(None) if self.compacted else np.flatnonzero(self.table[:, 0] != EMPTY)
        keys = (self.table[used, 0].astype(np.int64) << 32) | (self.table[used, 1].astype(np.int64) & 0xFFFFFFFF)
        if not self.dense and not self.compacted:
            ranked = np.argsort(keys)
            keys, used = keys[ranked], used[ranked]
            self.table, self.values = self.table[used], self.values[used]
            self.compacted = True
            used = slice(None)
        return keys, self.table[used, 3:], self.values[used]

    def items(self) -> tuple[np.ndarray, np.ndarray]:
        """(keys, counts[key, label]) of the used slots, in slot order."""
        keys = np.empty(self.size, dtype=np.int64)
        counts = np.empty((self.size, self.table.shape[1] - 3), dtype=np.int32)
        used_slots(self.table, 0, len(self.table), keys, counts)
        return keys, counts

    def chunks(self, slots: int) -> Iterator[tuple[np.ndarray, np.ndarray]]:
        """``items`` a range of ``slots`` slots at a time (a bounded copy of a large table)."""
        keys = np.empty(min(slots, len(self.table)), dtype=np.int64)
        counts = np.empty((len(keys), self.table.shape[1] - 3), dtype=np.int32)
        for start in range(0, len(self.table), slots):
            used = used_slots(self.table, start, min(start + slots, len(self.table)), keys, counts)
            if used:
                yield keys[:used], counts[:used]
