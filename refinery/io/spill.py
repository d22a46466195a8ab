"""What waits on disk instead of in memory. Hash-partitioned spill runs: counts that outgrow a memory budget go to
disk as Parquet runs, each row in the partition its feature's hash picks (``sql/_spill_partition.sql``), so the runs
merge one partition at a time (``sql/_spill_merge.sql``: every count of a feature is in one partition) in a fraction
of the memory the whole would take. ``SpilledVectors``: embeddings, read back memory-mapped. ``SpilledSlices``: arrays
appended slice by slice (a counter's token ids), read back a slice at a time."""
from __future__ import annotations

import glob
import os
import shutil
import tempfile
import weakref
from typing import Iterator

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from refinery.io.db import connect, load_sql, quote_literal
from refinery.io.scratch import process_folder, read_at, scratch_folder, write_at

DEFAULT_PARTITIONS = 64


class _Runs:
    """Spill runs under a temporary folder, each hash-partitioned into ``partitions`` files; iterating
    merges one partition at a time (the query ``MERGE`` over its files). ``close`` removes the folder."""

    MERGE = ""
    FILES = ""    # a partition's files under the root, as a glob with {p}
    MERGED = ""   # where a partition merged from several files is kept (a path FILES matches)

    def __init__(self, partitions: int = DEFAULT_PARTITIONS):
        self.partitions = partitions
        self.root = scratch_folder("spill-")
        self.runs = 0       # spills reported (a rewrite may carry over another's count)
        self._folders = 0   # run folders written
        self._con = None

    def _connection(self):
        if self._con is None:
            self._con = connect()
        return self._con

    def merged(self) -> Iterator[pa.Table]:
        """Each partition's rows summed over the runs (empty partitions skipped). A partition merged from
        several files is written back as one merged file in their place, so a later pass (the state after
        the statistics) reads it as it is instead of merging again."""
        con = self._connection()
        for p in range(self.partitions):
            files = sorted(glob.glob(os.path.join(self.root, self.FILES.format(p=p))))
            merged = os.path.join(self.root, self.MERGED.format(p=p))
            if files == [merged]:
                yield pq.read_table(merged)
            elif files:
                table = con.sql(load_sql(self.MERGE), params={"files": files}).to_arrow_table()
                if len(files) > 1:
                    self._replace(files, merged, table)
                yield table

    @staticmethod
    def _replace(files: list[str], merged: str, table: pa.Table) -> None:
        """``files`` replaced by ``merged``, which holds ``table`` (written aside, then moved in)."""
        os.makedirs(os.path.dirname(merged), exist_ok=True)
        pq.write_table(table, merged + ".tmp", compression="lz4")
        for f in files:
            os.remove(f)
        os.replace(merged + ".tmp", merged)

    def close(self) -> None:
        if self._con is not None:
            self._con.close()
            self._con = None
        shutil.rmtree(self.root, ignore_errors=True)


class PartitionedRuns(_Runs):
    """``(feature, label, count)`` runs, partitioned by a hash of the feature string (DuckDB,
    ``sql/_spill_partition.sql``); ``merged`` gives each partition's ``(feature, label, count)``."""

    MERGE = "_spill_merge"
    FILES = os.path.join("run-*", "part={p}", "*.parquet")
    MERGED = os.path.join("run-merged", "part={p}", "merged.parquet")

    def write(self, counts: pa.Table) -> None:
        con = self._connection()
        con.register("run", counts)
        try:
            rel = con.sql(load_sql("_spill_partition"), params={"partitions": self.partitions})
            target = os.path.join(self.root, f"run-{self._folders:05d}")
            rel.to_table("spilled")   # COPY cannot take the query's parameters: materialize, then copy
            con.execute(f"COPY spilled TO {quote_literal(target)} (FORMAT parquet, PARTITION_BY (part), "
                        "COMPRESSION lz4)")
            con.execute("DROP TABLE spilled")
        finally:
            con.unregister("run")
        self.runs += 1
        self._folders += 1


