"""The executor of a filter: it reads the input, has the filter decide and annotate each row, writes kept/ and
rejected/, measures the audits of the verdict and commits, in one place for every filter and engine.

- local: one streaming loop in this process (the batches read, decided, counted and written in turn);
- Ray, on an input of finished corpora whose shards the workers reach: one task per input shard (``ShardUnit``).
  The worker reads the shard itself, numbers its rows (``numbered``: each row's number in the input, from the
  manifests' row counts, so a decision made in ``prepare`` is found by the row, wherever it is read), has the filter
  decide and annotate them, writes its kept and rejected rows as shards of the corpora being written
  (``corpus_writer.write_shard`` into ``CorpusWriter.shard_target``) and counts the audit's features of its rows
  and of the kept ones (``NamedCounts``), cut by feature into parts that reducers on workers sum
  (``engine.map_reduce``, ``named_counts.summed_part``), each handing on only the features the verdict's audits
  can test. The driver receives each task's ``UnitWritten`` — the shards' records, rows per label and reasons, no
  row and no count — adopts the shards in input order, joins the reducers' sums, and commits. The input's rejects
  (read from its corpora's rejects files) are the only rows the driver reads;
- Ray on raw inputs (or shards the workers cannot reach: local files on a cluster of several nodes): the driver
  reads the batches and ships them to tasks in a bounded window, and writes what comes back.

Rows in = kept + filtered out + input rejects, whichever the path.
"""
from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Iterator

import numpy as np
import pyarrow as pa

from refinery.pipeline.stage import Output, set_column
from refinery.pipeline.stage_input import StageInput, with_split

if TYPE_CHECKING:
    from refinery.io.corpus_writer import ShardTarget, WrittenShard
    from refinery.pipeline.output import StageOutput

ROW_NUMBER = "__row_number"   # the column a batch's rows carry their number in the input in, while a filter sees them
COUNTED = ("text_a", "text_b", "label")   # what the audit's features read of a row
TOP_REASONS = 20   # the reasons a filter's report shows
VERDICT_MIN_COUNT = 10   # the verdict's audits test features in at least so many rows (the audit's default)
PARTS_PER_CPU = 8   # on Ray, the verdict's counts are summed in at most so many parts per CPU (one per unit at least)


def numbered(rows: pa.Table, first: int) -> pa.Table:
    """``rows`` with each row's number in the input (``ROW_NUMBER``), the first being ``first``."""
    return rows.append_column(ROW_NUMBER, pa.array(np.arange(first, first + rows.num_rows, dtype=np.int64)))


def row_numbers(batch: pa.Table) -> np.ndarray:
    """Each row's number in the stage's input (0 for its first good row, in the order ``prepare`` reads them): where a
    filter finds what ``prepare`` decided of the row."""
    return batch[ROW_NUMBER].to_numpy()


def rows_among(rows: np.ndarray, batch: pa.Table) -> tuple[np.ndarray, np.ndarray]:
    """(whether each row of ``batch`` is among ``rows``, sorted numbers of rows in the input, and its place there)."""
    at = row_numbers(batch)
    place = np.minimum(np.searchsorted(rows, at), max(len(rows) - 1, 0))
    return (rows[place] == at if len(rows) else np.zeros(len(at), bool)), place


def decide_batch(rows: pa.Table, stage) -> tuple[pa.Table, pa.Table, list]:
    """(the kept rows, the dropped rows, each as the filter's ``annotate`` writes it, the reasons of the dropped rows)
    of one batch of ``numbered`` rows: the work of a filter that runs where the engine puts it."""
    keep, why = stage.decide(rows)
    keep = np.asarray(keep, bool)
    kept, dropped = (part.drop_columns([ROW_NUMBER]) for part in stage.annotate(rows, keep))
    return kept, dropped, [str(why[i]) for i in np.flatnonzero(~keep)]


