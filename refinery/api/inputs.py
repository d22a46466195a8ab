"""The caller's data as the runner's input: a path, URL, glob or list of them is read as it is; in-memory data
(a pandas or polars DataFrame, a pyarrow Table, RecordBatch, RecordBatchReader or Dataset, a Hugging Face
``Dataset``, a Ray Dataset) is written as Parquet into the call's scratch folder first; named splits (a
``DatasetDict``, ``{split: data}`` or a ``split`` column) each to a file of their own. What it takes to hand
the refined rows back as they came (the kind, each split's object, the columns and types) is kept in the
``Source``."""
from __future__ import annotations

import dataclasses
import os
import re
import typing
from dataclasses import dataclass, field

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from refinery.io.corpus import EmptyInput
from refinery.io.location import join
from refinery.io.schema import PRESETS, canonical_mapping, parse_mapping
from refinery.io.scratch import write_parquet_file
from refinery.messages import Refusal
from refinery.pipeline.config import InputSpec, from_dict


@dataclass
class Source:
    """The caller's data, as the runner reads it: ``paths`` or named ``splits`` (in-memory data written as
    Parquet under the call's folder), and what it takes to hand the refined rows back as they came: the kind,
    the caller's object of each split (``parts``), whether the splits came from a ``split`` column, and the
    columns and types the caller's data had (``schema``, HF ``features``)."""

    kind: str            # path | pandas | polars | arrow | hf | ray (of every split)
    given: object        # the caller's object
    _: dataclasses.KW_ONLY
    paths: list = field(default_factory=list)
    splits: dict = field(default_factory=dict)
    columns: tuple = ()  # in-memory data's columns
    parts: dict = field(default_factory=dict)   # in-memory splits: {split: (kind, the caller's object)}
    split_column: bool = False                  # the splits are the values of the data's ``split`` column
    schema: pa.Schema | None = None             # in-memory data's columns and types, as written
    features: dict = field(default_factory=dict)   # HF ClassLabel columns: {column: ClassLabel}

    @property
    def all_paths(self) -> list:
        """Every path the caller's data is read from: the plain paths, then each split's."""
        return self.paths + [p for ps in self.splits.values() for p in ps]

    @property
    def canonical(self) -> bool:
        """In-memory data already in refinery's columns (``io.schema.canonical_mapping``): read without a preset or
        map."""
        return canonical_mapping(self.columns) is not None

    def input_spec(self, keys: dict, splits: list | None = None) -> InputSpec:
        """The runner's input: the caller's keywords over these paths, or over the named ``splits`` of them."""
        keys = dict(keys)
        if self.canonical and not keys.get("preset") and not keys.get("map"):
            keys["map"] = dict(canonical_mapping(self.columns).columns)   # as a file in them reads (``input_mapping``)
        if keys.get("labels") is not None:
            keys["labels"] = self.label_names(keys["labels"], keys)
        elif self.features and not keys.get("preset"):
            label = _label_column(keys)
            if label in self.features:   # a ClassLabel's names are the label set: -1 ("no label") is a reject
                keys["labels"] = list(self.features[label].names)
        spec = from_dict(InputSpec, {**keys, **({"splits": self.splits} if self.splits else {"paths": self.paths})},
                         "input")
        if splits is None or set(splits) == set(self.split_names(spec)):
            return spec
        return dataclasses.replace(spec, splits={s: p for s, p in spec.split_paths().items() if s in splits},
                                   paths=[])

    def label_names(self, labels, keys: dict) -> list[str]:
        """``labels=`` as the text the reader compares labels as: a ClassLabel's names for its integers, any
        other value as Arrow writes it as text (``0`` → ``"0"``, ``True`` → ``"true"``)."""
        names = getattr(self.features.get(_label_column(keys)), "names", None)
        if isinstance(labels, str) or not isinstance(labels, typing.Iterable):
            labels = [labels]
        return [label if isinstance(label, str) else names[int(label)]
                if names and isinstance(label, int) and 0 <= label < len(names)
                else pa.array([label]).cast(pa.string())[0].as_py() for label in labels]

    def split_names(self, spec: InputSpec) -> list[str]:
        """The input's named splits (none: an unnamed corpus)."""
        return [s for s in spec.split_paths() if s] if self.kind == "path" else list(self.splits)


def _label_column(keys: dict) -> str | None:
    """The caller's column the input's keywords map to ``label``."""
    mapping = keys.get("map") or {}
    if isinstance(mapping, str):
        mapping = dict(parse_mapping(mapping).columns)
    preset = PRESETS.get(str(keys.get("preset") or "").lower())
    return mapping.get("label") or (preset.columns.get("label") if preset else None)