KEYED_SCHEMA = pa.schema([("code", pa.int16()), ("first", pa.int32()), ("second", pa.int32()),
                          ("label", pa.int16()), ("count", pa.int32())])
_GOLDEN = np.uint64(0x9E3779B97F4A7C15)


class KeyedRuns(_Runs):
    """Counts named by integer ids (``FeatureCounts.spill``): rows ``(code, first, second, label, count)``
    — the count table, the token (or row-feature) ids and the label id — partitioned by a hash of
    (code, first, second), written with Arrow one slice of a table at a time (no string per feature,
    no copy of the run). ``merged_parts`` gives each partition merged (``sql/_spill_keyed_merge.sql``)
    as (code, first, second, counts) parts."""

    MERGE = "_spill_keyed_merge"
    FILES = os.path.join("run-*", "part-{p:05d}.parquet")
    MERGED = os.path.join("run-merged", "part-{p:05d}.parquet")

    def __init__(self, partitions: int = DEFAULT_PARTITIONS):
        super().__init__(partitions)
        self._writers: dict[int, pq.ParquetWriter] = {}

    def add(self, code: int, first: np.ndarray, second: np.ndarray, counts: np.ndarray) -> None:
        """The nonzero counts (features × label ids) of ``first``/``second`` of the table ``code``."""
        key = (first.astype(np.uint64) << np.uint64(32)) | (second.astype(np.uint64) & np.uint64(0xFFFFFFFF))
        part = ((((key ^ np.uint64(code + 1)) * _GOLDEN) >> np.uint64(32)) % np.uint64(self.partitions)).astype(np.int64)
        row, label = np.nonzero(counts)
        by_part = np.argsort(part[row], kind="stable")
        row, label = row[by_part], label[by_part]
        bounds = np.searchsorted(part[row], np.arange(self.partitions + 1))
        table = pa.table({"code": np.full(len(row), code, np.int16), "first": first[row].astype(np.int32),
                          "second": second[row].astype(np.int32), "label": label.astype(np.int16),
                          "count": counts[row, label].astype(np.int32)}, schema=KEYED_SCHEMA)
        for p in np.flatnonzero(np.diff(bounds)):
            if p not in self._writers:
                folder = os.path.join(self.root, f"run-{self._folders:05d}")
                os.makedirs(folder, exist_ok=True)
                self._writers[p] = pq.ParquetWriter(os.path.join(folder, f"part-{p:05d}.parquet"), KEYED_SCHEMA,
                                                    compression="lz4")
            self._writers[p].write_table(table.slice(bounds[p], bounds[p + 1] - bounds[p]))

    def end_run(self) -> None:
        """Close the run's files (a run with no counts is not one)."""
        for writer in self._writers.values():
            writer.close()
        self.runs += bool(self._writers)
        self._folders += bool(self._writers)
        self._writers = {}

    def merged_parts(self, columns: np.ndarray, width: int) -> Iterator[list[tuple[int, np.ndarray, np.ndarray, np.ndarray]]]:
        """Each partition's features as (code, first, second, F × ``width`` int64 counts) parts, one a
        table code; ``columns[label id]`` is the label's column (−1: left out)."""
        for merged in self.merged():
            if not merged.num_rows:
                continue
            code, first, second = (merged[c].to_numpy() for c in ("code", "first", "second"))
            label, count = merged["label"].to_numpy(), merged["count"].to_numpy()
            new = np.r_[True, (code[1:] != code[:-1]) | (first[1:] != first[:-1]) | (second[1:] != second[:-1])]
            starts, feature = np.flatnonzero(new), np.cumsum(new) - 1
            matrix = np.zeros((len(starts), width), dtype=np.int64)
            col = columns[label]
            matrix[feature[col >= 0], col[col >= 0]] = count[col >= 0]
            codes = code[starts]
            cuts = np.flatnonzero(np.r_[True, codes[1:] != codes[:-1], True])
            yield [(int(codes[a]), first[starts[a:b]].astype(np.int64), second[starts[a:b]].astype(np.int64),
                    matrix[a:b]) for a, b in zip(cuts[:-1], cuts[1:])]


