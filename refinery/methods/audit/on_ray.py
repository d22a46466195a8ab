"""The audit's counting pass on Ray workers (``counting.count_local``'s twin): the input cut into units of rows,
each counted by a worker, their counts summed on workers by key range (``pipeline.engine.map_reduce``), so the
driver holds the summed counts and the strings they name, never one unit's counts.

Exact counting hands on compact count arrays (``core.merged_counts``: each unit's counts cut into one part per
CPU of the cluster by a hash of each feature's strings, its strings put in the object store once for every
reducer; reducer p joins the strings part p of every unit uses and sums the part), so the driver is handed each
unit's rows, label totals and rejects, then the reducers' parts; sketches, and the recount of sketch mode's
candidates, are small states merged by one reducer. The ``hypo-only`` family's probe is trained by one Ray task
that reads the inputs itself and hands back its few counts (``hypo_only_counts``).
"""
from __future__ import annotations

from dataclasses import dataclass

import pyarrow as pa
import pyarrow.parquet as pq

from refinery.core import stats as zstats
from refinery.core.counts import counter_from_bytes
from refinery.core.feature_counts import FeatureCounts
from refinery.core.merged_counts import MergedCounts, sum_partials, unit_partials
from refinery.core.weighted_audit_counts import WEIGHT_COLUMN, WEIGHTED_COUNTS_SCHEMA, WeightedAuditCounts, summed_part
from refinery.io.corpus import Corpus, corpus_of, input_mapping, load
from refinery.io.inputs import expand_paths
from refinery.io.read_options import ReadOptions
from refinery.io.readers import read_file
from refinery.io.schema import Mapping
from refinery.io.location import get_fs
from refinery.methods.audit.config import AuditConfig
from refinery.core.audit_counters import count_table, new_counter
from refinery.methods.audit.counters import probe_counts
from refinery.pipeline.engine import cluster_cpus, map_reduce, run_as_task
from refinery.progress import progress

# A corpus is cut into units of equal rows, as few as give every CPU one, each at most UNIT_ROWS (a worker
# counting 5M planted pairs peaks at 1.3 GB; the larger a unit, the fewer counts there are to sum, as the common
# features recur in each) and at least MIN_UNIT_ROWS; the number of units is a multiple of the CPUs' where the
# input allows, so that no round of units leaves CPUs idle.
UNIT_ROWS = 1 << 23
MIN_UNIT_ROWS = 1 << 16
COLUMNS = ("text_a", "text_b", "label")


@dataclass(frozen=True)
class Piece:
    """Rows of one file: row groups of a corpus's shard, or a whole raw file (``row_groups`` None) read through
    ``mapping`` (``io.corpus.input_mapping``'s: the one given, or refinery's own columns where the file has them)."""

    path: str
    row_groups: tuple | None = None
    mapping: Mapping | None = None


