"""Writing canonical corpora: Parquet shards, the rejects, the dataset card and the manifest
(``CorpusWriter``), and the conversion of raw inputs into a corpus or a Hugging Face folder.

Publishing is atomic: everything is written under ``<out>.tmp-<token>`` with the manifest
last, then renamed onto ``<out>``; a folder without a manifest is never a finished corpus.
"""
from __future__ import annotations

import base64
import hashlib
import json
import os
import posixpath
import shutil
import sys
from collections import Counter
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, field, replace
from typing import Iterable, Mapping

import pyarrow as pa
import pyarrow.parquet as pq

from refinery.io.common_schema import common_schema, conform
from refinery.io.corpus import (CARD, FORMAT, REJECTS, AllRejected, concat, input_fingerprints, iter_input_batches,
                                load, reject_reasons, value_counts)
from refinery.io.finished import CORPUS, HF, finished
from refinery.io.records import MANIFEST, META_DIR, CorpusManifest, HfStamp
from refinery.io.hf import dataset_card, datasets_package, save_to_disk
from refinery.io.layout import DEFAULT_SHARD_ROWS, ROW_GROUP_ROWS
from refinery.io.location import get_fs, is_local, join, on_store
from refinery.io.modes import check_mode, keeps_finished
from refinery.io.ownership import stamp_marker
from refinery.io.publishing import AbortsOnError, AtomicDir, versioned_name
from refinery.io.read_options import ReadOptions
from refinery.io.redaction import redact
from refinery.io.scratch import in_memory_names
from refinery.io.schema import Mapping



