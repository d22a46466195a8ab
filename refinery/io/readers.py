"""Read labeled corpora (JSONL, JSON array, CSV/TSV, Parquet) into canonical Arrow batches.

Every input row ends either in a canonical batch or in a rejects batch with its source
file, line (1-based; row number for Parquet and JSON arrays), column and reason.
"""
from __future__ import annotations

import csv
import io
import json
import posixpath
import re
import threading
from dataclasses import dataclass
from typing import Iterator

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.json as pajson
import pyarrow.parquet as pq

from refinery.io.schema import (
    CANONICAL_SCHEMA,
    OPTIONAL_FIELDS,
    REJECTS_SCHEMA,
    Mapping,
    empty_table,
)
from refinery.io.storage import get_fs

DEFAULT_BATCH_ROWS = 65_536
DEFAULT_MAX_CHARS = 20_000
DEFAULT_MAX_ROW_BYTES = 4 << 20

FORMATS = {".jsonl": "jsonl", ".ndjson": "jsonl", ".json": "json", ".csv": "csv", ".tsv": "tsv",
           ".txt": "tsv", ".parquet": "parquet", ".pq": "parquet"}
COMPRESSIONS = (".gz", ".bz2", ".xz", ".zst")  # read through fsspec's compression="infer" (.zst: zstandard)
BOM = b"\xef\xbb\xbf"
MAX_JSON_DEPTH = 64  # deeper values are that row's reject, not a RecursionError
JSONL_BLOCK_BYTES = 16 << 20  # whole lines handed to Arrow's JSON reader at a time
LINE_BY_LINE = 2048           # a block Arrow refuses is halved down to this many lines, then read line by line


EMPTY_CANONICAL = empty_table(pa.schema([f.with_nullable(True) for f in CANONICAL_SCHEMA]))


class BadRowError(ValueError):
    """Raised under ``on_bad_row='fail'``: names the file, line and column."""


@dataclass
class Batch:
    rows: pa.Table
    rejects: pa.Table


@dataclass(frozen=True)
class ReadOptions:
    batch_rows: int = DEFAULT_BATCH_ROWS
    max_chars: int = DEFAULT_MAX_CHARS
    max_row_bytes: int = DEFAULT_MAX_ROW_BYTES  # a longer raw line or record is that row's reject
    on_bad_row: str = "quarantine"  # or "fail"
    storage_options: dict | None = None
    row_ids: bool = True  # False: rows without an id column get a null id, not a content hash (a pass that reads no ids)


def data_extension(path: str) -> str:
    """The format extension of ``path`` once a compression suffix is removed (``x.jsonl.zst`` → ``.jsonl``)."""
    name = path.lower()
    for suffix in COMPRESSIONS:
        name = name.removesuffix(suffix)
    return posixpath.splitext(name)[1]


def detect_format(path: str, mapping: Mapping | None) -> str:
    if mapping and mapping.format:
        return mapping.format
    ext = data_extension(path)
    if ext not in FORMATS:
        raise ValueError(f"{path}: cannot tell the format from the extension {ext!r}; "
                         f"use one of {', '.join(FORMATS)} (optionally {', '.join(COMPRESSIONS)})")
    return FORMATS[ext]


def expand_paths(inputs, storage_options=None) -> list[str]:
    """Files named by each input: a file, a directory of shards, or a glob (any fsspec URL)."""
    out: list[str] = []
    for url in inputs:
        fs, path = get_fs(url, storage_options)
        if any(ch in path for ch in "*?["):
            matches = sorted(fs.glob(path))
        elif fs.isdir(path):
            matches = sorted(
                p for p in fs.find(path)
                if data_extension(p) in FORMATS and not posixpath.basename(p).startswith((".", "_"))
            )
        else:
            matches = [path] if fs.exists(path) else []
        if not matches:
            raise FileNotFoundError(f"no input files at {url}")
        out.extend(fs.unstrip_protocol(m) if "://" in url else m for m in matches)
    return out


# ---------------------------------------------------------------- raw parsing per format

