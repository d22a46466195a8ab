"""``UnitPieces``: a long row-for-row map (a model over a table's rows: ``engine.actor_map``) kept in units as
checkpoint pieces, so that a killed run's rerun maps again only the units it had not finished."""
from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Callable, Iterator

import pyarrow as pa

if TYPE_CHECKING:
    from refinery.io.checkpoints import Checkpoints
    from refinery.progress import Progress


@dataclass(frozen=True)
class UnitPieces:
    """Where a long map keeps what it finished: units of ``rows`` rows (rounded to whole batches, so that a unit's
    output is the same whichever units are mapped beside it), each kept as the piece ``<prefix>-<k>`` of
    ``checkpoints`` once mapped."""

    checkpoints: "Checkpoints"
    prefix: str
    rows: int

    def name(self, unit: int) -> str:
        return f"{self.prefix}-{unit:05d}"

    def mapped(self, table: pa.Table, blocks: Callable[[pa.Table], Iterator[pa.Table]], batch_size: int,
               bar: "Progress") -> pa.Table:
        """``table`` mapped row for row: the units a killed run finished read back, the others mapped in one pass
        (``blocks``: the output blocks of the rows given, in order) and each kept as soon as its rows are out."""
        unit_rows = max(1, self.rows // batch_size) * batch_size
        units = range(-(-table.num_rows // unit_rows))
        finished = set(self.checkpoints.done())
        done = {k: self.checkpoints.get(self.name(k)) for k in units if self.name(k) in finished}
        todo = [k for k in units if done.get(k) is None]
        rest = [table.slice(k * unit_rows, unit_rows) for k in todo]
        bar.update(table.num_rows - sum(unit.num_rows for unit in rest))
        stream = blocks(pa.concat_tables(rest)) if rest else iter(())
        held: list = []
        for k, unit in zip(todo, rest):   # each unit's rows cut from the stream as soon as they are all out
            while sum(b.num_rows for b in held) < unit.num_rows:
                held.append(next(stream))
            joined = pa.concat_tables(held)
            done[k], held = joined.slice(0, unit.num_rows), [joined.slice(unit.num_rows)]
            self.checkpoints.put(self.name(k), done[k])
        return pa.concat_tables([done[k] for k in units]) if units else table.slice(0, 0)
