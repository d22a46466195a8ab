"""The stage contract: a method is a ``Stage`` with a config dataclass, and its verb, its pipeline key and its
Python call are that one class.

A stage has a registered name, a config dataclass (validated on construction; its fields, with their
defaults, allowed values and help, are the CLI options of the stage's verb and the keys of its pipeline
entry), the canonical columns it ``needs`` (checked against the input before it runs) and ``adds`` (a pipeline whose
step needs a column neither its input has nor an earlier step adds is refused before any work), and the
``resources`` one of its workers asks the engine for (a ``one_task`` stage, whose work is one process, runs
as one such task on the Ray engine, so the driver only orchestrates). ``run(source, out)`` reads ``StageInput`` and
publishes its parts through ``out``, the ``StageOutput`` the runner hands it; the runner around it owns ``_SUCCESS``, fingerprints and ``--mode``.
What the next stage reads is ``output``. Config fields named in ``references`` may name an earlier step
of the pipeline (``input``, a stage's name, or its folder ``NN-name``) instead of a path; the runner
resolves them to that step's output.
"""
from __future__ import annotations

import ast
import enum
import importlib
import importlib.util
import inspect
import posixpath
import sys
from abc import ABC, abstractmethod
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, ClassVar, Iterator

import pyarrow as pa

from refinery.io.ownership import STAGE_CORPUS
from refinery.io.read_options import ReadOptions
from refinery.io.schema import CANONICAL_FIELDS, Mapping

if TYPE_CHECKING:
    from refinery.core.stats import Prior
    from refinery.io.canonical import Batch
    from refinery.pipeline.output import StageOutput


class Output(enum.Enum):
    """What the next stage of a pipeline reads from a finished stage."""

    INPUT = None           # the stage's own input: the rows pass on unchanged (audit, leakage, compare)
    KEPT = "kept"          # the rows a filter kept
    POOL = "pool"          # IBADR's pool: the corpus and its accepted pseudo samples
    CORPUS = STAGE_CORPUS  # the corpus a stage made: up-sampled, weighted, generated, rewritten (RAZOR)

    def next_input(self, folder: str, current: str) -> str:
        return current if self is Output.INPUT else posixpath.join(folder, self.value)


