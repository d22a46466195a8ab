"""The Python API: ``import refinery as rf``, one function per stage over the data a notebook holds.

``rf.audit(data, k=20)``, ``rf.zfilter(data, k=20)``, … take ``data`` as any of: a path, URL, glob or list of
them; a pandas or polars DataFrame; a pyarrow Table, RecordBatch, RecordBatchReader or Dataset; a Hugging Face
``Dataset``; a Ray Dataset; or named splits: a ``DatasetDict`` or ``{split: any of these}``. The keyword
arguments are the stage config's keys, named as in a pipeline file (a nested config also by its options'
flat names, as on the CLI: ``band_min=``), with the input's (``preset=``, ``map=``, ``labels=``, …): one
``from_dict`` builds and validates them for the CLI, the pipeline file and this API alike. The stage runs
through the same runner as its verb; in-memory data is written as Parquet first, into the run's folder.

Each function returns a ``Result``: the accounting, the report as data, the refined corpus in the caller's
kind (``result.data``; ``to_pandas()``, ``to_arrow()``, ``to_polars()``, ``to_hf()``), the rows set aside
with their reasons, and the report's HTML inline in Jupyter.
"""
from __future__ import annotations

import contextlib
import dataclasses
import difflib
import html
import inspect
import json
import os
import re
import shutil
import tempfile
import typing
import warnings
import weakref
from dataclasses import dataclass, field

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from refinery.io.corpus import MANIFEST, Corpus, convert, is_corpus
from refinery.io.hf import as_dataset, datasets_package
from refinery.io.schema import PRESETS, Mapping, parse_mapping
from refinery.io.location import get_fs, join
from refinery.pipeline.config import (InputSpec, PipelineSpec, StageSpec, anchor_path, from_dict, parse_pipeline,
                                      to_dict)
from refinery.pipeline.fields import Leaf, leaves
from refinery.pipeline.runner import PipelineRun, StageRun, ingest, run_pipeline, run_stage, stage_input
from refinery.pipeline.stage import Output, StageResult, conservation, stage_class, stage_names
from refinery.report.page import scoped_style

RUN_KEYS = ("out", "engine", "mode", "split")
CANONICAL = ("text_a", "label")   # the columns that make a table readable without a preset or map


# ---------------------------------------------------------------- what the caller gives

@dataclass
class Source:
    """The caller's data, as the runner reads it: ``paths`` or named ``splits`` (in-memory data written as
    Parquet under the run's folder), and what it takes to hand the refined rows back as they came: the kind,
    the caller's object of each split (``parts``), whether the splits came from a ``split`` column, and the
    columns and types the caller's data had (``schema``, HF ``features``)."""

    kind: str            # path | pandas | polars | arrow | hf | ray (of every split)
    given: object        # the caller's object
    paths: list = field(default_factory=list)
    splits: dict = field(default_factory=dict)
    columns: tuple = ()  # in-memory data's columns
    parts: dict = field(default_factory=dict)   # in-memory splits: {split: (kind, the caller's object)}
    split_column: bool = False                  # the splits are the values of the data's ``split`` column
    schema: pa.Schema | None = None             # in-memory data's columns and types, as written
    features: dict = field(default_factory=dict)   # HF ClassLabel columns: {column: ClassLabel}

    @property
    def canonical(self) -> bool:
        """In-memory data already in refinery's columns (text_a, label, …): read without a preset or map."""
        return all(c in self.columns for c in CANONICAL)

    def input_spec(self, keys: dict, splits: list | None = None) -> InputSpec:
        """The runner's input: the caller's keywords over these paths, or over the named ``splits`` of them."""
        keys = dict(keys)
        if self.canonical and not keys.get("preset") and not keys.get("map"):
            keys["map"] = {c: c for c in ("id", "text_a", "text_b", "label", "node_a", "node_b") if c in self.columns}
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