def _rejects(source_file: str, lines, columns, reasons, raws) -> pa.Table:
    return pa.table(
        {"source_file": [source_file] * len(lines), "line": lines, "column": columns,
         "reason": reasons, "raw": raws},
        schema=REJECTS_SCHEMA,
    )


def _depth(value, limit: int) -> int:
    """Nesting depth of a parsed JSON value, counted no further than ``limit`` + 1."""
    depth, level = 0, [value]
    while level and depth <= limit:
        level = [v for x in level for v in (x.values() if isinstance(x, dict) else x if isinstance(x, list) else ())]
        depth += 1
    return depth


def _text_value(value):
    """(text, None) for a scalar JSON value in a text column, or (None, reason) for an object or array.

    Numbers and booleans are written as JSON writes them (12345 → "12345", true → "true")."""
    if value is None or isinstance(value, str):
        return value, None
    if isinstance(value, (bool, int, float)):
        return json.dumps(value), None
    kind = "object" if isinstance(value, dict) else "array"
    return None, f"a JSON {kind} where text is expected"


def _check_record(obj, text_columns: frozenset, may_be_deep: bool = True,
                  may_hold_surrogate: bool = True) -> tuple[str | None, str | None]:
    """Decode the text columns of one parsed record in place; (column, reason) if the row is bad.

    ``may_be_deep=False`` skips the depth walk when the source text cannot nest that deep, and
    ``may_hold_surrogate=False`` the surrogate check when the source text has no ``\\ud`` escape."""
    if not isinstance(obj, dict):
        return None, f"JSON {'array' if isinstance(obj, list) else type(obj).__name__} is not an object"
    if may_be_deep and _depth(obj, MAX_JSON_DEPTH) > MAX_JSON_DEPTH:
        return None, f"JSON nested deeper than {MAX_JSON_DEPTH} levels"
    for col in text_columns:
        if col in obj:
            obj[col], reason = _text_value(obj[col])
            if reason:
                return col, f"column {col!r} holds {reason}"
    return _lone_surrogate(obj) if may_hold_surrogate else (None, None)


def _may_hold_surrogate(text: str) -> bool:
    """Only a ``\\uD800``–``\\uDFFF`` escape can put a lone surrogate into decoded JSON."""
    return "\\ud" in text or "\\uD" in text


def _records_to_table(records: list[dict]) -> pa.Table:
    """Arrow table from parsed JSON objects. A pass-through column whose values have conflicting types
    keeps its strings as they are and holds the other values JSON-encoded, value by value."""
    keys = dict.fromkeys(k for r in records for k in r)
    cols = {}
    for k in keys:
        values = [r.get(k) for r in records]
        try:
            cols[k] = pa.array(values)
        except (pa.ArrowInvalid, pa.ArrowTypeError, OverflowError):
            cols[k] = pa.array([v if v is None or isinstance(v, str) else json.dumps(v) for v in values], pa.string())
    if not cols:  # no records, or only {}: zero columns, but as many rows as records
        return pa.table({"__rows": pa.nulls(len(records))}).drop_columns(["__rows"])
    return pa.table(cols)


def _parse_json_line(text: str, text_columns: frozenset):
    """(record, column, reason): one JSON line decoded on its own terms."""
    try:
        obj = json.loads(text)
    except json.JSONDecodeError as e:
        return None, None, f"malformed JSON: {e.msg} at column {e.colno}"
    except RecursionError:
        return None, None, f"JSON nested deeper than {MAX_JSON_DEPTH} levels"
    # every nesting level opens a bracket, so a line with fewer brackets than the limit needs no walk
    column, reason = _check_record(obj, text_columns, text.count("[") + text.count("{") >= MAX_JSON_DEPTH,
                                   _may_hold_surrogate(text))
    return (None, column, reason) if reason else (obj, None, None)


