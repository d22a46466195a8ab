"""Canonical corpora on any fsspec filesystem: Parquet shards, and beside them, in the hidden folder
``.refinery/``, the rejects, the manifest and a dataset card. The folder's visible files are its shards alone,
so ``pandas.read_parquet(folder)``, ``pyarrow.dataset`` and ``datasets.load_dataset("parquet", data_dir=folder)``
read it as the rows. This module reads them, and says whether a finished one can be reused
(``--mode skip``); ``corpus_writer`` writes them.
"""
from __future__ import annotations

import hashlib
from collections import Counter
import posixpath
from dataclasses import dataclass
from typing import Iterable, Iterator

import pyarrow as pa
import pyarrow.parquet as pq

from refinery.io.canonical import EMPTY_CANONICAL, Batch
from refinery.io.committed import committed_url
from refinery.io.common_schema import common_schema, conform
from refinery.io.inputs import expand_paths
from refinery.io.read_options import ReadOptions
from refinery.io.readers import input_columns, read_input
from refinery.io.schema import AS_IS_REQUIRED, PRESETS, REJECTS_SCHEMA, Mapping, canonical_mapping, empty_table
from refinery.io.splits import parse_split_spec, split_name
from refinery.io.location import MissingInput, forget_listings, get_fs, is_local, on_store
from refinery.io.finished import STAGE, corpus_manifest, finished
from refinery.io.records import MANIFEST, META_DIR, manifest_path
from refinery.io.ownership import RUN_ID_IN_NAME, STAGE_CORPUS
from refinery.io.records import CORPUS_FORMAT, CorpusManifest
from refinery.messages import Refusal, Setting

CARD = f"{META_DIR}/README.md"
REJECTS = f"{META_DIR}/rejects"     # the rejects' shards: rejects-00000.parquet, …
TOP_REASONS = 3                     # the reasons an all-rejected error names
FORMAT = CORPUS_FORMAT


class OutputExists(FileExistsError, Refusal):
    """The output holds a finished run and the mode does not replace it (a refusal, and a ``FileExistsError``)."""

    code = "output-exists"


class EmptyInput(Refusal):
    """An input or split with no good rows: refused unless the caller allows it."""

    code = "empty-input"


class AllRejected(EmptyInput):
    """Every row of the inputs was rejected. ``rejects`` is where they were written, each with its reason
    (None where they were written nowhere): a run that fails with it leaves them there for the user to read."""

    code = "all-rejected"

    def __init__(self, inputs, reasons: Counter, rejects: str | None = None):
        self.reasons, self.rejects = reasons, rejects
        self.keeps_output = rejects is not None   # a failed run's folder stays: the rejects are in it
        total = sum(reasons.values())
        named = ", ".join(inputs)
        if not total:
            super().__init__(f"{named}: no rows (an empty input); give a file that holds rows", code="empty-input")
            return
        top = "; ".join(f"{reason} ({n:,})" for reason, n in reasons.most_common(TOP_REASONS))
        more = f"; {len(reasons) - TOP_REASONS:,} other reasons" if len(reasons) > TOP_REASONS else ""
        where = ("; the rejects, each with its reason, are in ", rejects) if rejects else ()
        super().__init__(f"no good rows in {named}: all {total:,} rejected: {top}{more}", *where, "; check ",
                         Setting("preset"), " or ", Setting("map"), " and ", Setting("labels"))


def reject_reasons(rejects: pa.Table) -> Counter:
    """The rows of a rejects table per reason."""
    return Counter(dict(zip(*value_counts(rejects["reason"])))) if rejects.num_rows else Counter()


