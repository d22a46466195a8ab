"""The executor of a map stage (``pipeline.map_stage``): reads the input, has the stage's model map each unit of
requests, writes every unit's parts as a checkpoint piece, and commits the pieces as the stage's corpora, in one
place for every map stage and engine.

The run's requests (``requests_per_row`` per good row, the first ``row_limit`` rows) are cut into units of
``unit_requests``, numbered; unit k covers requests ``[k·U, (k+1)·U)`` and reads the rows that make them. Each unit's
parts are written by whoever mapped it into the piece ``shard-<k>`` of the stage's checkpoints (``io.checkpoints``,
keyed by the stage's settings, its input's fingerprints and labels): a killed run's finished pieces are kept and a
rerun maps only the other units. Once every unit is done, the driver takes each piece's files into the corpora in
unit order (``ShardTarget.take``: a hard link, or the store's own copy) and commits them: the output is the rows
in input order, whatever the engine, however often the run was killed.

- local: one ``UnitWorker`` in this process (the model loaded once), units in turn, progress per batch;
- Ray, on an input of finished corpora whose shards the workers reach: ``actors`` Ray actors (a model each, GPUs
  where the stage asks), each unit read by its actor from the input's shards (``io.row_ranges``) and written by it;
  the driver reads the pieces' records and the input's rejects, never a row;
- otherwise (raw inputs, or local files on a cluster of several nodes): the driver reads the rows and hands each
  unit its own; where the workers cannot reach the output, they hand back the parts and the driver writes them.

Rows in = rows mapped + rows beyond the limit + input rejects.
"""
from __future__ import annotations

import contextlib
import json
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Callable, Iterator

import pyarrow as pa

from refinery.pipeline.stage_input import StageInput, with_split

if TYPE_CHECKING:
    from refinery.io.checkpoints import Checkpoints
    from refinery.io.row_ranges import InputShards
    from refinery.pipeline.output import StageOutput

WRITTEN = "written.json"   # a piece's record of the shards it holds (``WrittenShard.to_json`` per part)


@dataclass(frozen=True)
class Mapped:
    """What a map stage's run wrote: the input's good rows, those mapped (the rest were beyond the stage's limit), the
    input's rejects, the requests made, each part's rows and rows per label, its units and those read back from a
    killed run's checkpoints, and the engine it ran on."""

    rows: int
    mapped: int
    input_rejects: int
    requests: int
    written: dict   # {part: rows}
    labels: dict    # {part: {label: rows}}
    units: int
    resumed: int
    engine: str

    @property
    def beyond_limit(self) -> int:
        return self.rows - self.mapped


