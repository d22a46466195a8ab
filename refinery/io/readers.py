"""Read labeled corpora (JSONL, JSON array, CSV/TSV, Parquet, Arrow IPC/Feather, Hugging Face
``save_to_disk`` folders) into canonical Arrow batches.

Every input row ends either in a canonical batch or in a rejects batch with its source
file, line (1-based; record number for Parquet, Arrow and JSON arrays), column and reason.
Whatever Arrow types a writer chose (``large_string``, ``string_view``, dictionaries, numbers,
booleans), the mapped columns leave the reader as the canonical types.
"""
from __future__ import annotations

import csv
import difflib
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
    PRESETS,
    REJECTS_SCHEMA,
    Mapping,
    empty_table,
)
from refinery.io.storage import get_fs

DEFAULT_BATCH_ROWS = 65_536
DEFAULT_MAX_CHARS = 20_000
DEFAULT_MAX_ROW_BYTES = 4 << 20

FORMATS = {".jsonl": "jsonl", ".ndjson": "jsonl", ".json": "json", ".csv": "csv", ".tsv": "tsv",
           ".txt": "tsv", ".parquet": "parquet", ".pq": "parquet", ".arrow": "arrow", ".feather": "arrow",
           ".ipc": "arrow"}
HF_METADATA = ("dataset_dict.json", "dataset_info.json", "state.json")  # Hugging Face save_to_disk: never data
COMPRESSIONS = (".gz", ".bz2", ".xz", ".zst")  # read through fsspec's compression="infer" (.zst: zstandard)
BOM = b"\xef\xbb\xbf"
MAX_JSON_DEPTH = 64  # deeper values are that row's reject, not a RecursionError
JSONL_BLOCK_BYTES = 16 << 20  # whole lines handed to Arrow's JSON reader at a time
LINE_BY_LINE = 2048           # a block Arrow refuses is halved down to this many lines, then read line by line


EMPTY_CANONICAL = empty_table(pa.schema([f.with_nullable(True) for f in CANONICAL_SCHEMA]))
EMPTY_REJECTS = empty_table(REJECTS_SCHEMA)


class BadRowError(ValueError):
    """Raised under ``on_bad_row='fail'``: names the file, line and column."""


class MissingColumnError(ValueError):
    """A mapped column that a file lacks, raised before any of its rows is read: one line naming the
    file, the column, the columns the file has, and a preset or column that fits."""


class AmbiguousColumnError(ValueError):
    """A mapped column whose name the file's header holds more than once."""


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
    csv_multiline: bool = False  # a CSV record whose quoted field runs over several lines is one row, not rejects

    def __post_init__(self):
        """Refuse what would break the reading later (a zero batch divides by zero), in the words of the configs."""
        for name in ("batch_rows", "max_chars", "max_row_bytes"):
            value = getattr(self, name)
            if not isinstance(value, int) or isinstance(value, bool) or value < 1:
                raise ValueError(f"{name} must be a positive integer, got {value!r}")
        if self.on_bad_row not in ("quarantine", "fail"):
            raise ValueError(f"on_bad_row must be one of quarantine, fail, got {self.on_bad_row!r}")


def data_extension(path: str) -> str:
    """The format extension of ``path`` once a compression suffix is removed (``x.jsonl.zst`` → ``.jsonl``)."""
    name = path.lower()
    for suffix in COMPRESSIONS:
        name = name.removesuffix(suffix)
    return posixpath.splitext(name)[1]


def detect_format(path: str, mapping: Mapping | None) -> str:
    """The format the extension names, else the mapping's (a preset's release without a known extension)."""
    ext = data_extension(path)
    if ext in FORMATS:
        return FORMATS[ext]
    if mapping and mapping.format:
        return mapping.format
    raise ValueError(f"{path}: cannot tell the format from the extension {ext!r}; "
                     f"use one of {', '.join(FORMATS)} (optionally {', '.join(COMPRESSIONS)})")


