"""The rows a stateful pass over the stream rejected, looked up by position: what a z-filter's ``decide`` reads.

Algorithm 1 decides each row against the Z that the rows before it built, so it runs once, in order, in the
stage's ``prepare``; ``decide`` then only looks each row up here (stateless: the lookup may run on any worker,
in any split of the stream). Decisions are columns, not objects, so that the driver's memory follows the
features hit, not the rows: per input row the index of its decision (−1: kept); per rejected row its reason's
prefix and the features it hit (indices into the names of the features that rejected any row). Rows are found
by their number in the input (``pipeline.executor.row_numbers``).
"""
from __future__ import annotations

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc


class Decisions:
    """Every input row's decision: ``rejected_at`` (per input row, in input order, the index of its rejection,
    −1 kept), and per rejection the index of its reason's prefix in ``prefixes`` and its hit features
    (``hits``: lists of indices into ``names``, sorted by name)."""

    def __init__(self, rejected_at: np.ndarray, prefix_index: np.ndarray, prefixes: list[str], hits: pa.ListArray,
                 names: pa.Array):
        self.rejected_at = rejected_at
        self.prefix_index, self.prefixes = prefix_index, pa.array(prefixes, pa.string())
        self.hits, self.names = hits, names

    @classmethod
    def build(cls, rows: int, rejected: np.ndarray, prefix_index: np.ndarray, prefixes: list[str],
              pair_positions: np.ndarray, pair_feature_ids: np.ndarray, names_of) -> "Decisions":
        """From the rejected rows' input positions (distinct, each with the index of its reason's prefix) and
        pairs (input position, feature id) of the features each hit; ``names_of(ids)`` names feature ids. Memory
        holds 4 bytes a row and about 12 a pair beside the arguments (the pairs grouped by a counting sort; each
        array let go once read, so that a caller that passes them without keeping them frees them here)."""
        from refinery.core.row_kernels import lists_by_row   # compiled: not imported by the verbs' --help

        rejected_at = _numbered(rows, rejected)
        ordered_prefixes = np.empty(len(rejected), np.int8)
        ordered_prefixes[rejected_at[rejected]] = prefix_index
        del rejected, prefix_index
        pair_rows = rejected_at[pair_positions]
        del pair_positions
        distinct, pair_names = _distinct(pair_feature_ids)
        del pair_feature_ids
        names = names_of(distinct)
        by_name = np.argsort(names.to_numpy(zero_copy_only=False), kind="stable").astype(np.int32)
        rank = np.empty(len(distinct), np.int32)
        rank[by_name] = np.arange(len(distinct), dtype=np.int32)
        offsets, ranks = lists_by_row(pair_rows, rank[pair_names], len(ordered_prefixes))
        del pair_rows, pair_names
        hits = pa.ListArray.from_arrays(pa.array(offsets), pa.array(by_name[ranks]))
        return cls(rejected_at, ordered_prefixes, prefixes, hits, names)

    @property
    def rejected(self) -> int:
        return len(self.prefix_index)

    def rejections_by_feature(self) -> dict:
        """{feature: rows it rejected}, commonest first."""
        counts = np.bincount(pc.list_flatten(self.hits).to_numpy(), minlength=len(self.names))
        order = np.argsort(-counts, kind="stable")
        return {name: int(n) for name, n in zip(self.names.take(pa.array(order)).to_pylist(), counts[order]) if n}

    def decide(self, positions: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """(keep, reasons) of the input rows at ``positions``: the ``FilterStage.decide`` of the filter that made
        these decisions."""
        if len(positions) and positions.max() >= len(self.rejected_at):
            raise RuntimeError("a row the z-filter did not see reached its decisions (the input changed while it ran)")
        at = self.rejected_at[positions]
        keep = at < 0
        reasons = np.empty(len(positions), dtype=object)
        dropped = at[~keep]
        if len(dropped):
            joined = pc.binary_join(self.hit_names(dropped), ", ")
            prefix = self.prefixes.take(pa.array(self.prefix_index[dropped]))
            reasons[~keep] = pc.binary_join_element_wise(prefix, joined, "").to_pylist()
        return keep, reasons

    def hit_names(self, rejections: np.ndarray) -> pa.ListArray:
        """The features each of ``rejections`` (indices of rejected rows) hit, by name."""
        lists = self.hits.take(pa.array(rejections, pa.int64()))
        flat = self.names.take(pc.list_flatten(lists))
        return pa.ListArray.from_arrays(_offsets(lists), flat)

    def biased_features(self, positions: np.ndarray) -> pa.Array:
        """The features each row at ``positions`` hit: B_Z(label)'s during the stream, or those that took it back
        after it (``ZFilter.settle``); null for a kept row."""
        at = self.rejected_at[positions]
        names = self.hit_names(np.maximum(at, 0))
        return pa.ListArray.from_arrays(_offsets(names), pc.list_flatten(names), mask=pa.array(at < 0))


def position_type(rows: int):
    """The integer type of a position among ``rows`` rows: 4 bytes while they fit."""
    return np.int32 if rows < 2 ** 31 else np.int64


def _numbered(rows: int, rejected: np.ndarray) -> np.ndarray:
    """Per input row (``rows`` of them), the index of its rejection among ``rejected`` (distinct positions) in input
    order, −1 for a kept row: a count of the rejected rows before it, not a sort of them."""
    at = np.zeros(rows, dtype=bool)
    at[rejected] = True
    numbered = np.cumsum(at, dtype=position_type(rows))
    numbered -= 1
    numbered[~at] = -1
    return numbered


def _distinct(ids: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(the distinct ``ids``, sorted; each id's index among them, int32): ``np.unique(ids, return_inverse=True)``
    through a table over the id range, not a sort of every id."""
    if not len(ids):
        return ids.astype(np.int64), np.zeros(0, np.int32)
    present = np.zeros(int(ids.max()) + 1, dtype=bool)
    present[ids] = True
    distinct = np.flatnonzero(present)
    index = np.cumsum(present, dtype=np.int32)
    index -= 1
    return distinct, index[ids]


def _offsets(lists: pa.ListArray) -> pa.Array:
    """The offsets of ``lists`` from 0 (a taken list array keeps its parent's)."""
    sizes = pc.list_value_length(lists).to_numpy(zero_copy_only=False)
    return pa.array(np.r_[0, np.cumsum(sizes)].astype(np.int32))


def tag(table: pa.Table, stage: str) -> pa.Table:
    """Set ``source_stage`` (seed | filtered), replacing a value from an earlier filtering."""
    if "source_stage" in table.column_names:
        table = table.drop_columns(["source_stage"])
    return table.append_column("source_stage", pa.array([stage] * table.num_rows, pa.string()))
