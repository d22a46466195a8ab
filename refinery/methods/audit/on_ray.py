"""The audit's counting pass on Ray workers (``counting.count_local``'s twin): the input cut into units of rows,
each counted by a worker, their counts summed on workers by key range (``pipeline.engine.map_reduce``), never one
unit's counts in the driver.

Exact counting hands on compact count arrays (``core.merged_counts``: each unit's counts cut into one part per
CPU of the cluster by a hash of each feature's strings, its strings put in the object store once for every
reducer; reducer p joins the strings part p of every unit uses and sums the part), so the driver is handed each
unit's rows, label totals and rejects; the reducers' parts stay in the object store (``HeldCounts``) for the task
that makes the statistics, the saved state and the report (``in_a_task``); sketches, and the recount of sketch mode's
candidates, are small states merged by one reducer. The ``hypo-only`` family's probe is trained by one Ray task
that reads the inputs itself and hands back its few counts (``hypo_only_counts``).
"""
from __future__ import annotations

from dataclasses import dataclass, field

import pyarrow as pa

from refinery.core import stats as zstats
from refinery.core.counts import counter_from_bytes
from refinery.core.feature_counts import FeatureCounts
from refinery.core.merged_counts import MergedCounts, sum_partials, unit_partials
from refinery.core.weighted_audit_counts import WEIGHT_COLUMN, WEIGHTED_COUNTS_SCHEMA, WeightedAuditCounts, summed_part
from refinery.io.read_options import ReadOptions
from refinery.io.read_units import Piece, unit_batches
from refinery.messages import Refusal
from refinery.methods.audit.config import AuditConfig
from refinery.core.audit_counters import count_table, new_counter
from refinery.methods.audit.counters import PROBE_COLUMNS, probe_counts
from refinery.pipeline.engine import cluster_cpus, map_reduce
from refinery.pipeline.ray_task import run_as_task
from refinery.pipeline.stage_input import StageInput
from refinery.progress import progress

COLUMNS = ("text_a", "text_b", "label")   # what a unit's counting reads of a corpus's rows


def count_unit(unit: tuple[Piece, ...], config: AuditConfig, only: pa.Array | None, partitions: int,
               opts: ReadOptions, weighted: bool = False) -> tuple[dict, tuple | None, list]:
    """In a worker: (rows, rows per label and rejects, for the driver; for exact counts the strings the unit's keys
    index, for every reducer; the unit's counts as ``partitions`` parts: ``UnitCounts``, or one counter state).
    ``weighted``: the unit's sums of weights and of their squares (``WeightedAuditCounts``), cut into ``partitions`` long tables by a
    hash of the feature, and Σ w per label for the driver."""
    partitioned = config.counting == "exact" and only is None and not weighted
    counter = FeatureCounts(config.features) if partitioned else new_counter(config, only, weighted)
    totals, rejects = {}, []
    for rows, bad in unit_batches(unit, opts, COLUMNS + ((WEIGHT_COLUMN,) if weighted else ())):
        if rows.num_rows and partitioned:
            counter.add(rows)
        elif rows.num_rows:
            count_table(rows, config, counter, only)
        if rows.num_rows:
            zstats.add_totals(totals, zstats.rows_per_label(rows["label"]))
        if bad is not None and bad.num_rows:
            rejects.append(bad)
    read = {"rows": sum(totals.values()), "label_totals": totals,
            "rejects": pa.concat_tables(rejects) if rejects else None}
    if weighted:
        return {**read, "weight_totals": counter.label_totals}, None, counter.parts(partitions)
    if not partitioned:
        return read, None, [counter.to_bytes()]
    return (read, *unit_partials(counter, partitions))


def merge_states(states: list[bytes], common: list) -> bytes:
    """In a worker: counter states (sketches, or exact counts of a few candidates) merged into one (``common``, the
    units' ``None``, unread)."""
    merged = counter_from_bytes(states[0])
    for state in states[1:]:
        merged.merge(counter_from_bytes(state))
    return merged.to_bytes()