def _kind(data) -> str:
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
    kind = _kind(data)
    if kind == "path":
        return Source(kind, data, paths=[os.fspath(p) for p in ([data] if isinstance(data, (str, os.PathLike))
                                                                else data)])
    name = f"{type(data).__module__.split('.')[0]}.{type(data).__name__}"   # "pandas.DataFrame": what reports
    if isinstance(data, pa.RecordBatchReader):                                # name the corpus by
        data = data.read_all()   # a stream is read once: its split column is looked at, its rows written
    by_column = _split_column_parts(data, kind) if kind not in ("hf_dict", "splits") else None
    if by_column is None and kind not in ("hf_dict", "splits"):
        path, features = _write_parquet(data, kind, join(folder, "input", f"{name}.parquet"))
        return Source(kind, data, paths=[path], columns=tuple(pq.read_schema(path).names),
                      schema=pq.read_schema(path), features=features)
    parts = {str(s): (kind, part) for s, part in by_column.items()} if by_column is not None \
        else {str(s): (_kind(part), part) for s, part in dict(data).items()}
    splits, kinds, columns, schema, features = {}, set(), {}, None, {}
    for split, (part_kind, part) in parts.items():
        safe = re.sub(r"[^\w.-]", "_", split)
        if part_kind == "path":
            splits[split] = as_source(part, folder).paths
        else:   # "datasets.DatasetDict-train.parquet": a report names the split it read
            path, part_features = _write_parquet(part, part_kind, join(folder, "input", safe, f"{name}-{safe}.parquet"))
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
        raise ValueError("the data's split column is empty in some rows: give every row a split, or rename the "
                         "column if it is no split")
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
            raise ValueError(f"the DataFrame has more than one column named {', '.join(map(repr, repeated))}; "
                             "rename them so each column has a name of its own")
        index_named = any(n is not None for n in data.index.names)
        try:
            table = pa.Table.from_pandas(data.reset_index() if index_named else data, preserve_index=False)
        except (pa.ArrowInvalid, pa.ArrowTypeError) as e:
            column = re.search(r"column (.+?) with type", str(e))
            which = f"column {column.group(1)!r}" if column else "a column"
            raise ValueError(f"the DataFrame's {which} holds values of more than one type ({e}); make it one "
                             f"type, e.g. df[{column.group(1) if column else 'col'!r}].astype(str)") from None
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
            raise ValueError("the Ray Dataset has no rows")
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


def _write_parquet(data, kind: str, path: str) -> tuple[str, dict]:
    """(the Parquet file ``data`` is written to, its HF ClassLabel columns)."""
    schema, batches = _batches(data, kind)
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with pq.ParquetWriter(path, schema) as writer:
        for batch in batches:
            writer.write_batch(batch if batch.schema == schema else batch.cast(schema))
    if not pq.read_metadata(path).num_rows:
        raise ValueError(f"the {type(data).__name__} has no rows")
    return path, (_class_labels(data) if kind == "hf" else {})


# ---------------------------------------------------------------- handing rows back as they came

def in_callers_columns(table: pa.Table, source: Source, mapping: Mapping | None) -> pa.Table:
    """Canonical rows in the caller's columns and types: each mapped column under the caller's name and of its
    type (int labels as ints), refinery's own id, sentence ids and empty text_b left out, the caller's column order first,
    then the columns the stage added."""
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
        original = renames.get(name, name)
        column = table[name]
        if original in schema.names and column.type != schema.field(original).type:
            column = _as_type(column, schema.field(original).type, name == "label" and mapping,
                              source.paths + [p for ps in source.splits.values() for p in ps], original)
        columns[original] = column
    order = [c for c in schema.names if c in columns] + [c for c in columns if c not in schema.names]
    return pa.table({c: columns[c] for c in order})


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


def _with_split(table: pa.Table, split: str) -> pa.Table:
    column = pa.array([split] * table.num_rows, pa.string())
    if "split" in table.column_names:
        return table.set_column(table.schema.get_field_index("split"), "split", column)
    return table.append_column("split", column)


def _as_kind(table: pa.Table, kind: str, features: dict):
    """The rows of ``table`` in the caller's kind."""
    if kind == "pandas":
        return table.to_pandas()
    if kind == "polars":
        import polars
        return polars.from_arrow(table)
    if kind == "hf":
        return _to_hf(table, features, by_split=False)
    if kind == "ray":
        import ray.data
        return ray.data.from_arrow(table)
    return table


def _to_hf(table: pa.Table, features: dict | None = None, by_split: bool = True):
    """A ``datasets.Dataset``; with ``by_split``, a ``DatasetDict`` when every row carries a named split. The
    class-label columns of the caller's data (``features``) are ClassLabel again."""
    datasets = datasets_package("to_hf()")
    if by_split and isinstance(dataset := as_dataset(table, needed_by="to_hf()"), dict):
        return datasets.DatasetDict({s: _to_hf(part.data.table, features, False) for s, part in dataset.items()})
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


# ---------------------------------------------------------------- results

