"""The audit's counting pass on Ray workers (``counting.count_local``'s twin): the input cut into units of rows,
each counted by a worker, their counts summed on workers by key range (``pipeline.engine.map_reduce``), so the
driver holds the summed counts and the strings they name, never one unit's counts.

Exact counting hands on compact hashed count arrays (``core.merged_counts``: each unit's counts cut into one
key range per CPU of the cluster, range p of every unit summed by one reducer); sketches, and the recount of
sketch mode's candidates, are small states merged by one reducer.
"""
from __future__ import annotations

from dataclasses import dataclass

import pyarrow as pa
import pyarrow.parquet as pq

from refinery.core import stats as zstats
from refinery.core.counts import counter_from_bytes
from refinery.core.exact_counts import ExactCounts
from refinery.core.feature_counts import FeatureCounts
from refinery.core.merged_counts import Dictionary, MergedCounts, hashed_partials, sum_partials
from refinery.io.corpus import Corpus, is_corpus, load
from refinery.io.inputs import expand_paths
from refinery.io.read_options import ReadOptions
from refinery.io.readers import read_file
from refinery.io.schema import Mapping
from refinery.io.location import get_fs
from refinery.methods.audit.config import AuditConfig
from refinery.methods.audit.counters import add_probe, count_table, new_counter
from refinery.pipeline.engine import cluster_cpus, map_reduce
from refinery.progress import progress

# A unit of a corpus is at most UNIT_ROWS rows (its counts take a worker about 0.6 GB on planted pairs; larger
# units leave less to sum, as common features recur in each) and at least MIN_UNIT_ROWS, and there are two per
# CPU where the input allows, so that every CPU counts.
UNIT_ROWS = 1 << 20
MIN_UNIT_ROWS = 1 << 16
COLUMNS = ("text_a", "text_b", "label")


@dataclass(frozen=True)
class Unit:
    """Rows one worker counts: row groups of a corpus's shard, or a whole raw file (``row_groups`` None)."""

    path: str
    row_groups: tuple | None = None


def corpus_units(files: list[str], storage_options: dict, cpus: int) -> list[Unit]:
    """Consecutive row groups of each shard, about ``UNIT_ROWS`` rows a unit (fewer, to give each CPU two)."""
    sizes = []
    for url in files:
        fs, path = get_fs(url, storage_options)
        with fs.open(path, "rb") as fh:
            meta = pq.ParquetFile(fh).metadata
        sizes.append([meta.row_group(i).num_rows for i in range(meta.num_row_groups)])
    total = sum(map(sum, sizes))
    target = min(UNIT_ROWS, max(MIN_UNIT_ROWS, total // (2 * cpus)))
    units = []
    for url, groups in zip(files, sizes):
        start, rows = 0, 0
        for i, n in enumerate(groups):
            rows += n
            if rows >= target or i == len(groups) - 1:
                units.append(Unit(url, tuple(range(start, i + 1))))
                start, rows = i + 1, 0
    return units


def _batches(unit: Unit, mapping: Mapping | None, opts: ReadOptions):
    """(rows, rejects) of a unit, a batch at a time."""
    if unit.row_groups is None:
        for batch in read_file(unit.path, mapping, opts):
            yield batch.rows, batch.rejects
        return
    fs, path = get_fs(unit.path, opts.storage_options)
    with fs.open(path, "rb") as fh:
        parquet = pq.ParquetFile(fh)
        columns = [c for c in COLUMNS if c in parquet.schema_arrow.names]
        for rb in parquet.iter_batches(batch_size=opts.batch_rows, row_groups=list(unit.row_groups), columns=columns):
            yield pa.Table.from_batches([rb]), None


def count_unit(unit: Unit, config: AuditConfig, only: pa.Array | None, partitions: int, mapping: Mapping | None,
               opts: ReadOptions) -> tuple[dict, list]:
    """In a worker: (rows, rows per label, rejects and, for exact counts, the dictionary of the strings hashed;
    the unit's counts as ``partitions`` parts: key ranges of ``HashedCounts``, or one counter state)."""
    hashed = config.counting == "exact" and only is None
    counter = FeatureCounts(config.features) if hashed else new_counter(config, only)
    totals, rejects = {}, []
    for rows, bad in _batches(unit, mapping, opts):
        if rows.num_rows and hashed:
            counter.add(rows)
        elif rows.num_rows:
            count_table(rows, config, counter, only)
        if rows.num_rows:
            zstats.add_totals(totals, zstats.rows_per_label(rows["label"]))
        if bad is not None and bad.num_rows:
            rejects.append(bad)
    read = {"rows": sum(totals.values()), "label_totals": totals,
            "rejects": pa.concat_tables(rejects) if rejects else None}
    if not hashed:
        return read, [counter.to_bytes()]
    read["dictionary"], parts = hashed_partials(counter, partitions)
    return read, parts


def merge_states(states: list[bytes]) -> bytes:
    """In a worker: counter states (sketches, or exact counts of a few candidates) merged into one."""
    merged = counter_from_bytes(states[0])
    for state in states[1:]:
        merged.merge(counter_from_bytes(state))
    return merged.to_bytes()


def count_ray(inputs, mapping: Mapping | None, opts: ReadOptions, config: AuditConfig,
              only: pa.Array | None = None, probe: bool = True, on_rejects=None):
    """The same pass as ``count_local`` on Ray workers: (counter, rejected rows). A raw file's rejects come back
    from its worker, a corpus's are read here; both reach ``on_rejects`` in the order of the inputs."""
    corpora = [u for u in inputs if is_corpus(u, opts.storage_options)]
    raw = [u for u in inputs if u not in corpora]
    if raw and mapping is None:
        raise ValueError("raw inputs need --preset or --map")
    if not inputs:
        raise ValueError("nothing to audit: no input")
    cpus = cluster_cpus()
    rejected, totals, dictionaries = 0, {}, []
    units = []
    if corpora:
        opened = [Corpus.open(u, opts.storage_options) for u in corpora]
        for corpus in opened:
            if on_rejects is not None and corpus.manifest.get("rejected"):
                on_rejects(corpus.read_rejects())
                rejected += corpus.manifest["rejected"]
        units += corpus_units([f for corpus in opened for f in corpus.files], opts.storage_options, cpus)
    units += [Unit(path) for path in expand_paths(raw, opts.storage_options)]
    hashed = config.counting == "exact" and only is None
    partitions = cpus if hashed else 1

    with progress(desc="audit" if only is None else "recount", unit=" rows") as bar:
        def mapped(read: dict) -> None:
            nonlocal rejected
            zstats.add_totals(totals, read["label_totals"])
            if read.get("dictionary") is not None:
                dictionaries.append(read["dictionary"])
            if read["rejects"] is not None:
                rejected += read["rejects"].num_rows
                if on_rejects is not None:
                    on_rejects(read["rejects"])
            bar.update(read["rows"])

        reduced = map_reduce(units, count_unit, sum_partials if hashed else merge_states, partitions,
                             shared={"config": config, "only": only, "partitions": partitions, "mapping": mapping,
                                     "opts": opts}, stage="audit", on_mapped=mapped) if units else []
    if hashed:
        counter = MergedCounts(Dictionary.joined(dictionaries), reduced, totals)
    else:
        counter = counter_from_bytes(reduced[0]) if reduced else new_counter(config, only)
    if probe and "hypo-only" in config.features.families:
        counter = counter if not hashed else ExactCounts().merge(counter)
        table, _ = load(inputs, mapping, opts)
        add_probe(counter, [table], config)
    return counter, rejected