@dataclass(frozen=True)
class MapUnit:
    """Requests ``[first_request, first_request + requests)`` of the run, ``per_row`` per input row: the rows
    ``[first_row, stop_row)`` make them (the first ``skip`` requests of those rows belong to the unit before).
    ``rows``: the rows themselves, where the driver read them."""

    index: int
    first_request: int
    requests: int
    per_row: int
    rows: pa.Table | None = None

    @property
    def name(self) -> str:
        return f"shard-{self.index:05d}"

    @property
    def first_row(self) -> int:
        return self.first_request // self.per_row

    @property
    def stop_row(self) -> int:
        return -(-(self.first_request + self.requests) // self.per_row)

    @property
    def skip(self) -> int:
        return self.first_request - self.first_row * self.per_row


def units_of(rows: int, per_row: int, unit_requests: int) -> list[MapUnit]:
    """The units of ``rows`` rows' requests."""
    total = rows * per_row
    return [MapUnit(i, start, min(unit_requests, total - start), per_row)
            for i, start in enumerate(range(0, total, unit_requests))]


class UnitWorker:
    """The stage's model, loaded once, mapping units: each unit's rows read from ``shards`` (or carried by the unit),
    its requests made and mapped, its parts written as a piece of ``checkpoints`` (or, without, handed back)."""

    def __init__(self, stage, shards: InputShards | None, labels: list, checkpoints: Checkpoints | None):
        from refinery.io.row_ranges import RowReader

        self.stage, self.labels, self.checkpoints = stage, labels, checkpoints
        self.reader = RowReader(shards) if shards is not None else None
        self.model = stage.load_model()

    def __call__(self, unit: MapUnit, advance: Callable[[float], None] = lambda done: None
                 ) -> tuple[MapUnit, dict | None]:
        rows = unit.rows
        if rows is None:
            rows = pa.concat_tables([with_split(t, s.split) if s.split else t
                                     for s, t in self.reader.read(unit.first_row, unit.stop_row)],
                                    promote_options="permissive")
        requests = self.stage.requests(rows, self.labels).slice(unit.skip, unit.requests)
        parts = self.stage.apply(requests, self.model, advance)
        if self.checkpoints is None:
            return _carried(unit), parts
        write_piece(self.checkpoints, unit.name, parts)
        return _carried(unit), None


def _carried(unit: MapUnit) -> MapUnit:
    """``unit`` without its rows (what travels back to the driver)."""
    return replace(unit, rows=None)


def write_piece(checkpoints: Checkpoints, name: str, parts: dict) -> None:
    """The parts of a unit as the checkpoint piece ``name``: a Parquet file per part and their records, whole or not
    at all."""
    from refinery.io.corpus_writer import write_shard

    with checkpoints.folder(name) as piece:
        written = {part: write_shard(piece, f"{part}.parquet", rows).to_json() for part, rows in parts.items()}
        piece.write_text(WRITTEN, json.dumps(written))


def write_mapped(stage, source: StageInput, out: StageOutput) -> Mapped:
    """Every unit of the stage's requests mapped (those a killed run finished read back), its parts committed as the
    stage's corpora in unit order: what was written."""
    from refinery.io.checkpoints import CHECKPOINTS
    from refinery.io.corpus import iter_parquet
    from refinery.io.redaction import redact
    from refinery.io.row_ranges import input_shards
    from refinery.progress import announce, progress

    options = source.opts.storage_options
    shards = input_shards(source.resolved_splits(), options) if source.mapping is None else None
    labels = _labels(stage, source, shards)
    per_row, size = stage.requests_per_row(labels), stage.unit_requests()
    checkpoints = out.checkpoints(stage.name, {"settings": redact(stage.checkpoint_settings()), "labels": labels,
                                               "unit_requests": size})
    done = set(checkpoints.done())
    if done:
        announce(f"{stage.name}: resuming after {len(done)} finished shard(s) of an interrupted run "
                 f"(checkpoints in {out.url(CHECKPOINTS)})")
    limit = stage.row_limit()
    rows = rejects = 0
    with contextlib.ExitStack() as stack:
        writers = {part: stack.enter_context(out.corpus(part)) for part in stage.parts}
        first = writers[stage.parts[0]]
        read_by_workers = shards is not None and _reached(shards.shards[0].file if shards.shards else out.folder,
                                                          source.engine, options)
        if read_by_workers:
            rows = shards.rows
            units = units_of(rows if limit is None else min(rows, limit), per_row, size)
            cut, total = iter(units), sum(u.requests for u in units)
        else:   # the rows are known as they are read: a limit bounds them
            units, total = [], None if limit is None else limit * per_row
            stream = _Streamed(source, per_row, size, limit, lambda batch: first.write(rejects=batch))
            cut = stream.units(units)
        with progress(total=total, desc=stage.name, unit=" request") as bar:
            todo = _to_map(cut, done, bar)
            _map_units(stage, todo, shards if read_by_workers else None, labels, checkpoints, source, out, bar)
        if read_by_workers:
            for batch in iter_parquet(shards.reject_files, options):   # the input's rejects travel with the output
                first.write(rejects=batch)
                rejects += batch.num_rows
        else:
            rows, rejects = stream.rows, stream.rejects
        if not rows:
            first.commit_all_rejected(source.paths)
        _take_pieces(units, checkpoints, writers)
        written = {part: writer.commit().rows for part, writer in writers.items()}
        labels_written = {part: writer.labels for part, writer in writers.items()}
    checkpoints.clear()
    mapped = rows if limit is None else min(rows, limit)
    return Mapped(rows, mapped, rejects, mapped * per_row, written, labels_written, len(units),
                  len([u for u in units if u.name in done]), source.engine)


def _to_map(units: Iterator[MapUnit], done: set, bar) -> Iterator[MapUnit]:
    """The units not among the ``done`` pieces; those that are counted on ``bar`` as they pass."""
    for unit in units:
        if unit.name in done:
            bar.update(unit.requests)
        else:
            yield unit


def _labels(stage, source: StageInput, shards: InputShards | None) -> list:
    """The input's labels, sorted, where the stage's requests need them: its corpora's manifests', or a pass over a
    raw input's labels; none otherwise."""
    if not stage.labels_needed():
        return []
    if shards is not None:
        return sorted(shards.labels)
    found: set = set()
    for batch in source.iter_batches():
        found.update(v for v in batch.rows["label"].to_pylist() if v is not None)
    return sorted(found)


def _reached(url: str, engine: str, options: dict) -> bool:
    """Whether the workers of ``engine`` reach ``url`` (a local file, on a Ray cluster of several nodes, they do
    not)."""
    from refinery.io.location import get_fs, is_local
    from refinery.pipeline.engine import single_node

    return engine != "ray" or not is_local(get_fs(url, options)[0]) or single_node()


def _map_units(stage, todo: Iterator[MapUnit], shards: InputShards | None, labels: list, checkpoints: Checkpoints,
               source: StageInput, out: StageOutput, bar) -> None:
    """Each unit of ``todo`` mapped and written as a piece: in this process, or on the stage's Ray actors."""
    from refinery.pipeline.engine import actor_pool_map
    from refinery.progress import RowsDone

    if source.engine != "ray":
        worker = UnitWorker(stage, shards, labels, checkpoints)
        for unit in todo:
            advance = RowsDone(bar)   # the unit's requests done so far, on the bar
            worker(unit, advance)
            advance(unit.requests)
        return
    writes = _reached(out.folder, "ray", out.storage_options)

    def on_done(value: tuple) -> None:
        unit, parts = value
        if parts is not None:   # the workers cannot reach the output: written here
            write_piece(checkpoints, unit.name, parts)
        bar.update(unit.requests)

    actor_pool_map(todo, UnitWorker, {"stage": stage, "shards": shards, "labels": labels,
                                      "checkpoints": checkpoints if writes else None},
                   actors=stage.actors(), resources=stage.worker_resources(), stage=stage.name, on_done=on_done)


def _take_pieces(units: list[MapUnit], checkpoints: Checkpoints, writers: dict) -> None:
    """Each unit's piece taken into the corpora being written, in unit order (its files linked or copied by the
    store: the driver reads only each piece's record)."""
    from refinery.io.corpus_writer import WrittenShard

    targets = {part: writer.shard_target() for part, writer in writers.items()}
    for unit in units:
        record = checkpoints.read_json(unit.name, WRITTEN)
        if record is None:
            raise RuntimeError(f"the piece {unit.name} of {checkpoints.root} was not written")
        for part, writer in writers.items():
            shard = WrittenShard.from_json(record[part])
            writer.adopt(targets[part].take(shard, checkpoints.url_of(unit.name), f"part-u{unit.index:05d}.parquet"))


class _Streamed:
    """The units of an input the driver reads (raw files, or shards the workers cannot reach), each carrying its
    rows: the rows read once, held until the units that need them are made. Counts the good rows and hands the
    input's rejects to ``on_rejects`` as they pass."""

    def __init__(self, source: StageInput, per_row: int, size: int, limit: int | None,
                 on_rejects: Callable[[pa.Table], None]):
        self.source, self.per_row, self.size, self.limit, self.on_rejects = source, per_row, size, limit, on_rejects
        self.rows = self.rejects = 0

    def units(self, made: list) -> Iterator[MapUnit]:
        """Every unit in order with its rows, appended to ``made`` without them as it is cut (the finished ones too:
        the caller skips them)."""
        held, held_first = [], 0   # the rows read and not yet wholly used, and the number of the first
        mapped = 0
        for batch in self.source.iter_batches():
            if batch.rejects.num_rows:
                self.on_rejects(batch.rejects)
                self.rejects += batch.rejects.num_rows
            good = batch.rows
            self.rows += good.num_rows
            room = good.num_rows if self.limit is None else max(min(good.num_rows, self.limit - mapped), 0)
            if room:
                held.append(good.slice(0, room))
                mapped += room
            while held and mapped * self.per_row >= (len(made) + 1) * self.size:
                unit, held, held_first = self._cut(len(made), held, held_first, self.size)
                made.append(_carried(unit))
                yield unit
        rest = mapped * self.per_row - len(made) * self.size
        if rest > 0:
            unit, _, _ = self._cut(len(made), held, held_first, rest)
            made.append(_carried(unit))
            yield unit

    def _cut(self, index: int, held: list, held_first: int, requests: int) -> tuple[MapUnit, list, int]:
        """(unit ``index``, ``requests`` long, with its rows; the rows still needed after it; the first's number)."""
        unit = MapUnit(index, index * self.size, requests, self.per_row)
        table = pa.concat_tables(held, promote_options="permissive")
        keep_from = (unit.first_request + requests) // self.per_row   # the next unit's first row
        return (replace(unit, rows=table.slice(unit.first_row - held_first, unit.stop_row - unit.first_row)),
                [table.slice(keep_from - held_first)], keep_from)
