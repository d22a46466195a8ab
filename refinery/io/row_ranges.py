"""A stage's input as numbered rows that a worker reads a range of itself: the shards of its finished corpora, each
with its row count (from the manifests), and ``RowReader`` of rows ``[start, stop)``, opening only the shards and
the row groups that hold them."""
from __future__ import annotations

from dataclasses import dataclass, field

import pyarrow as pa
import pyarrow.parquet as pq

from refinery.io.corpus import resolve
from refinery.io.location import get_fs, on_store


@dataclass(frozen=True)
class InputShard:
    """One Parquet shard of the input: its URL, its rows, and the split its rows belong to (``""``: none named)."""

    file: str
    rows: int
    split: str = ""


@dataclass(frozen=True)
class InputShards:
    """The input's shards in order, their corpora's rejects files, and the store ``storage_options`` reach."""

    shards: list
    reject_files: list
    storage_options: dict = field(default_factory=dict)
    labels: dict = field(default_factory=dict)   # the rows per label every corpus's manifest records, summed

    @property
    def rows(self) -> int:
        return sum(s.rows for s in self.shards)


def input_shards(splits: dict, storage_options: dict) -> InputShards | None:
    """The shards of the corpora ``splits`` names (``{split: [paths or their io.corpus.Resolved]}``), or None where
    one is not a finished corpus or its manifest records no rows per shard (a worker could not find a row by its
    number)."""
    shards, reject_files, labels = [], [], {}
    for split, paths in splits.items():
        for url in paths:
            corpus = resolve(url, storage_options).corpus
            if corpus is None:
                return None
            for name, file in zip(corpus.manifest.files, corpus.files):
                rows = corpus.manifest.recorded(name).rows
                if rows is None:
                    return None
                shards.append(InputShard(file, rows, split))
            reject_files += corpus.reject_files
            for label, n in corpus.manifest.labels.items():
                labels[label] = labels.get(label, 0) + n
    return InputShards(shards, reject_files, storage_options, labels)


class RowReader:
    """Reads rows ``[start, stop)`` of ``InputShards``: the row groups that hold them, the last one read kept for the
    next range (a worker's consecutive ranges mostly fall in one row group)."""

    def __init__(self, shards: InputShards):
        self.input = shards
        self._kept: tuple | None = None   # ((file, its first row, its rows), the rows) of the last row group read

    def read(self, start: int, stop: int) -> list[tuple[InputShard, pa.Table]]:
        """The rows ``[start, stop)`` of the input, as (shard, its rows in the range) in order."""
        out, first = [], 0
        for shard in self.input.shards:
            low, high = max(start, first), min(stop, first + shard.rows)
            if low < high:
                out.append((shard, self._rows_of(shard, low - first, high - first)))
            first += shard.rows
            if first >= stop:
                break
        return out

    def _rows_of(self, shard: InputShard, low: int, high: int) -> pa.Table:
        if self._kept is not None:
            (file, first, rows), table = self._kept
            if file == shard.file and first <= low and high <= first + rows:   # no request to the store
                return table.slice(low - first, high - low)
        fs, path = get_fs(shard.file, self.input.storage_options)
        parts = []
        with on_store(shard.file, "reading"), fs.open(path, "rb") as fh:
            parquet, first = pq.ParquetFile(fh), 0
            for group in range(parquet.metadata.num_row_groups):
                rows = parquet.metadata.row_group(group).num_rows
                if first < high and low < first + rows:
                    table = parquet.read_row_group(group)
                    self._kept = ((shard.file, first, rows), table)
                    parts.append(table.slice(max(low - first, 0), min(high, first + rows) - max(low, first)))
                first += rows
        return pa.concat_tables(parts) if len(parts) > 1 else parts[0]
