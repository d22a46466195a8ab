"""Exact feature–label counts (``ExactCounts``): batches accumulate in a ``FeatureCounts`` (integer ids,
compiled kernels); states from elsewhere merge by summing ``(feature, label, count)`` tables. Counts that
outgrow a memory budget spill to hash-partitioned runs on disk (``io.spill``), merged a partition at a time.
A state serializes and merges, so partial states from shards (or Ray tasks) combine, and a saved state can
be extended later.
"""
from __future__ import annotations

import io
import json

import duckdb
import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from refinery.core import stats as zstats
from refinery.core.feature_counts import FeatureCounts, gram_strings
from refinery.io.spill import KeyedRuns, PartitionedRuns


def write_counts_file(sink, meta: dict, tables, empty: pa.Table | None = None) -> None:
    """A saved state: ``tables`` of counts as one Arrow IPC file (LZ4) into ``sink`` (a writable file), with ``meta``
    as the schema's ``refinery`` metadata; ``empty`` gives the schema when there is no table."""
    tables = iter(tables)
    first = next(tables, None)
    first = empty if first is None else first
    schema = first.schema.with_metadata({b"refinery": json.dumps(meta).encode()})
    with pa.ipc.new_file(sink, schema, options=pa.ipc.IpcWriteOptions(compression="lz4")) as writer:
        writer.write_table(first.replace_schema_metadata(schema.metadata))
        for table in tables:
            writer.write_table(table.replace_schema_metadata(schema.metadata))


class SavedState:
    """``to_bytes`` of a counter whose ``write_state`` saves it."""

    def to_bytes(self) -> bytes:
        """``write_state`` into memory."""
        sink = pa.BufferOutputStream()
        self.write_state(sink)
        return sink.getvalue().to_pybytes()


