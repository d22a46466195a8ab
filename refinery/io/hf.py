"""Hugging Face ``datasets`` interop: the dataset card every corpus carries (YAML front matter as the Hub reads it:
the shards, their features and counts), and ``save_to_disk`` folders written from a table.
``datasets`` is optional: imported only where a folder of its own is written."""
from __future__ import annotations

import json
import os
import posixpath
import re

import pyarrow as pa
import pyarrow.compute as pc
import yaml

from refinery import __version__
from refinery.io.location import on_store
from refinery.io.publishing import AtomicDir
from refinery.io.records import CORPUS_FORMAT, CorpusManifest
from refinery.io.redaction import redact
from refinery.io.scratch import temporary_folder
from refinery.messages import Refusal, Setting

MAX_INPUTS = 10      # the inputs a card names
HF_SPLIT = "train"   # the one split a corpus is to the Hub: refinery keeps its splits in the ``split`` column
# Arrow's names of types whose ``datasets`` dtype is spelled otherwise
_DTYPES = {"double": "float64", "float": "float32", "halffloat": "float16", "date32[day]": "date32",
           "date64[ms]": "date64"}
_COLUMNS = {"id": "the row's id", "text_a": "the first text (premise, claim, question 1)",
            "text_b": "the second text (hypothesis, evidence, question 2; null for single texts)",
            "label": "the class", "weight": "the row's weight (leakage-neutral, or up-sampling's)",
            "split": "the split the row belongs to", "source": "where the row came from",
            "origin_id": "the id of the row it was made from"}
_STORAGE_OPTION = re.compile(r"\s--storage-option(?:=|\s+)\S+")
_SPLIT_NAME = re.compile(r"[^/\\]+")


HF_FORMAT = Setting("format", "hf")   # convert's output format that needs ``datasets``: what a message names by default


def datasets_package(needed_by: str | Setting = HF_FORMAT):
    """The ``datasets`` module, or one line saying how to install it."""
    try:
        import datasets
    except ImportError:
        raise Refusal(needed_by, " needs the datasets package: pip install 'refinery[hf]'",
                      code="missing-package") from None
    return datasets


def as_dataset(table: pa.Table, needed_by: str | Setting = HF_FORMAT):
    """A ``DatasetDict`` of the table's splits when every row has a ``split`` (the column becomes the dict's
    keys, in the order the rows name them), else a ``Dataset``."""
    datasets = datasets_package(needed_by)
    names = pc.unique(table["split"]).to_pylist() if "split" in table.column_names \
        and not table["split"].null_count else []
    if not names:
        return datasets.Dataset(table)
    return datasets.DatasetDict({n: datasets.Dataset(table.filter(pc.equal(table["split"], n)).drop_columns(["split"]))
                                 for n in names})


# ---------------------------------------------------------------- the dataset card of a corpus

def hub_feature(t: pa.DataType) -> dict:
    """The card's YAML for a column of Arrow type ``t``, as ``datasets`` writes it: ``dtype``, ``list`` or
    ``large_list`` (``length`` when fixed), or ``struct``."""
    if pa.types.is_dictionary(t):
        return hub_feature(t.value_type)
    if pa.types.is_struct(t):
        return {"struct": [{"name": f.name, **hub_feature(f.type)} for f in t]}
    if pa.types.is_list(t) or pa.types.is_large_list(t) or pa.types.is_fixed_size_list(t):
        inner = hub_feature(t.value_type)
        key = "large_list" if pa.types.is_large_list(t) else "list"
        length = {"length": t.list_size} if pa.types.is_fixed_size_list(t) else {}
        return {key: inner.get("dtype", inner.get("struct", inner)), **length}
    return {"dtype": _DTYPES.get(str(t), str(t))}


def dataset_card(manifest: CorpusManifest, schema: pa.Schema | None, num_bytes: int, splits: dict[str, int]) -> str:
    """A corpus's card (``.refinery/README.md``): the Hub's front matter (its shards as the one split ``train`` of
    ``num_bytes`` bytes in Arrow, the columns of ``schema`` (the shards', None without rows) as features) and what
    refinery did, from ``manifest``: the command and configuration (never storage options or credentials), the accounting, the
    label distribution, the counts of the ``split`` column (``splits``) and the columns."""
    rows, rejected = manifest.rows, manifest.rejected
    front = {}
    if schema is not None:
        front = {"configs": [{"config_name": "default",
                              "data_files": [{"split": HF_SPLIT, "path": manifest.files}]}],
                 "dataset_info": {"features": [{"name": f.name, **hub_feature(f.type)} for f in schema],
                                  "splits": [{"name": HF_SPLIT, "num_bytes": num_bytes, "num_examples": rows}]}}
    front["tags"] = ["refinery"]
    lines = ["---", yaml.safe_dump(front, sort_keys=False, allow_unicode=True).rstrip(), "---", "",
             "# A refinery corpus", "",
             f"Written by refinery {__version__} ({CORPUS_FORMAT}): {rows:,} rows in "
             f"{len(manifest.files)} Parquet shard(s), and "
             + (f"{rejected:,} rejected, each with its reason, in `.refinery/rejects-*.parquet` (not part of the "
                "dataset)"
                if rejected else "no row rejected") + f": {rows + rejected:,} rows in = {rows:,} + {rejected:,}.", ""]
    if schema is not None:
        lines += ["```python", "from datasets import load_dataset", "",
                  f'ds = load_dataset("path/to/this/folder", split="{HF_SPLIT}")', "```", ""]
    lines += ["## How it was made", "", "```", _STORAGE_OPTION.sub("", redact(manifest.command)), "```",
              ""]
    inputs = list(manifest.inputs)
    if inputs:
        more = f" and {len(inputs) - MAX_INPUTS:,} more" if len(inputs) > MAX_INPUTS else ""
        lines += ["From " + ", ".join(f"`{redact(name)}`" for name in inputs[:MAX_INPUTS]) + more + ".", ""]
    config = redact(_without_storage_options(json.loads(json.dumps(manifest.config, default=str))))
    lines += ["```yaml", yaml.safe_dump(config, sort_keys=False, allow_unicode=True).rstrip(), "```", ""]
    lines += _counts("Labels", "label", manifest.labels, rows)
    if splits:
        lines += _counts("Splits", "split", splits, rows) + [
            f"The splits are the values of the `split` column; the Hub and `load_dataset` see one split, "
            f"`{HF_SPLIT}` (`ds.filter(lambda row: row[\"split\"] == \"test\")` selects one).", ""]
    if schema is not None:
        lines += ["## Columns", "", "| column | type | |", "|---|---|---|"]
        lines += [f"| `{f.name}` | {f.type} | {_COLUMNS.get(f.name, '')} |" for f in schema] + [""]
    return "\n".join(lines)


