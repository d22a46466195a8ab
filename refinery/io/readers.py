"""Read labeled corpora (JSONL, JSON array, CSV/TSV, Parquet, Arrow IPC/Feather, Hugging Face
``save_to_disk`` folders) into canonical Arrow batches: ``read_file`` and ``read_input``, with the options
of a read and the JSON and JSONL parsers (the other formats' are in ``delimited`` and ``raw``).

Every input row ends either in a canonical batch or in a rejects batch with its source
file, line (1-based; record number for Parquet, Arrow and JSON arrays), column and reason.
Whatever Arrow types a writer chose (``large_string``, ``string_view``, dictionaries, numbers,
booleans), the mapped columns leave the reader as the canonical types.
"""
from __future__ import annotations

import contextlib
import difflib
import gzip
import json
import lzma
import re
import zlib
from typing import Iterator

import numpy as np
import pyarrow as pa
import pyarrow.json as pajson

from refinery.io.canonical import Batch, canonicalize
from refinery.io.common_schema import as_json_text
from refinery.io.delimited import delimited_pieces
from refinery.io.inputs import detect_format, expand_paths, hf_splits
from refinery.io.lines import BLOCK_BYTES, BOM, LineTexts, line_blocks
from refinery.io.raw import arrow_pieces, parquet_pieces, rejects_table, with_lines
from refinery.io.schema import PRESETS, Mapping
from refinery.io.location import get_fs
from refinery.io.read_options import ReadOptions
from refinery.io.scratch import in_memory_names
from refinery.messages import Message, Refusal, Setting

MAX_JSON_DEPTH = 64  # deeper values are that row's reject, not a RecursionError
JSONL_BLOCK_BYTES = BLOCK_BYTES  # whole lines handed to Arrow's JSON reader at a time
LINE_BY_LINE = 2048           # a block Arrow refuses is halved down to this many lines, then read line by line


class BadRowError(Refusal):
    """Raised under ``on_bad_row='fail'``: names the file, line and column."""

    code = "bad-row"


class MissingColumnError(Refusal):
    """A mapped column that a file lacks, raised before any of its rows is read: one line naming the
    file, the column, the columns the file has, and a preset or column that fits."""

    code = "missing-columns"


class AmbiguousColumnError(Refusal):
    """A mapped column whose name the file's header holds more than once."""

    code = "bad-input"


# ---------------------------------------------------------------- JSON and JSONL

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
        kinds = {type(v) for v in values if v is not None}
        if bool in kinds and len(kinds) > 1:   # Arrow would make [0.5, true] [0.5, 1.0]: a value altered
            cols[k] = as_json_text(values)
            continue
        try:
            cols[k] = pa.array(values)
        except (pa.ArrowInvalid, pa.ArrowTypeError, OverflowError):
            cols[k] = as_json_text(values)
    if not cols:  # no records, or only {}: zero columns, but as many rows as records
        return pa.table({"__rows": pa.nulls(len(records))}).drop_columns(["__rows"])
    return pa.table(cols)


def _parse_json_line(text: str, text_columns: frozenset):
    """(record, column, reason): one JSON line decoded on its own terms."""
    try:
        obj = json.loads(text)
    except json.JSONDecodeError as e:
        return None, None, f"malformed JSON: {e.msg.removesuffix(' at')} at column {e.colno}"   # json's 'starting at'
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
    return with_lines(_records_to_table(records), lines), pa.array(raws, pa.string()), rejects_table(source, bad)