def kind_of(data) -> str:
    """What ``data`` is, by its type's module (so that no library is imported to tell)."""
    if isinstance(data, (str, os.PathLike)) or (isinstance(data, (list, tuple)) and data
                                                and all(isinstance(d, (str, os.PathLike)) for d in data)):
        return "path"
    module = type(data).__module__.split(".")[0]
    name = type(data).__name__
    if module == "pandas" and name == "DataFrame":
        return "pandas"
    if module == "polars" and name == "DataFrame":
        return "polars"
    if module == "pyarrow" and name in ("Table", "RecordBatch", "RecordBatchReader", "FileSystemDataset",
                                        "InMemoryDataset", "UnionDataset", "Dataset"):
        return "arrow"
    if module == "datasets" and name == "Dataset":
        return "hf"
    if module == "datasets" and name == "DatasetDict":
        return "hf_dict"
    if module == "ray" and name in ("Dataset", "MaterializedDataset"):
        return "ray"
    if isinstance(data, dict) and data:
        return "splits"
    raise TypeError(f"cannot read a {type(data).__module__}.{name}: give a path, a pandas or polars DataFrame, a "
                    "pyarrow Table/RecordBatchReader/Dataset, a Hugging Face Dataset or DatasetDict, a Ray Dataset, "
                    "or {split: one of these}")


def as_source(data, folder: str) -> Source:
    """``data`` as the runner's input; in-memory data is written to ``folder/input/``, each named split (a
    ``DatasetDict``'s, a dict's, or a ``split`` column's) to a file of its own."""
    kind = kind_of(data)
    if kind == "path":
        return Source(kind, data, paths=[os.fspath(p) for p in ([data] if isinstance(data, (str, os.PathLike))
                                                                else data)])
    name = f"{type(data).__module__.split('.')[0]}.{type(data).__name__}"   # "pandas.DataFrame": what reports
    if isinstance(data, pa.RecordBatchReader):                                # name the corpus by
        data = data.read_all()   # a stream is read once: its split column is looked at, its rows written
    by_column = _split_column_parts(data, kind) if kind not in ("hf_dict", "splits") else None
    if by_column is None and kind not in ("hf_dict", "splits"):
        path, features = _as_parquet(data, kind, join(folder, "input", f"{name}.parquet"), f"{name} (in memory)")
        return Source(kind, data, paths=[path], columns=tuple(pq.read_schema(path).names),
                      schema=pq.read_schema(path), features=features)
    parts = {str(s): (kind, part) for s, part in by_column.items()} if by_column is not None \
        else {str(s): (kind_of(part), part) for s, part in dict(data).items()}
    splits, kinds, columns, schema, features = {}, set(), {}, None, {}
    for split, (part_kind, part) in parts.items():
        safe = re.sub(r"[^\w.-]", "_", split)
        if part_kind == "path":
            splits[split] = as_source(part, folder).paths
        else:   # "datasets.DatasetDict-train.parquet": a report names the split it read
            path, part_features = _as_parquet(part, part_kind, join(folder, "input", safe, f"{name}-{safe}.parquet"),
                                              f"{name}[{split!r}] (in memory)")
            splits[split] = [path]
            schema, features = schema or pq.read_schema(path), {**part_features, **features}
            columns.update(dict.fromkeys(pq.read_schema(path).names))
        kinds.add(part_kind)
    kind = kind if kind != "splits" else (kinds.pop() if len(kinds) == 1 else "arrow")
    return Source("hf" if kind == "hf_dict" else kind, data, splits=splits, columns=tuple(columns), parts=parts,
                  split_column=by_column is not None, schema=schema, features=features)


def _split_column_parts(data, kind: str) -> dict | None:
    """{split: the rows of ``data`` whose ``split`` column holds it, in ``data``'s kind}, in the order the rows
    name them; None when ``data`` has no ``split`` column."""
    if kind == "ray":
        if "split" not in data.schema().names:
            return None
        values = data.unique("split")
    elif kind == "hf":
        if "split" not in data.column_names:
            return None
        values = list(dict.fromkeys(data.data.column("split").to_pylist()))
    elif kind == "arrow" and not isinstance(data, (pa.Table, pa.RecordBatch)):   # a pyarrow.dataset.Dataset
        if "split" not in data.schema.names:
            return None
        values = list(dict.fromkeys(data.to_table(columns=["split"])["split"].to_pylist()))
    else:
        if "split" not in data.columns if kind != "arrow" else "split" not in data.schema.names:
            return None
        column = data["split"]
        values = list(dict.fromkeys(column.to_list() if kind in ("pandas", "polars") else column.to_pylist()))
    empty = [v for v in values if v is None or (isinstance(v, float) and v != v) or str(v) == ""]
    if empty:
        raise Refusal("the data's split column is empty in some rows: give every row a split, or rename the "
                      "column if it is no split", code="bad-input")
    return {str(v): _rows_of_split(data, kind, v) for v in values}


