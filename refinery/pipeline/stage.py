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
from dataclasses import dataclass
from typing import TYPE_CHECKING, ClassVar

import pyarrow as pa

from refinery.core.report_record import ReportRecord
from refinery.io.ownership import STAGE_CORPUS
from refinery.messages import Message, NamedSplits, Refusal, Setting
from refinery.pipeline.stage_input import StageInput

if TYPE_CHECKING:
    from refinery.pipeline.output import StageOutput


def reference_values(value) -> list:
    """The corpora a ``references`` field's value names: one (a string), a sequence, or a dict's values (named)."""
    return [value] if isinstance(value, str) else list(value.values() if isinstance(value, dict) else value or ())


def mapped_references(value, fn):
    """A ``references`` field's value of the same shape (a string, a sequence, a dict) with ``fn`` applied to each
    corpus it names."""
    if isinstance(value, str):
        return fn(value)
    return {k: fn(v) for k, v in value.items()} if isinstance(value, dict) else type(value)(map(fn, value))


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


def set_column(table: pa.Table, name: str, values) -> pa.Table:
    """``table`` with column ``name`` holding ``values``: a column of that name is replaced in place (a stage
    run again, or after another that added the same column, replaces it rather than adding a second)."""
    if name in table.column_names:
        return table.set_column(table.column_names.index(name), name, values)
    return table.append_column(name, values)


@dataclass
class StageResult:
    """A finished stage: the rows it read, where each went, its report, and what the terminal shows."""

    rows_in: int
    parts: dict[str, int]       # {"kept": n, "filtered out": n, "input rejects": n}: sums to rows_in
    report: ReportRecord        # its report.json is ``report.to_json()``
    headline: str = ""          # one line for a pipeline's log
    lines: tuple = ()           # further lines the stage's verb prints
    warnings: tuple = ()        # what a user should act on (the verb prints them to stderr)
    report_file: str = "report/report.html"   # the HTML report, relative to the stage folder

    def __post_init__(self):
        if not isinstance(self.report, ReportRecord):   # a stage's own fault: its report is its record
            raise TypeError(f"a stage's report is a ReportRecord (its report_type), not {type(self.report).__name__}")

    @property
    def input_rejects(self) -> int:
        """The input rows it rejected (``rejected``: those of the pipeline's input step)."""
        return self.parts.get("input rejects", self.parts.get("rejected", 0))

    @property
    def balanced(self) -> bool:
        return self.rows_in == sum(self.parts.values())

    def conservation(self) -> str:
        return conservation(self.rows_in, **self.parts)


def conservation(rows_in: int, **parts: int) -> str:
    """A run's accounting line: every input row is in an output or among the rejects."""
    terms = " + ".join(f"{n:,} {name}" for name, n in parts.items())
    return f"rows in {rows_in:,} = {terms} ({'ok' if rows_in == sum(parts.values()) else 'MISMATCH'})"


class MissingColumns(Refusal):
    """A stage's input lacks a column the stage needs."""

    code = "missing-columns"


def splits_hint(missing) -> Message:
    """The fix a ``MissingColumns`` message ends with when the missing column is ``split``."""
    return Message("; name the splits: ", NamedSplits()) if "split" in missing else Message()


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
    message = Message(f"{needed_by} needs column(s) {', '.join(missing)}, which {' and '.join(source.paths)} lacks: "
                      "read ", how, f", it has {has}" + (f"; not read: {', '.join(unread)}" if unread else ""))
    to_map = [c for c in missing if c != "split"]
    if "text_b" in to_map:
        message += f"; {needed_by} reads pairs of texts (text_a and text_b) and this input has one text a row"
        to_map.remove("text_b")
        if unread and mapped:
            columns_map = ",".join([*(f"{k}={v}" for k, v in mapped.items()), "text_b=COLUMN"])
            message += Message(": if a column it does not read holds the second text, name it, ",
                               Setting("map", columns_map, placeholder=True))
        elif not unread:
            message += f", so {needed_by} does not apply to it"
    if to_map:
        message += Message("; name the column(s): ",
                           Setting("map", ",".join(f"{c}=COLUMN" for c in to_map), placeholder=True))
    return MissingColumns(message + splits_hint(missing))


def _as_read(source: StageInput, columns: list) -> tuple[Message | str, list, list, dict]:
    """(how the input is read: its preset, a map, as it is or as a corpus; each of ``columns`` as the data names it;
    the raw data's columns nothing reads; {canonical column: the data's} of a raw input)."""
    from refinery.io.corpus import input_mapping
    from refinery.io.readers import input_columns

    path = source.paths[0]
    mapping = input_mapping(path, source.mapping, source.opts)
    if mapping is None:   # a refinery corpus: its texts by the names its manifest records
        names = dict(zip(("text_a", "text_b")[:1 if source.single_text else 2], source.field_names or ()))
        return "as a refinery corpus", [f"{c} ({names[c]})" if c in names else c for c in columns], [], {}
    how = Message("with ", Setting("preset", mapping.preset)) if mapping.preset else \
        Message("with ", Setting("map")) if source.mapping else "as it is (in refinery's columns)"
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
    report_type: ClassVar[type[ReportRecord]] = ReportRecord   # its report's record: report.json is its JSON
    references: ClassVar[tuple] = ()   # config fields holding corpora: paths or earlier steps' names
    profiles: ClassVar[dict] = {}      # named starting configs (the verb's --profile)
    # a ``references`` field whose last corpus is the input of a verb or call given none (compare's ``train``: the
    # corpora it trains on, the last its input)
    input_field: ClassVar[str | None] = None
    one_task: ClassVar[bool] = False   # its work is one process (DuckDB, NumPy): on Ray it runs as one task there
    version: ClassVar[int] = 1         # part of its fingerprint: raise it when the stage's output changes

    def __init__(self, config=None):
        self.config = config if config is not None else self.Config()
        if not isinstance(self.config, self.Config):
            raise TypeError(f"{self.name}: config must be a {self.Config.__name__}")

    def reads_every_split(self) -> bool:
        """Whether, configured so, the stage reads every named split of data given in memory (a ``DatasetDict``,
        ``{split: data}``) where ``split=`` names none, instead of ``train`` alone: a stage that needs splits."""
        return "split" in self.needs

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

    @classmethod
    def config_input(cls, config) -> list[str]:
        """The input ``config`` names itself (``input_field``'s last corpus), for a verb or call given none; []
        where the stage has no such field or it names none."""
        corpora = reference_values(getattr(config, cls.input_field)) if cls.input_field else []
        return [cls.referenced_path(corpora[-1])] if corpora else []

    @classmethod
    def pipeline_step(cls, config, spec_in):
        """The config of the one step of the pipeline a verb's command line spells (``--print-config``), read by
        a pipeline whose input is ``spec_in``: as it is, unless a stage reads more than its input through the
        command line's preset (compare)."""
        return config

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
        raise Refusal(f"unknown stage {name!r}" + (f"; did you mean {close[0]!r}?" if close else "")
                      + f" (stages: {', '.join(sorted(REGISTRY))})", code="unknown-setting")
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