@dataclass(repr=False)
class Result:
    """A finished stage: where each row went, its report, and its refined corpus in the caller's kind."""

    stage: str
    out: str                       # the stage's folder
    rows_in: int
    parts: dict                    # {"kept": n, "filtered out": n, "input rejects": n}: sums to rows_in
    headline: str
    corpus: str | None             # the refined corpus's folder; None when the rows pass on unchanged
    source: Source
    input: InputSpec
    warnings: tuple = ()
    report_file: str = "report/report.html"
    _report: dict | None = None
    _stamp: bytes | None = None
    splits: tuple = ()       # the named splits the stage read
    untouched: tuple = ()    # the named splits it passed through untouched

    @classmethod
    def of(cls, name: str, folder: str, result: StageResult, source: Source, spec: InputSpec,
           splits: tuple = (), untouched: tuple = ()) -> "Result":
        output = stage_class(name).output
        corpus = None if output is Output.INPUT else output.next_input(folder, "")
        return cls(name, folder, result.rows_in, dict(result.parts), result.headline, corpus, source, spec,
                   tuple(result.warnings), result.report_file, result.report or None, splits=tuple(splits),
                   untouched=tuple(untouched))

    def stamp(self) -> bytes | None:
        """The run's mark in its folder (``_SUCCESS``; a corpus's manifest), to tell this run from a later one."""
        for name in ("_SUCCESS", MANIFEST):
            if self._exists(name):
                fs, path = get_fs(join(self.out, name), self._storage)
                return fs.cat_file(path)
        return None

    def _current(self) -> "Result":
        """This result, if its folder still holds its run (a later call with the same ``out`` replaces it)."""
        if self._stamp is not None and self.stamp() != self._stamp:
            raise RuntimeError(f"{self.out} now holds a later run than this result's; use that run's result, "
                               "or give each run an out= of its own")
        return self

    @property
    def accounting(self) -> str:
        """``rows in N = a kept + b filtered out + … (ok)``."""
        return conservation(self.rows_in, **self.parts)

    @property
    def report(self) -> dict:
        """The stage's report as data (its ``report.json``)."""
        if self._report is None:
            names = ("report/report.json", "report/summary.json", "report.json")
            self._current()._report = next((self._json(f) for f in names if self._exists(f)), {})
        return self._report

    def to_arrow(self, canonical: bool = False) -> pa.Table:
        """The refined corpus (for a stage that passes its rows on unchanged: the input) as a pyarrow Table.
        For in-memory data, in the caller's columns and types, the splits passed through untouched included
        (named splits in a ``split`` column). ``canonical=True``: as refinery holds it, in refinery's columns
        (``id``, ``text_a``, ``text_b``, ``label`` as text, …), the splits the stage read only; data given as
        paths always comes back so."""
        if self._current().corpus is not None:
            table = Corpus.open(self.corpus, self._storage).read()
        else:
            table = stage_input(self.input, self.input.read_options()).load()[0]
        if canonical or self.source.kind == "path":
            return table
        pieces = [in_callers_columns(table, self.source, self.input.mapping())]
        for split in self.untouched:
            pieces.append(self._untouched(split))
        return pa.concat_tables(pieces, promote_options="permissive") if len(pieces) > 1 else pieces[0]

    def _untouched(self, split: str) -> pa.Table:
        """A split the stage passed through, as the caller gave it (as refinery wrote it to Parquet), in a
        ``split`` column."""
        kind, _ = self.source.parts[split]
        if kind == "path":
            spec = dataclasses.replace(self.input, splits={split: self.source.splits[split]}, paths=[])
            return in_callers_columns(stage_input(spec, spec.read_options()).load()[0], self.source, spec.mapping())
        return _with_split(pa.concat_tables([pq.read_table(p) for p in self.source.splits[split]]), split)

    def to_pandas(self, canonical: bool = False):
        return self.to_arrow(canonical).to_pandas()

    def to_polars(self, canonical: bool = False):
        import polars
        return polars.from_arrow(self.to_arrow(canonical))

    def to_hf(self, canonical: bool = False):
        """A ``datasets.Dataset`` (a ``DatasetDict`` when every row carries a named split)."""
        return _to_hf(self.to_arrow(canonical), None if canonical else self.source.features)

    @property
    def data(self):
        """The refined corpus in the kind of the data given, with the caller's columns and types: a DataFrame
        for a DataFrame, a ``DatasetDict`` for a ``DatasetDict`` (the splits the stage did not read as they
        were given), …; for paths, the corpus folder's path (for a stage that passes its rows on: the input)."""
        if self.source.kind == "path":
            return self.corpus if self.corpus is not None else self.source.given
        if self.corpus is None:
            return self.source.given
        if not self.source.parts or self.source.split_column:
            return _as_kind(self.to_arrow(), self.source.kind, self.source.features)
        read = self.to_arrow(canonical=True)
        read = in_callers_columns(read, self.source, self.input.mapping())
        parts = {}
        for split, (kind, part) in self.source.parts.items():
            if split in self.untouched:
                parts[split] = part
                continue
            rows = read.filter(pc.equal(read["split"], split)) if "split" in read.column_names else read
            rows = rows.drop_columns([c for c in ("split",) if c in rows.column_names])
            parts[split] = _as_kind(rows, "arrow" if kind == "path" else kind, self.source.features)
        return datasets_package().DatasetDict(parts) if _kind(self.source.given) == "hf_dict" else parts

    @property
    def rejected(self):
        """The rows the stage set aside, each with its ``reason``, as a DataFrame (none: no rows), in the
        caller's columns as ``data`` is."""
        folder = join(self._current().out, "rejected")
        table = Corpus.open(folder, self._storage).read() if is_corpus(folder, self._storage) else pa.table({})
        if table.num_rows and self.source.kind != "path":
            table = in_callers_columns(table, self.source, self.input.mapping())
        return table.to_pandas()

    @property
    def input_rejects(self):
        """The input rows refused on reading (file, line, column, reason, raw text), as a DataFrame."""
        if self._current().corpus is not None:
            return Corpus.open(self.corpus, self._storage).read_rejects().to_pandas()
        return stage_input(self.input, self.input.read_options()).load()[1].to_pandas()

    @property
    def report_path(self) -> str | None:
        return join(self.out, self.report_file) if self.report_file else None

    @property
    def splits_line(self) -> str:
        """Which named splits the stage read and which it passed through ("" for data without splits)."""
        if not self.untouched:
            return f"split {', '.join(self.splits)}" if self.splits else ""
        return f"split {', '.join(self.splits)}; {', '.join(self.untouched)} untouched"

    def __repr__(self) -> str:
        splits = f" [{self.splits_line}]" if self.splits_line else ""
        return f"<refinery {self.stage}{splits}: {self.accounting}; {self.out}>"

    def _repr_html_(self) -> str:
        """The report's own HTML (the body of ``report.html``) under a line with the accounting."""
        splits = f" [{html.escape(self.splits_line)}]" if self.splits_line else ""
        head = (f"<p><b>refinery {html.escape(self.stage)}</b>{splits}: {html.escape(self.accounting)}<br>"
                f"<code>{html.escape(self.out)}</code></p>")
        body = _report_body(self.report_path, self._storage) if self.report_path and self._exists(self.report_file) \
            else ""
        return f'<div class="refinery-report">{head}{body}</div>'

    @property
    def _storage(self) -> dict:
        return dict(self.input.storage_options)

    def _exists(self, name: str) -> bool:
        fs, path = get_fs(join(self.out, name), self._storage)
        return fs.exists(path)

    def _json(self, name: str) -> dict:
        fs, path = get_fs(join(self.out, name), self._storage)
        return json.loads(fs.cat_file(path))