def expand_paths(inputs, storage_options=None) -> list[str]:
    """Files named by each input: a file, a folder of shards, or a glob (any fsspec URL).

    In a folder each file is read by its extension; a Hugging Face ``save_to_disk`` dataset gives its
    Arrow files in the order its ``state.json`` lists them, and its JSON metadata is never data."""
    out: list[str] = []
    for url in inputs:
        fs, path = get_fs(url, storage_options)
        if any(ch in path for ch in "*?["):
            found = fs.glob(path, detail=True)
            matches = [f for m in sorted(found) for f in
                       (_folder_files(fs, m) if found[m].get("type") == "directory" else [m])]
        elif fs.isdir(path):
            matches = _folder_files(fs, path)
        else:
            matches = [path] if fs.exists(path) else []
        if not matches:
            raise FileNotFoundError(f"no input files at {url}")
        out.extend(_as_url(fs, url, m) for m in matches)
    return out


def hf_splits(url: str, storage_options=None) -> dict[str, list[str]]:
    """{split: its Arrow files} of a Hugging Face ``DatasetDict.save_to_disk`` folder, in the order of its
    ``dataset_dict.json``; {} for any other input."""
    fs, path = get_fs(url, storage_options)
    meta = posixpath.join(path, "dataset_dict.json")
    if any(ch in path for ch in "*?[") or not fs.isfile(meta):
        return {}
    splits = _json_file(fs, meta).get("splits") or sorted(
        posixpath.basename(posixpath.dirname(p)) for p in fs.glob(posixpath.join(path, "*", "state.json")))
    return {split: [_as_url(fs, url, f) for f in _hf_data_files(fs, posixpath.join(path, split))]
            for split in splits}


def _folder_files(fs, root: str) -> list[str]:
    """The data files under ``root`` in name order, a Hugging Face dataset's in its own order."""
    files = sorted(fs.find(root))
    datasets = {posixpath.dirname(f) for f in files if posixpath.basename(f) == "state.json"}
    out, listed = [], set()
    for f in files:
        folder, name = posixpath.split(f)
        if folder in datasets:
            if folder not in listed:
                listed.add(folder)
                out.extend(_hf_data_files(fs, folder))
        elif data_extension(f) in FORMATS and name not in HF_METADATA and not name.startswith((".", "_")):
            out.append(f)
    return out


def _hf_data_files(fs, folder: str) -> list[str]:
    """The Arrow files of a Hugging Face ``Dataset.save_to_disk`` folder, as its ``state.json`` lists them."""
    state = _json_file(fs, posixpath.join(folder, "state.json"))
    return [posixpath.join(folder, f["filename"]) for f in state.get("_data_files", [])]


def _json_file(fs, path: str) -> dict:
    try:
        return json.loads(fs.cat_file(path))
    except (json.JSONDecodeError, UnicodeDecodeError) as e:
        raise ValueError(f"{path}: not the JSON a Hugging Face save_to_disk folder holds ({e})") from None


def _as_url(fs, url: str, path: str) -> str:
    return fs.unstrip_protocol(path) if "://" in url else path


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
    for lines, first_line in _line_blocks(fs, path, JSONL_BLOCK_BYTES):
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