@dataclass(frozen=True)
class Resources:
    """What one worker of the stage asks the engine for: each Ray task or actor the engine launches for the
    stage (``pipeline.engine``: a filter's batches, a model's actors, a ``one_task`` stage's task)."""

    cpus: float = 1.0
    gpus: float = 0.0
    memory_gb: float = 1.0

    def ray_options(self) -> dict:
        """The options of a Ray task or actor asking for these resources."""
        return {"num_cpus": self.cpus, "num_gpus": self.gpus, "memory": int(self.memory_gb * 2**30)}


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
    _sides: dict = field(default_factory=dict, init=False, repr=False, compare=False)   # read_side's, once each

    @property
    def paths(self) -> list[str]:
        return [p for paths in self.splits.values() for p in paths]

    @property
    def named(self) -> bool:
        return any(self.splits)

    def iter_batches(self) -> Iterator["Batch"]:
        """Canonical batches of every split in order, named splits in a ``split`` column; each input's
        rejects come as batches of their own."""
        from refinery.io.canonical import Batch
        from refinery.io.corpus import iter_input_batches

        for split, paths in self.splits.items():
            for _, batch in iter_input_batches(paths, self.mapping, self.opts):
                yield Batch(with_split(batch.rows, split), batch.rejects) if split else batch

    def rows_at(self, wanted: list, columns: tuple = ("id", "text_a", "text_b")) -> dict:
        """Row number (in the order ``iter_batches`` gives the good rows) → the row's ``columns`` (those it has), for
        the rows ``wanted``: a pass over the input that keeps only them."""
        import numpy as np

        wanted, found, start = np.unique(np.asarray(wanted, np.int64)), {}, 0
        for batch in (b.rows for b in self.iter_batches() if b.rows.num_rows):
            mine = wanted[(wanted >= start) & (wanted < start + batch.num_rows)]
            if len(mine):
                part = batch.select([c for c in columns if c in batch.column_names])
                found.update(zip(mine.tolist(), part.take(pa.array(mine - start)).to_pylist()))
            start += batch.num_rows
            if start > (wanted[-1] if len(wanted) else -1):
                break
        return found

    def columns(self) -> list[str]:
        """The canonical columns every input has: a corpus's schema, or what the mapping gives raw files."""
        common = None
        for split, paths in self.splits.items():
            for path in paths:
                cols = set(_columns(path, self.mapping, self.opts.storage_options)) | ({"split"} if split else set())
                common = cols if common is None else common & cols
        return sorted(common or ())

    def read_side(self, side: SideInput) -> tuple[pa.Table, pa.Table]:
        """The rows and the rejects of a corpus the stage reads besides its input (``SideInput``), in memory, read
        once per run with the input's storage and batch options; a missing or unreadable one is a ``ValueError``
        naming its option."""
        from refinery.io.corpus import load

        key = (side.paths, repr(side.mapping))
        if key not in self._sides:
            try:
                self._sides[key] = load(list(side.paths), side.mapping, self.opts)
            except (FileNotFoundError, ValueError) as error:
                raise ValueError(f"{side.option}: {error}" if side.option else str(error)) from None
        return self._sides[key]

    def shard_files(self):
        """The input's Parquet shards in order, as workers read them themselves (``engine.ParquetSource``), where
        it is unnamed and every input a finished corpus; else None (the driver reads the rows)."""
        from refinery.io.corpus import Corpus, is_corpus
        from refinery.pipeline.engine import ParquetSource

        so = self.opts.storage_options
        if self.named or not all(is_corpus(url, so) for url in self.paths):
            return None
        return ParquetSource(tuple(f for url in self.paths for f in Corpus.open(url, so).files), storage_options=so)

    def rows_per_label(self, read_raw: bool = True) -> dict:
        """Rows per label of the input: each finished corpus's from its manifest, each raw input's read (its labels
        only), or counted 0 where not ``read_raw``."""
        from collections import Counter

        from refinery.core.stats import rows_per_label
        from refinery.io.corpus import Corpus, is_corpus, iter_input_batches

        counts, raw, so = Counter(), [], self.opts.storage_options
        for url in self.paths:
            if is_corpus(url, so):
                counts.update(Corpus.open(url, so).manifest["labels"])
            else:
                raw.append(url)
        for _, batch in iter_input_batches(raw if read_raw else [], self.mapping, replace(self.opts, row_ids=False)):
            counts.update(rows_per_label(batch.rows["label"]))
        return dict(counts)

    def read_rejects(self) -> pa.Table:
        """The input's rejects: a finished corpus's from its rejects file, a raw input's by reading it."""
        from refinery.io.corpus import Corpus, corpus_of, is_corpus, iter_input_batches
        from refinery.io.schema import REJECTS_SCHEMA, empty_table

        so, tables = self.opts.storage_options, []
        for url in (corpus_of(u, so) for u in self.paths):   # a stage's folder: the corpus it made
            if is_corpus(url, so):
                corpus = Corpus.open(url, so)
                tables += [corpus.read_rejects()] if corpus.manifest.get("rejected") else []
            else:
                tables += [b.rejects for _, b in iter_input_batches([url], self.mapping, self.opts)
                           if b.rejects.num_rows]
        return pa.concat_tables(tables) if tables else empty_table(REJECTS_SCHEMA)

    def load(self) -> tuple[pa.Table, pa.Table]:
        """All rows (named splits in a ``split`` column) and all rejects, in memory."""
        from refinery.io.corpus import load

        if not self.named:
            return load(self.paths, self.mapping, self.opts)
        rows, rejects = zip(*(load(paths, self.mapping, self.opts) for paths in self.splits.values()))
        tables = [with_split(t, s) for s, t in zip(self.splits, rows)]
        return pa.concat_tables(tables, promote_options="permissive"), pa.concat_tables(rejects)