def _lone_surrogate(obj: dict) -> tuple[str | None, str | None]:
    """(column, reason) when a value holds a UTF-16 surrogate escape with no partner: not encodable text."""
    for key, value in obj.items():
        try:
            json.dumps({key: value}, ensure_ascii=False).encode("utf-8")
        except UnicodeEncodeError:
            return str(key).encode("utf-8", "backslashreplace").decode(), \
                f"column {key!r} holds a lone UTF-16 surrogate (\\ud800-\\udfff escape), which is not text"
    return None, None


def _decode(raw: bytes) -> str | None:
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError:
        return None


def _parse_lines(chunk, opts, source, text_columns) -> tuple[pa.Table, pa.Array, pa.Table]:
    """Python's json, line by line: (records with ``__line``, their raw text, rejects with reasons)."""
    records, lines, raws, bad = [], [], [], []
    for lineno, raw in chunk:
        if len(raw) > opts.max_row_bytes:
            bad.append((lineno, None, f"line of {len(raw):,} bytes is over the {opts.max_row_bytes:,}-byte limit",
                        raw[:1024].decode("utf-8", "replace") + " …"))
            continue
        text = _decode(raw)
        if text is None:
            bad.append((lineno, None, "undecodable bytes (not UTF-8)", raw.decode("utf-8", "replace")))
            continue
        obj, column, reason = _parse_json_line(text, text_columns)
        if reason:
            bad.append((lineno, column, reason, text))
            continue
        records.append(obj)
        lines.append(lineno)
        raws.append(text)
    return _with_lines(_records_to_table(records), lines), pa.array(raws, pa.string()), _rejects(source, *_unzip4(bad))


def _raw_jsonl(fs, path, opts, source, text_columns) -> Iterator[tuple[pa.Table, object, pa.Table]]:
    """JSONL in blocks of whole lines, each cut into spans of ``batch_rows`` lines read by Arrow's JSON
    reader (vectorized, threaded) where it reads exactly what Python's json would (``_arrow_lines``), else
    halved down to ``LINE_BY_LINE`` lines and read line by line, so a damaged line costs one small slow
    piece, not the file. Yields (raw rows with ``__line``, their raw text, parse rejects)."""
    for lines, first_line in _jsonl_blocks(fs, path, JSONL_BLOCK_BYTES):
        spans = [(lo, min(lo + opts.batch_rows, len(lines))) for lo in range(0, len(lines), opts.batch_rows)]
        pending = spans[::-1]   # popped from the end: in file order
        while pending:
            lo, hi = pending.pop()
            table, keep = _arrow_lines(lines, lo, hi, opts, text_columns)
            if table is not None:
                yield _with_lines(table, first_line + keep), lines.subset(keep), _rejects(source, [], [], [], [])
            elif hi - lo <= LINE_BY_LINE:
                chunk = [(first_line + i, lines.raw(i)) for i in keep]
                if chunk:
                    yield _parse_lines(chunk, opts, source, text_columns)
            else:
                mid = (lo + hi) // 2
                pending += [(mid, hi), (lo, mid)]   # the first half is read first


def _jsonl_blocks(fs, path, block_bytes: int) -> Iterator[tuple["LineTexts", int]]:
    """(whole lines of about ``block_bytes``, the 1-based number of their first line); BOM removed.

    Each block is read into its own buffer after the partial line the last one left, and handed on as a
    view: no copy of the file's bytes beyond the read itself."""
    with fs.open(path, "rb", compression="infer") as fh:
        first, tail = 1, b""
        while True:
            buf = np.empty(len(tail) + block_bytes, np.uint8)   # not zeroed: the read fills it
            buf[:len(tail)] = np.frombuffer(tail, np.uint8)
            size = len(tail) + _read_into(fh, memoryview(buf)[len(tail):])
            if size == len(tail):
                break
            view = memoryview(buf)[:size]
            cut = _after_last_newline(buf, size)
            if cut == 0:   # no line ends yet: one line longer than a block
                tail = bytes(view)
                continue
            tail = bytes(view[cut:])
            lines = LineTexts(_without_bom(view[:cut]) if first == 1 else view[:cut])
            yield lines, first
            first += len(lines)
        if tail:
            yield LineTexts(_without_bom(memoryview(tail)) if first == 1 else memoryview(tail)), first


