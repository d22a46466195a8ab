"""Raw pieces, what the parser of every format yields: (rows as the file holds them, each with its line
as ``__line``; their raw text, or None where the rows are records of a table; the rows refused while
parsing, as rejects). The parsers of the formats that are tables already (Parquet, Arrow IPC) are here."""
from __future__ import annotations

from typing import Iterator

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from refinery.io.schema import REJECTS_SCHEMA, empty_table

EMPTY_REJECTS = empty_table(REJECTS_SCHEMA)


def rejects_table(source_file: str, bad: list[tuple]) -> pa.Table:
    """The rejects of ``source_file`` named by ``bad``: (line, column, reason, raw text) per row."""
    lines, columns, reasons, raws = ([b[i] for b in bad] for i in range(4))
    return pa.table(
        {"source_file": [source_file] * len(lines), "line": lines, "column": columns,
         "reason": reasons, "raw": raws},
        schema=REJECTS_SCHEMA,
    )


def with_lines(table: pa.Table, lines) -> pa.Table:
    """``table`` with each row's line (1-based; the row number for Parquet and JSON arrays) as ``__line``."""
    return table.append_column("__line", pa.array(lines, pa.int64()))


def parquet_pieces(fs, path, opts) -> Iterator[tuple[pa.Table, object, pa.Table]]:
    with fs.open(path, "rb") as fh:
        pf = pq.ParquetFile(fh)
        yield from _numbered((pa.Table.from_batches([rb]) for rb in pf.iter_batches(batch_size=opts.batch_rows)),
                             pf.schema_arrow)


def arrow_pieces(fs, path, opts, source) -> Iterator[tuple[pa.Table, object, pa.Table]]:
    """Arrow IPC: the file format (Feather 2) or the stream format (Hugging Face datasets' ``.arrow``)."""
    with fs.open(path, "rb", compression="infer") as fh:
        data = fh if fh.seekable() else pa.BufferReader(fh.read())
        is_file = data.read(6) == b"ARROW1"
        data.seek(0)
        try:
            reader = pa.ipc.open_file(data) if is_file else pa.ipc.open_stream(data)
        except pa.ArrowInvalid as e:
            raise ValueError(f"{source}: not an Arrow IPC file or stream ({e})") from None
        batches = (reader.get_batch(i) for i in range(reader.num_record_batches)) if is_file else reader
        tables = (pa.Table.from_batches([rb], reader.schema) for rb in batches)
        yield from _numbered(rebatch(tables, opts.batch_rows), reader.schema)


def rebatch(tables: Iterator[pa.Table], size: int) -> Iterator[pa.Table]:
    """Fixed-size batches (the last may be short) from a stream of tables."""
    buf: list[pa.Table] = []
    held = 0
    for t in tables:
        buf.append(t)
        held += t.num_rows
        while held >= size:
            whole = pa.concat_tables(buf, promote_options="permissive")
            yield whole.slice(0, size)
            rest = whole.slice(size)
            buf, held = ([rest] if rest.num_rows else []), rest.num_rows
    if held:
        yield pa.concat_tables(buf, promote_options="permissive")


def _numbered(tables, schema: pa.Schema) -> Iterator[tuple[pa.Table, object, pa.Table]]:
    """Tables of records with their 1-based record number as ``__line``; a file without records gives one table
    without rows, so that its columns are known."""
    start = 1
    for table in tables:
        yield with_lines(table, np.arange(start, start + table.num_rows)), None, EMPTY_REJECTS
        start += table.num_rows
    if start == 1:
        yield with_lines(empty_table(schema), []), None, EMPTY_REJECTS