def _columns(path: str, mapping: Mapping | None, storage_options: dict) -> list[str]:
    import pyarrow.parquet as pq

    from refinery.io.corpus import Corpus, corpus_of, input_mapping
    from refinery.io.location import get_fs

    mapping = input_mapping(path, mapping, ReadOptions(storage_options=storage_options))
    if mapping is None:   # a corpus (a stage's folder: the corpus it made)
        corpus = Corpus.open(corpus_of(path, storage_options), storage_options)
        if not corpus.files:
            return list(CANONICAL_FIELDS)
        if "columns" in corpus.manifest:   # recorded by the writer (a corpus written before: its first shard's)
            return list(corpus.manifest["columns"])
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


def set_column(table: pa.Table, name: str, values) -> pa.Table:
    """``table`` with column ``name`` holding ``values``: a column of that name is replaced in place (a stage
    run again, or after another that added the same column, replaces it rather than adding a second)."""
    if name in table.column_names:
        return table.set_column(table.column_names.index(name), name, values)
    return table.append_column(name, values)


def with_split(table: pa.Table, split: str) -> pa.Table:
    """``table`` with a ``split`` column holding ``split`` (replacing one it had)."""
    if "split" in table.column_names:
        table = table.drop_columns(["split"])
    return table.append_column("split", pa.array([split] * table.num_rows, pa.string()))


@dataclass
class StageResult:
    """A finished stage: the rows it read, where each went, its report, and what the terminal shows."""

    rows_in: int
    parts: dict                 # {"kept": n, "filtered out": n, "input rejects": n}: sums to rows_in
    report: dict
    headline: str = ""          # one line for a pipeline's log
    lines: tuple = ()           # further lines the stage's verb prints
    warnings: tuple = ()        # what a user should act on (the verb prints them to stderr)
    report_file: str = "report/report.html"   # the HTML report, relative to the stage folder

    @property
    def balanced(self) -> bool:
        return self.rows_in == sum(self.parts.values())

    def conservation(self) -> str:
        return conservation(self.rows_in, **self.parts)


def conservation(rows_in: int, **parts: int) -> str:
    """A run's accounting line: every input row is in an output or among the rejects."""
    terms = " + ".join(f"{n:,} {name}" for name, n in parts.items())
    return f"rows in {rows_in:,} = {terms} ({'ok' if rows_in == sum(parts.values()) else 'MISMATCH'})"


class MissingColumns(ValueError):
    """A stage's input lacks a column the stage needs."""


def splits_hint(missing) -> str:
    """The fix a ``MissingColumns`` message ends with when the missing column is ``split``."""
    return "; name the splits: --input train=PATH --input test=PATH" if "split" in missing else ""


def missing_columns(needed_by: str, missing: list, source: StageInput, columns: list, added: tuple = ()
                    ) -> MissingColumns:
    """The error for ``needed_by`` (a stage, or a pipeline's step) whose input ``source`` (with ``columns``, and the
    ``added`` ones earlier steps add) lacks the canonical ``missing`` columns, in the user's words: each column it
    has under the name its data gives it (``claim`` read as text_a through the preset or map; a corpus's text
    fields by the names its manifest records), the data's columns nothing reads, and the fix: a pair's second text
    named with ``--map … text_b=COLUMN`` where the data has an unread column, else that the stage needs pairs; the
    splits named; any other column mapped."""
    how, named, unread, mapped = _as_read(source, columns)
    has = ", ".join(named) + (f" (and the steps before it add {', '.join(added)})" if added else "")
    message = (f"{needed_by} needs column(s) {', '.join(missing)}, which {' and '.join(source.paths)} lacks: "
               f"read {how}, it has {has}" + (f"; not read: {', '.join(unread)}" if unread else ""))
    to_map = [c for c in missing if c != "split"]
    if "text_b" in to_map:
        message += (f"; {needed_by} reads pairs of texts (text_a and text_b) and this input has one text a row")
        to_map.remove("text_b")
        if unread and mapped:
            message += (": if a column it does not read holds the second text, name it, --map "
                        + ",".join(f"{k}={v}" for k, v in mapped.items()) + ",text_b=COLUMN")
        elif not unread:
            message += f", so {needed_by} does not apply to it"
    if to_map:
        message += "; name the column(s): --map " + ",".join(f"{c}=COLUMN" for c in to_map)
    return MissingColumns(message + splits_hint(missing))


