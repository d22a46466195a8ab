"""Feature–label counters with one output schema ``(feature, label, count)``.

``ExactCounts`` keeps every count: batches accumulate in a ``FeatureCounts`` (integer ids,
compiled kernels); states from elsewhere merge by summing ``(feature, label, count)`` tables.
``SketchCounts`` bounds memory with Apache DataSketches: a frequent-items sketch per label
for the heavy hitters and a count-min sketch for n(x); batches are pre-aggregated so each
distinct (feature, label) is one weighted update. Both serialize and merge, so partial
states from shards (or Ray tasks) combine, and a saved state can be extended later.
"""
from __future__ import annotations

import io
import json
import math

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from refinery.core import stats as zstats
from refinery.core.feature_counts import FeatureCounts, TokenIds, gram_strings

COUNTS_SCHEMA = pa.schema([("feature", pa.string()), ("label", pa.string()), ("count", pa.int64())])


def label_totals(labels) -> dict:
    """Rows per label of a label column."""
    vc = pc.value_counts(labels)
    return dict(zip(vc.field("values").to_pylist(), vc.field("counts").to_pylist()))


def add_totals(into: dict, more: dict | None) -> None:
    """Add the rows per label of ``more`` to ``into``."""
    for label, rows in (more or {}).items():
        into[label] = into.get(label, 0) + rows


class ExactCounts:
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

    def __init__(self, only: pa.Array | None = None, memory_budget: int | None = None):
        self.only = only
        self.memory_budget = memory_budget
        self._runs = None      # KeyedRuns or PartitionedRuns once spilled
        self._spilled_labels: set = set()
        self._parts: list[pa.Table] = []
        self._pending = 0
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
        from refinery.io.spill import PartitionedRuns

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
        from refinery.io.spill import KeyedRuns, PartitionedRuns

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
        self._parts, self._pending, self._matrix = [], 0, None
        self._runs.write(run)

    def _name_keyed_runs(self) -> None:
        """Keyed runs (and the batch counts) rewritten as string runs, a partition at a time: counts
        merged in as tables can only meet them by feature string."""
        from refinery.io.spill import KeyedRuns, PartitionedRuns

        if not isinstance(self._runs, KeyedRuns):
            return
        labels = self.labels()
        named = PartitionedRuns()
        for parts in self._keyed_partitions(labels):
            features, matrix = self._batches.named(parts, labels)
            named.write(zstats.matrix_to_long(features, labels, matrix, COUNTS_SCHEMA))
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
        self._parts.append(counts.cast(COUNTS_SCHEMA))
        self._pending += counts.num_rows
        self._sorted = False
        self._matrix = None
        add_totals(self.label_totals, label_totals)
        if self._pending > 8_000_000 and len(self._parts) > 1:
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
            raise ValueError("ExactCounts.add_table: every batch must be counted with the same features")
        self._batches.add(table)
        self._matrix = None
        add_totals(self.label_totals, label_totals(table["label"]))
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
            self.add_counts(zstats.matrix_to_long(features, labels, matrix, COUNTS_SCHEMA))

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
        from refinery.io.spill import KeyedRuns

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
        import duckdb

        con = duckdb.connect()
        con.register("parts", pa.concat_tables(self._parts))
        order = " ORDER BY feature, label" if ordered else ""
        t = con.sql("SELECT feature, label, sum(count)::BIGINT AS count FROM parts GROUP BY feature, label"
                    + order).to_arrow_table().cast(COUNTS_SCHEMA)
        con.close()
        self._parts, self._pending = [t], t.num_rows

    def counts(self) -> pa.Table:
        """Every (feature, label, count), sorted by feature and label (all in memory, spilled or not)."""
        if self._runs is not None:
            labels = self.labels()
            merged = [zstats.matrix_to_long(features, labels, matrix, COUNTS_SCHEMA)
                      for features, matrix, _, _ in self._spilled(labels)]
            table = pa.concat_tables(merged) if merged else pa.Table.from_batches([], COUNTS_SCHEMA)
            return table.sort_by([("feature", "ascending"), ("label", "ascending")])
        self._fold_batches()
        if not self._parts:
            return pa.Table.from_batches([], schema=COUNTS_SCHEMA)
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
        from refinery.io.spill import KeyedRuns

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
        first = next(tables, None)
        if first is None:
            first = wide(pa.array([], pa.string()), np.zeros((0, len(labels))))
        schema = first.schema.with_metadata({b"refinery": json.dumps(meta).encode()})
        with pa.ipc.new_file(sink, schema, options=pa.ipc.IpcWriteOptions(compression="lz4")) as writer:
            writer.write_table(first.replace_schema_metadata(schema.metadata))
            for table in tables:
                writer.write_table(table.replace_schema_metadata(schema.metadata))

    def to_bytes(self) -> bytes:
        """``write_state`` into memory."""
        sink = pa.BufferOutputStream()
        self.write_state(sink)
        return sink.getvalue().to_pybytes()

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