def _count(counts, kept: pa.Table, dropped: pa.Table) -> None:
    """The batch counted once into ``counts`` (a two-mask ``WeightedCounts``): weights 1 (the input) and keep (the
    kept rows)."""
    columns = [c for c in COUNTED if c in kept.column_names]
    counts.add(pa.concat_tables([kept.select(columns), dropped.select(columns)]), None,
               np.repeat([1.0, 0.0], [kept.num_rows, dropped.num_rows]))


def _with_reasons(dropped: pa.Table, why: list) -> pa.Table:
    return set_column(dropped, "reason", pa.array(why, pa.string()))


@dataclass(frozen=True)
class ShardUnit:
    """One input shard as a worker reads it: its URL, the number of its first row in the stage's input, the split
    its rows belong to (``""``: none named) and the unit's place among the stage's units."""

    index: int
    file: str
    first_row: int
    split: str = ""
    storage_options: dict = field(default_factory=dict)


@dataclass(frozen=True)
class UnitWritten:
    """What a worker hands the driver of one ``ShardUnit``: the kept and rejected shards it wrote and the dropped
    rows' reasons by kind."""

    kept: WrittenShard
    dropped: WrittenShard
    reasons: Counter


def apply_unit(unit: ShardUnit, stage, kept_to: ShardTarget, dropped_to: ShardTarget, features, partitions: int
               ) -> tuple[UnitWritten, None, list]:
    """On a worker (``engine.map_reduce``'s map): ``unit`` read, decided and annotated by ``stage``, its kept and
    dropped rows written as shards of the corpora ``kept_to`` and ``dropped_to``; (what was written, nothing for
    every reducer, and, with ``features`` (a ``FeatureConfig``), the audit's counts of its rows and of its kept
    ones cut into ``partitions`` parts by feature (``NamedCounts.parts``); none without)."""
    from refinery.core.named_counts import NamedCounts
    from refinery.core.weighted_counts import WeightedCounts
    from refinery.io.corpus import concat, iter_parquet
    from refinery.io.corpus_writer import write_shard

    counts = WeightedCounts(None, features, 2, masks=2) if features is not None else None
    kept_parts, dropped_parts, reasons, first = [], [], Counter(), unit.first_row
    for table in iter_parquet([unit.file], unit.storage_options):
        rows = with_split(table, unit.split) if unit.split else table
        kept, dropped, why = decide_batch(numbered(rows, first), stage)
        first += rows.num_rows
        if counts is not None:
            _count(counts, kept, dropped)
        kept_parts.append(kept)
        dropped_parts.append(_with_reasons(dropped, why))
        reasons.update(map(stage.reason_kind, why))
    name = f"part-u{unit.index:05d}.parquet"
    written = UnitWritten(write_shard(kept_to, name, concat(kept_parts)),
                          write_shard(dropped_to, name, concat(dropped_parts)), reasons)
    return written, None, NamedCounts.of(counts.flush()).parts(partitions) if counts is not None else []


@dataclass(frozen=True)
class ShardPlan:
    """The input as workers read it: its shards (``ShardUnit``s, in input order) and its corpora's rejects files, on
    the store ``storage_options`` reach."""

    units: list
    reject_files: list
    storage_options: dict


def shard_plan(source: StageInput) -> ShardPlan | None:
    """The input's shards as units for workers that read and write themselves, or None where the driver must read
    them: the local engine, raw inputs, a corpus whose manifest records no rows per shard, or shards on this
    machine's disk when the Ray cluster has other nodes (their workers could not reach them, nor the output)."""
    from refinery.io.location import get_fs, is_local
    from refinery.io.row_ranges import input_shards
    from refinery.pipeline.engine import single_node

    options = source.opts.storage_options
    if source.engine != "ray" or source.mapping is not None:
        return None
    shards = input_shards(source.resolved_splits(), options)
    if shards is None:
        return None
    units, first = [], 0
    for shard in shards.shards:
        units.append(ShardUnit(len(units), shard.file, first, shard.split, options))
        first += shard.rows
    if units and is_local(get_fs(units[0].file, options)[0]) and not single_node():
        return None
    return ShardPlan(units, shards.reject_files, options)