def _as_read(source: StageInput, columns: list) -> tuple[str, list, list, dict]:
    """(how the input is read: its preset, a map, as it is or as a corpus; each of ``columns`` as the data names it;
    the raw data's columns nothing reads; {canonical column: the data's} of a raw input)."""
    from refinery.io.corpus import input_mapping
    from refinery.io.readers import input_columns

    path = source.paths[0]
    mapping = input_mapping(path, source.mapping, source.opts)
    if mapping is None:   # a refinery corpus: its texts by the names its manifest records
        names = dict(zip(("text_a", "text_b")[:1 if source.single_text else 2], source.field_names or ()))
        return "as a refinery corpus", [f"{c} ({names[c]})" if c in names else c for c in columns], [], {}
    how = f"with --preset {mapping.preset}" if mapping.preset else "with --map" if source.mapping else \
        "as it is (in refinery's columns)"
    given = {k: v for k, v in mapping.columns.items() if v and k in columns}
    return how, [f"{given[c]} (as {c})" if given.get(c, c) != c else c for c in columns], \
        [c for c in input_columns(path, source.opts) if c not in given.values()], given


class Stage(ABC):
    name: ClassVar[str]
    Config: ClassVar[type]
    needs: ClassVar[tuple] = ("id", "text_a", "label")
    adds: ClassVar[tuple] = ()
    resources: ClassVar[Resources] = Resources()
    output: ClassVar[Output] = Output.KEPT
    references: ClassVar[tuple] = ()   # config fields holding corpora: paths or earlier steps' names
    profiles: ClassVar[dict] = {}      # named starting configs (the verb's --profile)
    verb: ClassVar[bool] = True        # whether ``refinery NAME`` runs the stage alone (compare's verb is its own)
    one_task: ClassVar[bool] = False   # its work is one process (DuckDB, NumPy): on Ray it runs as one task there
    version: ClassVar[int] = 1         # part of its fingerprint: raise it when the stage's output changes

    def __init__(self, config=None):
        self.config = config if config is not None else self.Config()
        if not isinstance(self.config, self.Config):
            raise TypeError(f"{self.name}: config must be a {self.Config.__name__}")

    def also_reads(self) -> list[str]:
        """Files or corpora the stage reads besides its input and its ``references`` (compare's evaluation sets):
        part of its fingerprint, so a changed file runs the step again."""
        return []

    @classmethod
    def code_digest(cls) -> str | None:
        """Part of its fingerprint: for a stage defined outside refinery (a plugin, a notebook's class), the sha256
        of its module's source, so that an edited ``decide`` runs the step again without a raised ``version``;
        refinery's own stages are covered by refinery's version. None where the source cannot be read."""
        import hashlib
        import inspect
        import sys

        module = sys.modules.get(cls.__module__)
        if cls.__module__.split(".")[0] == "refinery" or module is None:
            return None
        try:
            source = inspect.getsource(module)
        except (OSError, TypeError):   # a class typed at an interactive prompt: its own source if it has one
            try:
                source = inspect.getsource(cls)
            except (OSError, TypeError):
                return None
        return hashlib.sha256(source.encode()).hexdigest()

    @classmethod
    def referenced_path(cls, reference: str) -> str:
        """The file, folder or corpus a resolved ``references`` value reads (compare's ``PATH@SPLIT``: PATH)."""
        return reference

    def check_input(self, source: StageInput) -> None:
        """Refuse an input without a column this stage needs (NeMo Curator's ``validate_input``), naming the
        input's columns as its data names them and the fix (``missing_columns``)."""
        columns = source.columns()
        missing = [c for c in self.needs if c not in columns]
        if missing:
            raise missing_columns(self.name, missing, source, columns)

    @abstractmethod
    def run(self, source: StageInput, out: "StageOutput") -> StageResult:
        """Read ``source``, publish the stage's parts through ``out`` (``pipeline.output.StageOutput``: the stage
        opens no path itself), return its accounting."""

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.config!r})"


