"""Raw rows made canonical: each mapped column cast to its canonical type and checked, each row kept or
rejected with the first reason it fails for, and ids hashed where a file ships none."""
from __future__ import annotations

import difflib
import json
from dataclasses import dataclass

import pyarrow as pa
import pyarrow.compute as pc

from refinery.io.ids import content_ids
from refinery.io.raw import EMPTY_REJECTS
from refinery.io.schema import CANONICAL_SCHEMA, OPTIONAL_FIELDS, PRESETS, REJECTS_SCHEMA, Mapping, empty_table

EMPTY_CANONICAL = empty_table(pa.schema([f.with_nullable(True) for f in CANONICAL_SCHEMA]))
# canonical field → its type; the order of the canonical columns (node_a/node_b: the leakage graph's sentence
# ids, QQP qid1/qid2 and MSRP #1/#2 ID)
CANONICAL_TYPES = {**{f.name: f.type for f in CANONICAL_SCHEMA}, "node_a": pa.string(), "node_b": pa.string(),
                   **OPTIONAL_FIELDS}
_CHECKED = ("text_a", "text_b", "label")   # where mapped, each row must hold a value (a text: a non-empty one)
# target type → (what a column must hold, what a row whose value does not convert holds)
_KINDS = {pa.string(): ("text", "bytes that are not UTF-8"), pa.float64(): ("a number", "a value that is not a number")}


@dataclass
class Batch:
    rows: pa.Table
    rejects: pa.Table


def canonicalize(table: pa.Table, mapping: Mapping, source_file: str, max_chars: int, raws=None,
                 row_ids: bool = True) -> Batch:
    """Map a raw table (with its ``__line`` column) to canonical rows and rejects.

    Every mapped column is cast to its canonical type (texts, labels and ids to ``string``, ``weight`` to
    ``float64``) whatever type its writer chose: ``large_string``, ``string_view``, dictionaries, binary that
    is UTF-8, numbers, booleans. Checks, in order, each naming its column: a value that is
    not of the type (lists and structs are never made into text), a null or absent value, empty text, over-long text,
    label outside the declared set. Columns that are not mapped pass through, their string and dictionary
    types made plain. Vectorized with Arrow compute. ``raws`` (anything with ``take``) gives the raw text of
    the rejected rows; without it they are written as JSON. ``row_ids=False`` leaves the ids a file lacks
    null instead of hashing them.
    """
    if table.num_rows == 0:  # a batch whose every line was bad: an empty batch
        return Batch(EMPTY_CANONICAL, EMPTY_REJECTS)
    table = pa.table({name: _plain(col) for name, col in zip(table.column_names, table.columns)})
    verdict = _Verdict(table.num_rows)
    mapped = {k: v for k, v in mapping.columns.items() if v is not None}
    values = _mapped_values(table, mapped, max_chars, verdict)
    values["label"] = _labels(values["label"], mapping, mapped["label"], verdict)
    used = set(mapped.values()) | (set(values) & set(OPTIONAL_FIELDS))   # the columns read: mapped, or by name
    rest = _beside(table.select([name for name in table.column_names if name not in used]))   # __line, the unmapped
    if not verdict.flagged:   # the common batch: every row kept, nothing copied
        return Batch(_rows(rest, values, source_file, row_ids), EMPTY_REJECTS)
    bad = pc.is_valid(verdict.reason)
    good = pc.invert(bad)
    rejects = _rejects(table, pc.indices_nonzero(bad), verdict, source_file, raws)
    kept = {key: col.filter(good) for key, col in values.items()}
    return Batch(_rows(rest.filter(good), kept, source_file, row_ids), rejects)


class _Verdict:
    """Per row, the reason it is rejected for and the column that reason names (both null: kept)."""

    def __init__(self, n: int):
        self.reason = pa.nulls(n, pa.string())
        self.column = pa.nulls(n, pa.string())
        self.flagged = False   # whether any row is rejected

    def flag(self, mask, column: str, reason: str) -> None:
        """Reject the rows of ``mask`` (null: not) for ``reason``, unless an earlier check rejected them."""
        if not pc.any(mask).as_py():   # the common case: no row of the batch fails this check
            return
        mask = pc.and_(pc.fill_null(mask, False), pc.is_null(self.reason))
        self.flagged = True
        self.reason = pc.if_else(mask, pa.scalar(reason), self.reason)
        self.column = pc.if_else(mask, pa.scalar(column), self.column)


def _mapped_values(table: pa.Table, mapped: dict, max_chars: int, verdict: _Verdict) -> dict[str, pa.ChunkedArray]:
    """Canonical field → its column in the canonical type, the rows that fail the field's checks flagged."""
    n = table.num_rows
    values: dict[str, pa.ChunkedArray] = {}
    for key, typ in CANONICAL_TYPES.items():
        src = mapped.get(key, key if key in OPTIONAL_FIELDS else None)
        if src is None:
            continue
        if src not in table.column_names:
            if key in _CHECKED:
                # the file holds the column (``readers`` checks before any row): these records lack its key
                verdict.flag(pa.array([True] * n, pa.bool_()), src, f"missing or null value in column {src!r}")
                values[key] = pa.chunked_array([pa.nulls(n, pa.string())])
            continue
        col, unfit, why = _conform(table[src], typ, src)
        if unfit is not None:
            verdict.flag(unfit, src, why)
        values[key] = col
        if key in _CHECKED:
            _check_values(col, src, key != "label", max_chars, verdict)
    return values