@dataclass(frozen=True)
class FilterWritten:
    """What a filter wrote (``write_filtered``): the rows of kept/ and rejected/ (the leading rows included), the
    input's rejects, the rows of each label kept and filtered out, and the commonest reasons with their rows."""

    kept: int
    filtered_out: int
    input_rejects: int
    kept_by_label: dict[str, int]
    filtered_by_label: dict[str, int]
    reasons: dict[str, int]

    def to_json(self) -> dict:
        """As a filter's report.json keeps it."""
        return {"kept": self.kept, "filtered_out": self.filtered_out, "input_rejects": self.input_rejects,
                "by_label": {l: {"kept": self.kept_by_label[l], "filtered out": self.filtered_by_label[l]}
                             for l in self.kept_by_label},
                "reasons": self.reasons}


class _Tally:
    """What the driver adds up of the rows written: per label kept and filtered out, the reasons, the input's
    rejects."""

    def __init__(self):
        self.kept, self.dropped, self.reasons = Counter(), Counter(), Counter()
        self.input_rejects = 0

    def add(self, kept: dict, dropped: dict, reasons) -> None:
        """Rows per label kept and dropped, and the reasons (each one, or a count per reason)."""
        self.kept.update(kept)
        self.dropped.update(dropped)
        self.reasons.update(reasons)

    def written(self, kept: int, dropped: int) -> FilterWritten:
        """What was written (``kept`` and ``dropped``: the rows of kept/ and rejected/)."""
        labels = sorted(set(self.kept) | set(self.dropped))
        return FilterWritten(kept, dropped, self.input_rejects, {l: self.kept[l] for l in labels},
                             {l: self.dropped[l] for l in labels}, dict(self.reasons.most_common(TOP_REASONS)))


def prepared(stage, source: StageInput, out: StageOutput):
    """The filter ``stage`` with its ``prepare`` done: in this process, or, for a ``prepare_as_task`` filter under
    ``--engine ray``, as one Ray task (``ray_task.run_as_task``; on the driver's node where the output is on its local
    disk, for the checkpoints), which reads the input itself and hands back the filter with what it decided: the
    driver reads no row."""
    if source.engine != "ray" or not stage.prepare_as_task:
        stage.prepare(source, out)
        return stage
    from refinery.io.location import get_fs, is_local
    from refinery.pipeline.ray_task import run_as_task

    done, _ = run_as_task(_prepare, (stage, source, out), stage.resources, f"{stage.name}: prepare",
                          on_this_node=is_local(get_fs(out.folder, out.storage_options)[0]))
    return done


def _prepare(stage, source: StageInput, out: StageOutput):
    """In a Ray task: the filter after its ``prepare``."""
    stage.prepare(source, out)
    return stage


def write_filtered(stage, source: StageInput, out: StageOutput) -> tuple[FilterWritten, object]:
    """kept/ and rejected/ of the filter ``stage`` (its ``prepare`` done) written and committed: (what was written;
    the audits of the input and of the kept rows for the verdict
    (``WeightedAudits``), unless the filter ``judges_itself``). The kept rows' audit is kept with kept/
    (``FilterStage.kept_record``)."""
    from refinery.core.features import FeatureConfig
    from refinery.core.weighted_counts import audit_weightings   # numba: not at a verb's build

    features = None if stage.judges_itself else FeatureConfig().named(source.field_names, source.single_text)
    tally, plan = _Tally(), shard_plan(source)
    with out.corpus(Output.KEPT.value) as kept_w, out.corpus("rejected") as dropped_w:
        for part, writer in ((Output.KEPT.value, kept_w), ("rejected", dropped_w)):
            for rows, rejects in stage.leading_rows(part):
                writer.write(rows, rejects)
        writers = (kept_w, dropped_w)
        counts = _in_driver(stage, source, writers, tally, features) if plan is None else \
            _on_workers(stage, plan, writers, tally, features)
        if not tally.kept and not tally.dropped:
            kept_w.commit_all_rejected(source.paths)   # the rejects stay in kept/, named by the error
        audits = None
        if counts is not None and counts.rows:   # the rule the input's audit takes, recorded with both parts
            audits = audit_weightings(counts, (0, 1), min_count=VERDICT_MIN_COUNT, carried=source.prior)
            out.prior = audits.prior
        record = stage.kept_record(audits, kept_w.labels)
        if record is not None:
            record.attach_to(kept_w)
        kept, dropped = kept_w.commit().rows, dropped_w.commit().rows
    return tally.written(kept, dropped), audits


