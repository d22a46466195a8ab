"""The rows a stateful pass over the stream rejected, looked up by row id: what a z-filter's ``decide`` reads.

Algorithm 1 decides each row against the Z that the rows before it built, so it runs once, in order, in the
stage's ``prepare``; ``decide`` then only looks each row up here (stateless: the lookup may run on any worker,
in any split of the stream). Rows that share an id share a decision: rejected if any of them was.
"""
from __future__ import annotations

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc


class Decisions:
    """The rejected rows' ids, each with its reason and the biased features it hit (``biased_features``)."""

    def __init__(self, ids: pa.Array, reasons: list[str], hits: list[list[str]]):
        self.ids = ids
        self.reasons = pa.array(reasons, pa.string())
        self.hits = pa.array(hits, pa.list_(pa.string()))

    @property
    def rejected(self) -> int:
        return len(self.ids)

    def _positions(self, batch: pa.Table) -> pa.ChunkedArray:
        """Each row's place among the rejected rows (null: kept)."""
        return pc.index_in(batch["id"], value_set=self.ids.cast(batch["id"].type))

    def decide(self, batch: pa.Table) -> tuple[np.ndarray, list]:
        """(keep, reasons): the ``FilterStage.decide`` of the filter that made these decisions."""
        at = self._positions(batch)
        return pc.is_null(at).to_numpy(zero_copy_only=False), self.reasons.take(at).to_pylist()

    def biased_features(self, batch: pa.Table) -> pa.ChunkedArray:
        """The features each row hit: B_Z(label)'s during the stream, or those that took it back after it
        (``ZFilter.settle``); null for a kept row."""
        return self.hits.take(self._positions(batch))


def tag(table: pa.Table, stage: str) -> pa.Table:
    """Set ``source_stage`` (seed | filtered), replacing a value from an earlier filtering."""
    if "source_stage" in table.column_names:
        table = table.drop_columns(["source_stage"])
    return table.append_column("source_stage", pa.array([stage] * table.num_rows, pa.string()))