def _after_last_newline(buf: np.ndarray, size: int, step: int = 1 << 16) -> int:
    """The position after the last newline of ``buf[:size]`` (0: none), searched from the end."""
    for hi in range(size, 0, -step):
        found = np.flatnonzero(buf[max(0, hi - step):hi] == 10)
        if len(found):
            return max(0, hi - step) + int(found[-1]) + 1
    return 0


def _read_into(fh, view: memoryview) -> int:
    """Fill ``view`` from ``fh`` as far as the file goes (a compressed or remote stream may return less
    than asked); the number of bytes read."""
    filled = 0
    readinto = getattr(fh, "readinto", None)
    while filled < len(view):
        if readinto is not None:
            got = readinto(view[filled:]) or 0
        else:
            data = fh.read(len(view) - filled)
            got = len(data)
            view[filled:filled + got] = data
        if got == 0:
            break
        filled += got
    return filled


def _without_bom(view: memoryview) -> memoryview:
    return view[len(BOM):] if view[:len(BOM)] == BOM else view


class LineTexts:
    """The lines of a block of bytes (a view) as spans between newline positions; a line's text is decoded
    only when its row is rejected (``take``)."""

    def __init__(self, block: memoryview, starts: np.ndarray | None = None, ends: np.ndarray | None = None):
        self.block = block
        if starts is None:
            buf = np.frombuffer(block, np.uint8)
            ends = np.flatnonzero(buf == 10)
            if len(buf) and buf[-1] != 10:
                ends = np.append(ends, len(buf))
            starts = np.concatenate([[0], ends[:-1] + 1]).astype(np.int64)
        self.starts, self.ends = starts, ends

    def __len__(self) -> int:
        return len(self.starts)

    def subset(self, keep: np.ndarray) -> "LineTexts":
        return LineTexts(self.block, self.starts[keep], self.ends[keep])

    def raw(self, i: int) -> bytes:
        """Line ``i`` without its line end (as ``rstrip(b"\\r\\n")``)."""
        return bytes(self.block[self.starts[i]:self.ends[i]]).rstrip(b"\r\n")

    def too_long(self, indices: np.ndarray, limit: int) -> bool:
        """Whether a line of ``indices`` is longer than ``limit`` bytes without its line end."""
        longer = indices[(self.ends[indices] - self.starts[indices]) > limit]
        return any(len(self.raw(i)) > limit for i in longer)

    def nonblank(self, lo: int, hi: int) -> np.ndarray:
        """Lines in [lo, hi) that hold a byte other than ASCII whitespace (``bytes.strip``'s): only a line
        that is empty or starts with whitespace is looked at."""
        starts, ends = self.starts[lo:hi], self.ends[lo:hi]
        if not len(starts):
            return np.arange(lo, hi)
        lead = np.frombuffer(self.block, np.uint8)[np.minimum(starts, len(self.block) - 1)]
        suspect = np.flatnonzero((ends == starts) | (lead == 32) | ((lead >= 9) & (lead <= 13))) + lo
        blank = [i for i in suspect if not self.raw(i).strip()]
        return np.setdiff1d(np.arange(lo, hi), blank, assume_unique=True) if blank else np.arange(lo, hi)

    def all_objects(self, indices: np.ndarray) -> bool:
        """Whether each of these lines opens a JSON object: Arrow reads a ``null`` line as a row of nulls
        (Python's json rejects it) and crashes on a block that starts with one."""
        lead = np.frombuffer(self.block, np.uint8)[np.minimum(self.starts[indices], len(self.block) - 1)]
        return all(self.raw(i).lstrip()[:1] == b"{" for i in indices[lead != ord("{")])

    def take(self, indices) -> pa.Array:
        return pa.array([self.raw(i).decode("utf-8") for i in np.asarray(indices, dtype=np.int64)], pa.string())


_LONG_INTEGER = re.compile(rb"\d{16,}")


