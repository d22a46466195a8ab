"""Units of an input's rows that a worker reads by itself: a finished corpus's shards cut by row groups into units
of about equal rows, a raw file whole (``Piece``), and their batches (``unit_batches``)."""
from __future__ import annotations

from dataclasses import dataclass

import pyarrow as pa
import pyarrow.parquet as pq

from refinery.io.location import get_fs
from refinery.io.read_options import ReadOptions
from refinery.io.readers import read_file
from refinery.io.schema import Mapping

# A corpus is cut into units of equal rows, as few as give every CPU one, each at most UNIT_ROWS (a worker
# counting 5M planted pairs peaks at 1.3 GB; the larger a unit, the fewer counts there are to sum, as the common
# features recur in each) and at least MIN_UNIT_ROWS; the number of units is a multiple of the CPUs' where the
# input allows, so that no round of units leaves CPUs idle.
UNIT_ROWS = 1 << 23
MIN_UNIT_ROWS = 1 << 16


@dataclass(frozen=True)
class Piece:
    """Rows of one file: row groups of a corpus's shard, or a whole raw file (``row_groups`` None) read through
    ``mapping`` (``io.corpus.input_mapping``'s: the one given, or refinery's own columns where the file has them)."""

    path: str
    row_groups: tuple | None = None
    mapping: Mapping | None = None


def corpus_units(files: list[str], storage_options: dict, cpus: int) -> list[tuple[Piece, ...]]:
    """The shards' row groups in order, cut into units of about equal rows (see ``UNIT_ROWS``); a unit may span
    shards."""
    sizes = []
    for url in files:
        fs, path = get_fs(url, storage_options)
        with fs.open(path, "rb") as fh:
            meta = pq.ParquetFile(fh).metadata
        sizes.append([meta.row_group(i).num_rows for i in range(meta.num_row_groups)])
    total = sum(map(sum, sizes))
    rounds = max(1, -(-total // (cpus * UNIT_ROWS)))
    target = max(MIN_UNIT_ROWS, -(-total // (rounds * cpus)))
    units, pieces, rows = [], [], 0
    for url, groups in zip(files, sizes):
        start = 0
        for i, n in enumerate(groups):
            rows += n
            if rows >= target:
                units.append((*pieces, Piece(url, tuple(range(start, i + 1)))))
                pieces, rows, start = [], 0, i + 1
        if start < len(groups):
            pieces.append(Piece(url, tuple(range(start, len(groups)))))
    return units + ([tuple(pieces)] if pieces else [])


def unit_batches(unit: tuple[Piece, ...], opts: ReadOptions, columns: tuple):
    """(rows, rejects) of a unit's pieces, a batch at a time: a raw file's canonical rows and rejects, a corpus's
    ``columns`` (those its shards have) and no rejects (the corpus keeps them apart)."""
    for piece in unit:
        if piece.row_groups is None:
            for batch in read_file(piece.path, piece.mapping, opts):
                yield batch.rows, batch.rejects
            continue
        fs, path = get_fs(piece.path, opts.storage_options)
        with fs.open(path, "rb") as fh:
            parquet = pq.ParquetFile(fh)
            present = [c for c in columns if c in parquet.schema_arrow.names]
            for rb in parquet.iter_batches(batch_size=opts.batch_rows, row_groups=list(piece.row_groups),
                                           columns=present):
                yield pa.Table.from_batches([rb]), None
