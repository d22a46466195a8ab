"""CSV and TSV read by physical lines into raw pieces: each non-blank line after the header is a row or
a reject, a quoted field over several lines one record only when asked (``csv_multiline``)."""
from __future__ import annotations

import csv
from typing import Iterator

import pyarrow as pa

from refinery.io.lines import BLOCK_BYTES, line_blocks
from refinery.io.raw import rejects_table, with_lines
from refinery.messages import Message, Refusal, Setting


def delimited_pieces(fs, path, opts, source, delimiter, quoting) -> Iterator[tuple[pa.Table, object, pa.Table]]:
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
        out = with_lines(table, lines_kept), pa.array(raws, pa.string()), rejects_table(source, bad)
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
    for lines, first in line_blocks(fs, path, BLOCK_BYTES):
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
            raise Refusal(f"{source}: the header (line {lineno}) holds undecodable bytes (not UTF-8)", code="bad-input")
        names, still_open = splitter.split(text)
        if still_open:
            raise Refusal(f"{source}: the header (line {lineno}) has an unbalanced quote", code="bad-input")
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
            yield from _spanning_record(lines, given_back, splitter, lineno, line, fields, multiline=multiline,
                                        width=width, max_bytes=max_bytes)
        elif undecodable:
            yield lineno, None, _safe(text), "undecodable bytes (not UTF-8)"
        elif len(fields) != width:
            yield lineno, None, text, f"expected {width} columns, got {len(fields)}"
        else:
            yield lineno, fields, text, None


def _spanning_record(lines, given_back: list, splitter: _LineSplitter, lineno: int, line: bytes, fields: list, *,
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
    # a reason is the rejects table's text: the setting named in the run's terms
    remedy = str(Message(" (read such records with ", Setting("csv_multiline", True), ")"))
    yield lineno, None, first_text, f"quoted field runs over lines {lineno}-{last}: a record over several lines{remedy}"
    for number, following in taken:
        if following.strip():
            yield number, None, _safe(_decode_line(following.rstrip(b"\r"))[0]), \
                f"inside the quoted field opened on line {lineno}{remedy}"


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


def _safe(s: str) -> str:
    return s.encode("utf-8", "surrogateescape").decode("utf-8", "replace")