# name → "module:Class" (imported on first use, so a command loads only the methods it runs) or a registered class
REGISTRY = {
    "audit": "refinery.methods.audit.stage:AuditStage",
    "zfilter": "refinery.methods.zfilter.stage:ZFilterStage",
    "compose": "refinery.methods.zfilter.stage:ComposeStage",
    "confidence": "refinery.methods.confidence.stage:ConfidenceStage",
    "upsample": "refinery.methods.upsample.stage:UpsampleStage",
    "leakage": "refinery.methods.leakage.stage:LeakageStage",
    "weights": "refinery.methods.weights.stage:WeightsStage",
    "generate": "refinery.methods.generate.stage:GenerateStage",
    "razor": "refinery.methods.razor.stage:RazorStage",
    "ibadr": "refinery.methods.ibadr.stage:IbadrStage",
    "aflite": "refinery.methods.aflite.stage:AFLiteStage",
    "dedup": "refinery.methods.dedup.stage:DedupStage",
    "decontaminate": "refinery.methods.decontaminate.stage:DecontaminateStage",
    "datamap": "refinery.methods.datamap.stage:DataMapStage",
    "compare": "refinery.methods.compare.stage:CompareStage",
    "probe": "refinery.methods.probe.stage:ProbeStage",
}


def register(cls: type[Stage]) -> type[Stage]:
    """Add a stage class (e.g. one of your own) to the registry: its verb and pipeline key are its name."""
    REGISTRY[cls.name] = cls
    return cls


PLUGIN_GROUP = "refinery.stages"   # the entry-point group of installed packages' stages: name = "module:Class"
_plugins_added: list[bool] = []    # holds True once the installed plugins are in REGISTRY


def _add_plugins() -> None:
    """Add the stages that installed packages declare under the entry-point group ``refinery.stages`` to
    ``REGISTRY`` (once; a built-in or registered stage keeps its name). Their modules are imported when
    their stage is first used, as the built-in ones are."""
    if _plugins_added:
        return
    from importlib.metadata import entry_points

    for entry in entry_points(group=PLUGIN_GROUP):
        REGISTRY.setdefault(entry.name, entry.value)
    _plugins_added.append(True)


def stage_names() -> list[str]:
    """Every stage's name: the built-in ones, those registered in this process and the installed plugins'."""
    _add_plugins()
    return list(REGISTRY)


def _entry(name: str):
    if name not in REGISTRY:
        _add_plugins()
    if name not in REGISTRY:
        import difflib

        close = difflib.get_close_matches(name, REGISTRY, n=1)
        raise ValueError(f"unknown stage {name!r}" + (f"; did you mean {close[0]!r}?" if close else "")
                         + f" (stages: {', '.join(sorted(REGISTRY))})")
    return REGISTRY[name]


def stage_class(name: str) -> type[Stage]:
    entry = _entry(name)
    if isinstance(entry, str):
        module, cls = entry.split(":")
        entry = getattr(importlib.import_module(module), cls)
    return entry


def stage_doc(name: str) -> str:
    """The docstring of stage ``name``'s class, read from its module's source while that module is not imported
    (``refinery --help`` lists every stage's verb without importing the methods)."""
    entry = _entry(name)
    if isinstance(entry, str) and entry.split(":")[0] not in sys.modules:
        doc = _source_docstring(*entry.split(":"))
        if doc is not None:
            return doc
    return inspect.getdoc(stage_class(name)) or ""


def _source_docstring(module: str, cls: str) -> str | None:
    """The docstring of class ``cls`` defined at the top of ``module``'s source file; None when the module has no
    source or defines the class some other way."""
    spec = importlib.util.find_spec(module)
    if spec is None or not (spec.origin or "").endswith(".py"):
        return None
    with open(spec.origin, encoding="utf-8") as fh:
        tree = ast.parse(fh.read(), spec.origin)
    node = next((n for n in tree.body if isinstance(n, ast.ClassDef) and n.name == cls), None)
    return None if node is None else ast.get_docstring(node) or ""
