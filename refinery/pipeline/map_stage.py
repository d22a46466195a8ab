"""``MapStage``: a stage whose rows become other rows through a model loaded once per worker (generation: a row's
prompts become generated rows), with reading, resuming, writing and the commit done once, by the map executor.

A map stage declares how many requests each input row makes (``requests_per_row``: fixed for a run, so that the
requests of any range of rows are known without reading the others), the requests of a batch of rows
(``requests``), its model (``load_model``: once per worker) and what a unit's requests become (``apply``: {part:
rows}, one table per corpus it writes, ``parts``). The executor (``pipeline.map_executor``) cuts the run's requests
into units of ``unit_requests``, has workers read each unit's rows, apply the stage and write the unit's parts as a
checkpoint piece, and commits the pieces as the stage's corpora in input order; a killed run redoes only the units
it had not finished. ``result`` turns what was written (``Mapped``) into the stage's report.
"""
from __future__ import annotations

from abc import abstractmethod
from typing import TYPE_CHECKING, Callable, ClassVar

import pyarrow as pa

from refinery.pipeline.config import to_dict
from refinery.pipeline.map_executor import Mapped, write_mapped
from refinery.pipeline.stage import Output, Resources, Stage, StageResult
from refinery.pipeline.stage_input import StageInput

if TYPE_CHECKING:
    from refinery.pipeline.output import StageOutput


class MapStage(Stage):
    output = Output.CORPUS
    parts: ClassVar[tuple] = (Output.CORPUS.value,)   # the corpora it writes (the first holds the input's rejects)

    def labels_needed(self) -> bool:
        """Whether its requests need every label of the input (``requests``' ``labels``)."""
        return False

    def row_limit(self) -> int | None:
        """Map only the input's first rows (the rest are counted, beyond the limit); None: every row."""
        return None

    def unit_requests(self) -> int:
        """Requests per unit: what a worker does at once, and what a killed run may have to redo."""
        return 1024

    def actors(self) -> int:
        """Workers (Ray actors, each with its own model) under ``--engine ray``."""
        return 1

    def worker_resources(self) -> Resources:
        """What each worker asks the engine for (GPUs for a model that needs one)."""
        return self.resources

    def checkpoint_settings(self) -> dict:
        """The settings that shape its output: a killed run's pieces are reused while they are unchanged (every
        setting by default)."""
        return to_dict(self.config)

    @abstractmethod
    def requests_per_row(self, labels: list) -> int:
        """How many requests each input row makes (``labels``: the input's, where ``labels_needed``)."""

    @abstractmethod
    def requests(self, rows: pa.Table, labels: list) -> pa.Table:
        """The requests of ``rows``: ``requests_per_row`` for each, in row order."""

    @abstractmethod
    def load_model(self):
        """The model the requests go through, loaded once per worker."""

    @abstractmethod
    def apply(self, requests: pa.Table, model, advance: Callable[[float], None]) -> dict:
        """{part: rows} for ``requests`` (a unit's) through ``model``; ``advance(n)`` says n of them are done."""

    @abstractmethod
    def result(self, mapped: Mapped, out: StageOutput) -> StageResult:
        """The report published and the stage's result, once its corpora are."""

    def run(self, source: StageInput, out: StageOutput) -> StageResult:
        """Every unit of requests mapped where the engine puts it, its parts committed; then ``result``."""
        return self.result(write_mapped(self, source, out), out)