class CorpusWriter(AbortsOnError):
    """Write canonical shards, rejects and a manifest; publish atomically on ``commit``.

    ``mode``: ``overwrite`` replaces a finished output, ``skip`` leaves it (``skipped`` is
    then True and nothing is written), ``error`` refuses to touch it. ``location``: where the corpus is written
    when not at ``out`` (a part of a run, written where no reader looks until the run's commit). ``inputs``: what
    it was made from, whose fingerprints (``input_prints``, where the caller has them) the manifest keeps.
    """

    def __init__(self, out: str, *, mode: str = "overwrite", shard_rows: int = DEFAULT_SHARD_ROWS,
                 config: dict | None = None, storage_options: dict | None = None, extra: Mapping | None = None,
                 inputs: Iterable[str] | None = None, location: str | None = None, input_prints: dict | None = None):
        check_mode(mode)
        self.out = out.rstrip("/")   # the corpus's URL, as it is published and named
        location = (location or out).rstrip("/")   # where it is written (a run's folder before its commit)
        self.fs, self.path = get_fs(location, storage_options)
        self.mode = mode
        self.storage_options = dict(storage_options or {})
        self.shard_rows = shard_rows
        self.config = config or {}
        self.extra = {} if extra is None else extra   # a mapping read at the commit
        self.inputs = input_prints if input_prints is not None else \
            input_fingerprints(inputs, storage_options) if inputs is not None else None
        self._finished = finished(location, storage_options, CORPUS, HF) if mode != "overwrite" else None
        self.skipped = keeps_finished(out, mode, self._finished, _differs(self.inputs, self.config))
        self._buffer: list[pa.Table] = []
        self._buffered = 0
        self._shard: _ShardWriter | None = None   # the shard whose row groups are being written
        self._rejects: list[pa.Table] = []
        self._rejected_buffered = 0
        self.reasons: Counter = Counter()     # the rejects per reason
        self._files: list = []           # futures of the shards' stats, in order
        self._reject_files: list = []
        self._tasks: list[Future] = []   # work handed to the writer thread, not yet known to be done
        self._labels: dict[str, int] = {}
        self._splits: dict[str, int] = {}   # for the card: the rows of each value of a ``split`` column,
        self._schemas: list[pa.Schema] = []   # the shards' columns (and their names, to conform them at commit)
        self._offered: pa.Schema | None = None   # the columns of the first rows offered, kept or not
        self._names: list[str] = []
        self._nbytes = 0                      # and the rows' size in Arrow
        self._attached: dict[str, pa.Table] = {}
        self._dir = None if self.skipped else AtomicDir(location, storage_options)
        # shards are encoded and written a row group at a time on one background thread (Arrow releases the
        # GIL), so the next batches are read meanwhile and a shard's end costs one row group, not the shard
        self._writer = ThreadPoolExecutor(1, thread_name_prefix="shard-writer")

    # -- writing
    def write(self, rows: pa.Table | None = None, rejects: pa.Table | None = None) -> None:
        if self.skipped:
            return
        if rows is not None and self._offered is None:
            self._offered = rows.schema
        if rows is not None and rows.num_rows:
            self._buffer.append(rows)
            self._buffered += rows.num_rows
            self._nbytes += rows.nbytes
            for lab, cnt in zip(*value_counts(rows["label"])):
                self._labels[lab] = self._labels.get(lab, 0) + cnt
            if "split" in rows.column_names:
                for split, cnt in zip(*value_counts(rows["split"])):
                    self._splits[split] = self._splits.get(split, 0) + cnt
            self._flush_rows()
        if rejects is not None and rejects.num_rows:
            self.reasons.update(reject_reasons(rejects))
            self._rejects.append(rejects)
            self._rejected_buffered += rejects.num_rows
            if self._rejected_buffered >= self.shard_rows:
                self._flush_rejects()

    def _flush_rows(self, final: bool = False) -> None:
        """Buffered rows to the writer thread a row group (≥ ``ROW_GROUP_ROWS``, or all with ``final``) at a
        time; a shard is closed at ``shard_rows`` rows."""
        while self._buffered:
            room = self.shard_rows - (self._shard.rows if self._shard is not None else 0)
            if not final and self._buffered < min(ROW_GROUP_ROWS, room):
                return
            table = concat(self._buffer)
            head, rest = (table.slice(0, room), table.slice(room)) if table.num_rows > room else (table, None)
            self._buffer = [rest] if rest is not None else []
            self._buffered = rest.num_rows if rest is not None else 0
            if self._shard is not None:
                fitted = self._shard.fit(head)
                if fitted is None:
                    self._close_shard()   # other columns than the shard's: they start a shard of their own
                else:
                    head = fitted
            if self._shard is None:
                self._names.append(f"part-{len(self._files):05d}.parquet")
                self._shard = _ShardWriter(self._dir, self._names[-1], head.schema)
                self._files.append(None)
                self._schemas.append(head.schema)
            self._shard.rows += head.num_rows
            self._submit(self._shard.append, head)
            if self._shard.rows >= self.shard_rows:
                self._close_shard()
        if final and self._shard is not None:
            self._close_shard()

    def _close_shard(self) -> None:
        self._files[-1] = self._submit(self._shard.close)
        self._shard = None

    def _flush_rejects(self) -> None:
        table = pa.concat_tables(self._rejects)
        self._rejects, self._rejected_buffered = [], 0
        if table.num_rows:
            shard = _ShardWriter(self._dir, f"{REJECTS}-{len(self._reject_files):05d}.parquet", table.schema)
            self._reject_files.append(self._submit(shard.write, table))

    def _submit(self, fn, *args) -> Future:
        """``fn(*args)`` on the writer thread, after at most a few tasks still waiting (their errors raised
        here). The thread runs its tasks in order, so the oldest is the first to finish."""
        while self._tasks and (self._tasks[0].done() or len(self._tasks) >= 4):
            self._tasks.pop(0).result()
        future = self._writer.submit(fn, *args)
        self._tasks.append(future)
        return future

    def shard_target(self) -> ShardTarget:
        """Where a worker writes shards of this corpus itself (``write_shard``), for ``adopt`` to take them in: the
        folder the writer publishes at its commit, reachable from any node on an object store (locally, from this
        node's workers)."""
        return ShardTarget(self.out, self._dir.tmp if self._dir.local else self._dir.out, self.storage_options,
                           None if self._dir.local else self._dir.run_id)

    def adopt(self, shard: WrittenShard) -> None:
        """Take in a shard a worker wrote (``write_shard`` into ``shard_target()``) as the corpus's next: after the
        rows written so far, published with them at the commit (or removed with them by ``abort``)."""
        if self.skipped:
            return
        self._flush_rows(final=True)   # the rows written before it lead it
        if self._offered is None:
            self._offered = shard.schema
        if shard.record is None:
            return
        self._dir.file(shard.record["path"])   # the folder's own file: listed in its marker, removed by abort
        self._names.append(shard.name)
        self._files.append(_Done(shard.record))
        self._schemas.append(shard.schema)
        self._nbytes += shard.nbytes
        for counted, into in ((shard.labels, self._labels), (shard.splits, self._splits)):
            for value, rows in counted.items():
                into[value] = into.get(value, 0) + rows

    @property
    def labels(self) -> dict:
        """The rows written so far per label."""
        return dict(sorted(self._labels.items()))

    def attach(self, key: str, table: pa.Table) -> None:
        """Keep ``table`` with the corpus, as ``.refinery/<key>.parquet`` named in the manifest's ``attached`` with its
        size and sha256 (what a stage measured of the rows it wrote; ``Corpus.attached`` reads it back)."""
        if not self.skipped:
            self._attached[key] = table

    def _write_attached(self) -> dict:
        records = {}
        for key, table in self._attached.items():
            sink = pa.BufferOutputStream()
            pq.write_table(table, sink, compression="zstd")
            data, name = sink.getvalue().to_pybytes(), f"{META_DIR}/{key}.parquet"
            self._dir.write_bytes(name, data)
            records[key] = {"path": name, "bytes": len(data), "sha256": hashlib.sha256(data).hexdigest()}
        return records

    # -- publishing
    def commit(self) -> CorpusManifest:
        """Flush, write the manifest last, and move the result into place: the manifest (where ``mode`` kept the
        finished corpus, its own)."""
        if self.skipped:
            return self._finished
        self._flush_rows(final=True)
        if self._rejects:
            self._flush_rejects()
        for task in self._tasks:
            task.result()
        self._files = [f.result() for f in self._files]
        self._reject_files = [f.result() for f in self._reject_files]
        self._writer.shutdown()
        if not self._files and self._offered is not None:   # rows offered, none kept: an empty shard keeps the columns
            self._names.append("part-00000.parquet")
            self._files.append(_ShardWriter(self._dir, self._names[-1], self._offered).write(self._offered.empty_table()))
            self._schemas.append(self._offered)
        schema = common_schema(self._schemas) if self._schemas else None
        for i, shard_schema in enumerate(self._schemas):   # shards begun for a drifted column: rewritten to it
            if shard_schema != schema:
                table = pq.read_table(pa.BufferReader(self._dir.read_bytes(self._files[i]["path"])))
                self._files[i] = _ShardWriter(self._dir, self._names[i], schema).write(conform(table, schema))
        manifest = {
            "format": FORMAT,
            "rows": sum(f["rows"] for f in self._files),
            "rejected": sum(f["rows"] for f in self._reject_files),
            "labels": dict(sorted(self._labels.items())),
            **({"columns": schema.names} if schema is not None else {}),   # its shards' (read without opening one)
            "files": [f["path"] for f in self._files],
            "rejects": [f["path"] for f in self._reject_files],
            "reject_reasons": dict(self.reasons.most_common()),
            "file_stats": self._files + self._reject_files,
            **({"attached": self._write_attached()} if self._attached else {}),
            **self.extra,
            **({"inputs": self.inputs} if self.inputs is not None else {}),
            "command": redact(command_line()),
            "config": redact(self.config),
        }
        text = json.dumps(manifest, indent=2, default=str)
        checked = CorpusManifest.checked(join(self.out, MANIFEST), json.loads(text))   # as a reader will have it
        self._dir.write_text(CARD, in_memory_names(dataset_card(checked, schema, self._nbytes,
                                                                dict(sorted(self._splits.items())))))
        self._dir.write_text(MANIFEST, in_memory_names(text))
        self._dir.commit()
        return checked

    def copy(self, batches: Iterable, inputs) -> CorpusManifest:
        """Write every ``Batch`` of ``batches`` (rows and rejects, as read from ``inputs``) and commit: the manifest.
        Inputs without a good row are ``commit_all_rejected``: their rejects published, ``AllRejected`` raised."""
        rows = 0
        for batch in batches:
            self.write(batch.rows if batch.rows.num_rows else None, batch.rejects)
            rows += batch.rows.num_rows
        if not rows:
            self.commit_all_rejected(inputs)
        return self.commit()

    def commit_all_rejected(self, inputs) -> None:
        """Publish this writer's rejects (it was given no row) and raise ``AllRejected`` naming their reasons and
        where they are: the error of a run whose inputs held no good row."""
        self.commit()
        raise AllRejected(inputs, self.reasons, posixpath.join(self.out, f"{REJECTS}-*.parquet"))

    def abort(self) -> None:
        self._writer.shutdown(wait=False, cancel_futures=True)   # a write stuck on a dead store is not waited for
        if self._dir is not None:
            self._dir.abort()