def _arrow_lines(lines: LineTexts, lo: int, hi: int, opts, text_columns) -> tuple[pa.Table | None, np.ndarray]:
    """(the non-blank lines [lo, hi) read by Arrow's JSON reader, their positions), the table None where
    Arrow's reading could differ from Python's json's line by line (then they are read that way, with a
    reason per bad line): a line that is not an object, any line over ``max_row_bytes``, bytes that are not
    UTF-8, a line Arrow rejects (malformed JSON, duplicate keys, lone surrogates, types that change between
    lines), two objects on one line, a text column holding floats or nested values (Python writes 1.0 as
    "1.0"), nesting that could reach ``MAX_JSON_DEPTH``, and integers too long for int64 that Arrow would
    round to floats. Strings Arrow would take for timestamps are read again as strings."""
    keep = lines.nonblank(lo, hi)
    if not len(keep) or lines.too_long(keep, opts.max_row_bytes) or not lines.all_objects(keep):
        return None, keep
    piece = lines.block[lines.starts[lo]:lines.ends[hi - 1]]
    try:
        str(piece, "utf-8")
        table = pajson.read_json(pa.BufferReader(piece))
        timestamps = [f for f in table.schema if pa.types.is_timestamp(f.type) or pa.types.is_date(f.type)]
        if timestamps:
            schema = pa.schema([f.with_type(pa.string()) for f in timestamps])
            table = pajson.read_json(pa.BufferReader(piece), parse_options=pajson.ParseOptions(
                explicit_schema=schema, unexpected_field_behavior="infer"))
    except (pa.ArrowInvalid, UnicodeDecodeError):
        return None, keep
    if table.num_rows != len(keep):
        return None, keep
    for field in table.schema:
        if field.name in text_columns and not (pa.types.is_string(field.type) or pa.types.is_null(field.type)
                                               or pa.types.is_int64(field.type) or pa.types.is_boolean(field.type)):
            return None, keep
        if _depth_of_type(field.type) + 2 >= MAX_JSON_DEPTH or _has_temporal(field.type):
            return None, keep
        if _has_float(field.type) and _LONG_INTEGER.search(piece):
            return None, keep
    return table, keep


def _children(t: pa.DataType) -> list[pa.DataType]:
    return [t.field(i).type for i in range(t.num_fields)] if t.num_fields else []


def _depth_of_type(t: pa.DataType) -> int:
    return 1 + max(map(_depth_of_type, _children(t))) if _children(t) else 0


def _has_float(t: pa.DataType) -> bool:
    return pa.types.is_floating(t) or any(map(_has_float, _children(t)))


def _has_temporal(t: pa.DataType) -> bool:
    return pa.types.is_temporal(t) or any(map(_has_temporal, _children(t)))


def _raw_json_array(fs, path, opts, source, text_columns) -> Iterator[tuple[pa.Table, object, pa.Table]]:
    with fs.open(path, "rb", compression="infer") as fh:
        data = fh.read().removeprefix(BOM)
    text = _decode(data)
    if text is None:
        raise BadRowError(f"{source}: undecodable bytes (not UTF-8) in a JSON array file")
    try:
        items = json.loads(text)
    except json.JSONDecodeError as e:
        raise BadRowError(f"{source}, line {e.lineno}: malformed JSON: {e.msg}") from None
    except RecursionError:
        raise BadRowError(f"{source}: JSON nested deeper than Python can parse") from None
    if isinstance(items, dict):
        items = next((v for v in items.values() if isinstance(v, list)), [items])
    may_hold_surrogate = _may_hold_surrogate(text)
    for start in range(0, max(len(items), 1), opts.batch_rows):
        records, lines, raws, bad = [], [], [], []
        for i, obj in enumerate(items[start:start + opts.batch_rows], start=start + 1):
            column, reason = _check_record(obj, text_columns, may_hold_surrogate=may_hold_surrogate)
            raw = _json_text(obj)
            if reason:
                bad.append((i, column, reason.replace("JSON ", "array element: JSON ", 1) if column is None
                            else reason, raw))
            else:
                records.append(obj)
                lines.append(i)
                raws.append(raw)
        yield _with_lines(_records_to_table(records), lines), pa.array(raws, pa.string()), \
            _rejects(source, *_unzip4(bad))