class AuditResult(Result):
    """An audit: ``stats`` (every feature's n, count, p̂ and z* per label) and ``top(k)``."""

    @property
    def stats(self):
        """Features × labels with n (rows with the feature), count, p̂(label|feature) and z*, as a DataFrame."""
        fs, path = get_fs(join(self._current().out, "report", "stats.parquet"), self._storage)
        with fs.open(path, "rb") as fh:
            return pq.read_table(fh).to_pandas()

    def top(self, k: int = 10, label: str | None = None):
        """The ``k`` features of highest z* per label (or of ``label``), ranked, as a DataFrame."""
        stats = self.stats
        if label is not None:
            if label not in set(stats["label"]):
                raise ValueError(f"no label {label!r}; labels: {', '.join(sorted(set(stats['label'])))}")
            stats = stats[stats["label"] == label]
        top = (stats[stats["feature"] != "null"].sort_values(["label", "z"], ascending=[True, False], kind="stable")
               .groupby("label", sort=True).head(k).reset_index(drop=True))
        top.insert(0, "rank", top.groupby("label").cumcount() + 1)
        return top[["label", "rank", "feature", "z", "n", "count", "p_hat"]]

    @property
    def threshold(self) -> float:
        """The Bonferroni-corrected z* a feature must exceed to count as a bias."""
        return self.report["threshold"]


class CompareResult(Result):
    """A comparison: ``table``, the accuracy of each training corpus on each evaluation set."""

    @property
    def table(self):
        """One row per (evaluation set, training corpus): mean accuracy over seeds and its std, the gain on the
        baseline with its paired-bootstrap 95% interval, and the evaluation set's majority-class accuracy."""
        import pandas as pd
        rows = []
        for ev, per in self.report["accuracy"].items():
            majority = self.report["eval"][ev]["majority"]["accuracy"]
            for name, cell in per.items():
                gain = cell.get("gain") or {}
                low, high = map(_number, gain.get("ci95") or (None, None))
                rows.append({"eval": ev, "train": name, "accuracy": cell["mean"], "std": _number(cell["std"]),
                             "gain": _number(gain.get("delta")), "gain_ci_low": low, "gain_ci_high": high,
                             "majority": majority})
        return pd.DataFrame(rows)


def _number(value) -> float:
    """A figure of a table: NaN where there is none (one seed has no std; the baseline no gain)."""
    return float("nan") if value is None else value


RESULTS = {"audit": AuditResult, "compare": CompareResult}


# ---------------------------------------------------------------- keyword arguments