def corpus_units(files: list[str], storage_options: dict, cpus: int) -> list[tuple[Piece, ...]]:
    """The shards' row groups in order, cut into units of about equal rows (see ``UNIT_ROWS``); a unit may span
    shards."""
    sizes = []
    for url in files:
        fs, path = get_fs(url, storage_options)
        with fs.open(path, "rb") as fh:
            meta = pq.ParquetFile(fh).metadata
        sizes.append([meta.row_group(i).num_rows for i in range(meta.num_row_groups)])
    total = sum(map(sum, sizes))
    rounds = max(1, -(-total // (cpus * UNIT_ROWS)))
    target = max(MIN_UNIT_ROWS, -(-total // (rounds * cpus)))
    units, pieces, rows = [], [], 0
    for url, groups in zip(files, sizes):
        start = 0
        for i, n in enumerate(groups):
            rows += n
            if rows >= target:
                units.append((*pieces, Piece(url, tuple(range(start, i + 1)))))
                pieces, rows, start = [], 0, i + 1
        if start < len(groups):
            pieces.append(Piece(url, tuple(range(start, len(groups)))))
    return units + ([tuple(pieces)] if pieces else [])


def _batches(unit: tuple[Piece, ...], opts: ReadOptions, weighted: bool = False):
    """(rows, rejects) of a unit's pieces, a batch at a time (with ``weighted``, a corpus's ``weight`` too)."""
    for piece in unit:
        if piece.row_groups is None:
            for batch in read_file(piece.path, piece.mapping, opts):
                yield batch.rows, batch.rejects
            continue
        fs, path = get_fs(piece.path, opts.storage_options)
        with fs.open(path, "rb") as fh:
            parquet = pq.ParquetFile(fh)
            columns = [c for c in COLUMNS + ((WEIGHT_COLUMN,) if weighted else ()) if c in parquet.schema_arrow.names]
            for rb in parquet.iter_batches(batch_size=opts.batch_rows, row_groups=list(piece.row_groups),
                                           columns=columns):
                yield pa.Table.from_batches([rb]), None


def count_unit(unit: tuple[Piece, ...], config: AuditConfig, only: pa.Array | None, partitions: int,
               opts: ReadOptions, weighted: bool = False) -> tuple[dict, tuple | None, list]:
    """In a worker: (rows, rows per label and rejects, for the driver; for exact counts the strings the unit's keys
    index, for every reducer; the unit's counts as ``partitions`` parts: ``UnitCounts``, or one counter state).
    ``weighted``: the unit's sums of weights and of their squares (``WeightedAuditCounts``), cut into ``partitions`` long tables by a
    hash of the feature, and Σ w per label for the driver."""
    partitioned = config.counting == "exact" and only is None and not weighted
    counter = FeatureCounts(config.features) if partitioned else new_counter(config, only, weighted)
    totals, rejects = {}, []
    for rows, bad in _batches(unit, opts, weighted):
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


def count_ray(inputs, mapping: Mapping | None, opts: ReadOptions, config: AuditConfig,
              only: pa.Array | None = None, probe: bool = True, on_rejects=None, weighted: bool = False):
    """The same pass as ``count_local`` on Ray workers: the counter. A raw file's rejects come back
    from its worker, a corpus's are read here; both reach ``on_rejects`` in the order of the inputs. ``weighted``:
    sums of weights, each reducer summing its features' parts of every unit (``weighted_audit_counts.summed_part``)."""
    if not inputs:
        raise ValueError("nothing to audit: no input")
    cpus = cluster_cpus()
    totals = {}
    units, corpus_rejects = [], []   # corpus_rejects: (the unit they come before, the corpus)
    for path in inputs:
        read_by = input_mapping(path, mapping, opts)   # as the local engine reads it (``io.corpus``)
        if read_by is None:   # a corpus, or a stage's folder: the corpus it made
            corpus = Corpus.open(corpus_of(path, opts.storage_options), opts.storage_options)
            if on_rejects is not None and corpus.manifest.get("rejected"):
                corpus_rejects.append((len(units), corpus))
            units += corpus_units(corpus.files, opts.storage_options, cpus)
        else:
            units += [(Piece(file, mapping=read_by),) for file in expand_paths([path], opts.storage_options)]

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
                                     "weighted": weighted}, stage="audit", on_mapped=mapped) if units else []
        hand_on_corpus_rejects(len(units))
    if weighted:
        counter = WeightedAuditCounts()
        counter.add_counts(pa.concat_tables(reduced) if reduced else WEIGHTED_COUNTS_SCHEMA.empty_table(), weights,
                           totals)
    elif partitioned:
        counter = MergedCounts(reduced, totals)
    else:
        counter = counter_from_bytes(reduced[0]) if reduced else new_counter(config, only)
    if probe and "hypo-only" in config.features.families:
        counts, _ = run_as_task(hypo_only_counts, (inputs, mapping, opts, config, weighted), desc="hypo-only probe",
                                on_this_node=False)
        counter.add_counts(counts)
    return counter


def hypo_only_counts(inputs, mapping: Mapping | None, opts: ReadOptions, config: AuditConfig,
                     weighted: bool = False) -> pa.Table:
    """In a Ray task: the hypothesis-only probe's long counts over ``inputs`` (``counters.probe_counts``), read
    here, not by the driver."""
    table, _ = load(inputs, mapping, opts)
    return probe_counts(table, config, weighted)