class _Done:
    """A shard already written (``adopt``): its record, as a future of the writer thread gives one."""

    def __init__(self, record: dict):
        self.record = record

    def result(self) -> dict:
        return self.record


@dataclass(frozen=True)
class ShardTarget:
    """The folder a corpus is written to before its commit, as a worker elsewhere reaches it (``CorpusWriter.
    shard_target``): ``location`` on the store ``storage_options`` reach; on an object store each data file carries
    the run's id (``AtomicDir.versioned``), locally the folder is the run's own."""

    corpus: str
    location: str
    storage_options: dict = field(default_factory=dict)
    run_id: str | None = None

    def versioned(self, name: str) -> str:
        return name if self.run_id is None else versioned_name(name, self.run_id)

    def write_bytes(self, name: str, data: bytes) -> None:
        fs, path = get_fs(self.location, self.storage_options)
        with on_store(join(self.corpus, name), "writing"), fs.open(join(path, name), "wb") as fh:
            fh.write(data)

    def take(self, shard: WrittenShard, folder: str, name: str) -> WrittenShard:
        """``shard``, a finished file of ``folder`` on the same store (a checkpoint's piece), as the shard ``name`` of
        this corpus: hard-linked on a local disk (copied where a link cannot be made), copied by the store itself
        on an object store; no byte of it passes through this process."""
        if shard.record is None:
            return replace(shard, name=name)
        fs, path = get_fs(self.location, self.storage_options)
        source, target = get_fs(join(folder, shard.record["path"]), self.storage_options)[1], self.versioned(name)
        with on_store(join(self.corpus, target), "writing"):
            if is_local(fs):
                os.makedirs(path, exist_ok=True)
                try:
                    os.link(source, os.path.join(path, target))
                except OSError:   # another device, or a file system without links
                    shutil.copyfile(source, os.path.join(path, target))
            else:
                fs.copy(source, join(path, target))
        return replace(shard, name=name, record={**shard.record, "path": target})


