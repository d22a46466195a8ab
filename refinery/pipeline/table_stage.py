"""``TableStage``: a stage computed over its whole input at once in DuckDB (AUDAC's up-sampling plan, the sentence
graph's leakage features, the leakage-neutral weights over them); its reading, writing and commit are the table
executor's (``write_computed``), never the stage's.

The executor loads the input's rows into the DuckDB table ``rows`` (``row_id``: the position in input order; named
splits in a ``split`` column, an unnamed input's rows under ``unnamed_split``) with DuckDB's memory at most
``rows_memory`` (past it its tables spill into the process's scratch folder), and hands them with the input's
rejects to the stage's ``compute`` (``TableInput``). ``compute`` returns the corpora to write (``CorpusPart``: their
rows as Arrow tables in order, the rejects they answer for, what their manifest keeps, and what the stage measured of
the rows once they are written: the audit prior rule and the audit kept with the corpus); the executor writes and
commits each, then ``result`` publishes the report and gives the stage's result, the connection still open (a report
may stream a query's rows into a file). On Ray the whole runs as one task (``one_task``) on a node with the memory
the stage declares (``resources``), so the rows never pass the driver.
"""
from __future__ import annotations

from abc import abstractmethod
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Callable, ClassVar, Iterable

import pyarrow as pa

from refinery.pipeline.stage import Stage, StageResult
from refinery.pipeline.stage_input import StageInput

if TYPE_CHECKING:
    from refinery.core.audit_record import AuditRecord
    from refinery.core.stats import Prior
    from refinery.io.records import CorpusManifest
    from refinery.pipeline.output import StageOutput


@dataclass(frozen=True)
class TableInput:
    """The input as a table stage computes over it: ``con``, a DuckDB connection holding table ``rows``, the input's
    ``rejects`` (carried into the corpora it writes), ``source``, what was read (its splits, field names and
    carried prior), ``splits``, its paths by the split their rows were loaded under (an unnamed input's under
    the stage's ``unnamed_split``), and ``checkpoints(task, settings)``: the finished pieces of a long computation kept
    in the output (``io.checkpoints.Checkpoints``), which a killed run's rerun reads back. A stage that reads its
    rows itself, as batches of ``source`` (``queries_rows`` false), gets no ``con`` and no ``rejects`` (its batches
    carry them)."""

    con: object
    rejects: pa.Table | None
    source: StageInput
    splits: dict
    checkpoints: Callable

    def table(self) -> pa.Table:
        """Every row of ``rows`` in memory, in input order, without ``row_id``: what a computation over the whole
        table starts from (a model fit on it, RAZOR's rounds, IBADR's pool)."""
        return self.con.sql("SELECT * EXCLUDE (row_id) FROM rows ORDER BY row_id").to_arrow_table()


@dataclass(frozen=True)
class PartAudit:
    """What a stage measured of a corpus's rows as they were written: the audit's prior rule it decided (recorded in
    the corpus's manifest; None: the one already recorded) and the audit kept with the corpus (None: none)."""

    prior: "Prior | None" = None
    record: "AuditRecord | None" = None


@dataclass
class CorpusPart:
    """A corpus a table stage writes: the part ``name`` of its folder (``""``: the folder itself), its ``rows`` (Arrow
    tables, in order; consumed once, as they are written), the input's ``rejects`` it answers for, the ``extra``
    entries of its manifest, the ``settings`` it records (None: the stage's), and ``audit``: given the rows per label
    written, once every row is, what the stage measured of them (``PartAudit``). ``rejects_from``: a computation
    that finds the input's rejects as it runs (a counting pass over the input's batches), called with the function
    it hands each table of them to, as they come, after the rows; one that raises leaves the part unwritten."""

    name: str
    rows: Iterable[pa.Table]
    rejects: pa.Table | None = None
    extra: dict = field(default_factory=dict)
    settings: dict | None = None
    audit: Callable[[dict], PartAudit] | None = None
    rejects_from: Callable[[Callable[[pa.Table], None]], None] | None = None


class TableStage(Stage):
    """A stage over the whole input in DuckDB: ``compute`` the corpora to write from the input's rows, then
    ``result`` (the report published, the accounting) once they are committed."""

    one_task = True
    rows_memory: ClassVar[int] = 1 << 30          # DuckDB's memory for the rows and the stage's queries (bytes)
    unnamed_split: ClassVar[str | None] = None   # the split of an unnamed input's rows (None: no split column added)

    def queries_rows(self) -> bool:
        """Whether ``compute`` queries the input's rows in DuckDB (loaded first as table ``rows``); False: it reads
        them itself in passes of the input's batches (``TableInput.source.iter_batches``)."""
        return True

    @abstractmethod
    def compute(self, rows: TableInput) -> list[CorpusPart]:
        """The corpora to write from the input (``rows``), in the order they are written."""

    @abstractmethod
    def result(self, manifests: dict, out: "StageOutput") -> StageResult:
        """The report published through ``out`` and the stage's result, once the corpora ``compute`` gave are
        committed (``manifests``: {part: its ``io.records.CorpusManifest``: rows, rejected, labels, …})."""

    def run(self, source: StageInput, out: "StageOutput") -> StageResult:
        return write_computed(self, source, out)


def write_computed(stage: TableStage, source: StageInput, out: "StageOutput") -> StageResult:
    """Load ``source``'s rows into DuckDB (where the stage queries them), write and commit the corpora
    ``stage.compute`` gives, then ``stage.result``; the connection is closed (its spill removed) however it ends."""
    from refinery.io import queries

    named = source.named
    splits = source.splits if named or stage.unnamed_split is None else {stage.unnamed_split: source.paths}
    if not stage.queries_rows():
        computed = stage.compute(TableInput(None, None, source, splits, out.checkpoints))
        return stage.result({part.name: _committed(part, out) for part in computed}, out)
    con = queries.connect(most_memory=stage.rows_memory)
    try:
        rejects = queries.load_input(con, splits, source.mapping, source.opts,
                                     with_split=named or stage.unnamed_split is not None)
        manifests = {part.name: _committed(part, out)
                     for part in stage.compute(TableInput(con, rejects, source, splits, out.checkpoints))}
        return stage.result(manifests, out)
    finally:
        con.close()


def _committed(part: CorpusPart, out: "StageOutput") -> "CorpusManifest":
    """``part`` written as a corpus of ``out`` and committed: its manifest."""
    with out.corpus(part.name, settings=part.settings, extra=part.extra) as writer:
        for rows in part.rows:
            writer.write(rows)
        if part.rejects is not None:
            writer.write(rejects=part.rejects)
        if part.rejects_from is not None:
            part.rejects_from(lambda rejects: writer.write(rejects=rejects))
        if part.audit is not None:
            measured = part.audit(writer.labels)
            if measured.prior is not None:
                out.prior = measured.prior   # read by the manifest at the commit
            if measured.record is not None:
                measured.record.attach_to(writer)
        return writer.commit()
