"""Bounded-memory feature–label counts (``SketchCounts``) with Apache DataSketches: a frequent-items sketch
per label for the heavy hitters and a count-min sketch for n(x); batches are pre-aggregated so each distinct
(feature, label) is one weighted update. A state serializes and merges, as the exact counts' does.
"""
from __future__ import annotations

import json
import math

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
from datasketches import count_min_sketch, frequent_items_error_type, frequent_strings_sketch

from refinery.core import stats as zstats
from refinery.core.feature_counts import FeatureCounts


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
        if label not in self._items:
            self._items[label] = frequent_strings_sketch(self.lg_max_k)
        return self._items[label]

    def add_table(self, table: pa.Table, features) -> None:
        """Count one canonical batch (``features``: a ``FeatureConfig``) into the current chunk."""
        if self._chunk is None:
            self._chunk = FeatureCounts(features)
        self._chunk.add(table)
        zstats.add_totals(self.label_totals, zstats.rows_per_label(table["label"]))
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
        zstats.add_totals(self.label_totals, label_totals)
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
        zstats.add_totals(self.label_totals, other.label_totals)
        return self

    def candidates(self) -> pa.Array:
        """Every feature some label's sketch tracks (sorted): the features a recount pass counts exactly.

        Complete above the sketches' error: every (x, l) with count(x, l) > ``label_count_max_error[l]``
        is tracked, so the recount has every feature whose z*(x, l) needs a count that large.
        """
        self._drain_chunk()
        items = set()
        for sk in self._items.values():
            items.update(item for item, *_ in sk.get_frequent_items(frequent_items_error_type.NO_FALSE_NEGATIVES, 0))
        return pa.array(sorted(items), pa.string())

    def counts(self) -> pa.Table:
        """Estimated counts of every feature that is a heavy hitter of some label.

        Each feature's label counts come from the per-label sketches; their sum is the
        feature's n unless the count-min estimate (an upper bound) is larger, which then
        goes to the ``stats.OTHER`` pseudo-label so n stays honest.
        """
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
                features.append(f), labels.append(zstats.OTHER), values.append(n - total)
        return pa.table({"feature": features, "label": labels, "count": values}, schema=zstats.COUNTS_SCHEMA)

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