@dataclass
class Corpus:
    """A finished canonical corpus: its manifest, checked (``records.CorpusManifest``), and where its shards are."""

    url: str
    manifest: CorpusManifest
    storage_options: dict | None = None
    sizes_checked: bool = False   # whether its files' sizes were checked (``_check_sizes``): before a file is read

    @classmethod
    def open(cls, url: str, storage_options: dict | None = None, check_sizes: bool = True) -> "Corpus":
        """The corpus at ``url`` (a part of a run's folder: of the run committed there, ``committed_url``), its
        manifest checked as one record (``corpus_manifest``), then, before a row is read, that no file it names is
        reached through a symbolic link out of the folder and each is there with the size it records (now, or
        where not ``check_sizes``, before the first of its files is read: what only reads its manifest, a step
        that is skipped, lists no folder)."""
        url = committed_url(url, storage_options)
        fs, path = get_fs(url, storage_options)
        forget_listings(fs, path)  # another process may have published it since this one last looked
        record = corpus_manifest(url, storage_options)
        if record is None:
            raise MissingInput(f"{url}: no {MANIFEST}; not a finished refinery corpus")
        if is_local(fs):
            record.check_links(path)
        corpus = cls(url.rstrip("/"), record, storage_options)
        if check_sizes:
            corpus._check_sizes()
        return corpus

    def _check_sizes(self) -> None:
        """Each listed file is there with the size the manifest records (corpora written before sizes were
        recorded: present): one listing of the folder, so a shard replaced, truncated or removed behind refinery's
        back is named, not read."""
        if self.sizes_checked:
            return
        fs, path = get_fs(self.url, self.storage_options)
        record = self.manifest.record
        with on_store(self.url, "listing the corpus"):
            found = {posixpath.relpath(p, path): info.get("size") for p, info in
                     fs.find(path, detail=True, withdirs=False).items()}
        forget_listings(fs, path)   # the listings it cached: a later read must see a file written since
        for name in self.manifest.paths():
            recorded = self.manifest.recorded(name).bytes
            if name not in found:
                raise MissingInput(f"{posixpath.join(self.url, name)}: listed in {record} but missing; the "
                                   "corpus was changed after refinery wrote it: write it again")
            if recorded is not None and found[name] != recorded:
                raise Refusal(f"{posixpath.join(self.url, name)}: {found[name]:,} bytes where {record} records "
                              f"{recorded:,}; the file was replaced or cut after refinery wrote it: write the "
                              "corpus again", code="bad-input")
        self.sizes_checked = True

    def _digest_checked(self, url: str, digest: str, expected: str | None) -> None:
        """Refuse (``Refusal``, bad-input) the file ``url`` whose sha256 ``digest`` is not ``expected`` (outside
        ``on_store``: a file changed is the user's to write again, not a store's failure)."""
        if expected is not None and digest != expected:
            raise Refusal(f"{url}: its sha256 differs from the one {self.manifest.record} records; the file was "
                          "changed after refinery wrote it: write the corpus again", code="bad-input")

    def verify(self) -> int:
        """Check every listed file's sha256 (shards, rejects, attached tables) against the manifest's (a whole read
        of the corpus); the files checked. Raises a ``Refusal`` (bad-input) naming the first that differs."""
        checked = 0
        for name in self.manifest.paths():
            expected = self.manifest.recorded(name).sha256
            if expected is None:
                continue
            url = posixpath.join(self.url, name)
            fs, path = get_fs(url, self.storage_options)
            with on_store(url, "verifying the corpus"), fs.open(path, "rb") as fh:
                digest = _sha256(iter(lambda: fh.read(1 << 22), b""))
            self._digest_checked(url, digest, expected)
            checked += 1
        return checked

    def attached(self, key: str) -> pa.Table | None:
        """The table a stage kept with the corpus under ``key`` (``CorpusWriter.attach``), or None where it kept
        none; a table whose bytes differ from what the manifest records is refused (``Refusal``, bad-input)."""
        entry = self.manifest.attached.get(key)
        if entry is None:
            return None
        self._check_sizes()
        url = posixpath.join(self.url, entry.path)
        fs, path = get_fs(url, self.storage_options)
        with on_store(self.url, "reading what the corpus keeps"):
            data = fs.cat_file(path)   # whole, in one request
        self._digest_checked(url, _sha256([data]), entry.sha256)
        return pq.read_table(pa.BufferReader(data))

    @property
    def files(self) -> list[str]:
        """Its shards, each checked to be there with the size the manifest records (``_check_sizes``, once)."""
        self._check_sizes()
        return [posixpath.join(self.url, f) for f in self.manifest.files]

    @property
    def reject_files(self) -> list[str]:
        self._check_sizes()
        return [posixpath.join(self.url, f) for f in self.manifest.rejects]

    def iter_tables(self, columns=None, batch_rows: int = 65_536) -> Iterator[pa.Table]:
        """The rows in order, ``batch_rows`` at a time."""
        return iter_parquet(self.files, self.storage_options, columns, batch_rows)

    def read(self, columns=None) -> pa.Table:
        """Every row; a corpus of none has the columns of its empty shard (a filter that kept no row keeps them)."""
        tables = list(self.iter_tables(columns))
        if not tables and self.files:
            fs, path = get_fs(self.files[0], self.storage_options)
            with fs.open(path, "rb") as fh:
                schema = pq.read_schema(fh)
            return schema.empty_table().select(columns) if columns else schema.empty_table()
        return concat(tables)

    def read_rejects(self, columns: list | None = None) -> pa.Table:
        """The input rows the corpus answers for as rejected, each with its reason (``columns``: those only)."""
        fs, _ = get_fs(self.url, self.storage_options)
        tables = []
        for url in self.reject_files:
            _, path = get_fs(url, self.storage_options)
            with fs.open(path, "rb") as fh:
                tables.append(pq.read_table(fh, columns=columns))
        empty = empty_table(REJECTS_SCHEMA)
        return pa.concat_tables(tables) if tables else empty.select(columns) if columns else empty


