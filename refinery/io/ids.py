"""Content-hash row ids, for the rows of a file that ships none."""
from __future__ import annotations

import posixpath
import threading

import pyarrow as pa

from refinery.io.db import connect, load_sql

_THREAD = threading.local()


def content_ids(source_file: str, lines, text_a, text_b, label) -> pa.Array:
    """Content-hash ids, salted with the file name and line so duplicates stay distinct: the first 16 hex
    digits of sha1("<file name>\\x1f<line>\\x1f<text_a>\\x1f<text_b>\\x1f<label>") (``sql/_row_ids.sql``),
    computed by DuckDB on one connection per thread (opening one costs 20–30 ms)."""
    if getattr(_THREAD, "ids", None) is None:
        _THREAD.ids = connect(), load_sql("_row_ids")
    con, sql = _THREAD.ids
    rows = pa.table({"line": lines, "text_a": text_a, "text_b": text_b, "label": label})
    con.register("rows", pa.Table.from_batches(rows.to_batches(max_chunksize=16_384), rows.schema))  # a thread a batch
    try:
        return con.sql(sql, params=[posixpath.basename(source_file)]).to_arrow_table()["id"]
    finally:
        con.unregister("rows")