@dataclass(frozen=True)
class WrittenShard:
    """A shard a worker wrote (``write_shard``): its name, its record (path in the corpus: the name, versioned; rows,
    bytes, sha256; None where the worker had no row to write), its columns, and its rows per label and per split and
    their size in Arrow."""

    name: str
    record: dict | None
    schema: pa.Schema
    labels: dict
    splits: dict
    nbytes: int

    def to_json(self) -> dict:
        """The shard as a JSON object (the schema in Arrow's IPC encoding, base64), for ``from_json``."""
        return {"name": self.name, "record": self.record, "labels": self.labels, "splits": self.splits,
                "nbytes": self.nbytes, "schema": base64.b64encode(self.schema.serialize().to_pybytes()).decode()}

    @classmethod
    def from_json(cls, value: dict) -> "WrittenShard":
        schema = pa.ipc.read_schema(pa.py_buffer(base64.b64decode(value["schema"])))
        return cls(value["name"], value["record"], schema, value["labels"], value["splits"], value["nbytes"])


def write_shard(target: ShardTarget, name: str, rows: pa.Table) -> WrittenShard:
    """``rows`` as the shard ``name`` of the corpus ``target`` names, encoded as ``CorpusWriter`` encodes its own (one
    row group); nothing is written for no row (its columns are still told, for a corpus that keeps none)."""
    labels = dict(zip(*value_counts(rows["label"]))) if rows.num_rows else {}
    splits = dict(zip(*value_counts(rows["split"]))) if rows.num_rows and "split" in rows.column_names else {}
    record = _ShardWriter(target, name, rows.schema).write(rows) if rows.num_rows else None
    return WrittenShard(name, record, rows.schema, labels, splits, rows.nbytes)


class _ShardWriter:
    """One Parquet shard, encoded a row group at a time (``append``, on the writer thread) into memory and
    published whole at ``close``. Dictionary pages and min/max statistics only where they pay: not for ids
    and texts, which are nearly all distinct (Arrow would build a dictionary for each and throw it away)."""

    def __init__(self, directory: AtomicDir | ShardTarget, name: str, schema: pa.Schema):
        self.dir, self.name, self.schema = directory, name, schema
        self.rows = 0        # rows handed to it (counted when handed, before they are written)
        self._sink = pa.BufferOutputStream()
        small = [c for c in schema.names if c not in ("id", "text_a", "text_b")]
        self._writer = pq.ParquetWriter(self._sink, schema, compression="zstd", use_dictionary=small,
                                        write_statistics=small)

    def fit(self, table: pa.Table) -> pa.Table | None:
        """``table`` in this shard's schema, or None where the shard's types do not hold its values (another
        column, or a type that is not the common type: a shard of its own, conformed at commit)."""
        if table.schema == self.schema:
            return table
        if table.schema.names == self.schema.names and common_schema([self.schema, table.schema]) == self.schema:
            return conform(table, self.schema)
        return None

    def append(self, table: pa.Table) -> None:
        self._writer.write_table(table, row_group_size=max(table.num_rows, 1))

    def close(self) -> dict:
        self._writer.close()
        data = self._sink.getvalue().to_pybytes()
        folder, base = posixpath.split(self.name)
        name = posixpath.join(folder, self.dir.versioned(base))
        self.dir.write_bytes(name, data)
        return {"path": name, "rows": self.rows, "bytes": len(data), "sha256": hashlib.sha256(data).hexdigest()}

    def write(self, table: pa.Table) -> dict:
        """The whole shard at once."""
        self.rows = table.num_rows
        self.append(table)
        return self.close()


