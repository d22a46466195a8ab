"""Hash-partitioned spill runs: counts that outgrow a memory budget go to disk as Parquet runs, each
row in the partition its feature's hash picks (``sql/spill_partition.sql``), so the runs merge one
partition at a time (``sql/spill_merge.sql``: every count of a feature is in one partition) in a
fraction of the memory the whole would take."""
from __future__ import annotations

import glob
import os
import shutil
import tempfile
from typing import Iterator

import pyarrow as pa

DEFAULT_PARTITIONS = 64


def memory_budget(value: str | float | int | None = None) -> int:
    """Bytes of a budget given as bytes (``8G``, ``512M``, ``1000000``) or as a fraction of this
    machine's memory (``0.5``); None: half of it."""
    total = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    if value is None:
        return total // 2
    text = str(value).strip().upper().removesuffix("B")
    scale = {"K": 1 << 10, "M": 1 << 20, "G": 1 << 30, "T": 1 << 40}.get(text[-1:], 1)
    try:
        amount = float(text[:-1] if scale > 1 else text)
    except ValueError:
        raise ValueError(f"memory budget {value!r}: give bytes (8G, 512M) or a fraction of memory (0.5)") from None
    if amount <= 0:
        raise ValueError(f"memory budget {value!r} must be positive")
    return int(amount * total) if scale == 1 and amount <= 1 else int(amount * scale)


class PartitionedRuns:
    """``(feature, label, count)`` spill runs under a temporary folder, hash-partitioned by feature.

    ``write`` adds a run; iterating gives each partition's merged counts. ``close`` removes the folder.
    """

    def __init__(self, partitions: int = DEFAULT_PARTITIONS, directory: str | None = None):
        self.partitions = partitions
        self.root = tempfile.mkdtemp(prefix="refinery-spill-", dir=directory)
        self.runs = 0
        self._con = None

    def _connection(self):
        from refinery.io.queries import connect

        if self._con is None:
            self._con = connect()
        return self._con

    def write(self, counts: pa.Table) -> None:
        from refinery.io.queries import load_sql, quote_literal

        con = self._connection()
        con.register("run", counts)
        try:
            rel = con.sql(load_sql("spill_partition"), params={"partitions": self.partitions})
            target = os.path.join(self.root, f"run-{self.runs:05d}")
            rel.to_table("spilled")   # COPY cannot take the query's parameters: materialize, then copy
            con.execute(f"COPY spilled TO {quote_literal(target)} (FORMAT parquet, PARTITION_BY (part), "
                        "COMPRESSION lz4)")
            con.execute("DROP TABLE spilled")
        finally:
            con.unregister("run")
        self.runs += 1

    def __iter__(self) -> Iterator[pa.Table]:
        """Each partition's ``(feature, label, count)`` summed over the runs (empty partitions skipped)."""
        from refinery.io.queries import load_sql

        con = self._connection()
        for p in range(self.partitions):
            files = sorted(glob.glob(os.path.join(self.root, "run-*", f"part={p}", "*.parquet")))
            if files:
                yield con.sql(load_sql("spill_merge"), params={"files": files}).to_arrow_table()

    @property
    def bytes_on_disk(self) -> int:
        return sum(os.path.getsize(f) for f in glob.glob(os.path.join(self.root, "**", "*.parquet"), recursive=True))

    def close(self) -> None:
        if self._con is not None:
            self._con.close()
            self._con = None
        shutil.rmtree(self.root, ignore_errors=True)