def _keywords(cls: type) -> dict[str, Leaf]:
    """A stage config's keyword arguments: top-level fields by their pipeline keys, nested ones by the flat
    names of their CLI options."""
    out: dict[str, Leaf] = {}
    for leaf in leaves(cls):
        name = leaf.path[0] if len(leaf.path) == 1 else leaf.keyword
        if name in out:
            raise TypeError(f"{cls.__name__}: keyword {name} names both {'.'.join(out[name].path)} and "
                            f"{'.'.join(leaf.path)}")
        out[name] = leaf
    return out


INPUT_KEYS = _keywords(InputSpec)   # preset=, map=, labels=, on_bad_row=, …


def _nested_fields(cls: type) -> set[str]:
    return {name for name, hint in typing.get_type_hints(cls).items() if dataclasses.is_dataclass(hint)}


def config_dict(cls: type, kwargs: dict, where: str) -> dict:
    """The nested dict a pipeline file holds for config ``cls``, from keyword arguments."""
    keywords, nested = _keywords(cls), _nested_fields(cls)
    fields = {f.name for f in dataclasses.fields(cls) if f.init}
    out: dict = {}
    for key, value in kwargs.items():
        if key in nested and isinstance(value, dict):
            out.setdefault(key, {}).update(value)
        elif key in keywords:
            node = out
            for part in keywords[key].path[:-1]:
                node = node.setdefault(part, {})
            node[keywords[key].path[-1]] = value
        elif key in fields:
            out[key] = value
        else:
            known = sorted(set(keywords) | fields | set(INPUT_KEYS) | set(RUN_KEYS))
            close = difflib.get_close_matches(key, known, n=1)
            raise TypeError(f"{where}() got an unknown keyword {key!r}"
                            + (f"; did you mean {close[0]!r}?" if close else "") + f" (keywords: {', '.join(known)})")
    return out


def _split_keywords(kwargs: dict) -> tuple[dict, dict]:
    """(the input's keywords, the rest)."""
    given = {k: v for k, v in kwargs.items() if k in INPUT_KEYS}
    for key, value in list(given.items()):
        parse = INPUT_KEYS[key].field.metadata.get("parse")
        if parse and isinstance(value, str):
            given[key] = parse(value)
    return given, {k: v for k, v in kwargs.items() if k not in INPUT_KEYS}


def _check_preset(keys: dict, source: Source) -> None:
    """In-memory data needs a preset or map unless it is in refinery's columns: say which fits."""
    if keys.get("preset") or keys.get("map") or source.kind == "path" or source.canonical:
        return
    columns = list(source.columns)
    fitting = [n for n, p in PRESETS.items() if all(c in columns for c in p.required.values())]
    hint = f"; try preset={fitting[0]!r}" if fitting else ""
    raise ValueError(f"name the data's columns: preset= (one of {', '.join(PRESETS)}) or map={{'text_a': COL, "
                     f"'text_b': COL, 'label': COL}}; it has {', '.join(columns)}{hint}")


class Run:
    """Where a call writes: ``out`` when given (in-memory input's Parquet in a temporary folder beside it),
    else a new temporary folder. The temporary folder is removed when the call fails, when no result needs it
    any more (the results hold their ``Run``), and at the latest when the process exits."""

    def __init__(self, out: str | None, name: str):
        if out is None:
            self.folder = tempfile.mkdtemp(prefix=f"refinery-{name}-")
            self.out = join(self.folder, name)
        else:
            self.folder = tempfile.mkdtemp(prefix=f"refinery-{name}-input-")
            self.out = os.fspath(out)
        self.remove = weakref.finalize(self, shutil.rmtree, self.folder, True)

    def keep_until_exit(self) -> None:
        """Keep the folder until the process exits, whatever holds a result: its path was handed out (a
        refined corpus of files is ``result.data``, a path)."""
        _UNTIL_EXIT.append(self)

    @contextlib.contextmanager
    def removed_on_failure(self):
        """The folder removed at once when the work inside fails."""
        try:
            yield self
        except BaseException:
            self.remove()
            raise


_UNTIL_EXIT: list[Run] = []   # runs whose folders are removed only when the process exits


_SPLITS_HINT = re.compile(r"--input train=PATH --input test=PATH")
_OPTION = re.compile(r"--([a-z][a-z0-9-]*)(?: ([\w.:/-]+))?")


def in_python_terms(message: str, source: Source | None = None) -> str:
    """A message of the CLI's in the API's words: ``--preset snli`` → ``preset='snli'``, named splits as a
    dict, and the Parquet refinery wrote in-memory data to as "the data"."""
    for path in (source.paths + [p for ps in source.splits.values() for p in ps]) if source else ():
        if source.kind != "path":
            message = message.replace(path, f"the data ({path})")
    message = _SPLITS_HINT.sub("{'train': data, 'test': data} (a DatasetDict, or a split column)", message)

    def keyword(m):
        name, value = m.group(1).replace("-", "_"), m.group(2)
        if value is None:
            return f"{name}=True" if name in _FLAGS else f"{name}=…"
        return f"{name}={value}" if re.fullmatch(r"[\d.]+", value) else f"{name}={value!r}"
    return _OPTION.sub(keyword, message)