def _line_blocks(fs, path, block_bytes: int) -> Iterator[tuple["LineTexts", int]]:
    """(whole lines of about ``block_bytes``, the 1-based number of their first line) of a text file; BOM removed.

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
    """CSV/TSV by physical lines: each non-blank line after the header is a row or a reject (a blank line is
    neither, as in JSONL). The first batch carries the header's columns even when no row follows."""
    if quoting:
        csv.field_size_limit(max(csv.field_size_limit(), opts.max_row_bytes))
    given_back: list = []
    lines = _physical_lines(fs, path, given_back)
    splitter = _LineSplitter(delimiter, quoting)
    header = _header(lines, splitter, source)
    if header is None:   # an empty file: no columns, no rows
        return
    rows, lines_kept, raws, bad, yielded = [], [], [], [], False

    def flush():
        columns = list(zip(*rows)) if rows else [()] * len(header)
        table = pa.Table.from_arrays([pa.array(c, pa.string()) for c in columns], names=header)
        out = _with_lines(table, lines_kept), pa.array(raws, pa.string()), _rejects(source, *_unzip4(bad))
        rows.clear(), lines_kept.clear(), raws.clear(), bad.clear()
        return out

    records = _delimited_records(lines, given_back, splitter, opts.csv_multiline, len(header), opts.max_row_bytes)
    for count, (lineno, fields, text, reason) in enumerate(records, 1):
        if reason:
            bad.append((lineno, None, reason, text))
        else:
            rows.append(fields)
            lines_kept.append(lineno)
            raws.append(text)
        if count % opts.batch_rows == 0:
            yielded = True
            yield flush()
    if rows or bad or not yielded:
        yield flush()


def _physical_lines(fs, path, given_back: list) -> Iterator[tuple[int, bytes]]:
    """(1-based number, bytes without the ``\\n``) of every line (a missing last newline ends a line too); lines
    put in ``given_back`` (last first) are given again before the next."""
    for lines, first in _line_blocks(fs, path, JSONL_BLOCK_BYTES):
        block = bytes(lines.block)
        parts = block.split(b"\n")
        if block.endswith(b"\n"):
            parts.pop()
        for line in enumerate(parts, first):
            while given_back:
                yield given_back.pop()
            yield line
    while given_back:
        yield given_back.pop()


def _header(lines, splitter: _LineSplitter, source: str) -> list[str] | None:
    """The column names on the first non-blank line (None for a file without one)."""
    for lineno, line in lines:
        body = line.rstrip(b"\r")
        if not body or body.isspace():
            continue
        text, undecodable = _decode_line(body)
        if undecodable:
            raise ValueError(f"{source}: the header (line {lineno}) holds undecodable bytes (not UTF-8)")
        names, still_open = splitter.split(text)
        if still_open:
            raise ValueError(f"{source}: the header (line {lineno}) has an unbalanced quote")
        return names
    return None


def _delimited_records(lines, given_back: list, splitter: _LineSplitter, multiline: bool, width: int,
                       max_bytes: int) -> Iterator[tuple[int, list | None, str, str | None]]:
    """(line, fields, text, None) for a row, (line, None, text, reason) for a reject, per non-blank line.

    A quoted field that runs past its line's end makes a record over several lines when it closes by RFC 4180
    on a later line into ``width`` fields within ``max_bytes``: that record is one row under ``multiline``, else
    each of its lines is a reject that says so. Otherwise the quote is unbalanced: its line alone is a reject
    and the lines after it are read on their own (given back), so a stray quote never swallows the rows that
    follow."""
    delimiter, quoting = splitter.delimiter, splitter.quoting   # the common line is split here, without a call
    for lineno, line in lines:
        body = line.rstrip(b"\r")
        if not body or body.isspace():
            continue
        if len(body) > max_bytes:
            yield lineno, None, _preview(body), f"line of {len(body):,} bytes is over the {max_bytes:,}-byte limit"
            continue
        try:
            text, undecodable = body.decode("utf-8"), False
        except UnicodeDecodeError:
            text, undecodable = _decode_line(body)
        try:
            fields, still_open = splitter.split(text) if quoting and '"' in text else (text.split(delimiter), False)
        except csv.Error as e:
            yield lineno, None, _safe(text), f"malformed CSV: {e}"
            continue
        if still_open:
            yield from _spanning_record(lines, given_back, splitter, lineno, line, fields, multiline, width,
                                        max_bytes)
        elif undecodable:
            yield lineno, None, _safe(text), "undecodable bytes (not UTF-8)"
        elif len(fields) != width:
            yield lineno, None, text, f"expected {width} columns, got {len(fields)}"
        else:
            yield lineno, fields, text, None


