"""One schema for tables whose columns drift: a text file's types are inferred a batch at a time, so a column
the user did not map can be int64 in one batch and string in the next, or first appear after thousands of rows.
A corpus's shards must share one schema (pandas, Hugging Face ``datasets`` and DuckDB read its folder as one
table), so the batches and shards are conformed to ``common_schema``: every column once, in first-seen order,
of the type that holds every batch's values: Arrow's permissive promotion (null → any, int64 → double, …)
where it casts both, else text (each value as its JSON text), as a whole-file read gives a column of mixed
types."""
from __future__ import annotations

import json

import pyarrow as pa

_CAST_ERRORS = (pa.ArrowInvalid, pa.ArrowNotImplementedError, pa.ArrowTypeError)


def common_schema(schemas) -> pa.Schema:
    """The schema every one of ``schemas`` conforms to (``conform``): their columns, each once, in first-seen
    order, each of the common type of its types."""
    fields: dict[str, pa.Field] = {}
    for schema in schemas:
        for f in schema:
            seen = fields.get(f.name)
            fields[f.name] = f.with_nullable(True) if seen is None else seen.with_type(common_type(seen.type, f.type))
    return pa.schema(list(fields.values()))


def common_type(a: pa.DataType, b: pa.DataType) -> pa.DataType:
    """The type that holds the values of types ``a`` and ``b``: Arrow's permissive promotion where both cast to
    it, else ``string``."""
    if a == b:
        return a
    try:
        promoted = pa.unify_schemas([pa.schema([("v", a)]), pa.schema([("v", b)])],
                                    promote_options="permissive").field("v").type
        for t in (a, b):
            pa.array([None], t).cast(promoted)   # a kernel exists for the cast (a null to keep it cheap)
        return promoted
    except _CAST_ERRORS:
        return pa.string()


def conform(table: pa.Table, schema: pa.Schema) -> pa.Table:
    """``table`` with ``schema``'s columns in its order: a column it lacks as nulls, one of another type cast (to
    text: as JSON, ``as_json_text``)."""
    if table.schema == schema:
        return table
    columns = []
    for f in schema:
        if f.name not in table.column_names:
            columns.append(pa.nulls(table.num_rows, f.type))
            continue
        column = table[f.name]
        if column.type != f.type:
            column = as_json_text(column) if f.type == pa.string() else column.cast(f.type)
        columns.append(column)
    return pa.Table.from_arrays(columns, schema=schema)


def as_json_text(values) -> pa.Array:
    """Values (a list, or an Arrow column) of mixed types as text, as a line-by-line read of a JSON file gives a
    column of them: a string as it is, another value as its JSON text (``1.0`` → ``"1.0"``, ``True`` →
    ``"true"``, a struct → ``'{"k": 9}'``), null as null."""
    values = values if isinstance(values, list) else values.to_pylist()
    return pa.array([v if v is None or isinstance(v, str) else json.dumps(v, default=str, ensure_ascii=False)
                     for v in values], pa.string())
