"""``StageInput``: the corpora a stage reads, and the ways it reads them (batches in order, the input's shards and
units for workers, rows per label, rejects, the columns a model reads, side corpora), so that a stage never opens a
corpus itself."""
from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Iterator

import pyarrow as pa

from refinery.messages import CODES, Refusal
from refinery.io.read_options import ReadOptions
from refinery.io.schema import CANONICAL_FIELDS, Mapping

if TYPE_CHECKING:
    from refinery.core.stats import Prior
    from refinery.io.canonical import Batch
    from refinery.io.corpus import Resolved


@dataclass(frozen=True)
class SideInput:
    """A corpus a stage reads besides its input (an evaluation set, z-filtering's seed): its ``paths``, the
    ``mapping`` its raw files are read through (None: refinery's columns), and ``option``, what a message about it
    names (``--against test``)."""

    paths: tuple
    mapping: Mapping | None = None
    option: str = ""


@dataclass
class StageInput:
    """The corpora a stage reads: ``{split: [paths]}`` (split ``""``: unnamed, rows keep any ``split`` column
    they have), raw files read through ``mapping`` or finished corpora (``mapping`` None). A pipeline's
    stages read its input's corpus, and know the input's preset by its ``field_names``."""

    splits: dict
    mapping: Mapping | None = None
    opts: ReadOptions = field(default_factory=ReadOptions)
    engine: str = "local"
    field_names: tuple | None = None   # the task's names of text_a and text_b (the input's preset's)
    single_text: bool = False          # whether the input's preset has one text
    prior: Prior | None = None         # the audit's prior rule its corpora record (decided on their lineage's first)
    _resolved: dict = field(default_factory=dict, init=False, repr=False, compare=False)   # path → io's Resolved

    def resolved(self, path: str) -> "Resolved":
        """``path`` as it is read (``io.corpus.resolve``: the corpus it names, opened, or a raw input), resolved
        once for the step: every read of the input below, here and on Ray's workers (they get it resolved), uses
        it and looks no pointer or manifest up again."""
        from refinery.io.corpus import resolve

        found = self._resolved.get(path)
        if found is None:
            found = self._resolved[path] = resolve(path, self.opts.storage_options)
        return found

    def resolved_splits(self) -> dict:
        """``splits`` with each path ``resolved``."""
        return {split: list(map(self.resolved, paths)) for split, paths in self.splits.items()}

    @property
    def paths(self) -> list[str]:
        return [p for paths in self.splits.values() for p in paths]

    @property
    def named(self) -> bool:
        return any(self.splits)

    def iter_batches(self) -> Iterator["Batch"]:
        """Canonical batches of every split in order, named splits in a ``split`` column; each input's
        rejects come as batches of their own."""
        for _, batch in self.iter_read():
            yield batch

    def iter_read(self) -> Iterator[tuple[str, "Batch"]]:
        """``iter_batches``' batches, each with the file it was read from (for a message naming it)."""
        from refinery.io.canonical import Batch
        from refinery.io.corpus import iter_input_batches

        for split, paths in self.splits.items():
            for path, batch in iter_input_batches(map(self.resolved, paths), self.mapping, self.opts):
                yield path, (Batch(with_split(batch.rows, split), batch.rejects) if split else batch)

    def read_columns(self, columns) -> pa.Table:
        """``columns`` (those the rows have) of every good row, in memory, in ``iter_batches``' order: what a model
        fit on the whole input reads, not the input's other columns."""
        parts = [b.rows.select([c for c in columns if c in b.rows.column_names]) for b in self.iter_batches()
                 if b.rows.num_rows]
        if parts:
            return pa.concat_tables(parts, promote_options="permissive")
        return pa.table({c: pa.array([], pa.string()) for c in columns if c in CANONICAL_FIELDS})

    def read_units(self, cpus: int) -> tuple[list, list]:
        """The input cut into units that workers read themselves (``io.read_units``): each finished corpus's row
        groups in units of about equal rows for ``cpus`` workers, each raw file whole; and (the number of units
        before them, the corpus) of each finished corpus that keeps rejects."""
        from refinery.io.corpus import input_mapping
        from refinery.io.inputs import expand_paths
        from refinery.io.read_units import Piece, corpus_units

        so, units, keeping_rejects = self.opts.storage_options, [], []
        for path in self.paths:
            resolved = self.resolved(path)
            read_by = input_mapping(resolved, self.mapping, self.opts)   # as iter_batches reads it (``io.corpus``)
            if read_by is None:   # a corpus, or a stage's folder: the corpus it made
                corpus = resolved.corpus
                if corpus.manifest.rejected:
                    keeping_rejects.append((len(units), corpus))
                units += corpus_units(corpus.files, so, cpus)
            else:
                units += [(Piece(file, mapping=read_by),) for file in expand_paths([path], so)]
        return units, keeping_rejects

    def rows_at(self, wanted: list, columns: tuple = ("id", "text_a", "text_b")) -> dict:
        """Row number (in the order ``iter_batches`` gives the good rows) → the row's ``columns`` (those it has), for
        the rows ``wanted``: a pass over the input that keeps only them."""
        import numpy as np

        found = {}
        for numbers, part in self._taken(np.unique(np.asarray(wanted, np.int64)), columns):
            found.update(zip(numbers.tolist(), part.to_pylist()))
        return found

    def column_at(self, rows: np.ndarray, column: str = "id") -> pa.Array:
        """``column`` of each of ``rows`` (row numbers as ``rows_at`` takes them, in any order, repeats allowed), as
        one Arrow array: a pass over the input that keeps only that column of those rows, not a row's objects."""
        import numpy as np

        wanted, back = np.unique(np.asarray(rows, np.int64), return_inverse=True)
        parts = [part[column].combine_chunks() for _, part in self._taken(wanted, (column,))]
        found = pa.concat_arrays(parts) if parts else pa.array([], pa.string())
        return found.take(pa.array(back.ravel())) if len(wanted) else found

    def _taken(self, wanted, columns: tuple):
        """(their numbers, a table of their ``columns``) of the rows ``wanted`` (sorted distinct row numbers) batch
        by batch, in one pass over the input that stops after the last of them."""
        import numpy as np

        start = 0
        for batch in (b.rows for b in self.iter_batches() if b.rows.num_rows) if len(wanted) else ():
            lo, hi = np.searchsorted(wanted, [start, start + batch.num_rows])
            if hi > lo:
                part = batch.select([c for c in columns if c in batch.column_names])
                yield wanted[lo:hi], part.take(pa.array(wanted[lo:hi] - start))
            start += batch.num_rows
            if start > wanted[-1]:
                break

    def columns(self) -> list[str]:
        """The canonical columns every input has: a corpus's schema, or what the mapping gives raw files."""
        common = None
        for split, paths in self.splits.items():
            for path in paths:
                cols = set(_columns(self.resolved(path), self.mapping, self.opts.storage_options)) | \
                    ({"split"} if split else set())
                common = cols if common is None else common & cols
        return sorted(common or ())

    def read_side(self, side: SideInput) -> tuple[pa.Table, pa.Table]:
        """The rows and the rejects of a corpus the stage reads besides its input (``SideInput``), in memory, read
        with the input's storage and batch options; one missing or unreadable is a ``Refusal`` naming its
        ``option``, where it has one (of its error's kind, else ``bad-input``)."""
        from refinery.io.corpus import load

        try:
            return load(list(side.paths), side.mapping, self.opts)   # resolved once, in this read
        except (FileNotFoundError, ValueError) as error:
            if not side.option:
                raise
            code = getattr(error, "code", None)   # a refusal's kind stays; a file not there: bad-input
            code = code if isinstance(code, str) and code in CODES else "bad-input"
            raise Refusal(f"{side.option}: {error}", code=code) from None

    def shard_files(self):
        """The input's Parquet shards in order, as workers read them themselves (``engine.ParquetSource``), where
        it is unnamed and every input a finished corpus; else None (the driver reads the rows)."""
        from refinery.pipeline.engine import ParquetSource

        corpora = [self.resolved(url).corpus for url in self.paths]
        if self.named or None in corpora:
            return None
        return ParquetSource(tuple(f for corpus in corpora for f in corpus.files),
                             storage_options=self.opts.storage_options)

    def rows_per_label(self, read_raw: bool = True) -> dict:
        """Rows per label of the input: each finished corpus's from its manifest, each raw input's read (its labels
        only), or counted 0 where not ``read_raw``."""
        from collections import Counter

        from refinery.core.stats import rows_per_label
        from refinery.io.corpus import iter_input_batches

        counts, raw = Counter(), []
        for resolved in map(self.resolved, self.paths):
            if resolved.corpus is not None:
                counts.update(resolved.corpus.manifest.labels)
            else:
                raw.append(resolved)
        for _, batch in iter_input_batches(raw if read_raw else [], self.mapping, replace(self.opts, row_ids=False)):
            counts.update(rows_per_label(batch.rows["label"]))
        return dict(counts)

    def read_rejects(self) -> pa.Table:
        """The input's rejects: a finished corpus's from its rejects file, a raw input's by reading it."""
        from refinery.io.corpus import iter_input_batches
        from refinery.io.schema import REJECTS_SCHEMA, empty_table

        tables = []
        for resolved in map(self.resolved, self.paths):   # a stage's folder: the corpus it made
            corpus = resolved.corpus
            if corpus is not None:
                tables += [corpus.read_rejects()] if corpus.manifest.rejected else []
            else:
                tables += [b.rejects for _, b in iter_input_batches([resolved], self.mapping, self.opts)
                           if b.rejects.num_rows]
        return pa.concat_tables(tables) if tables else empty_table(REJECTS_SCHEMA)

    def load(self) -> tuple[pa.Table, pa.Table]:
        """All rows (named splits in a ``split`` column) and all rejects, in memory."""
        from refinery.io.corpus import load

        if not self.named:
            return load(list(map(self.resolved, self.paths)), self.mapping, self.opts)
        rows, rejects = zip(*(load(list(map(self.resolved, paths)), self.mapping, self.opts)
                              for paths in self.splits.values()))
        tables = [with_split(t, s) for s, t in zip(self.splits, rows)]
        return pa.concat_tables(tables, promote_options="permissive"), pa.concat_tables(rejects)