def _spanning_record(lines, given_back: list, splitter: _LineSplitter, lineno: int, line: bytes, fields: list,
                     multiline: bool, width: int, max_bytes: int) -> Iterator[tuple[int, list | None, str, str | None]]:
    """The record whose quoted field opens on ``line`` and runs past its end (see ``_delimited_records``)."""
    taken, size, still_open, previous = [], len(line), True, line
    for following in lines:
        taken.append(following)
        size += len(following[1]) + 1
        try:   # a line inside a quoted field reads as one that opens with a quote; its quotes must be RFC 4180's
            more, still_open = splitter.split('"' + _decode_line(following[1].rstrip(b"\r"))[0], strict=True)
        except csv.Error:
            break
        fields[-1] += _line_end(previous) + more[0]
        fields.extend(more[1:])
        previous = following[1]
        if not still_open or size > max_bytes or len(fields) > width:
            break
    first_text = _safe(_decode_line(line.rstrip(b"\r"))[0])
    if still_open or size > max_bytes or len(fields) != width:
        given_back.extend(reversed(taken))
        yield lineno, None, first_text, "unbalanced quote: the quoted field opened on this line does not close on it"
        return
    last = taken[-1][0]
    if multiline:
        text, undecodable = _decode_line(b"\n".join([line, *(t[1] for t in taken)]).rstrip(b"\r"))
        yield (lineno, None, _safe(text), "undecodable bytes (not UTF-8)") if undecodable else (lineno, fields, text, None)
        return
    yield lineno, None, first_text, (f"quoted field runs over lines {lineno}-{last}: a record over several lines "
                                     "(read such records with --csv-multiline)")
    for number, following in taken:
        if following.strip():
            yield number, None, _safe(_decode_line(following.rstrip(b"\r"))[0]), \
                f"inside the quoted field opened on line {lineno} (read such records with --csv-multiline)"


def _line_end(line: bytes) -> str:
    """The line end ``line`` had in the file (its ``\\r`` if any, and the ``\\n`` it was split on)."""
    return line[len(line.rstrip(b"\r")):].decode() + "\n"


class _LineSplitter:
    """The fields of one line at a time. With ``quoting`` they follow RFC 4180 as Python's csv reads them (``strict``:
    a closing quote must be followed by a delimiter or the line end, else csv.Error); without, or on a line
    without a quote, a delimiter always separates."""

    def __init__(self, delimiter: str, quoting: bool):
        self.delimiter, self.quoting = delimiter, quoting
        self._feed: list[str] = []   # the line, then a closing quote the reader takes only if the line left one open
        lines = iter(self._feed.pop, None)
        self._readers = {strict: csv.reader(lines, delimiter=delimiter, strict=strict) for strict in (False, True)}

    def split(self, text: str, strict: bool = False) -> tuple[list[str], bool]:
        """(fields, whether the line ends inside a quoted field)."""
        if not self.quoting or '"' not in text:
            return text.split(self.delimiter), False
        self._feed[:] = ['"', text]
        fields = next(self._readers[strict])
        return fields, not self._feed


def _decode_line(body: bytes) -> tuple[str, bool]:
    """(text, whether bytes were not UTF-8: those are kept as surrogate escapes for ``_safe``)."""
    try:
        return body.decode("utf-8"), False
    except UnicodeDecodeError:
        return body.decode("utf-8", "surrogateescape"), True


def _preview(body: bytes) -> str:
    return body[:1024].decode("utf-8", "replace") + " …"


def _raw_parquet(fs, path, opts) -> Iterator[tuple[pa.Table, object, pa.Table]]:
    with fs.open(path, "rb") as fh:
        pf = pq.ParquetFile(fh)
        yield from _numbered((pa.Table.from_batches([rb]) for rb in pf.iter_batches(batch_size=opts.batch_rows)),
                             pf.schema_arrow)


