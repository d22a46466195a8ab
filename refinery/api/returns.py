"""The refined rows handed back as the caller's data came: the caller's kind (a DataFrame for a DataFrame, a
``Dataset`` for a ``Dataset``, …), column names and types (integer labels as integers, a ClassLabel as that
ClassLabel), the columns the stage added after them."""
from __future__ import annotations

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from refinery.api.inputs import Source
from refinery.io.hf import as_dataset, datasets_package
from refinery.io.schema import Mapping


def in_callers_columns(table: pa.Table, source: Source, mapping: Mapping | None) -> pa.Table:
    """Canonical rows in the caller's columns and types: each mapped column under the caller's name and of its
    type (int labels as ints), refinery's own id, sentence ids and empty text_b left out, the caller's column
    order first, then the columns the stage added."""
    schema = source.schema
    if schema is None or mapping is None:
        return table
    renames = {key: column for key, column in mapping.columns.items()
               if column and key in table.column_names and column in schema.names}
    own = ("id", "text_b", "node_a", "node_b")   # refinery's own where the caller mapped none
    columns = {}
    for name in table.column_names:
        if name in own and name not in renames:
            continue
        original = renames.get(name, _beside_name(name, schema, renames))
        column = table[name]
        if original in schema.names and column.type != schema.field(original).type:
            column = _as_type(column, schema.field(original).type, name == "label" and mapping,
                              source.all_paths, original)
        columns[original] = column
    order = [c for c in schema.names if c in columns] + [c for c in columns if c not in schema.names]
    return pa.table({c: columns[c] for c in order})


def _beside_name(name: str, schema: pa.Schema, renames: dict) -> str:
    """The caller's own column that reading kept beside refinery's as ``NAME.2`` (``io.canonical._beside``): the
    caller's ``text_b`` where ``text_b`` is refinery's, read from another column."""
    base, dot, number = name.rpartition(".")
    if dot and number.isdigit() and base in ("id", "text_a", "text_b", "label") and base in schema.names \
            and base not in renames.values():
        return base
    return name


def _as_type(column: pa.ChunkedArray, typ: pa.DataType, mapping, files: list, original: str) -> pa.ChunkedArray:
    """``column`` (text) as the caller's type ``typ``: labels through the caller's own values (a preset's
    renamed labels too), anything else by a cast; left as text where a value does not convert (a generated
    row's id)."""
    if mapping:
        chunks = [chunk for f in files if original in pq.read_schema(f).names
                  for chunk in pq.read_table(f, columns=[original])[original].chunks]
        values = pc.unique(pa.chunked_array(chunks, typ)).drop_null()
        texts = [mapping.labels.get(t, t) for t in values.cast(pa.string()).to_pylist()]
        at = pc.index_in(column, value_set=pa.array(texts, pa.string()))
        if at.null_count == column.null_count:
            return pc.take(values, at)
        return column
    try:
        return column.cast(typ)
    except (pa.ArrowInvalid, pa.ArrowNotImplementedError, pa.ArrowTypeError):
        return column


def as_kind(table: pa.Table, kind: str, features: dict):
    """The rows of ``table`` in the caller's kind."""
    if kind == "pandas":
        return table.to_pandas()
    if kind == "polars":
        import polars
        return polars.from_arrow(table)
    if kind == "hf":
        return to_hf(table, features, by_split=False)
    if kind == "ray":
        import ray.data
        return ray.data.from_arrow(table)
    return table


def to_hf(table: pa.Table, features: dict | None = None, by_split: bool = True):
    """A ``datasets.Dataset``; with ``by_split``, a ``DatasetDict`` when every row carries a named split. The
    class-label columns of the caller's data (``features``) are ClassLabel again."""
    datasets = datasets_package("to_hf()")
    if by_split and isinstance(dataset := as_dataset(table, needed_by="to_hf()"), dict):
        return datasets.DatasetDict({s: to_hf(part.data.table, features, False) for s, part in dataset.items()})
    wanted = {c: f for c, f in (features or {}).items() if c in table.column_names}
    for column, feature in wanted.items():
        text = table[column].cast(pa.string())
        codes = pc.index_in(text, value_set=pa.array(feature.names, pa.string())).cast(pa.int64())
        unnamed = pc.is_null(codes)   # an integer outside the names (-1: no class), as it came
        if pc.any(unnamed).as_py():
            codes = pc.if_else(unnamed, pc.if_else(unnamed, text, pa.scalar("0")).cast(pa.int64()), codes)
        table = table.set_column(table.schema.get_field_index(column), column, codes)
    hub = datasets.Features({**datasets.Features.from_arrow_schema(table.schema), **wanted})
    return datasets.Dataset(table, info=datasets.DatasetInfo(features=hub))