class SpilledVectors:
    """Float32 row vectors of several fields appended chunk by chunk to files of a temporary folder, then read back
    memory-mapped (``mapped``): rows × dim each, never all in memory. The folder goes with this object (``close``,
    or when it is collected)."""

    def __init__(self, dims: list[int], prefix: str = "vectors-"):
        self._folder = tempfile.TemporaryDirectory(prefix=prefix, dir=process_folder())
        self.dims, self.rows = list(dims), 0
        self._paths = [os.path.join(self._folder.name, f"field{f}.f32") for f in range(len(dims))]
        self._files = [open(p, "wb") for p in self._paths]

    def append(self, chunk: list) -> None:
        """One chunk of rows: an array (rows × dim) per field."""
        for fh, vectors in zip(self._files, chunk):
            fh.write(np.ascontiguousarray(vectors, np.float32).tobytes())
        self.rows += len(chunk[0])

    def mapped(self) -> list:
        """Each field's vectors, memory-mapped read-only (the files closed for writing first)."""
        for fh in self._files:
            fh.close()
        return [np.memmap(p, np.float32, "r", shape=(self.rows, d)) for p, d in zip(self._paths, self.dims)]

    def close(self) -> None:
        for fh in self._files:
            fh.close()
        self._folder.cleanup()


class SpilledSlices:
    """Arrays appended slice by slice to one file per stream in a temporary folder (``pwrite``; a stream is
    appended by one thread at a time, different streams side by side), read back slice by slice (``preadv``:
    the OS's page cache keeps what memory allows). The folder goes with this object (``close``, or when it is
    collected)."""

    def __init__(self, streams: list[str], prefix: str = "slices-"):
        self._folder = tempfile.TemporaryDirectory(prefix=prefix, dir=process_folder())
        self._fds = {s: os.open(os.path.join(self._folder.name, f"{i}.bin"), os.O_RDWR | os.O_CREAT, 0o600)
                     for i, s in enumerate(streams)}
        self._slices: dict[str, list] = {s: [] for s in streams}   # (offset, dtype, length) of each slice
        self._sizes = dict.fromkeys(streams, 0)
        self._closer = weakref.finalize(self, _close_slices, self._fds, self._folder)

    def append(self, stream: str, array: np.ndarray) -> None:
        data = np.ascontiguousarray(array)
        write_at(self._fds[stream], data, self._sizes[stream])
        self._slices[stream].append((self._sizes[stream], data.dtype, len(data)))
        self._sizes[stream] += data.nbytes

    def lengths(self, stream: str) -> list[int]:
        """The length of each slice of ``stream``, in order."""
        return [length for _, _, length in self._slices[stream]]

    def read(self, stream: str, k: int) -> np.ndarray:
        offset, dtype, length = self._slices[stream][k]
        array = np.empty(length, dtype)
        read_at(self._fds[stream], array, offset)
        return array

    def joined(self, stream: str, dtype) -> np.ndarray:
        """Every slice of ``stream`` one after the other, read into one array of ``dtype`` (the slices': a stream
        of none is empty): the memory of the result alone, where arrays joined in memory would leave their parts'
        in the heap."""
        out = np.empty(sum(self.lengths(stream)), dtype)
        at = 0
        for offset, _, length in self._slices[stream]:
            read_at(self._fds[stream], out[at:at + length], offset)
            at += length
        return out

    def close(self) -> None:
        """Close the files and remove the folder (once; also when this object is collected, or Python exits)."""
        self._closer()


def _close_slices(fds: dict, folder: tempfile.TemporaryDirectory) -> None:
    for fd in fds.values():
        os.close(fd)
    fds.clear()
    folder.cleanup()