def _raw_arrow(fs, path, opts, source) -> Iterator[tuple[pa.Table, object, pa.Table]]:
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
        yield _with_lines(table, np.arange(start, start + table.num_rows)), None, EMPTY_REJECTS
        start += table.num_rows
    if start == 1:
        yield _with_lines(empty_table(schema), []), None, EMPTY_REJECTS


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

    Every mapped column is cast to its canonical type (texts, labels and ids to ``string``, ``weight`` to
    ``float64``) whatever type its writer chose: ``large_string``, ``string_view``, dictionaries, binary that
    is UTF-8, numbers, booleans. Checks, in order, each naming its column: missing column, a value that is
    not of the type (lists and structs are never made into text), null value, empty text, over-long text,
    label outside the declared set. Columns that are not mapped pass through, their string and dictionary
    types made plain. Vectorized with Arrow compute. ``raws`` (anything with ``take``) gives the raw text of
    the rejected rows; without it they are written as JSON. ``row_ids=False`` leaves the ids a file lacks
    null instead of hashing them.
    """
    n = table.num_rows
    if n == 0:  # a batch whose every line was bad: an empty batch
        return Batch(EMPTY_CANONICAL, EMPTY_REJECTS)
    table = pa.table({name: _plain(col) for name, col in zip(table.column_names, table.columns)})
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
    for key, typ in CANONICAL_TYPES.items():
        src = mapped.get(key, key if key in OPTIONAL_FIELDS else None)
        if src is None:
            continue
        if src not in table.column_names:
            if key in ("text_a", "text_b", "label"):
                flag(pa.array([True] * n, pa.bool_()), src, f"missing column {src!r}")
                values[key] = pa.chunked_array([pa.nulls(n, pa.string())])
            continue
        col, unfit, why = _conform(table[src], typ, src)
        if unfit is not None:
            flag(unfit, src, why)
        values[key] = col
        if key not in ("text_a", "text_b", "label"):
            continue
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
    values["label"] = label

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
    out = {key: col.filter(good) for key, col in values.items()}
    out.setdefault("text_b", pa.nulls(kept.num_rows, pa.string()))
    ids = out.get("id")
    if ids is None or ids.null_count:
        hashed = _hash_ids(source_file, kept["__line"], out["text_a"], out["text_b"], out["label"]) if row_ids \
            else pa.nulls(kept.num_rows, pa.string())
        ids = hashed if ids is None else pc.if_else(pc.is_null(ids), hashed, ids)
    out = {"id": ids, **{k: out[k] for k in CANONICAL_TYPES if k in out and k != "id"}}
    used = set(mapped.values()) | set(out) | {"__line"}
    for name in kept.column_names:
        if name not in used:
            out[name] = kept[name]
    return Batch(pa.table(out), rejects)


# canonical field → its type; the order of the canonical columns (node_a/node_b: the leakage graph's sentence
# ids, QQP qid1/qid2 and MSRP #1/#2 ID)
CANONICAL_TYPES = {**{f.name: f.type for f in CANONICAL_SCHEMA}, "node_a": pa.string(), "node_b": pa.string(),
                   **OPTIONAL_FIELDS}
# target type → (what a column must hold, what a row whose value does not convert holds)
_KINDS = {pa.string(): ("text", "bytes that are not UTF-8"), pa.float64(): ("a number", "a value that is not a number")}


def _conform(col: pa.ChunkedArray, typ: pa.DataType, name: str):
    """(``col`` (made ``_plain``) as ``typ``, a mask of the rows whose value cannot be, why), the mask None when
    every value can.

    A cheap cast for what writers use for text and numbers; lists, structs and maps are never made into text,
    and a value that does not convert (bytes that are not UTF-8, ``"abc"`` as a weight) is that row's reject."""
    t = col.type
    if t == typ:
        return col, None, None
    expected, unconverted = _KINDS[typ]
    if pa.types.is_nested(t):
        return pa.chunked_array([pa.nulls(len(col), typ)]), pc.is_valid(col), \
            f"column {name!r} holds {t} where {expected} is expected"
    try:
        return col.cast(typ), None, None
    except (pa.ArrowInvalid, pa.ArrowNotImplementedError, pa.ArrowTypeError):
        pass
    converted = []
    for value in col:   # a rare batch: each value on its own
        try:
            converted.append(value.cast(typ))
        except (pa.ArrowInvalid, pa.ArrowNotImplementedError, pa.ArrowTypeError):
            converted.append(None)
    unfit = pa.array([c is None and v.is_valid for c, v in zip(converted, col)], pa.bool_())
    return pa.chunked_array([pa.array([c.as_py() if c is not None else None for c in converted], typ)]), unfit, \
        f"column {name!r} holds {unconverted}"