def _in_driver(stage, source: StageInput, writers: tuple, tally: _Tally, features):
    """The batches read here and decided in this process, or on Ray tasks in a bounded window; written here.
    Returns the audit's counts (a ``WeightedCounts``; None without ``features``)."""
    from refinery.core.stats import rows_per_label
    from refinery.core.weighted_counts import WeightedCounts
    from refinery.pipeline.engine import stream_map

    kept_w, dropped_w = writers
    counts = WeightedCounts(None, features, 2, masks=2) if features is not None else None

    def on_rejects(rejects: pa.Table) -> None:
        kept_w.write(rejects=rejects)
        tally.input_rejects += rejects.num_rows

    for kept, dropped, why in stream_map(_numbered_batches(source, on_rejects), decide_batch, source.engine,
                                         {"stage": stage}, stage=stage.name, resources=stage.resources):
        if counts is not None:
            _count(counts, kept, dropped)
        kept_w.write(kept)
        dropped_w.write(_with_reasons(dropped, why))
        tally.add(rows_per_label(kept["label"]), rows_per_label(dropped["label"]), map(stage.reason_kind, why))
    return counts


def _on_workers(stage, plan: ShardPlan, writers: tuple, tally: _Tally, features):
    """Each unit of ``plan`` read, decided, written and counted by a Ray task (``apply_unit``), its counts summed by
    feature on workers (``named_counts.summed_part``: only what the verdict's audits can test comes back); the
    driver adopts the shards in input order and writes the input's rejects into kept/. Returns the summed counts
    (a ``NamedCounts``; None without ``features``)."""
    from functools import partial

    from refinery.core.named_counts import NamedCounts, summed_part
    from refinery.io.corpus import iter_parquet
    from refinery.pipeline.engine import cluster_cpus, map_reduce
    from refinery.progress import progress

    kept_w, dropped_w = writers
    cpus = cluster_cpus()
    partitions = min(max(cpus, len(plan.units)), PARTS_PER_CPU * cpus) if features is not None else 0
    shared = {"stage": stage, "kept_to": kept_w.shard_target(), "dropped_to": dropped_w.shard_target(),
              "features": features, "partitions": partitions}
    with progress(total=len(plan.units), desc=f"{stage.name}: shards", unit=" shard") as bar:
        def adopt(unit: UnitWritten) -> None:
            kept_w.adopt(unit.kept)
            dropped_w.adopt(unit.dropped)
            tally.add(unit.kept.labels, unit.dropped.labels, unit.reasons)
            bar.update(1)

        sums = map_reduce(plan.units, apply_unit, partial(summed_part, min_count=VERDICT_MIN_COUNT), partitions,
                          shared=shared, stage=stage.name, resources=stage.resources, on_mapped=adopt)
    for rejects in iter_parquet(plan.reject_files, plan.storage_options):   # the input's rejects travel with kept/
        kept_w.write(rejects=rejects)
        tally.input_rejects += rejects.num_rows
    sums = [s for s in sums if s is not None]
    return NamedCounts.joined(sums) if sums else None


def _numbered_batches(source: StageInput, on_rejects) -> Iterator[pa.Table]:
    """The ``numbered`` rows of each batch of ``source`` that has rows; each batch's rejects handed to ``on_rejects``
    as it is read."""
    start = 0
    for batch in source.iter_batches():
        if batch.rejects.num_rows:
            on_rejects(batch.rejects)
        if batch.rows.num_rows:
            yield numbered(batch.rows, start)
            start += batch.rows.num_rows