def _jsonl_pieces(fs, path, opts, source, text_columns) -> Iterator[tuple[pa.Table, object, pa.Table]]:
    """JSONL in blocks of whole lines, each cut into spans of ``batch_rows`` lines read by Arrow's JSON
    reader (vectorized, threaded) where it reads exactly what Python's json would (``_arrow_lines``), else
    halved down to ``LINE_BY_LINE`` lines and read line by line, so a damaged line costs one small slow
    piece, not the file. Yields (raw rows with ``__line``, their raw text, parse rejects)."""
    for lines, first_line in line_blocks(fs, path, JSONL_BLOCK_BYTES):
        spans = [(lo, min(lo + opts.batch_rows, len(lines))) for lo in range(0, len(lines), opts.batch_rows)]
        pending = spans[::-1]   # popped from the end: in file order
        while pending:
            lo, hi = pending.pop()
            table, keep = _arrow_lines(lines, lo, hi, opts, text_columns)
            if table is not None:
                yield with_lines(table, first_line + keep), lines.subset(keep), rejects_table(source, [])
            elif hi - lo <= LINE_BY_LINE:
                chunk = [(first_line + i, lines.raw(i)) for i in keep]
                if chunk:
                    yield _parse_lines(chunk, opts, source, text_columns)
            else:
                mid = (lo + hi) // 2
                pending += [(mid, hi), (lo, mid)]   # the first half is read first


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
    read = pajson.ReadOptions(use_threads=not _may_nest(piece, len(keep)))
    try:
        str(piece, "utf-8")
        table = pajson.read_json(pa.BufferReader(piece), read_options=read)
        timestamps = [f for f in table.schema if pa.types.is_timestamp(f.type) or pa.types.is_date(f.type)]
        if timestamps:
            schema = pa.schema([f.with_type(pa.string()) for f in timestamps])
            table = pajson.read_json(pa.BufferReader(piece), read_options=read, parse_options=pajson.ParseOptions(
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


def _may_nest(piece: memoryview, objects: int) -> bool:
    """Whether a piece of ``objects`` JSON lines may hold a list or an object below the lines' own: a bracket, or a
    brace beyond one a line (in a text too: a false alarm costs only speed). Arrow's threaded reader can crash
    (SIGSEGV, pyarrow 26) on such a column whose type changes between its blocks, so these are read serially."""
    data = np.frombuffer(piece, np.uint8)
    return bool(np.count_nonzero(data == ord("[")) or np.count_nonzero(data == ord("{")) > objects)


def _children(t: pa.DataType) -> list[pa.DataType]:
    return [t.field(i).type for i in range(t.num_fields)] if t.num_fields else []


def _depth_of_type(t: pa.DataType) -> int:
    return 1 + max(map(_depth_of_type, _children(t))) if _children(t) else 0


def _has_float(t: pa.DataType) -> bool:
    return pa.types.is_floating(t) or any(map(_has_float, _children(t)))


def _has_temporal(t: pa.DataType) -> bool:
    return pa.types.is_temporal(t) or any(map(_has_temporal, _children(t)))


def _json_array_pieces(fs, path, opts, source, text_columns) -> Iterator[tuple[pa.Table, object, pa.Table]]:
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
        yield with_lines(_records_to_table(records), lines), pa.array(raws, pa.string()), \
            rejects_table(source, bad)


def _json_text(obj) -> str:
    """An element as JSON text for the rejects file (a lone surrogate kept as its ``\\ud800`` escape)."""
    try:
        return json.dumps(obj, ensure_ascii=False).encode("utf-8", "backslashreplace").decode("utf-8")
    except (RecursionError, ValueError):
        return f"<{type(obj).__name__} too deeply nested to print>"


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


def input_columns(url: str, opts: ReadOptions = ReadOptions()) -> list[str]:
    """The columns of a raw input (a file, folder or glob) as its first file names them: its header, its schema, or
    the keys of its first records (none for an empty file)."""
    splits = hf_splits(url, opts.storage_options) or {None: expand_paths([url], opts.storage_options)}
    first = next(path for paths in splits.values() for path in paths)
    with contextlib.closing(_raw_pieces(first, Mapping({}), opts)[1]) as pieces:
        piece = next(pieces, None)
    return [] if piece is None else [c for c in piece[0].column_names if c != "__line"]


def _raw_pieces(path: str, mapping: Mapping, opts: ReadOptions) -> tuple[str, Iterator]:
    """(the file's format, its raw pieces as that format's parser yields them: ``raw``'s (rows, raw text, parse
    rejects))."""
    fs, fpath = get_fs(path, opts.storage_options)
    fmt = detect_format(path, mapping)
    if fmt == "json" and _looks_like_jsonl(fs, fpath):
        fmt = "jsonl"
    text_columns = frozenset(mapping.columns[k] for k in ("text_a", "text_b", "label", "id", "node_a", "node_b")
                             if mapping.columns.get(k))
    mapped = frozenset(c for c in mapping.columns.values() if c)
    quoting = fmt == "csv" if mapping.csv_quoting is None else mapping.csv_quoting
    parsers = {
        "jsonl": lambda: _jsonl_pieces(fs, fpath, opts, path, text_columns),
        "json": lambda: _json_array_pieces(fs, fpath, opts, path, text_columns),
        "csv": lambda: delimited_pieces(fs, fpath, opts, path, ",", quoting),
        "tsv": lambda: delimited_pieces(fs, fpath, opts, path, "\t", quoting),
        "parquet": lambda: parquet_pieces(fs, fpath, opts, path, mapped),
        "arrow": lambda: arrow_pieces(fs, fpath, opts, path, mapped),
    }
    return fmt, parsers[fmt]()


def read_file(path: str, mapping: Mapping, opts: ReadOptions = ReadOptions()) -> Iterator[Batch]:
    """Stream one file as canonical batches; raise MissingColumnError before any row when a mapped column is
    not in the file, BadRowError on the first bad row under ``fail``."""
    fmt, raw_pieces = _raw_pieces(path, mapping, opts)
    pieces = _with_mapped_columns(_unique_columns(raw_pieces, mapping, path), mapping, path,
                                  from_schema=fmt not in ("jsonl", "json"), records=opts.batch_rows)
    shown = in_memory_names(path)   # in-memory data's rejects name the caller's object, not its scratch file
    for raw, raws, parse_rejects in _whole(pieces, path):
        batch = canonicalize(raw, mapping, path, opts.max_chars, raws, opts.row_ids)
        rejects = pa.concat_tables([parse_rejects, batch.rejects]).sort_by("line")
        if shown != path and rejects.num_rows:
            rejects = rejects.set_column(0, "source_file", pa.array([shown] * rejects.num_rows, pa.string()))
        if opts.on_bad_row == "fail" and rejects.num_rows:
            first = rejects.slice(0, 1).to_pylist()[0]
            where = f", column {first['column']!r}" if first["column"] else ""
            raise BadRowError(f"{first['source_file']}, line {first['line']}{where}: {first['reason']}")
        yield Batch(batch.rows, rejects)


def _whole(pieces, source: str):
    """The pieces of a compressed file, its end cut short or its bytes damaged named as one line (exit 2)."""
    try:
        yield from pieces
    except (EOFError, zlib.error, lzma.LZMAError, gzip.BadGzipFile) as e:
        raise Refusal(f"{source}: the compressed file is damaged or cut short ({e}); download it again",
                      code="bad-input") from None


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


def _missing_columns_message(source: str, missing: list[str], columns: list[str], mapping: Mapping) -> Message:
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
        hints.append(Message("try ", *[part for name in fitting[:3] for part in (" or ", Setting("preset", name))][1:]))
    how = Setting("preset", mapping.preset) if mapping.preset else Setting("map")
    return Message(f"{source} has no column{'s' if len(missing) > 1 else ''} {', '.join(map(repr, missing))} (", how,
                   f"); it has {listed}", *[part for hint in hints for part in ("; ", hint)])


def _looks_like_jsonl(fs, path) -> bool:
    with fs.open(path, "rb", compression="infer") as fh:
        head = fh.read(4096).removeprefix(BOM).lstrip()
    return not head.startswith(b"[")