def _plain(col):
    """``col`` with strings as ``string``, bytes as ``binary`` and dictionaries decoded (Arrow's kernels do not all
    take ``string_view``, nor cast a dictionary of them; the canonical corpus holds one type for each)."""
    t = col.type
    if pa.types.is_dictionary(t):
        return pa.chunked_array([pc.take(_plain(c.dictionary), c.indices) for c in col.chunks], _plain_type(t))
    target = _plain_type(t)
    return col if target == t else col.cast(target)


def _plain_type(t: pa.DataType) -> pa.DataType:
    if pa.types.is_dictionary(t):
        return _plain_type(t.value_type)
    if pa.types.is_large_string(t) or pa.types.is_string_view(t):
        return pa.string()
    if pa.types.is_large_binary(t) or pa.types.is_binary_view(t):
        return pa.binary()
    return t


# ---------------------------------------------------------------- public entry points

def read_input(url: str, mapping: Mapping, opts: ReadOptions = ReadOptions()) -> Iterator[tuple[str, Batch]]:
    """(file, canonical batch) for every file of one raw input (a file, folder or glob); the splits of a Hugging
    Face ``DatasetDict`` folder are read one after the other, each row's ``split`` the name of its own."""
    splits = hf_splits(url, opts.storage_options) or {None: expand_paths([url], opts.storage_options)}
    for split, paths in splits.items():
        for path in paths:
            for batch in read_file(path, mapping, opts):
                rows = batch.rows
                if split is not None and "split" not in rows.column_names:
                    rows = rows.append_column("split", pa.array([split] * rows.num_rows, pa.string()))
                yield path, Batch(rows, batch.rejects)


def read_file(path: str, mapping: Mapping, opts: ReadOptions = ReadOptions()) -> Iterator[Batch]:
    """Stream one file as canonical batches; raise MissingColumnError before any row when a mapped column is
    not in the file, BadRowError on the first bad row under ``fail``."""
    fs, fpath = get_fs(path, opts.storage_options)
    fmt = detect_format(path, mapping)
    if fmt == "json" and _looks_like_jsonl(fs, fpath):
        fmt = "jsonl"
    text_columns = frozenset(mapping.columns[k] for k in ("text_a", "text_b", "label", "id", "node_a", "node_b")
                             if mapping.columns.get(k))
    quoting = fmt == "csv" if mapping.csv_quoting is None else mapping.csv_quoting
    parsers = {
        "jsonl": lambda: _raw_jsonl(fs, fpath, opts, path, text_columns),
        "json": lambda: _raw_json_array(fs, fpath, opts, path, text_columns),
        "csv": lambda: _raw_delimited(fs, fpath, opts, path, ",", quoting),
        "tsv": lambda: _raw_delimited(fs, fpath, opts, path, "\t", quoting),
        "parquet": lambda: _raw_parquet(fs, fpath, opts),
        "arrow": lambda: _raw_arrow(fs, fpath, opts, path),
    }
    pieces = _with_mapped_columns(_unique_columns(parsers[fmt](), mapping, path), mapping, path,
                                  from_schema=fmt not in ("jsonl", "json"), records=opts.batch_rows)
    for raw, raws, parse_rejects in pieces:
        batch = canonicalize(raw, mapping, path, opts.max_chars, raws, opts.row_ids)
        rejects = pa.concat_tables([parse_rejects, batch.rejects]).sort_by("line")
        if opts.on_bad_row == "fail" and rejects.num_rows:
            first = rejects.slice(0, 1).to_pylist()[0]
            where = f", column {first['column']!r}" if first["column"] else ""
            raise BadRowError(f"{first['source_file']}, line {first['line']}{where}: {first['reason']}")
        yield Batch(batch.rows, rejects)


