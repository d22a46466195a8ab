"""The ``generate`` stage, label-conditioned generation over a corpus: prompts from a template, a generator, generated
rows.

Each input row yields one prompt per target label (its own label, every label of the input, or a given list); the
generator samples n texts per prompt; every text becomes a canonical row with ``source=generated`` and
``origin_id``. Prompts whose generation failed, or that produced no text, are rows of ``failed/`` with the error, so
every prompt is accounted for. It is a map stage (``pipeline.map_stage``): the prompts are generated ``shard_rows``
at a time (whole batches), by a generator loaded once per worker (Ray actors under ``--engine ray``, each reading its
rows and writing what it generated itself), every finished shard kept until the output is committed: a killed run
generates only the shards it had not finished, and since every batch is sampled from the sampling seed, the rows are
those an uninterrupted run makes.
"""
from __future__ import annotations

import json
from dataclasses import asdict, dataclass, replace

import pyarrow as pa

from refinery.core.report_record import ReportRecord
from refinery.io.redaction import redact
from refinery.methods.generate.config import GenerationConfig
from refinery.methods.generate.prompts import generated_rows, prompts, target_labels
from refinery.pipeline.map_executor import Mapped
from refinery.pipeline.map_stage import MapStage
from refinery.pipeline.output import StageOutput
from refinery.pipeline.stage import Output, Resources, StageResult

FAILED = "failed"   # the part holding the prompts that produced no text, each with its reason


@dataclass(frozen=True, kw_only=True)
class GenerateReport(ReportRecord):
    """A generation run's report: the rows prompted and those beyond ``limit``, the prompts, the generated rows
    (corpus/) and failed prompts (failed/), the input's rejects, the backend, its model and the engine, the sampling
    and the template, the shards and those read back from a killed run, and the configuration (secrets redacted)."""

    inputs: int
    beyond_limit: int
    prompts: int
    generated: int
    failed: int
    input_rejected: int
    backend: str
    model: str
    engine: str
    sampling: dict
    template: str
    shards: int
    resumed_shards: int
    config: dict


class GenerateStage(MapStage):
    """Label-conditioned generation (e.g. hypotheses for a premise and a label) through a generator.

    The input rows are prompts; the output's ``corpus/`` holds the generated rows (the input's rejects in its
    rejects), ``failed/`` the failed prompts with their reasons, and ``report/`` the run's figures.
    """

    report_type = GenerateReport

    name, Config = "generate", GenerationConfig
    needs = ("id", "text_a", "label")
    adds = ("source", "origin_id")
    resources = Resources(cpus=1, memory_gb=2)
    output = Output.CORPUS
    parts = (Output.CORPUS.value, FAILED)
    version = 3   # 3: failed prompts as the corpus failed/, the figures in report/ (were generation/)

    def labels_needed(self) -> bool:
        return self.config.target_labels == "all"

    def row_limit(self) -> int | None:
        return self.config.limit

    def unit_requests(self) -> int:
        return max(1, self.config.shard_rows // self.config.batch_size) * self.config.batch_size

    def actors(self) -> int:
        return self.config.actors

    def worker_resources(self) -> Resources:
        return replace(self.resources, gpus=self.config.gpus_per_actor)

    def checkpoint_settings(self) -> dict:
        """Every setting but where the generator runs (a run killed on one engine resumes on the other)."""
        settings = asdict(self.config)
        del settings["actors"], settings["gpus_per_actor"]
        return settings

    def requests_per_row(self, labels: list) -> int:
        every = target_labels(self.config, labels)
        return 1 if every is None else len(every)

    def requests(self, rows: pa.Table, labels: list) -> pa.Table:
        return prompts(rows, self.config, labels)

    def load_model(self):
        from refinery.models.actors import GeneratorActor

        config = self.config
        return GeneratorActor(config.backend.name, config.backend.kwargs(), asdict(config.sampling))

    def apply(self, requests: pa.Table, model, advance) -> dict:
        """The prompts generated ``batch_size`` at a time (each batch sampled from the seed): {corpus: generated
        rows, failed: failed prompts}."""
        size, parts = self.config.batch_size, []
        for start in range(0, requests.num_rows, size):
            model.advance = lambda done, start=start: advance(start + done)
            parts.append(model(requests.slice(start, size)))
            advance(start + parts[-1].num_rows)
        rows, failed = generated_rows(pa.concat_tables(parts) if parts else model(requests))
        return {Output.CORPUS.value: rows, FAILED: failed}

    def result(self, mapped: Mapped, out: StageOutput) -> StageResult:
        """report/ (report.json and its page) with the prompts, generated rows and failed prompts; the result."""
        from refinery.report.page import config_table, fields

        config = self.config
        r = GenerateReport(inputs=mapped.mapped, beyond_limit=mapped.beyond_limit, prompts=mapped.requests,
                           generated=mapped.written[Output.CORPUS.value], failed=mapped.written[FAILED],
                           input_rejected=mapped.input_rejects, backend=config.backend.name,
                           model=config.backend.model, engine=mapped.engine, sampling=asdict(config.sampling),
                           template=config.template, shards=mapped.units, resumed_shards=mapped.resumed,
                           config=redact(asdict(config)))
        page = out.report_page(f"{self.name}: label-conditioned generation")
        page.section("Prompts", fields({
            "rows prompted": r.inputs, "rows beyond the limit": r.beyond_limit, "input rejects": r.input_rejected,
            "prompts": r.prompts, "generated rows (corpus/)": r.generated, "failed prompts (failed/)": r.failed,
            "shards": r.shards, "shards read back from a killed run": r.resumed_shards, "engine": r.engine}))
        page.section("Configuration", config_table(json.loads(json.dumps(r.config, default=str))))
        out.publish_report(r, page)
        headline = f"{r.prompts:,} prompts -> {r.generated:,} generated rows, {r.failed:,} failed"
        return StageResult(mapped.rows + mapped.input_rejects,
                           {"prompted": mapped.mapped, "beyond limit": mapped.beyond_limit,
                            "input rejects": mapped.input_rejects}, r, headline,
                           (f"{headline} ({config.backend.name}, {mapped.engine})",)
                           + ((f"resumed: {mapped.resumed} finished shard(s) from the interrupted run before",)
                              if mapped.resumed else ()))