class SketchCounts:
    """Bounded-memory counts: frequent items per label (heavy hitters), count-min for n(x).

    Batches are counted by the compiled exact counter a chunk at a time (``CHUNK_FEATURES``
    features), then each label's sketch gets one weighted update per feature of the chunk whose
    count reaches the chunk's cut-off: the label's k-th largest count (k = the sketch's map
    size; never below 2), as a sketch of k counters keeps at most 3k/4 items. So a chunk of
    a million rows costs some hundred thousand updates, not one a feature occurrence.

    Error bounds (``error_bounds``): a label count is underestimated by at most the sketch's
    maximum error plus the counts left below the cut-offs (``prefilter_undercount``: the sum over
    chunks of the labels' cut-offs − 1); n(x) is overestimated by at most ``relative_error × total weight``
    with probability ``1 - exp(-num_hashes)``, and underestimated by at most the same prefilter sum.
    """

    mode = "sketch"
    CHUNK_FEATURES = 4_000_000
    spilled_runs = 0   # bounded by its sketches: it never spills

    def __init__(self, lg_max_k: int = 16, cm_hashes: int = 5, cm_buckets: int = 1 << 20):
        from datasketches import count_min_sketch

        self.lg_max_k = lg_max_k
        self.cm_hashes, self.cm_buckets = cm_hashes, cm_buckets
        self._items: dict = {}
        self._n = count_min_sketch(cm_hashes, cm_buckets)
        self._chunk: FeatureCounts | None = None
        self.prefilter_undercount = 0
        self.label_totals: dict[str, int] = {}

    @property
    def rows(self) -> int:
        return sum(self.label_totals.values())

    def _sketch(self, label: str):
        from datasketches import frequent_strings_sketch

        if label not in self._items:
            self._items[label] = frequent_strings_sketch(self.lg_max_k)
        return self._items[label]

    def add_table(self, table: pa.Table, features) -> None:
        """Count one canonical batch (``features``: a ``FeatureConfig``) into the current chunk."""
        if self._chunk is None:
            self._chunk = FeatureCounts(features)
        self._chunk.add(table)
        add_totals(self.label_totals, label_totals(table["label"]))
        if self._chunk.held_features > self.CHUNK_FEATURES or self._chunk.rows > FeatureCounts.MAX_ROWS // 2:
            self._drain_chunk()

    def _drain_chunk(self) -> None:
        """Hand the chunk's counts above the cut-offs to the sketches."""
        if self._chunk is None:
            return
        chunk, self._chunk = self._chunk, None
        labels = sorted(chunk.labels)
        cap = 1 << self.lg_max_k
        features, _, matrix = chunk.matrix(labels, min_count=2)
        cuts = [max(2, int(np.partition(matrix[:, j], len(matrix) - cap)[len(matrix) - cap])) if len(matrix) > cap
                else 2 for j in range(len(labels))]
        keep = np.flatnonzero((matrix >= np.array(cuts)[None, :]).any(axis=1))
        features, matrix = features.take(pa.array(keep)).to_pylist(), matrix[keep]
        for j, label in enumerate(labels):
            sketch = self._sketch(label)
            for i in np.flatnonzero(matrix[:, j] >= cuts[j]).tolist():
                sketch.update(features[i], int(matrix[i, j]))
        cm = self._n
        for f, n in zip(features, matrix.sum(axis=1).tolist()):
            cm.update(f, n)
        self.prefilter_undercount += sum(cut - 1 for cut in cuts)   # a feature left out has each count < its cut

    def add_counts(self, counts: pa.Table, label_totals: dict | None = None) -> None:
        """Add a ``(feature, label, count)`` table: one update per row."""
        self._drain_chunk()
        add_totals(self.label_totals, label_totals)
        for part in counts.group_by("label").aggregate([]).column("label").to_pylist():
            sub = counts.filter(pc.equal(counts["label"], part))
            sketch = self._sketch(part)
            for f, c in zip(sub["feature"].to_pylist(), sub["count"].to_pylist()):
                sketch.update(f, c)
        n = counts.group_by("feature").aggregate([("count", "sum")])
        cm = self._n
        for f, c in zip(n["feature"].to_pylist(), n["count_sum"].to_pylist()):
            cm.update(f, c)

    def merge(self, other: "SketchCounts") -> "SketchCounts":
        self._drain_chunk()
        other._drain_chunk()
        self.prefilter_undercount += other.prefilter_undercount
        for label, sk in other._items.items():
            self._sketch(label).merge(sk)
        self._n.merge(other._n)
        add_totals(self.label_totals, other.label_totals)
        return self

    def candidates(self) -> pa.Array:
        """Every feature some label's sketch tracks (sorted): the features a recount pass counts exactly.

        Complete above the sketches' error: every (x, l) with count(x, l) > ``label_count_max_error[l]``
        is tracked, so the recount has every feature whose z*(x, l) needs a count that large.
        """
        from datasketches import frequent_items_error_type

        self._drain_chunk()
        items = set()
        for sk in self._items.values():
            items.update(item for item, *_ in sk.get_frequent_items(frequent_items_error_type.NO_FALSE_NEGATIVES, 0))
        return pa.array(sorted(items), pa.string())

    def counts(self) -> pa.Table:
        """Estimated counts of every feature that is a heavy hitter of some label.

        Each feature's label counts come from the per-label sketches; their sum is the
        feature's n unless the count-min estimate (an upper bound) is larger, which then
        goes to a ``__other__`` pseudo-label so n stays honest.
        """
        from datasketches import frequent_items_error_type

        self._drain_chunk()
        candidates = set()
        for sk in self._items.values():
            candidates.update(item for item, *_ in sk.get_frequent_items(frequent_items_error_type.NO_FALSE_POSITIVES))
        features, labels, values = [], [], []
        for f in sorted(candidates):
            total = 0
            for label, sk in sorted(self._items.items()):
                est = sk.get_estimate(f)
                if est:
                    features.append(f), labels.append(label), values.append(est)
                    total += est
            n = int(self._n.get_estimate(f))
            if n > total:
                features.append(f), labels.append("__other__"), values.append(n - total)
        return pa.table({"feature": features, "label": labels, "count": values}, schema=COUNTS_SCHEMA)

    def error_bounds(self) -> dict:
        self._drain_chunk()
        return {
            "mode": "sketch",
            "lg_max_k": self.lg_max_k,
            "prefilter_undercount": self.prefilter_undercount,
            "label_count_max_error": {k: int(self._max_error(sk)) for k, sk in self._items.items()},
            "n_relative_error": self._n.get_relative_error(),
            "n_max_overcount": int(math.ceil(self._n.get_relative_error() * self._n.total_weight)),
            "n_confidence": 1 - math.exp(-self.cm_hashes),
        }

    @staticmethod
    def _max_error(sk) -> float:
        from datasketches import frequent_items_error_type

        items = sk.get_frequent_items(frequent_items_error_type.NO_FALSE_NEGATIVES)
        return max((ub - lb for _, _, lb, ub in items), default=0)

    def write_state(self, sink) -> None:
        sink.write(self.to_bytes())

    def close(self) -> None:
        """Nothing on disk to remove (the interface of ``ExactCounts.close``)."""

    def to_bytes(self) -> bytes:
        self._drain_chunk()
        header = {"mode": "sketch", "lg_max_k": self.lg_max_k, "cm_hashes": self.cm_hashes,
                  "cm_buckets": self.cm_buckets, "label_totals": self.label_totals,
                  "prefilter_undercount": self.prefilter_undercount,
                  "labels": sorted(self._items)}
        parts = [self._items[k].serialize() for k in header["labels"]] + [self._n.serialize()]
        header["sizes"] = [len(p) for p in parts]
        h = json.dumps(header).encode()
        return len(h).to_bytes(8, "little") + h + b"".join(parts)

    @classmethod
    def from_bytes(cls, data: bytes) -> "SketchCounts":
        from datasketches import count_min_sketch, frequent_strings_sketch

        size = int.from_bytes(data[:8], "little")
        header = json.loads(data[8:8 + size])
        obj = cls(header["lg_max_k"], header["cm_hashes"], header["cm_buckets"])
        obj.label_totals = header["label_totals"]
        obj.prefilter_undercount = header.get("prefilter_undercount", 0)
        pos = 8 + size
        blobs = []
        for s in header["sizes"]:
            blobs.append(data[pos:pos + s])
            pos += s
        for label, blob in zip(header["labels"], blobs):
            obj._items[label] = frequent_strings_sketch.deserialize(blob)
        obj._n = count_min_sketch.deserialize(blobs[-1])
        return obj