def _sha256(data_blocks) -> str:
    """The sha256 (hex) of the bytes ``data_blocks`` yields."""
    digest = hashlib.sha256()
    for block in data_blocks:
        digest.update(block)
    return digest.hexdigest()


def iter_parquet(files, storage_options: dict | None = None, columns=None, batch_rows: int = 65_536
                 ) -> Iterator[pa.Table]:
    """The rows of Parquet ``files`` (local paths or URLs) in order, ``batch_rows`` at a time."""
    for url in files:
        fs, path = get_fs(url, storage_options)
        with fs.open(path, "rb") as fh:
            for rb in pq.ParquetFile(fh).iter_batches(batch_size=batch_rows, columns=columns):
                yield pa.Table.from_batches([rb])


def corpus_of(url: str, storage_options: dict | None = None) -> str:
    """``url``, or the ``corpus/`` part of a stage's folder (upsample, weights, generate and razor publish the
    corpus they make there, beside ``report/``): a stage's folder reads as the corpus it made."""
    part = posixpath.join(url.rstrip("/"), STAGE_CORPUS)
    if any(ch in url for ch in "*?[") or is_corpus(url, storage_options) or not is_corpus(part, storage_options):
        return url
    return part


@dataclass(frozen=True)
class Resolved:
    """An input resolved once (``resolve``): ``url`` as given; ``path``, what is read of it (a stage's folder: the
    corpus it made, ``corpus_of``); ``corpus``, the finished corpus there, opened (``Corpus.open``: read in the run
    committed there, its manifest checked), or None where the input is raw (files, a folder of them, a glob)."""

    url: str
    path: str
    corpus: Corpus | None = None


def resolve(url: "str | Resolved", storage_options: dict | None = None) -> Resolved:
    """``url`` as refinery reads it (``Resolved``; one already resolved as it is): what a step resolves once for
    each of its inputs and hands down, so that no reader looks its pointers and manifest up again."""
    if isinstance(url, Resolved):
        return url
    if not any(ch in url for ch in "*?["):
        for path in (url, posixpath.join(url.rstrip("/"), STAGE_CORPUS)):
            if is_corpus(path, storage_options):
                return Resolved(url, path, Corpus.open(path, storage_options, check_sizes=False))
    return Resolved(url, url)


def stage_parts(url: str, storage_options: dict | None = None) -> list[str]:
    """The corpora inside a stage's folder ``url`` (``kept``, ``rejected``, ``pool``, …), or none."""
    fs, path = get_fs(url, storage_options)
    with on_store(url, "looking at the input"):
        if not fs.isdir(path) or finished(url, storage_options, STAGE) is None:
            return []
        fs, run = get_fs(committed_url(url, storage_options), storage_options)
        folders = sorted(posixpath.basename(p.rstrip("/")) for p in fs.ls(run, detail=False) if fs.isdir(p))
    return [posixpath.join(url.rstrip("/"), f) for f in folders if is_corpus(posixpath.join(url, f), storage_options)]