def _json_text(obj) -> str:
    """An element as JSON text for the rejects file (a lone surrogate kept as its ``\\ud800`` escape)."""
    try:
        return json.dumps(obj, ensure_ascii=False).encode("utf-8", "backslashreplace").decode("utf-8")
    except (RecursionError, ValueError):
        return f"<{type(obj).__name__} too deeply nested to print>"


def _raw_delimited(fs, path, opts, source, delimiter, quoting) -> Iterator[tuple[pa.Table, object, pa.Table]]:
    with fs.open(path, "rb", compression="infer") as fh:
        stream = io.TextIOWrapper(fh, encoding="utf-8-sig", errors="surrogateescape", newline="")
        reader = csv.reader(stream, delimiter=delimiter,
                            quoting=csv.QUOTE_MINIMAL if quoting else csv.QUOTE_NONE)
        header = next(reader, None)
        if header is None:
            return
        width = len(header)
        cols: list[list] = [[] for _ in header]
        lines, raws, bad = [], [], []

        def flush():
            table = pa.table({h: pa.array(c, pa.string()) for h, c in zip(header, cols)})
            out = _with_lines(table, lines), pa.array(raws, pa.string()), _rejects(source, *_unzip4(bad))
            for c in cols:
                c.clear()
            lines.clear(), raws.clear(), bad.clear()
            return out

        prev_line = reader.line_num
        for row in reader:
            lineno, prev_line = prev_line + 1, reader.line_num
            if not row or (len(row) == 1 and not row[0].strip()):
                continue
            raw = delimiter.join(row)
            if len(raw) > opts.max_row_bytes:
                bad.append((lineno, None, f"line of {len(raw):,} characters is over the {opts.max_row_bytes:,} limit",
                            _safe(raw[:1024]) + " …"))
            elif len(row) != width:
                bad.append((lineno, None, f"expected {width} columns, got {len(row)}", _safe(raw)))
            elif any(_has_surrogates(v) for v in row):
                bad.append((lineno, None, "undecodable bytes (not UTF-8)", _safe(raw)))
            else:
                for c, v in zip(cols, row):
                    c.append(v)
                lines.append(lineno)
                raws.append(raw)
            if len(lines) + len(bad) >= opts.batch_rows:
                yield flush()
        if lines or bad:
            yield flush()


def _raw_parquet(fs, path, opts, source) -> Iterator[tuple[pa.Table, object, pa.Table]]:
    with fs.open(path, "rb") as fh:
        pf = pq.ParquetFile(fh)
        start = 1
        for rb in pf.iter_batches(batch_size=opts.batch_rows):
            table = pa.Table.from_batches([rb])
            lines = list(range(start, start + table.num_rows))
            start += table.num_rows
            yield _with_lines(table, lines), None, _rejects(source, [], [], [], [])


def _has_surrogates(s: str) -> bool:
    try:
        s.encode("utf-8")
        return False
    except UnicodeEncodeError:
        return True


def _safe(s: str) -> str:
    return s.encode("utf-8", "surrogateescape").decode("utf-8", "replace")


def _unzip4(bad):
    return ([b[0] for b in bad], [b[1] for b in bad], [b[2] for b in bad], [b[3] for b in bad])


def _with_lines(table: pa.Table, lines) -> pa.Table:
    """``table`` with each row's line (1-based; the row number for Parquet and JSON arrays) as ``__line``."""
    return table.append_column("__line", pa.array(lines, pa.int64()))


# ---------------------------------------------------------------- canonicalization

_THREAD = threading.local()