def _counts(title: str, name: str, counts: dict, rows: int) -> list[str]:
    return [f"## {title}", "", f"| {name} | rows | share |", "|---|---:|---:|",
            *(f"| {_cell(value)} | {n:,} | {n / rows:.1%} |" for value, n in counts.items()), ""]


def _cell(value) -> str:
    """``value`` as a Markdown table cell."""
    return " ".join(str(value).split()).replace("|", "\\|")


def _without_storage_options(value):
    """A configuration without its storage options (endpoints and credentials are nobody's business in a card)."""
    if isinstance(value, dict):
        return {k: _without_storage_options(v) for k, v in value.items() if k != "storage_options"}
    if isinstance(value, list):
        return [_without_storage_options(v) for v in value]
    return value


# ---------------------------------------------------------------- save_to_disk folders

def save_to_disk(table: pa.Table, out: str, storage_options: dict | None = None, rejects: pa.Table | None = None,
                 shard_rows: int | None = None) -> dict[str, int]:
    """Write ``table`` as a ``datasets`` ``save_to_disk`` folder at ``out`` (``datasets.load_from_disk(out)``
    reads it): a ``DatasetDict`` of its splits when every row has a ``split`` (the column becomes the dict's
    keys, in the order the rows name them), else a ``Dataset``; ``rejects`` (the rejects schema) in
    ``out/rejects.parquet``, which ``load_from_disk`` and refinery's readers of the folder leave aside.
    ``shard_rows``: rows per Arrow file (default: ``datasets``' 500 MB). Published as refinery publishes a
    corpus (``AtomicDir``: a folder refinery did not write is refused; locally, a sibling folder renamed into
    place; on an object store the Arrow files get the run's id and the metadata naming them comes last).
    Returns its rows per split ({} for a ``Dataset``)."""
    dataset = as_dataset(table)
    parts = dict(dataset) if isinstance(dataset, dict) else {}   # a DatasetDict is a dict of its splits
    bad = [n for n in parts if not _SPLIT_NAME.fullmatch(n) or n in (".", "..")]
    if bad:
        raise Refusal(f"split {bad[0]!r} cannot name a folder of a Hugging Face DatasetDict", code="bad-input")
    shards = {n: _shards(d.num_rows, shard_rows) for n, d in parts.items()} if parts \
        else _shards(table.num_rows, shard_rows)
    with AtomicDir(out, storage_options) as directory:
        if directory.local:
            dataset.save_to_disk(directory.tmp, num_shards=shards)
            for name in _files(directory.tmp):
                directory.file(name)
        else:
            with temporary_folder("hf-") as staging:
                dataset.save_to_disk(staging, num_shards=shards)
                _upload(staging, directory)
        if rejects is not None:
            directory.write_parquet("rejects.parquet", rejects)
        directory.commit()
    return {n: t.num_rows for n, t in parts.items()}


def _shards(rows: int, shard_rows: int | None) -> int | None:
    """Arrow files for ``rows`` rows, ``shard_rows`` a file (None: as ``datasets`` chooses)."""
    return max(1, -(-rows // shard_rows)) if shard_rows else None


def _files(root: str) -> list[str]:
    """The files under local folder ``root``, relative, with ``/``."""
    return sorted(posixpath.join(os.path.relpath(d, root).replace(os.sep, "/"), f).removeprefix("./")
                  for d, _, files in os.walk(root) for f in files)


def _upload(staging: str, directory: AtomicDir) -> None:
    """A local ``save_to_disk`` folder onto an object store: the Arrow files under versioned names, then each
    ``state.json`` naming them, ``dataset_dict.json`` last."""
    files = _files(staging)
    arrow = {f: directory.versioned(f) for f in files if f.endswith(".arrow")}
    for name, target in arrow.items():
        with on_store(f"{directory.out}/{target}", "writing"):
            directory.fs.put_file(os.path.join(staging, name), directory.file(target))
    for name in sorted((f for f in files if f not in arrow), key=lambda f: f.endswith("dataset_dict.json")):
        with open(os.path.join(staging, name), "rb") as fh:
            data = fh.read()
        if posixpath.basename(name) == "state.json":
            state = json.loads(data)
            folder = posixpath.dirname(name)
            for entry in state["_data_files"]:
                entry["filename"] = posixpath.basename(arrow[posixpath.join(folder, entry["filename"])])
            data = json.dumps(state, indent=2).encode()
        directory.write_bytes(name, data)