def make_counter(mode: str, **kwargs):
    if mode == "exact":
        return ExactCounts(**kwargs)
    if mode == "sketch":
        return SketchCounts(**kwargs)
    raise ValueError(f"counting mode must be exact or sketch, not {mode!r}")


def counter_from_bytes(data: bytes):
    """An ``ExactCounts`` (an Arrow IPC file, or Parquet from an earlier version) or a ``SketchCounts``."""
    exact = data[:6] == b"ARROW1" or data[:4] == b"PAR1"
    return ExactCounts.from_bytes(data) if exact else SketchCounts.from_bytes(data)


class IncrementalCounts:
    """Feature × label counts that grow row by row (z-filter's Z): a feature index and an F×C matrix.

    Adding accepted rows is O(their features); z-statistics are recomputed from the matrix
    without recounting Z (Wu et al. 2022, Algorithm 1, incremental). ``vocabulary`` shares
    another counter's feature index, so ids mean the same features in both. The index is the
    compiled interning table of the audit (about 60 bytes a feature, against 200 for a Python
    dict and list) and counts are int32: tens of millions of features fit in a few GB.
    """

    def __init__(self, labels: list, vocabulary: "IncrementalCounts | None" = None):
        self.labels = list(labels)
        self.label_index = {l: j for j, l in enumerate(self.labels)}
        self.vocabulary = vocabulary.vocabulary if vocabulary else TokenIds()
        self.matrix = np.zeros((1024, len(self.labels)), dtype=np.int32)
        self.label_totals = {l: 0 for l in self.labels}

    @property
    def num_features(self) -> int:
        return len(self.vocabulary)

    def ids(self, features: pa.Array) -> np.ndarray:
        """Feature ids of an Arrow string array, registering unseen features."""
        return self.vocabulary.ids(features)

    def names(self, ids) -> pa.Array:
        """The feature strings of ``ids``."""
        ids = np.asarray(ids, dtype=np.int64)
        return self.vocabulary.grams(ids, np.full(len(ids), -1, dtype=np.int64), "")

    def add(self, feature_ids, label_ids, row_labels=None) -> None:
        """Count pairs (feature id, label id); ``row_labels`` are the labels of the rows added."""
        F, C = self.num_features, len(self.labels)
        if F > self.matrix.shape[0]:  # grown by half: the copy briefly holds both
            grown = np.zeros((max(F, self.matrix.shape[0] * 3 // 2), C), dtype=self.matrix.dtype)
            grown[: self.matrix.shape[0]] = self.matrix
            self.matrix = grown
        cells, counts = np.unique(np.asarray(feature_ids) * C + label_ids, return_counts=True)
        self.matrix.reshape(-1)[cells] += counts.astype(self.matrix.dtype)  # distinct cells: the add is exact
        for l in row_labels if row_labels is not None else ():
            self.label_totals[l] += 1

    @property
    def rows(self) -> int:
        return sum(self.label_totals.values())

    def stats(self, prior: str = "uniform", min_count: int = 10, alpha: float = 0.01):
        """z-statistics of the features with n ≥ ``min_count`` (the only ones z* is defined for)."""
        counts = self.matrix[: self.num_features]
        keep = np.flatnonzero(zstats.row_totals(counts) >= min_count)
        return zstats.from_matrix(self.names(keep), self.labels, counts[keep].astype(np.float64),
                                  zstats.prior_vector(self.labels, self.label_totals, prior), min_count, alpha)