def _differs(inputs: dict | None, config: dict):
    """How a finished corpus differs from one of ``inputs`` and ``config`` (``modes.keeps_finished``'s
    ``differs``): None where it does not."""
    def differs(stored: CorpusManifest | HfStamp) -> str | None:
        if stored.inputs != (inputs or {}):
            changed = sorted(set(stored.inputs) ^ set(inputs or {})) or \
                sorted(k for k in inputs or {} if stored.inputs.get(k) != inputs[k])
            return (f"was made from other inputs or inputs that have changed since "
                    f"({', '.join(changed[:3]) or 'inputs'})")
        if stored.config != json.loads(json.dumps(redact(config), default=str)):
            return "holds a corpus made with another configuration"
        return None

    return differs


def command_line() -> str:
    return " ".join(["refinery", *sys.argv[1:]]) if sys.argv and sys.argv[0].endswith("refinery") else " ".join(sys.argv)


def write_table(table: pa.Table, out: str, rejects: pa.Table | None = None, **kwargs) -> CorpusManifest:
    """Write one in-memory table (and the input rejects it answers for) as a finished corpus, manifest last."""
    with CorpusWriter(out, **kwargs) as writer:
        writer.write(table, rejects)
        return writer.commit()


@dataclass(frozen=True)
class Converted:
    """What ``convert`` or ``convert_hf`` published (or kept: ``skipped``, ``--mode skip`` found the same run
    finished): its rows and rejects, and a corpus's manifest or a Hugging Face folder's rows per split (none for a
    ``Dataset``)."""

    rows: int
    rejected: int
    manifest: CorpusManifest | None = None
    splits: dict = field(default_factory=dict)
    skipped: bool = False


def convert(inputs, out: str, mapping: Mapping | None, opts: ReadOptions = ReadOptions(),
            mode: str = "overwrite", shard_rows: int = DEFAULT_SHARD_ROWS, config: dict | None = None) -> Converted:
    """Read raw inputs and write the canonical corpus with its rejects and manifest; inputs without a good row
    are an ``EmptyInput`` (their rejects published). The manifest records the names the preset gives the texts
    (``Mapping.recorded_names``: ``msrp``'s sentence1/sentence2), so that the corpus's audit names its features as
    the input's does and a stage's output would."""
    with CorpusWriter(out, mode=mode, shard_rows=shard_rows, config=config, storage_options=opts.storage_options,
                      inputs=inputs, extra=mapping.recorded_names() if mapping is not None else None) as writer:
        manifest = writer.commit() if writer.skipped else \
            writer.copy((batch for _, batch in iter_input_batches(inputs, mapping, opts)), inputs)
        return Converted(manifest.rows, manifest.rejected, manifest, skipped=writer.skipped)


def convert_hf(inputs, out: str, mapping: Mapping | None, opts: ReadOptions = ReadOptions(), mode: str = "overwrite",
               shard_rows: int | None = None, config: dict | None = None) -> Converted:
    """Read raw inputs (or corpora) into a Hugging Face ``save_to_disk`` folder (``hf.save_to_disk``: a
    ``DatasetDict`` where the rows have splits, their rejects in ``rejects.parquet``), in memory. ``mode`` as for a
    corpus: the run's inputs and config are kept in the folder's marker for ``skip`` (``HfStamp``)."""
    datasets_package()   # before any input is read
    config = {**(config or {}), "format": "hf"}
    inputs = list(inputs)
    prints = input_fingerprints(inputs, opts.storage_options)
    stored = finished(out, opts.storage_options, CORPUS, HF) if mode != "overwrite" else None
    if keeps_finished(out, mode, stored, _differs(prints, config)):
        return Converted(stored.rows, stored.rejected, splits=stored.splits, skipped=True)
    rows, rejects = load(inputs, mapping, opts)
    splits = save_to_disk(rows, out, opts.storage_options, rejects, shard_rows)
    rejected = rejects.num_rows if rejects is not None else 0
    if not rows.num_rows:
        raise AllRejected(inputs, reject_reasons(rejects), posixpath.join(out, "rejects.parquet"))
    stamp_marker(out, HfStamp(rows.num_rows, rejected, splits, prints,
                              json.loads(json.dumps(redact(config), default=str))), opts.storage_options)
    return Converted(rows.num_rows, rejected, splits=splits)
