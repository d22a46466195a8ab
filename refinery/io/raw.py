"""Raw pieces, what the parser of every format yields: (rows as the file holds them, each with its line
as ``__line``; their raw text, or None where the rows are records of a table; the rows refused while
parsing, as rejects). The parsers of the formats that are tables already (Parquet, Arrow IPC) are here, with
the decoding of the Hugging Face ``ClassLabel`` columns their schemas declare."""
from __future__ import annotations

import json
from typing import Iterator

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from refinery.io.schema import REJECTS_SCHEMA, empty_table
from refinery.messages import Refusal

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


def parquet_pieces(fs, path, opts, source, mapped) -> Iterator[tuple[pa.Table, object, pa.Table]]:
    """Parquet, ``batch_rows`` records at a time (``mapped``: see ``decode_class_labels``)."""
    with fs.open(path, "rb") as fh:
        try:
            pf = pq.ParquetFile(fh)
        except pa.ArrowInvalid as e:
            raise Refusal(f"{source}: not a whole Parquet file ({e}); a damaged or cut-short copy?",
                          code="bad-input") from None
        yield from _numbered((pa.Table.from_batches([rb]) for rb in pf.iter_batches(batch_size=opts.batch_rows)),
                             pf.schema_arrow, source, mapped)


def arrow_pieces(fs, path, opts, source, mapped) -> Iterator[tuple[pa.Table, object, pa.Table]]:
    """Arrow IPC: the file format (Feather 2) or the stream format (Hugging Face datasets' ``.arrow``)."""
    with fs.open(path, "rb", compression="infer") as fh:
        data = fh if fh.seekable() else pa.BufferReader(fh.read())
        is_file = data.read(6) == b"ARROW1"
        data.seek(0)
        try:
            reader = pa.ipc.open_file(data) if is_file else pa.ipc.open_stream(data)
        except pa.ArrowInvalid as e:
            raise Refusal(f"{source}: not an Arrow IPC file or stream ({e})", code="bad-input") from None
        batches = (reader.get_batch(i) for i in range(reader.num_record_batches)) if is_file else reader
        tables = (pa.Table.from_batches([rb], reader.schema) for rb in batches)
        yield from _numbered(rebatch(tables, opts.batch_rows), reader.schema, source, mapped)


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


def class_labels(schema: pa.Schema) -> dict[str, list[str]]:
    """{column: its class names} for the integer columns that the Hugging Face features in ``schema``'s metadata
    (``datasets``' ``to_parquet``, ``save_to_disk``, the Hub's Parquet) declare ``ClassLabel``."""
    try:
        features = json.loads(schema.metadata[b"huggingface"])["info"]["features"]
        return {name: [str(n) for n in f["names"]] for name, f in features.items()
                if isinstance(f, dict) and f.get("_type") == "ClassLabel" and isinstance(f.get("names"), list)
                and schema.get_field_index(name) >= 0 and pa.types.is_integer(schema.field(name).type)}
    except (TypeError, KeyError, ValueError, AttributeError):   # no metadata, or not datasets' features
        return {}


def decode_class_labels(table: pa.Table, classes: dict[str, list[str]], source: str, mapped
                        ) -> tuple[pa.Table, pa.Table]:
    """``table`` (with ``__line``) with each ``ClassLabel`` column's integers as their names, as ``datasets``'
    ``int2str`` gives them, and the rows refused: an integer outside the names, or -1 (``datasets``' "no label")
    in a column of ``mapped``; elsewhere -1 becomes null."""
    original, refused = table, {}   # row → (column, reason), the first column that refuses it
    for name, names in classes.items():
        values = table[name]
        known = pc.and_(pc.greater_equal(values, 0), pc.less(values, len(names)))
        unfit = pc.invert(known) if name in mapped else pc.and_(pc.invert(known), pc.not_equal(values, -1))
        for i in pc.indices_nonzero(pc.fill_null(unfit, False)).to_pylist():
            value = values[i].as_py()
            refused.setdefault(i, (name, f"label -1 in column {name!r} (no label in the ClassLabel feature)"
                                   if value == -1 else f"label {value} in column {name!r} is outside the "
                                   f"ClassLabel feature's {len(names)} names"))
        names_of = pc.take(pa.array(names, pa.string()), pc.if_else(known, values, pa.scalar(None, values.type)))
        table = table.set_column(table.schema.get_field_index(name), name, names_of)
    if not refused:
        return table, EMPTY_REJECTS
    rows = sorted(refused)
    records = original.drop_columns(["__line"]).take(rows).to_pylist()
    bad = [(line, *refused[i], json.dumps(record, default=str, ensure_ascii=False))
           for i, line, record in zip(rows, original["__line"].take(rows).to_pylist(), records)]
    keep = np.ones(table.num_rows, bool)
    keep[rows] = False
    return table.filter(keep), rejects_table(source, bad)


def _numbered(tables, schema: pa.Schema, source: str, mapped) -> Iterator[tuple[pa.Table, object, pa.Table]]:
    """Tables of records with their 1-based record number as ``__line`` and their ``ClassLabel`` columns decoded;
    a file without records gives one table without rows, so that its columns are known."""
    classes = class_labels(schema)

    def numbered(table: pa.Table, start: int) -> tuple[pa.Table, object, pa.Table]:
        rows, rejects = decode_class_labels(with_lines(table, np.arange(start, start + table.num_rows)), classes,
                                            source, mapped)
        return rows, None, rejects

    start = 1
    for table in tables:
        yield numbered(table, start)
        start += table.num_rows
    if start == 1:
        yield numbered(empty_table(schema), 1)