class ExactCounts(SavedState):
    """Every feature's counts; with ``only``, just those of the features in ``only`` (sketch mode's
    recount: batches are counted by the compiled counter a chunk at a time, then the chunk's
    counts of ``only`` kept, so memory holds a chunk and the kept counts).

    ``memory_budget`` (bytes): counts that would outgrow it go to hash-partitioned runs on disk and
    counting goes on from empty; statistics and the state are then built one partition at a time.
    Counts of batches alone spill as ids (``KeyedRuns``: the compiled counter's tables a slot range
    at a time, its vocabularies kept), once the tables held plus the doubling of the largest
    would pass ``KEYED_SHARE`` of the budget; counts merged in as tables spill as strings
    (``PartitionedRuns``) past ``1 / SPILL_FACTOR`` of it. ``close`` removes the runs.
    """

    mode = "exact"
    CHUNK_FEATURES = 4_000_000   # ``only``: the compiled counter's features before its counts are filtered
    SPILL_FACTOR = 4             # peak memory of turning held counts into a table, over their size
    KEYED_SHARE = 0.75           # of the budget, for the count tables (the rest: reading, vocabularies, Python)
    COMPACT_ROWS = 8_000_000     # count-table rows merged in before they are summed

    def __init__(self, only: pa.Array | None = None, memory_budget: int | None = None):
        self.only = only
        self.memory_budget = memory_budget
        self._runs = None      # KeyedRuns or PartitionedRuns once spilled
        self._spilled_labels: set = set()
        self._parts: list[pa.Table] = []
        self._pending = 0      # rows of the count tables held
        self._compacted = 0    # rows of the last sum of them (the first table held)
        self._sorted = True
        self._batches = None   # FeatureCounts of the batches added with add_table
        self._matrix = None    # (labels, matrix()) until the next add
        self.label_totals: dict[str, int] = {}

    @property
    def rows(self) -> int:
        return sum(self.label_totals.values())

    @property
    def _batches_only(self) -> bool:
        """Whether every count is in the batch counter (none merged in, none filtered): read straight from it."""
        return not self._parts and self._batches is not None and self.only is None and self._runs is None

    @property
    def spilled_runs(self) -> int:
        return self._runs.runs if self._runs is not None else 0

    @property
    def _keyed(self) -> bool:
        """Whether every count is in the batch counter or in keyed runs: spilled as ids."""
        return (not self._parts and self._batches is not None and self.only is None
                and not isinstance(self._runs, PartitionedRuns))

    def _within_budget(self) -> None:
        if self.memory_budget is None:
            return
        if self._keyed:
            if self._batches.nbytes + 2 * self._batches.largest_table_nbytes > self.KEYED_SHARE * self.memory_budget:
                self._spill()
            return
        held = (self._batches.nbytes if self._batches is not None else 0) + sum(p.nbytes for p in self._parts)
        if held * self.SPILL_FACTOR > self.memory_budget:
            self._spill()

    def _spill(self) -> None:
        """Every count held goes to a new spill run."""
        if self._keyed:
            if self._runs is None:
                self._runs = KeyedRuns()
            self._batches.spill(self._runs)
            self._matrix = None
            return
        self._name_keyed_runs()
        self._fold_batches()
        if not self._parts:
            return
        if self._runs is None:
            self._runs = PartitionedRuns()
        run = pa.concat_tables(self._parts)
        self._spilled_labels.update(pc.unique(run["label"]).to_pylist())
        self._parts, self._pending, self._compacted, self._matrix = [], 0, 0, None
        self._runs.write(run)

    def _name_keyed_runs(self) -> None:
        """Keyed runs (and the batch counts) rewritten as string runs, a partition at a time: counts
        merged in as tables can only meet them by feature string."""
        if not isinstance(self._runs, KeyedRuns):
            return
        labels = self.labels()
        named = PartitionedRuns()
        for parts in self._keyed_partitions(labels):
            features, matrix = self._batches.named(parts, labels)
            named.write(zstats.matrix_to_long(features, labels, matrix, zstats.COUNTS_SCHEMA))
        named.runs = self._runs.runs   # the spills made, not the partitions rewritten
        self._runs.close()
        self._runs, self._spilled_labels = named, set(labels)

    def _keyed_partitions(self, labels: list):
        """The keyed runs' partitions merged, one at a time (after spilling what is held), as
        (code, first, second, counts in the order of ``labels``) parts."""
        self._batches.spill(self._runs)
        columns = np.full(len(self._batches.labels), -1, dtype=np.int64)   # label id → column of ``labels``
        for j, label_id in enumerate(self._batches.label_ids(labels)):
            if label_id >= 0:
                columns[label_id] = j
        yield from self._runs.merged_parts(columns, len(labels))

    def close(self) -> None:
        """Remove the spill runs (if any)."""
        if self._runs is not None:
            self._runs.close()

    def add_counts(self, counts: pa.Table, label_totals: dict | None = None) -> None:
        self._parts.append(counts.cast(zstats.COUNTS_SCHEMA))
        self._pending += counts.num_rows
        self._sorted = False
        self._matrix = None
        zstats.add_totals(self.label_totals, label_totals)
        # summed once the rows added since the last sum outnumber both COMPACT_ROWS and that sum's rows: each
        # sum at least doubles what it reads, so merging n rows costs O(n log n), not a sum per merge
        if len(self._parts) > 1 and self._pending - self._compacted > max(self.COMPACT_ROWS, self._compacted):
            self._compact()
        self._within_budget()

    def add_table(self, table: pa.Table, features) -> None:
        """Add one canonical batch, counting the features of ``features`` (a ``FeatureConfig``)."""

        if self._batches is not None and self._batches.rows + table.num_rows > FeatureCounts.MAX_ROWS:
            # an accumulator counts fewer than 2**31 rows: its counts spill (keyed) or move to the tables
            self._spill() if self._keyed and self._runs is not None else self._fold_batches()
        if self._batches is None:
            self._batches = FeatureCounts(features)
        elif self._batches.config != features:
            raise RuntimeError("ExactCounts.add_table: every batch must be counted with the same features")
        self._batches.add(table)
        self._matrix = None
        zstats.add_totals(self.label_totals, zstats.rows_per_label(table["label"]))
        if self.only is not None and self._batches.held_features > self.CHUNK_FEATURES:
            self._fold_batches()
        self._within_budget()

    def _fold_batches(self) -> None:
        """Move the accumulated batches into the summed tables (with ``only``: their counts of those features)."""
        self._name_keyed_runs()   # the batch counter's vocabularies name them: they go first
        if self._batches is not None:
            batches, self._batches = self._batches, None
            features, labels, matrix = batches.matrix()
            if self.only is not None:
                keep = pc.is_in(features, value_set=self.only)
                features, matrix = features.filter(keep), matrix[keep.to_numpy(zero_copy_only=False)]
            self.add_counts(zstats.matrix_to_long(features, labels, matrix, zstats.COUNTS_SCHEMA))

    def matrix(self, labels: list, min_count: int = 0) -> tuple[pa.Array, np.ndarray, np.ndarray]:
        """(F features, F×C counts in the order of ``labels``, n) of the features in at least ``min_count``
        rows: straight from the accumulated batches when nothing was merged in (strings built only
        for the features kept), else from the summed tables (kept until the next add)."""
        key = (list(labels), min_count)
        if self._matrix is None or self._matrix[0] != key:
            if self._runs is not None:
                result = self._merged_matrix(labels, min_count)
            elif not self._batches_only:
                self._fold_batches()
                result = zstats.at_least(*zstats.long_to_matrix(self.counts(), labels), min_count)
            else:
                features, _, matrix = self._batches.matrix(labels, min_count)
                result = features, matrix, zstats.row_totals(matrix)
            self._matrix = key, result
        return self._matrix[1]

    def _spilled(self, labels: list, min_count: int = 0):
        """The spill runs' partitions merged, one at a time (after spilling what is held), each as
        (features in at least ``min_count`` rows, their counts in the order of ``labels``, n, the number
        of features in the partition); keyed runs name only the features kept."""
        if isinstance(self._runs, KeyedRuns):
            for parts in self._keyed_partitions(labels):
                features, matrix = self._batches.named(parts, labels, min_count)
                yield features, matrix, zstats.row_totals(matrix), sum(len(p[1]) for p in parts)
            return
        self._spill()
        for counts in self._runs.merged():
            features, matrix, n = zstats.long_to_matrix(counts, labels)
            yield *zstats.at_least(features, matrix, n, min_count), len(features)

    def _merged_matrix(self, labels: list, min_count: int) -> tuple[pa.Array, np.ndarray, np.ndarray]:
        parts, self._spilled_features = [], 0
        for features, matrix, n, in_partition in self._spilled(labels, min_count):
            self._spilled_features += in_partition
            parts.append((features, matrix, n))
        if not parts:
            return pa.array([], pa.string()), np.zeros((0, len(labels))), np.zeros(0)
        return (pa.concat_arrays([p[0] for p in parts]), np.concatenate([p[1] for p in parts]),
                np.concatenate([p[2] for p in parts]))

    @property
    def num_features(self) -> int:
        """Distinct features counted."""
        if self._runs is not None:
            if self._matrix is None:
                self.matrix(self.labels(), min_count=2**62)   # a pass over the partitions that keeps nothing
            return self._spilled_features
        if not self._batches_only:
            self._fold_batches()
            return int(pc.count_distinct(self.counts()["feature"]).as_py()) if self._parts else 0
        return self._batches.num_features

    def labels(self) -> list:
        """Every label counted, sorted."""
        seen = set(self.label_totals) | self._spilled_labels | (set(self._batches.labels) if self._batches is not None
                                                                  else set())
        for part in self._parts:
            seen.update(pc.unique(part["label"]).to_pylist())
        return sorted(seen)

    def merge(self, other: "ExactCounts") -> "ExactCounts":
        self.add_counts(other.counts(), other.label_totals)
        return self

    def _compact(self, ordered: bool = False) -> None:
        """Sum the partial tables (DuckDB's parallel hash aggregate); sorted only when asked."""
        con = duckdb.connect()
        con.register("parts", pa.concat_tables(self._parts))
        order = " ORDER BY feature, label" if ordered else ""
        t = con.sql("SELECT feature, label, sum(count)::BIGINT AS count FROM parts GROUP BY feature, label"
                    + order).to_arrow_table().cast(zstats.COUNTS_SCHEMA)
        con.close()
        self._parts, self._pending, self._compacted = [t], t.num_rows, t.num_rows

    def counts(self) -> pa.Table:
        """Every (feature, label, count), sorted by feature and label (all in memory, spilled or not)."""
        if self._runs is not None:
            labels = self.labels()
            merged = [zstats.matrix_to_long(features, labels, matrix, zstats.COUNTS_SCHEMA)
                      for features, matrix, _, _ in self._spilled(labels)]
            table = pa.concat_tables(merged) if merged else pa.Table.from_batches([], zstats.COUNTS_SCHEMA)
            return table.sort_by([("feature", "ascending"), ("label", "ascending")])
        self._fold_batches()
        if not self._parts:
            return pa.Table.from_batches([], schema=zstats.COUNTS_SCHEMA)
        if len(self._parts) > 1 or not self._sorted:
            self._compact(ordered=True)
            self._sorted = True
        return self._parts[0]

    def error_bounds(self) -> dict:
        return {"mode": "exact", "count_error": 0}

    # -- serialization
    def write_state(self, sink) -> None:
        """An Arrow IPC file (LZ4) into ``sink`` (a writable file), one row per feature with an int64 count
        column per label (``count_<j>`` for the j-th of the metadata's ``labels``). Counts of batches
        alone, held or spilled as ids, are written in the compact ``grams`` layout
        (``FeatureCounts.gram_tables``: token ids into one dictionary, no string per feature); others
        as ``wide`` (a ``feature`` column); spilled counts a partition at a time."""
        labels = self.labels()
        keyed = isinstance(self._runs, KeyedRuns)
        meta = {"mode": "exact", "labels": labels, "label_totals": self.label_totals,
                "layout": "grams" if self._batches_only or keyed else "wide"}

        def wide(features, matrix) -> pa.Table:
            return pa.table({"feature": features.cast(pa.large_string()),
                             **{f"count_{j}": matrix[:, j].astype(np.int64) for j in range(len(labels))}})

        if self._batches_only:
            tables = self._batches.gram_tables(labels)
        elif keyed:
            tables = self._batches.gram_tables(labels, self._keyed_partitions(labels))
        elif self._runs is not None:
            tables = (wide(features, matrix) for features, matrix, _, _ in self._spilled(labels))
        else:
            tables = iter([wide(*self.matrix(labels)[:2])])
        write_counts_file(sink, meta, tables, empty=wide(pa.array([], pa.string()), np.zeros((0, len(labels)))))

    @classmethod
    def from_bytes(cls, data: bytes) -> "ExactCounts":
        """A state of ``to_bytes``, or one saved as Parquet by an earlier version (``wide`` or long)."""
        if data[:4] == b"PAR1":
            t = pq.read_table(io.BytesIO(data))
        else:
            t = pa.ipc.open_file(pa.py_buffer(data)).read_all()
        meta = json.loads(t.schema.metadata[b"refinery"])
        obj = cls()
        if meta.get("layout") not in ("wide", "grams"):   # a long (feature, label, count) table
            obj.add_counts(t.replace_schema_metadata(None), meta["label_totals"])
            return obj
        labels = meta["labels"]
        features = t["feature"] if meta["layout"] == "wide" else gram_strings(t)
        matrix = np.column_stack([t[f"count_{j}"].to_numpy() for j in range(len(labels))]) if labels \
            else np.zeros((t.num_rows, 0), np.int64)
        obj.add_counts(zstats.matrix_to_long(features, labels, matrix), meta["label_totals"])
        return obj