def _columns(resolved: "Resolved", mapping: Mapping | None, storage_options: dict) -> list[str]:
    import pyarrow.parquet as pq

    from refinery.io.corpus import input_mapping
    from refinery.io.location import get_fs

    mapping = input_mapping(resolved, mapping, ReadOptions(storage_options=storage_options))
    path = resolved.url
    if mapping is None:   # a corpus (a stage's folder: the corpus it made)
        corpus = resolved.corpus
        if not corpus.files:
            return list(CANONICAL_FIELDS)
        if corpus.manifest.columns is not None:   # recorded by the writer (a corpus written before: its first shard's)
            return list(corpus.manifest.columns)
        fs, local = get_fs(corpus.files[0], storage_options)
        with fs.open(local, "rb") as fh:
            return pq.read_schema(fh).names
    mapped = [name for name, column in mapping.columns.items() if column]
    return ["id", *mapped, *(["split"] if mapping and _carries_split(path, mapping, storage_options) else [])]


def _carries_split(path: str, mapping: Mapping, storage_options: dict) -> bool:
    """Whether a raw input's rows carry a ``split`` column of their own (its first batch tells)."""
    from refinery.io.readers import read_input

    opts = ReadOptions(batch_rows=1_000, storage_options=storage_options, row_ids=False)
    first = next((batch for _, batch in read_input(path, mapping, opts) if batch.rows.num_rows), None)
    return first is not None and "split" in first.rows.column_names


def with_split(table: pa.Table, split: str) -> pa.Table:
    """``table`` with a ``split`` column holding ``split`` (replacing one it had)."""
    if "split" in table.column_names:
        table = table.drop_columns(["split"])
    return table.append_column("split", pa.array([split] * table.num_rows, pa.string()))