def count_ray(source: StageInput, config: AuditConfig, only: pa.Array | None = None, probe: bool = True,
              on_rejects=None, weighted: bool = False):
    """The same pass as ``count_local`` on Ray workers: the counter. A raw file's rejects come back
    from its worker, a corpus's are read here; both reach ``on_rejects`` in the order of the inputs. ``weighted``:
    sums of weights, each reducer summing its features' parts of every unit (``weighted_audit_counts.summed_part``)."""
    if not source.paths:
        raise Refusal("nothing to audit: no input", code="empty-input")
    cpus = cluster_cpus()
    totals, opts = {}, source.opts
    units, corpus_rejects = source.read_units(cpus)   # corpus_rejects: (the unit they come before, the corpus)
    if on_rejects is None:
        corpus_rejects = []

    def hand_on_corpus_rejects(before: int) -> None:
        while corpus_rejects and corpus_rejects[0][0] <= before:
            on_rejects(corpus_rejects.pop(0)[1].read_rejects())

    partitioned = config.counting == "exact" and only is None
    partitions = cpus if partitioned else 1
    weights = {}   # Σ w per label, weighted
    with progress(desc="audit" if only is None else "recount", unit=" rows") as bar:
        mapped_units = 0

        def mapped(read: dict) -> None:
            """A unit's totals and rejects taken."""
            nonlocal mapped_units
            hand_on_corpus_rejects(mapped_units)
            mapped_units += 1
            zstats.add_totals(totals, read["label_totals"])
            zstats.add_totals(weights, read.get("weight_totals"))
            if read["rejects"] is not None and on_rejects is not None:
                on_rejects(read["rejects"])
            bar.update(read["rows"])

        reduce = summed_part if weighted else sum_partials if partitioned else merge_states
        reduced = map_reduce(units, count_unit, reduce, partitions,
                             shared={"config": config, "only": only, "partitions": partitions, "opts": opts,
                                     "weighted": weighted}, stage="audit", on_mapped=mapped,
                             held=partitioned and not weighted) if units else []
        hand_on_corpus_rejects(len(units))
    if weighted:
        counter = WeightedAuditCounts()
        counter.add_counts(pa.concat_tables(reduced) if reduced else WEIGHTED_COUNTS_SCHEMA.empty_table(), weights,
                           totals)
    elif partitioned:
        counter = HeldCounts(reduced, totals)
    else:
        counter = counter_from_bytes(reduced[0]) if reduced else new_counter(config, only)
    if probe and "hypo-only" in config.features.families:
        counts, _ = run_as_task(hypo_only_counts, (source, config, weighted), desc="hypo-only probe",
                                on_this_node=False)
        counter.add_counts(counts)
    return counter


@dataclass
class HeldCounts:
    """Exact counts summed on Ray's workers and left in its object store (the reducers' ``SummedPart``s, as refs),
    so that the statistics and the saved state are made by a task beside them (``in_a_task``), not by the driver:
    what the driver reads of them (rows, rows per label) and ``counter``, the ``MergedCounts`` of the process that
    takes them."""

    parts: list             # refs of the reducers' ``SummedPart``s
    label_totals: dict
    extra: list = field(default_factory=list)   # long counts of features no part holds (the hypo-only probe's)

    @property
    def rows(self) -> int:
        return sum(self.label_totals.values())

    def add_counts(self, counts: pa.Table) -> None:
        self.extra.append(counts)

    def counter(self) -> MergedCounts:
        import ray

        counter = MergedCounts(ray.get(self.parts), self.label_totals)
        for counts in self.extra:
            counter.add_counts(counts)
        return counter


def in_a_task(fn, args: tuple, out):
    """``fn(*args)`` as a Ray task beside the counts a ``HeldCounts`` left on the workers (on the driver's node where
    ``out``, the output it publishes through, is on its local disk): the audit's statistics and report, so that the
    driver is handed the summary, not every feature's counts."""
    from refinery.io.location import get_fs, is_local

    value, _ = run_as_task(fn, args, desc="audit statistics", on_this_node=is_local(get_fs(out.folder,
                                                                                             out.storage_options)[0]))
    return value


def hypo_only_counts(source: StageInput, config: AuditConfig, weighted: bool = False) -> pa.Table:
    """In a Ray task: the hypothesis-only probe's long counts over ``source`` (``counters.probe_counts``), read
    here, not by the driver."""
    return probe_counts(source.read_columns(PROBE_COLUMNS + ((WEIGHT_COLUMN,) if weighted else ())), config,
                        weighted)