def not_a_corpus(url: str, storage_options: dict | None = None, columns: list | None = None) -> Refusal:
    """The error for ``url`` read without a mapping where it is no corpus and not in refinery's columns: a stage's
    folder names its parts; a file its ``columns`` and the presets whose columns it has."""
    parts = stage_parts(url, storage_options)
    if parts:
        return Refusal(f"{url} is a refinery stage's folder, not a corpus: read one of its parts, "
                       f"{' or '.join(parts)}", code="bad-input")
    if columns is None:
        return Refusal(f"{url} is not a refinery corpus; name its columns with ", Setting("preset"), " or ",
                       Setting("map"), code="missing-columns")
    fitting = [name for name, preset in PRESETS.items() if all(c in columns for c in preset.required.values())]
    presets = [Setting("preset", name) for name in fitting[:3]] or [Setting("preset")]
    return Refusal(f"{url} has no {' and '.join(AS_IS_REQUIRED)} columns (it has {', '.join(columns) or 'none'}); "
                   "name its columns with ", *[part for preset in presets for part in (preset, " or ")],
                   Setting("map", "text_a=COLUMN,label=COLUMN,…", placeholder=True), code="missing-columns")


def input_mapping(url: "str | Resolved", mapping: Mapping | None, opts: ReadOptions = ReadOptions()
                  ) -> Mapping | None:
    """How the input ``url`` (or its ``Resolved``) is read: a finished corpus (or a stage's folder that made one) as
    it is (None); a raw input through ``mapping``, else, where it is already in refinery's columns (``text_a``,
    ``label``, …), as it is (``canonical_mapping``), on the command line and through the API alike; else
    ``not_a_corpus``."""
    resolved = resolve(url, opts.storage_options)
    if resolved.corpus is not None:
        return None
    url = resolved.url
    if mapping is not None:
        return mapping
    if stage_parts(url, opts.storage_options):   # a stage's folder: its parts are corpora, not one file to read
        raise not_a_corpus(url, opts.storage_options)
    try:
        columns = input_columns(url, opts)
    except ValueError:   # no format to read it by (an unknown extension): a preset names it
        raise not_a_corpus(url, opts.storage_options) from None
    found = canonical_mapping(columns)
    if found is None:
        raise not_a_corpus(url, opts.storage_options, columns)
    return found


def read_any(url: str, storage_options: dict | None = None) -> pa.Table:
    """A finished corpus (a stage's folder: the corpus it made) or a single Parquet file, whole."""
    url = corpus_of(url, storage_options)
    if is_corpus(url, storage_options):
        return Corpus.open(url, storage_options).read()
    fs, path = get_fs(url, storage_options)
    if not fs.exists(path):
        raise MissingInput(f"{url}: no such file or corpus")
    with fs.open(path, "rb") as fh:
        try:
            return pq.read_table(fh)
        except pa.ArrowInvalid as e:   # a JSON or CSV file where a corpus or Parquet file was asked
            raise Refusal(f"{url}: not a corpus or a Parquet file ({str(e).splitlines()[0]}); make it one with "
                          "refinery convert", code="bad-input") from None


def is_corpus(url: str, storage_options=None) -> bool:
    """Whether ``url`` is a folder with a corpus manifest (a store that refuses to say is named with ``url``)."""
    fs, path = get_fs(committed_url(url, storage_options), storage_options)
    fs.invalidate_cache(path)
    with on_store(url, "looking at the input"):
        return (not is_local(fs) or fs.isdir(path)) and manifest_path(fs, path) is not None


def concat(tables: list[pa.Table]) -> pa.Table:
    tables = [t for t in tables if t is not None]
    if not tables:
        return pa.table({"id": pa.array([], pa.string()), "text_a": pa.array([], pa.string()),
                         "text_b": pa.array([], pa.string()), "label": pa.array([], pa.string())})
    try:
        return pa.concat_tables(tables, promote_options="permissive")
    except (pa.ArrowInvalid, pa.ArrowTypeError):   # a column's type drifted between batches: to their common type
        schema = common_schema(t.schema for t in tables)
        return pa.concat_tables([conform(t, schema) for t in tables])