_FLAGS = ("allow_overlap", "csv_multiline", "score_only", "transductive", "multigraph")


@contextlib.contextmanager
def python_terms(source: Source | None):
    """Errors raised inside worded for the caller (``in_python_terms``)."""
    try:
        yield
    except (ValueError, OSError) as e:
        e.args = (in_python_terms(str(e), source), *e.args[1:])
        raise


class SplitsNotice(UserWarning):
    """A stage read some of the data's named splits and passed the others through untouched."""


def chosen_splits(stage: str, names: list[str], split) -> tuple[list[str], list[str]]:
    """(the named splits ``stage`` reads, those it passes through untouched). A stage that needs splits
    (leakage) reads them all; any other reads ``train``, or the data's only split, or those ``split=`` names
    (a name or a list of names, pooled)."""
    if split is None:
        if len(names) < 2 or "split" in stage_class(stage).needs:
            return list(names), []
        if "train" not in names:
            raise ValueError(f"the data has splits {', '.join(names)} and none named 'train': name the one {stage} "
                             f"reads, e.g. split={names[0]!r} (a list of splits pools them)")
        chosen = ["train"]
    else:
        chosen = [split] if isinstance(split, str) else list(split)
        if not names:
            raise ValueError(f"split={split!r}: the data has no named splits (give a DatasetDict, {{split: data}} "
                             "or a split column)")
        unknown = [s for s in chosen if s not in names]
        if unknown or not chosen:
            raise ValueError(f"no split {unknown[0] if unknown else ''!r}; the data's splits: {', '.join(names)}")
    return chosen, [s for s in names if s not in chosen]


def _run_one(name: str, data, out, engine: str, mode: str, split, kwargs: dict) -> Result:
    cls = stage_class(name)
    input_keys, rest = _split_keywords(kwargs)
    config = from_dict(cls.Config, config_dict(cls.Config, rest, name), name)
    if mode not in ("overwrite", "skip", "error"):
        raise ValueError(f"mode must be one of overwrite, skip, error, got {mode!r}")
    run = Run(out, name)
    with run.removed_on_failure():
        source = as_source(data, run.folder)
        _check_preset(input_keys, source)
        with python_terms(source):
            read, untouched = chosen_splits(name, source.split_names(source.input_spec(input_keys)), split)
            spec_in = source.input_spec(input_keys, read)
            spec = PipelineSpec(spec_in, [StageSpec(name, config)], run.out, engine)
            step = run_stage(spec, mode, echo=lambda line: None)
    if untouched:
        where = "result.data holds them as given" if source.kind != "path" else "they stay in your files only"
        warnings.warn(f"{name} read split {', '.join(map(repr, read))} and passed {', '.join(map(repr, untouched))} "
                      f"through untouched ({where}); split= names the splits to read", SplitsNotice, stacklevel=3)
    return _result(name, step, source, spec_in, run, splits=(read, untouched))


def _result(name: str, step: StageRun, source: Source, spec_in: InputSpec, run: Run,
            folder: str | None = None, splits: tuple = ((), ())) -> Result:
    folder = folder or run.out
    result = RESULTS.get(name, Result).of(name, folder, step.result, source, spec_in, *splits)
    result._run = run   # keeps the run's temporary folder as long as the result lives
    if source.kind == "path" and result.corpus is not None and folder.startswith(run.folder):
        run.keep_until_exit()   # result.data is a path into it
    result._stamp = result.stamp()
    for warning in result.warnings:
        warnings.warn(f"{name}: {in_python_terms(warning, source)}", stacklevel=3)
    return result


def _stage_function(name: str):
    cls = stage_class(name)
    keywords = _keywords(cls.Config)

    def call(data, /, *, out=None, engine="local", mode="overwrite", split=None, **kwargs):
        return _run_one(name, data, out, engine, mode, split, kwargs)

    params = [inspect.Parameter("data", inspect.Parameter.POSITIONAL_ONLY),
              inspect.Parameter("out", inspect.Parameter.KEYWORD_ONLY, default=None),
              inspect.Parameter("engine", inspect.Parameter.KEYWORD_ONLY, default="local"),
              inspect.Parameter("mode", inspect.Parameter.KEYWORD_ONLY, default="overwrite"),
              inspect.Parameter("split", inspect.Parameter.KEYWORD_ONLY, default=None)]
    params += [inspect.Parameter(k, inspect.Parameter.KEYWORD_ONLY, default=leaf.default)
               for k, leaf in {**keywords, **INPUT_KEYS}.items()]
    call.__signature__ = inspect.Signature(params)
    call.__name__ = call.__qualname__ = name
    doc = inspect.getdoc(cls) or name
    lines = [f"    {k}: {leaf.field.metadata.get('help', '')}".rstrip() for k, leaf in keywords.items()]
    call.__doc__ = (f"{doc}\n\n``data``: a path, DataFrame, Arrow table, HF Dataset/DatasetDict, Ray Dataset or "
                    "{split: data}; ``out``: the stage's folder (default: a temporary folder, removed with the result "
                    "or at exit); ``engine``: local | ray; ``mode``: overwrite | skip | error; ``split``: the named "
                    "split(s) to read (default: train, or every split for a stage that needs them); the others pass "
                    "through untouched.\n\nThe stage's keywords (its pipeline keys):\n"
                    + "\n".join(lines) + "\n\nThe input's keywords: " + ", ".join(INPUT_KEYS) + ".")
    return call