def _hash_ids(source_file: str, lines, text_a, text_b, label) -> pa.Array:
    """Content-hash ids, salted with the file name and line so duplicates stay distinct: the first 16 hex
    digits of sha1("<file name>\\x1f<line>\\x1f<text_a>\\x1f<text_b>\\x1f<label>") (``sql/row_ids.sql``),
    computed by DuckDB on one connection per thread (opening one costs 20–30 ms)."""
    from refinery.io.queries import connect, load_sql

    if getattr(_THREAD, "ids", None) is None:
        _THREAD.ids = connect(), load_sql("row_ids")
    con, sql = _THREAD.ids
    rows = pa.table({"line": lines, "text_a": text_a, "text_b": text_b, "label": label})
    con.register("rows", pa.Table.from_batches(rows.to_batches(max_chunksize=16_384), rows.schema))  # a thread a batch
    try:
        return con.sql(sql, params=[posixpath.basename(source_file)]).to_arrow_table()["id"]
    finally:
        con.unregister("rows")


def canonicalize(table: pa.Table, mapping: Mapping, source_file: str, max_chars: int, raws=None,
                 row_ids: bool = True) -> Batch:
    """Map a raw table (with its ``__line`` column) to canonical rows and rejects.

    Checks, in order, each naming its column: missing column, null value, empty text,
    over-long text, label outside the declared set. Vectorized with Arrow compute. ``raws``
    (anything with ``take``) gives the raw text of the rejected rows; without it they are
    written as JSON. ``row_ids=False`` leaves the ids a file lacks null instead of hashing them.
    """
    n = table.num_rows
    if n == 0:  # a batch whose every line was bad: an empty batch
        return Batch(EMPTY_CANONICAL, empty_table(REJECTS_SCHEMA))
    reason = pa.nulls(n, pa.string())
    column = pa.nulls(n, pa.string())

    def flag(mask, col_name, text):
        nonlocal reason, column
        if not pc.any(mask).as_py():   # the common case: no row of the batch fails this check
            return
        mask = pc.and_(pc.fill_null(mask, False), pc.is_null(reason))
        reason = pc.if_else(mask, pa.scalar(text), reason)
        column = pc.if_else(mask, pa.scalar(col_name), column)

    mapped = {k: v for k, v in mapping.columns.items() if v is not None}
    values: dict[str, pa.ChunkedArray] = {}
    for key in ("text_a", "text_b", "label"):
        src = mapped.get(key)
        if src is None:
            continue
        if src not in table.column_names:
            flag(pa.array([True] * n, pa.bool_()), src, f"missing column {src!r}")
            values[key] = pa.chunked_array([pa.nulls(n, pa.string())])
            continue
        col = table[src]
        if not pa.types.is_string(col.type) and not pa.types.is_large_string(col.type):
            if _castable(col.type):
                col = pc.cast(col, pa.string())
            else:  # lists, structs, binary: that row's reject, never text made up from them
                flag(pc.is_valid(col), src, f"column {src!r} holds {col.type} where text is expected")
                col = pa.chunked_array([pa.nulls(n, pa.string())])
        values[key] = col
        flag(pc.is_null(col), src, f"missing or null value in column {src!r}")
        if key != "label":
            nbytes = pc.binary_length(col)   # O(1) a row; characters ≤ bytes
            flag(pc.or_(pc.equal(nbytes, 0), pc.utf8_is_space(col)), src, f"empty text in column {src!r}")
            if pc.any(pc.greater(nbytes, max_chars)).as_py():
                flag(pc.greater(pc.utf8_length(col), max_chars), src,
                     f"text longer than {max_chars} characters in column {src!r}")

    label = values["label"]
    if mapping.labels:
        keys = pa.array(list(mapping.labels), pa.string())
        idx = pc.index_in(label, value_set=keys)
        label = pc.if_else(pc.is_null(idx), label, pc.take(pa.array(list(mapping.labels.values())), idx))
    if mapping.label_set is not None:
        outside = pc.invert(pc.is_in(label, value_set=pa.array(list(mapping.label_set), pa.string())))
        flag(outside, mapped["label"], "label not in the label set " + "|".join(mapping.label_set))

    bad = pc.is_valid(reason)
    good = pc.invert(bad)
    lines = table["__line"]

    # rejects
    bad_idx = pc.indices_nonzero(bad)
    if raws is not None:
        raw_bad = raws.take(bad_idx)
    else:
        raw_bad = pa.array([json.dumps(r, default=str, ensure_ascii=False)
                            for r in table.drop_columns(["__line"]).take(bad_idx).to_pylist()], pa.string())
    rejects = pa.table(
        {"source_file": pa.array([source_file] * len(bad_idx), pa.string()), "line": pc.take(lines, bad_idx),
         "column": pc.take(column, bad_idx), "reason": pc.take(reason, bad_idx), "raw": raw_bad},
        schema=REJECTS_SCHEMA,
    )

    # canonical rows
    kept = table.filter(good)
    text_a = values["text_a"].filter(good)
    text_b = values["text_b"].filter(good) if "text_b" in values else pa.nulls(kept.num_rows, pa.string())
    label = label.filter(good)
    id_src = mapped.get("id")
    ids = None
    if id_src and id_src in kept.column_names:
        ids = pc.cast(kept[id_src], pa.string())
    if ids is None or ids.null_count:
        hashed = _hash_ids(source_file, kept["__line"], text_a, text_b, label) if row_ids \
            else pa.nulls(kept.num_rows, pa.string())
        ids = hashed if ids is None else pc.if_else(pc.is_null(ids), hashed, ids)

    out = {"id": ids, "text_a": text_a, "text_b": text_b, "label": label}
    for node in ("node_a", "node_b"):  # sentence ids for the leakage graph (QQP qid1/qid2, MSRP #1/#2 ID)
        src = mapped.get(node)
        if src and src in kept.column_names:
            out[node] = pc.cast(kept[src], pa.string())
    for opt, typ in OPTIONAL_FIELDS.items():
        src = mapped.get(opt, opt)
        if src in kept.column_names:
            out[opt] = pc.cast(kept[src], typ)
    used = set(mapped.values()) | set(out) | {"__line"}
    for name in kept.column_names:
        if name not in used:
            out[name] = kept[name]
    return Batch(pa.table(out), rejects)