def iter_input_batches(inputs: "Iterable[str | Resolved]", mapping: Mapping | None,
                       opts: ReadOptions = ReadOptions()) -> Iterator[tuple[str, Batch]]:
    """Canonical batches from raw inputs (through ``input_mapping``: with a mapping, or as they are where they are in
    refinery's columns) or finished corpora (without one), each input a path or its ``Resolved``. A raw input that
    holds no rows at all (an empty file, a header alone) is an ``EmptyInput`` naming it. A stage's folder reads
    as the corpus it made (``corpus_of``)."""
    for resolved in (resolve(url, opts.storage_options) for url in inputs):
        url, corpus = resolved.path, resolved.corpus
        if corpus is not None:
            for table in corpus.iter_tables(batch_rows=opts.batch_rows):
                yield url, Batch(table, empty_table(REJECTS_SCHEMA))
            if corpus.manifest.rejected:  # a corpus's own rejects travel with its rows
                yield url, Batch(EMPTY_CANONICAL, corpus.read_rejects())
            continue
        empty = True
        for path, batch in read_input(url, input_mapping(resolved, mapping, opts), opts):
            empty = empty and not batch.rows.num_rows and not batch.rejects.num_rows
            yield path, batch
        if empty:
            raise AllRejected([url], Counter())


def load(inputs, mapping: Mapping | None = None, opts: ReadOptions = ReadOptions(),
         with_split: bool = False) -> tuple[pa.Table, pa.Table]:
    """All rows and rejects of the inputs in memory (for small corpora and tests).

    With ``with_split`` each row gets ``split`` = the basename of the input it came from
    (unless the corpus already has a split column).
    """
    rows, rejects = [], []
    for url in inputs:
        for _, batch in iter_input_batches([url], mapping, opts):
            table = batch.rows
            if with_split and "split" not in table.column_names:
                name = split_name(url.url if isinstance(url, Resolved) else url)
                table = table.append_column("split", pa.array([name] * table.num_rows, pa.string()))
            rows.append(table)
            rejects.append(batch.rejects)
    return concat(rows), (pa.concat_tables(rejects) if rejects else empty_table(REJECTS_SCHEMA))


def input_fingerprints(inputs: "Iterable[str | Resolved] | dict", storage_options: dict | None = None
                       ) -> dict[str, str]:
    """What ``--mode skip`` compares, per input (a path, or its ``Resolved``): a finished corpus by the sha256 of its
    manifest (which holds every shard's sha256; its shards' names without a store's run ids, which differ between two
    runs that wrote the same rows), a raw file by its size and fsspec checksum (the modification stamp
    locally, the ETag on object stores). ``SPLIT=PATH`` inputs ({split: paths}) keep the split in the key."""
    if isinstance(inputs, dict):   # {split: paths} ("": unnamed)
        given = [(split, path) for split, paths in inputs.items()
                 for path in ([paths] if isinstance(paths, (str, Resolved)) else paths)]
    else:
        given = [("", spec) if isinstance(spec, Resolved) else parse_split_spec(spec) for spec in inputs]
    prints: dict[str, str] = {}
    for split, url in given:
        prefix = f"{split}=" if split else ""
        resolved = resolve(url, storage_options)
        url = resolved.path
        if resolved.corpus is not None:   # its manifest checked before its digest stands for the corpus
            fs, path = get_fs(resolved.corpus.url, storage_options)
            manifest = RUN_ID_IN_NAME.sub("", fs.cat_file(manifest_path(fs, path)).decode())   # a store's run ids
            prints[prefix + url] = "manifest:" + hashlib.sha256(manifest.encode()).hexdigest()
            continue
        for path in expand_paths([url], storage_options):
            fs, local = get_fs(path, storage_options)
            prints[prefix + path] = f"size:{fs.size(local)} checksum:{fs.checksum(local):x}"
    return prints


def value_counts(arr) -> tuple[list, list]:
    vc = arr.value_counts()
    if isinstance(vc, pa.ChunkedArray):
        vc = vc.combine_chunks()
    return vc.field("values").to_pylist(), vc.field("counts").to_pylist()