def _unique_columns(pieces, mapping: Mapping, source: str):
    """The raw pieces with each column name once: a mapped name the file holds twice is an
    AmbiguousColumnError; other repeats are kept, renamed ``name.2``, ``name.3``, … (a header's empty cells)."""
    for raw, raws, rejects in pieces:
        names = raw.column_names
        if len(set(names)) < len(names):
            seen: dict[str, int] = {}
            renamed = []
            for i, name in enumerate(names, 1):
                if name in seen and name in mapping.columns.values():
                    raise AmbiguousColumnError(f"{source} has two columns named {name!r} (columns {seen[name]} "
                                               f"and {i}); which one to read is ambiguous")
                seen.setdefault(name, i)
                renamed.append(name if seen[name] == i else f"{name}.{sum(n == name for n in names[:i])}")
            raw = raw.rename_columns(renamed)
        yield raw, raws, rejects


def _with_mapped_columns(pieces, mapping: Mapping, source: str, from_schema: bool, records: int):
    """The raw pieces, once every required mapped column is known to be in the file: in its schema (a header,
    Parquet, Arrow), or, for JSON, held by one of its first ``records`` records; else MissingColumnError."""
    required = list(dict.fromkeys(mapping.required.values()))
    buffered, held, seen = [], {}, 0
    for piece in pieces:
        buffered.append(piece)
        held.update(dict.fromkeys(c for c in piece[0].column_names if c != "__line"))
        seen += piece[0].num_rows
        if from_schema or seen >= records or all(c in held for c in required):
            break
    missing = [c for c in required if c not in held]
    if missing and buffered and (from_schema or seen):   # an empty file has no columns to tell
        raise MissingColumnError(_missing_columns_message(source, missing, list(held), mapping))
    yield from buffered
    yield from pieces


def _missing_columns_message(source: str, missing: list[str], columns: list[str], mapping: Mapping) -> str:
    """``x.tsv has no column 'sentence1' (--preset snli); it has a, b, c; try --preset sick`` (one line)."""
    listed = ", ".join(columns[:20]) + (f", … ({len(columns) - 20} more)" if len(columns) > 20 else "") \
        if columns else "none"
    hints = []
    if mapping.preset is None:
        hints += [f"did you mean {close[0]!r} for {c!r}?" for c in missing
                  if (close := difflib.get_close_matches(c, columns, n=1, cutoff=0.6))]
    fitting = [name for name, preset in PRESETS.items()
               if name != mapping.preset and all(c in columns for c in preset.required.values())]
    fitting.sort(key=lambda name: -sum(c in columns for c in PRESETS[name].columns.values()))
    if fitting:
        hints.append("try " + " or ".join(f"--preset {name}" for name in fitting[:3]))
    how = f"--preset {mapping.preset}" if mapping.preset else "--map"
    return (f"{source} has no column{'s' if len(missing) > 1 else ''} {', '.join(map(repr, missing))} ({how}); "
            f"it has {listed}" + "".join(f"; {h}" for h in hints))


def _looks_like_jsonl(fs, path) -> bool:
    with fs.open(path, "rb", compression="infer") as fh:
        head = fh.read(4096).removeprefix(BOM).lstrip()
    return not head.startswith(b"[")