# ---------------------------------------------------------------- functions that are not one stage

def read(data, /, *, out=None, **kwargs) -> Result:
    """``data`` read into a refinery corpus (canonical columns; bad rows in its rejects with their reasons)."""
    input_keys, rest = _split_keywords(kwargs)
    if rest:
        config_dict(InputSpec, rest, "read")   # names the unknown keyword
    run = Run(out, "corpus")
    with run.removed_on_failure():
        source = as_source(data, run.folder)
        _check_preset(input_keys, source)
        spec_in = source.input_spec(input_keys)
        opts = spec_in.read_options()
        with python_terms(source):
            manifest = convert(list(stage_input(spec_in, opts).paths), run.out, spec_in.mapping(), opts,
                               config={"input": to_dict(spec_in)}) if not spec_in.splits \
                else _read_splits(spec_in, run.out)
    rows, rejected = manifest["rows"], manifest["rejected"]
    canonical = dataclasses.replace(source, schema=None, features={}, parts={})   # read's corpus: refinery's columns
    result = Result("read", run.out, rows + rejected, {"rows": rows, "rejected": rejected}, f"{rows:,} rows",
                    run.out, canonical, spec_in, report_file="")
    result._run, result._stamp = run, result.stamp()
    if source.kind == "path" and out is None:
        run.keep_until_exit()
    return result


def _read_splits(spec_in: InputSpec, out: str) -> dict:
    result = ingest(spec_in, out, spec_in.read_options())
    return {"rows": result.parts["rows"], "rejected": result.parts["rejected"]}


def run(spec, /, data=None, *, out=None, engine=None, **kwargs) -> "PipelineResult":
    """Run a pipeline (the CLI's ``refinery run``): a YAML file's path, YAML text, or the dict a pipeline file
    holds. With ``data`` (and the input's keywords), the pipeline reads it instead of its file's ``input``;
    ``out`` replaces its ``out`` (none at all: a new temporary run folder)."""
    import yaml
    if isinstance(spec, (str, os.PathLike)) and os.path.exists(spec):
        with open(spec) as fh:
            raw, base = yaml.safe_load(fh), os.path.dirname(os.path.abspath(spec))
    else:
        raw, base = (yaml.safe_load(spec) if isinstance(spec, str) else dict(spec)), "."
    if isinstance(raw, str) and re.search(r"\.(ya?ml|json)$", raw):
        raise FileNotFoundError(f"no pipeline file {raw}")
    if not isinstance(raw, dict):
        raise ValueError(f"a pipeline is a file, YAML text or a dict with input and stages, not {raw!r:.80}")
    target = os.path.abspath(out) if out is not None else (anchor_path(raw["out"], base) if raw.get("out") else None)
    if data is None and kwargs:
        raise TypeError(f"run(): the input's keywords ({', '.join(kwargs)}) go with data=")
    run = Run(target, "pipeline")
    raw = {**raw, "out": run.out}
    source = None
    with run.removed_on_failure():
        if data is not None:
            source = as_source(data, run.folder)
            input_keys, rest = _split_keywords(kwargs)
            if rest:
                config_dict(InputSpec, rest, "run")   # names the unknown keyword
            _check_preset(input_keys, source)
            raw["input"] = to_dict(source.input_spec(input_keys))
        parsed = parse_pipeline(raw, base)
        source = source or Source("path", parsed.input.paths or parsed.input.splits, paths=parsed.input.paths,
                                  splits=parsed.input.splits)
        with python_terms(source):
            done = run_pipeline(parsed, engine=engine, echo=lambda line: None)
    return PipelineResult(done, source, parsed, run)