def _castable(t: pa.DataType) -> bool:
    return pa.types.is_integer(t) or pa.types.is_floating(t) or pa.types.is_boolean(t) or pa.types.is_null(t)


# ---------------------------------------------------------------- public entry points

def read_file(path: str, mapping: Mapping, opts: ReadOptions = ReadOptions()) -> Iterator[Batch]:
    """Stream one file as canonical batches; raise BadRowError on the first bad row under ``fail``."""
    fs, fpath = get_fs(path, opts.storage_options)
    fmt = detect_format(path, mapping)
    text_columns = frozenset(mapping.columns[k] for k in ("text_a", "text_b", "label", "id", "node_a", "node_b")
                             if mapping.columns.get(k))
    parsers = {
        "jsonl": lambda: _raw_jsonl(fs, fpath, opts, path, text_columns),
        "json": lambda: _raw_json_array(fs, fpath, opts, path, text_columns),
        "csv": lambda: _raw_delimited(fs, fpath, opts, path, ",", mapping.csv_quoting),
        "tsv": lambda: _raw_delimited(fs, fpath, opts, path, "\t", mapping.csv_quoting),
        "parquet": lambda: _raw_parquet(fs, fpath, opts, path),
    }
    if fmt == "json" and _looks_like_jsonl(fs, fpath):
        fmt = "jsonl"
    for raw, raws, parse_rejects in parsers[fmt]():
        batch = canonicalize(raw, mapping, path, opts.max_chars, raws, opts.row_ids)
        rejects = pa.concat_tables([parse_rejects, batch.rejects]).sort_by("line")
        if opts.on_bad_row == "fail" and rejects.num_rows:
            first = rejects.slice(0, 1).to_pylist()[0]
            where = f", column {first['column']!r}" if first["column"] else ""
            raise BadRowError(f"{first['source_file']}, line {first['line']}{where}: {first['reason']}")
        yield Batch(batch.rows, rejects)


def _looks_like_jsonl(fs, path) -> bool:
    with fs.open(path, "rb", compression="infer") as fh:
        head = fh.read(4096).removeprefix(BOM).lstrip()
    return not head.startswith(b"[")