def _check_values(col: pa.ChunkedArray, src: str, text: bool, max_chars: int, verdict: _Verdict) -> None:
    """Flag the rows of a ``_CHECKED`` column without a value; with ``text``, those with an empty or over-long one."""
    verdict.flag(pc.is_null(col), src, f"missing or null value in column {src!r}")
    if not text:
        return
    nbytes = pc.binary_length(col)   # O(1) a row; characters ≤ bytes
    verdict.flag(pc.or_(pc.equal(nbytes, 0), pc.utf8_is_space(col)), src, f"empty text in column {src!r}")
    if pc.any(pc.greater(nbytes, max_chars)).as_py():
        verdict.flag(pc.greater(pc.utf8_length(col), max_chars), src,
                     f"text longer than {max_chars} characters in column {src!r}")


def _labels(label: pa.ChunkedArray, mapping: Mapping, src: str, verdict: _Verdict):
    """The labels as the mapping names them; the rows whose label is outside the declared set flagged."""
    if mapping.labels:
        keys = pa.array(list(mapping.labels), pa.string())
        idx = pc.index_in(label, value_set=keys)
        label = pc.if_else(pc.is_null(idx), label, pc.take(pa.array(list(mapping.labels.values())), idx))
    if mapping.label_set is not None:
        outside = pc.invert(pc.is_in(label, value_set=pa.array(list(mapping.label_set), pa.string())))
        reason = "label not in the label set " + "|".join(mapping.label_set)
        if pc.any(outside).as_py():
            values = pc.unique(pc.drop_null(label.filter(outside))).to_pylist()
            for value in values[:HINTED_LABELS]:   # each value's reason names the labels it belongs with
                verdict.flag(pc.equal(label, value), src, reason + _label_hint(value, mapping.label_set))
        verdict.flag(outside, src, reason)
    return label


HINTED_LABELS = 20   # distinct labels outside the set whose rejects say where they belong (a free-text column: many)


def _label_hint(value: str, label_set: tuple) -> str:
    """Where a label outside the set belongs: a declared label it is a typo of, or the presets it is a label of."""
    presets = [name for name, m in PRESETS.items() if value in (m.label_set or ()) and m.label_set != label_set]
    if presets:
        return f" ({value!r} is a label of preset {' and '.join(presets)})"
    close = difflib.get_close_matches(value, label_set, n=1, cutoff=0.8)
    return f" ({value!r}: close to {close[0]!r}, a typo in the data or in the label set?)" if close else ""


def _rejects(table: pa.Table, bad_idx: pa.Array, verdict: _Verdict, source_file: str, raws) -> pa.Table:
    """The rejects of the rows ``bad_idx``, with their raw text (``raws``, else the row as JSON)."""
    if raws is not None:
        raw_bad = raws.take(bad_idx)
    else:
        raw_bad = pa.array([json.dumps(r, default=str, ensure_ascii=False)
                            for r in table.drop_columns(["__line"]).take(bad_idx).to_pylist()], pa.string())
    return pa.table(
        {"source_file": pa.array([source_file] * len(bad_idx), pa.string()), "line": pc.take(table["__line"], bad_idx),
         "column": pc.take(verdict.column, bad_idx), "reason": pc.take(verdict.reason, bad_idx), "raw": raw_bad},
        schema=REJECTS_SCHEMA,
    )


def _beside(rest: pa.Table) -> pa.Table:
    """The unmapped columns (and ``__line``), one that bears the name of a column every canonical row has (id,
    text_a, text_b, label) renamed ``NAME.2`` (as a header's repeated name is): the file's own ``text_b`` or ``id``
    kept beside the mapped ones, not dropped. (An unmapped ``node_a``/``node_b`` passes through as it is.)"""
    taken = set(CANONICAL_TYPES) | set(rest.column_names)
    renamed = []
    for name in rest.column_names:
        if name in CANONICAL_SCHEMA.names:
            n = 2
            while f"{name}.{n}" in taken:
                n += 1
            taken.add(f"{name}.{n}")
            name = f"{name}.{n}"
        renamed.append(name)
    return rest.rename_columns(renamed) if renamed != rest.column_names else rest


def _rows(rest: pa.Table, values: dict, source_file: str, row_ids: bool) -> pa.Table:
    """The canonical rows of their canonical ``values`` and ``rest``, the kept rows' ``__line`` and columns that
    are not mapped: the canonical columns in order, ids hashed where missing (with ``row_ids``), then ``rest``
    but ``__line``."""
    out = dict(values)
    out.setdefault("text_b", pa.nulls(rest.num_rows, pa.string()))
    ids = out.get("id")
    if ids is None or ids.null_count:
        hashed = content_ids(source_file, rest["__line"], out["text_a"], out["text_b"], out["label"]) if row_ids \
            else pa.nulls(rest.num_rows, pa.string())
        ids = hashed if ids is None else pc.if_else(pc.is_null(ids), hashed, ids)
    out = {"id": ids, **{k: out[k] for k in CANONICAL_TYPES if k in out and k != "id"}}
    for name in rest.column_names:
        if name != "__line":
            out[name] = rest[name]
    return pa.table(out)


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
