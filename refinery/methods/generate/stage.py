"""The ``generate`` stage, label-conditioned generation over a corpus: prompts from a template, a generator stage,
generated rows.

Each input row yields one prompt per target label (its own label, every label, or a given list);
the stage (in-process or a Ray Data actor pool) samples n texts per prompt; every text becomes a
canonical row with ``source=generated`` and ``origin_id``. Prompts whose generation failed, or
that produced no text, are listed with the error in ``failed.parquet``, so every prompt is accounted for.
The prompts are generated ``shard_rows`` at a time, each finished shard checkpointed under the output
(``io.checkpoints``): a killed run continues after its last finished shard, and since every batch is
sampled from the sampling seed, the rows are those an uninterrupted run makes.
"""
from __future__ import annotations

import json
from dataclasses import asdict, replace

import pyarrow as pa

from refinery.io.checkpoints import CHECKPOINTS, Checkpoints, table_digest
from refinery.io.redaction import redact
from refinery.methods.generate.config import GenerationConfig
from refinery.methods.generate.prompts import generated_rows, prompts
from refinery.models.actors import generate_table
from refinery.pipeline.output import StageOutput
from refinery.pipeline.stage import Output, Resources, Stage, StageInput, StageResult
from refinery.progress import announce, progress


def generate_in_shards(requests: pa.Table, config: GenerationConfig, engine: str, checkpoints: Checkpoints
                       ) -> pa.Table:
    """The generator's output for every prompt, shard by shard, each shard read from ``checkpoints`` if a
    previous run finished it, else generated and checkpointed. One bar counts the prompts done, batch by
    batch, across the shards (a finished shard counts at once)."""
    resources = replace(GenerateStage.resources, gpus=config.gpus_per_actor)
    shard = max(1, config.shard_rows // config.batch_size) * config.batch_size

    def generate(part: pa.Table, bar=None) -> pa.Table:
        return generate_table(part, config.backend.name, config.backend.kwargs(), config.sampling, engine=engine,
                              batch_size=config.batch_size, actors=config.actors, resources=resources, bar=bar)

    if not requests.num_rows:
        return generate(requests)
    parts = []
    with progress(total=requests.num_rows, desc="generate", unit=" prompt") as bar:
        for number, start in enumerate(range(0, requests.num_rows, shard)):
            name = f"shard-{number:05d}"
            part = checkpoints.get(name)
            if part is None:
                part = generate(requests.slice(start, shard), bar)
                checkpoints.put(name, part)
            else:
                bar.update(part.num_rows)
            parts.append(part)
    return pa.concat_tables(parts)


class GenerateStage(Stage):
    """Label-conditioned generation (e.g. hypotheses for a premise and a label) through a generator.

    The input rows are prompts; the output's ``corpus/`` holds the generated rows (the input's rejects in its
    rejects), and ``generation/`` the failed prompts (``failed.parquet``) and the run's figures.
    """

    name, Config = "generate", GenerationConfig
    needs = ("id", "text_a", "label")
    adds = ("source", "origin_id")
    resources = Resources(cpus=1, memory_gb=2)
    output = Output.CORPUS
    version = 2   # 2: the corpus in corpus/ (generation/ sat inside it: pandas read its files as data)

    def run(self, source: StageInput, out: StageOutput) -> StageResult:
        """Generate into ``out``: the generated rows' corpus ``corpus/`` (the input's rejects in its rejects),
        ``generation/`` (failed.parquet and generation.json). Rows past ``limit`` are counted, not prompted."""
        table, rejects = source.load()
        config = self.config
        unused = max(table.num_rows - config.limit, 0) if config.limit is not None else 0
        table = table.slice(0, table.num_rows - unused)
        requests = prompts(table, config)
        checkpoints = out.checkpoints("generate", {"config": redact(asdict(config)),
                                                   "prompts": table_digest(requests)})
        resumed = len(checkpoints.done())
        if resumed:
            announce(f"generate: resuming after {resumed} finished shard(s) of an interrupted run "
                     f"(checkpoints in {out.url(CHECKPOINTS)})")
        rows, failed = generated_rows(generate_in_shards(requests, config, source.engine, checkpoints))
        r = {"inputs": table.num_rows, "beyond_limit": unused, "prompts": requests.num_rows,
             "generated": rows.num_rows, "failed": failed.num_rows, "backend": config.backend.name,
             "model": config.backend.model, "engine": source.engine, "sampling": asdict(config.sampling),
             "template": config.template, "resumed_shards": resumed}
        r["input_rejected"] = out.write_corpus(Output.CORPUS.value, rows, rejects,
                                               settings={"generation": r})["rejected"]
        with out.files("generation") as d:
            d.write_parquet("failed.parquet", failed)
            d.write_text("generation.json", json.dumps(r, indent=1))
            d.commit()
        checkpoints.clear()
        headline = f"{r['prompts']:,} prompts -> {r['generated']:,} generated rows, {r['failed']:,} failed"
        return StageResult(r["inputs"] + r["beyond_limit"] + r["input_rejected"],
                           {"prompted": r["inputs"], "beyond limit": r["beyond_limit"],
                            "input rejects": r["input_rejected"]}, r, headline,
                           (f"{headline} ({config.backend.name}, {source.engine})",)
                           + ((f"resumed: {r['resumed_shards']} finished shard(s) from the interrupted run before",)
                              if r["resumed_shards"] else ()), report_file="")