def _rows_of_split(data, kind: str, value):
    if kind == "pandas":
        return data[data["split"] == value]
    if kind == "polars":
        import polars
        return data.filter(polars.col("split") == value)
    if kind == "hf":
        import numpy as np
        return data.select(np.flatnonzero(pc.equal(data.data.column("split"), value).to_numpy(zero_copy_only=False)))
    if kind == "ray":
        return data.filter(lambda row: row["split"] == value)
    if isinstance(data, (pa.Table, pa.RecordBatch)):
        return data.filter(pc.equal(data["split"], value))
    return data.filter(pc.field("split") == value)   # a pyarrow.dataset.Dataset


def _batches(data, kind: str):
    """(schema, batches) of in-memory ``data``, streamed where the data is a stream."""
    if kind == "pandas":
        repeated = sorted({str(c) for c in data.columns[data.columns.duplicated()]})
        if repeated:
            raise Refusal(f"the DataFrame has more than one column named {', '.join(map(repr, repeated))}; "
                          "rename them so each column has a name of its own", code="bad-input")
        index_named = any(n is not None for n in data.index.names)
        try:
            table = pa.Table.from_pandas(data.reset_index() if index_named else data, preserve_index=False)
        except (pa.ArrowInvalid, pa.ArrowTypeError) as e:
            column = re.search(r"column (.+?) with type", str(e))
            which = f"column {column.group(1)!r}" if column else "a column"
            raise Refusal(f"the DataFrame's {which} holds values of more than one type ({e}); make it one "
                          f"type, e.g. df[{column.group(1) if column else 'col'!r}].astype(str)",
                          code="bad-input") from None
        return table.schema, table.to_batches()
    if kind == "polars":
        table = data.to_arrow()
        return table.schema, table.to_batches()
    if kind == "hf":
        names = _class_labels(data)
        schema = data.features.arrow_schema
        for column in names:
            schema = schema.set(schema.get_field_index(column), pa.field(column, pa.string()))
        return schema, (_names_of_class_labels(b, names) for t in data.with_format("arrow").iter(batch_size=65_536)
                        for b in t.to_batches())
    if kind == "ray":
        stream = iter(data.iter_batches(batch_format="pyarrow", batch_size=65_536))   # an iterable that restarts
        first = next(stream, None)
        if first is None:
            raise EmptyInput("the Ray Dataset has no rows")
        return first.schema, (b for t in (first, *stream) for b in t.to_batches())
    if isinstance(data, pa.RecordBatch):
        return data.schema, [data]
    if isinstance(data, pa.Table):
        return data.schema, data.to_batches()
    if isinstance(data, pa.RecordBatchReader):
        return data.schema, data
    return data.schema, data.to_batches()   # a pyarrow.dataset.Dataset


def _class_labels(data) -> dict:
    """{column: ClassLabel} of a Hugging Face ``Dataset``'s class-label columns."""
    return {name: feature for name, feature in data.features.items() if type(feature).__name__ == "ClassLabel"}


def _names_of_class_labels(batch: pa.RecordBatch, class_labels: dict) -> pa.RecordBatch:
    """``batch`` with each ClassLabel column's integers as their names (an integer outside the names, such as
    SNLI's -1 for "no gold label", as its digits: the label set the names declare rejects it)."""
    for column, feature in class_labels.items():
        i = batch.schema.get_field_index(column)
        codes = batch.column(i)
        inside = pc.and_(pc.greater_equal(codes, 0), pc.less(codes, len(feature.names)))
        named = pc.take(pa.array(feature.names, pa.string()), pc.if_else(inside, codes, 0))
        batch = batch.set_column(i, column, pc.if_else(inside, named, codes.cast(pa.string())))
    return batch


def _as_parquet(data, kind: str, path: str, shown: str) -> tuple[str, dict]:
    """(the Parquet file ``data`` is written to, named ``shown`` in reports; its HF ClassLabel columns)."""
    schema, batches = _batches(data, kind)
    if not write_parquet_file(path, schema, batches, shown):
        raise EmptyInput(f"the {type(data).__name__} has no rows")
    return path, (_class_labels(data) if kind == "hf" else {})


def check_preset(keys: dict, source: Source) -> None:
    """In-memory data needs a preset or map unless it is in refinery's columns: say which fits."""
    if keys.get("preset") or keys.get("map") or source.kind == "path" or source.canonical:
        return
    columns = list(source.columns)
    fitting = [n for n, p in PRESETS.items() if all(c in columns for c in p.required.values())]
    hint = f"; try preset={fitting[0]!r}" if fitting else ""
    raise Refusal(f"name the data's columns: preset= (one of {', '.join(PRESETS)}) or map={{'text_a': COL, "
                  f"'text_b': COL, 'label': COL}}; it has {', '.join(columns)}{hint}", code="missing-columns")