class PipelineResult:
    """A finished pipeline: each stage's ``Result`` (``result["zfilter"]`` or ``result[2]``) and the final corpus."""

    def __init__(self, done: PipelineRun, source: Source, spec: PipelineSpec, run: Run):
        self.out, self._run, self._source = done.out, run, source
        self._storage = dict(spec.input.storage_options)
        self.stages: dict[str, Result] = {}
        for step, stage_spec in zip(done.stages[1:], spec.stages):
            self.stages[step.folder] = _result(stage_spec.name, step, source, spec.input, run,
                                               folder=join(done.out, step.folder))
        self.final = self.stages[done.stages[-1].folder] if len(done.stages) > 1 else None
        self.lines = [f"{s.folder}: {s.status}, {s.result.conservation()}" for s in done.stages]

    def __getitem__(self, key):
        if isinstance(key, int):
            return list(self.stages.values())[key]
        matches = [r for folder, r in self.stages.items() if key in (folder, r.stage)]
        if not matches:
            raise KeyError(f"no stage {key!r}; stages: {', '.join(self.stages)}")
        return matches[-1]

    @property
    def data(self):
        """The pipeline's final corpus in the caller's kind (see ``Result.data``)."""
        corpus = next((r for r in reversed(self.stages.values()) if r.corpus is not None), None)
        return corpus.data if corpus else self._source.given

    def __repr__(self) -> str:
        return f"<refinery pipeline: {len(self.stages)} stage(s); {self.out}>"

    @property
    def receipt(self) -> dict:
        """The pipeline report as data (``pipeline/receipt.json``): each step's rows, labels, max z* and the
        input's top features' z*."""
        fs, path = get_fs(join(self.out, "pipeline", "receipt.json"), self._storage)
        return json.loads(fs.cat_file(path))

    def _repr_html_(self) -> str:
        rows = "".join(f"<li>{html.escape(line)}</li>" for line in self.lines)
        body = _report_body(join(self.out, "pipeline", "report.html"), self._storage)
        return (f'<div class="refinery-report"><b>refinery pipeline</b> <code>{html.escape(self.out)}</code>'
                f"<ul>{rows}</ul>{body}</div>")


def _report_body(report: str, storage_options: dict) -> str:
    """A report page's body without its title: what a notebook shows under a result's own line."""
    fs, path = get_fs(report, storage_options)
    match = re.search(r"<body>(.*)</body>", fs.cat_file(path).decode(), re.S)
    body = re.sub(r"<h1>.*?</h1>", "", match.group(1) if match else "", count=1, flags=re.S)
    return f"<style>{scoped_style('.refinery-report')}</style>{body}"


def compare(train: dict, eval: dict, /, *, out=None, label_maps=None, **kwargs) -> CompareResult:
    """Does it help? The same model trained on each of ``train`` ({name: data or a Result}; the first is the
    baseline) and scored on each of ``eval`` ({name: data, or (data, preset)}). The keywords are
    ``CompareConfig``'s (backend, inputs, seeds, bootstrap, …) and the input's (the training data's preset)."""
    from refinery.methods import compare as cmp

    if not isinstance(train, dict) or not isinstance(eval, dict):
        raise TypeError("compare(train, eval): give each as {name: data}, e.g. compare({'original': df, "
                        "'filtered': result}, {'hard': ('hard.jsonl', 'snli')})")
    input_keys, rest = _split_keywords(kwargs)
    config = from_dict(cmp.CompareConfig, config_dict(cmp.CompareConfig, rest, "compare"), "compare")
    run = Run(out, "compare")
    with run.removed_on_failure():
        train_paths = {}
        for name, data in train.items():
            if isinstance(data, Result):
                train_paths[name] = [data.corpus or data.out]
                continue
            source = as_source(data, join(run.folder, "train", name))
            _check_preset(input_keys, source)
            train_paths[name] = source.paths or [p for ps in source.splits.values() for p in ps]
        evals = []
        for name, value in eval.items():
            data, preset = value if isinstance(value, tuple) else (value, None)
            source = as_source(data, join(run.folder, "eval", name))
            evals.append(cmp.EvalSet(name, tuple(source.paths or [p for ps in source.splits.values() for p in ps]),
                                     preset.lower() if preset else None, dict((label_maps or {}).get(name, {}))))
        spec_in = from_dict(InputSpec, {**input_keys, "paths": [p for ps in train_paths.values() for p in ps]}, "input")
        with python_terms(None):
            report = cmp.run(train_paths, evals, run.out, spec_in.mapping(), spec_in.read_options(), config)
    first = report["train"][next(iter(report["train"]))]
    step = StageResult(first["rows"] + first["rejected"], {"trained on": first["rows"],
                                                           "input rejects": first["rejected"]}, report,
                       f"{len(train)} corpora on {len(evals)} evaluation set(s)")
    return _result("compare", StageRun("compare", "compare", "ran", 0.0, step),
                   Source("path", train, paths=spec_in.paths), spec_in, run)


__all__ = [*(n for n in stage_names() if n != "compare"), "compare", "read", "run", "Result", "AuditResult",
           "CompareResult", "PipelineResult", "SplitsNotice"]


def __getattr__(name: str):
    """``rf.audit``, ``rf.zfilter``, …: the function of every registered stage, made on first use."""
    if name in stage_names() and name != "compare":
        function = _stage_function(name)
        globals()[name] = function
        return function
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
