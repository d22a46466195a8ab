"""Label-conditioned generation over a corpus: prompts from a template, a generator stage, generated rows.

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
import string
from dataclasses import asdict, dataclass, replace

import pyarrow as pa

from refinery.core.validation import NOT_EMPTY, Allowed, at_least, number_in, setting, validate
from refinery.io.checkpoints import CHECKPOINTS, Checkpoints, table_digest
from refinery.io.redaction import redact
from refinery.models.generate import Backend, Sampling
from refinery.models.stages import generate_table
from refinery.pipeline.output import StageOutput
from refinery.pipeline.stage import Output, Resources, Stage, StageInput, StageResult
from refinery.progress import announce, progress

LABEL_DESCRIPTIONS = {
    "entailment": "definitely true given the premise",
    "neutral": "possibly true given the premise, but not implied by it",
    "contradiction": "definitely false given the premise",
    "SUPPORTS": "supported by the evidence", "REFUTES": "refuted by the evidence",
}
DEFAULT_TEMPLATE = ("Premise: {text_a}\nWrite one short sentence that is {label_description}. "
                    "Reply with the sentence only.")


TEMPLATE_FIELDS = ("id", "text_a", "text_b", "label", "label_description")


def _is_template(value) -> bool:
    """A format string whose ``{names}`` are all row fields."""
    try:
        names = {name for _, name, _, _ in string.Formatter().parse(value) if name is not None}
    except (ValueError, TypeError):
        return False
    return names <= set(TEMPLATE_FIELDS)


@dataclass
class GenerationConfig:
    template: str = setting(DEFAULT_TEMPLATE, Allowed(_is_template, "a prompt over " + " ".join(
        "{" + f + "}" for f in TEMPLATE_FIELDS)), "Prompt template over the row's fields.")
    target_labels: str = setting("own", NOT_EMPTY, "own, all, or comma-separated labels to generate for.")
    limit: int | None = setting(None, at_least(1).or_none(), "Prompt only the first rows of the input.")
    sampling: Sampling = setting(Sampling(), help="Sampling of every backend.")
    backend: Backend = setting(Backend(), help="Where texts are generated.")
    batch_size: int = setting(16, at_least(1), "Prompts per generator call.")
    shard_rows: int = setting(1024, at_least(1), "Prompts per checkpointed shard (rounded to whole batches): a "
                                                 "killed run continues after its last finished shard.")
    actors: int = setting(1, at_least(1), "Ray Data actor pool size.")
    gpus_per_actor: float = setting(0.0, number_in(0), "GPUs each actor asks for.")

    def __post_init__(self):
        validate(self)


def prompts(table: pa.Table, config: GenerationConfig) -> pa.Table:
    """One row per (input row, target label): origin_id, text_a, label, prompt."""
    rows = table.select([c for c in ("id", "text_a", "text_b", "label") if c in table.column_names]).to_pylist()
    every = sorted({r["label"] for r in rows})
    if config.target_labels not in ("own", "all"):
        every = [x.strip() for x in config.target_labels.split(",") if x.strip()]
    out = []
    for r in rows:
        for label in ([r["label"]] if config.target_labels == "own" else every):
            fields = {**r, "label": label, "label_description": LABEL_DESCRIPTIONS.get(label, f"labelled '{label}'")}
            try:
                prompt = config.template.format(**fields)
            except KeyError as e:
                raise ValueError(f"template names {e} but rows have only {', '.join(fields)}") from None
            out.append({"origin_id": r["id"], "text_a": r["text_a"], "label": label, "prompt": prompt})
    return pa.Table.from_pylist(out, schema=pa.schema([("origin_id", pa.string()), ("text_a", pa.string()),
                                                       ("label", pa.string()), ("prompt", pa.string())]))


def generated_rows(result: pa.Table) -> tuple[pa.Table, pa.Table]:
    """(canonical generated rows, failed prompts) from a stage's output."""
    rows, failed = [], []
    for r in result.to_pylist():
        texts = [t for t in (r["generated"] or []) if t]
        if r["generation_error"] or not texts:
            failed.append({"origin_id": r["origin_id"], "label": r["label"], "prompt": r["prompt"],
                           "reason": r["generation_error"] or "empty generation"})
        for k, text in enumerate(texts):
            rows.append({"id": f"{r['origin_id']}#gen-{r['label']}-{k}", "text_a": r["text_a"], "text_b": text,
                         "label": r["label"], "source": "generated", "origin_id": r["origin_id"]})
    schema = pa.schema([("id", pa.string()), ("text_a", pa.string()), ("text_b", pa.string()),
                        ("label", pa.string()), ("source", pa.string()), ("origin_id", pa.string())])
    fail_schema = pa.schema([("origin_id", pa.string()), ("label", pa.string()), ("prompt", pa.string()),
                             ("reason", pa.string())])
    return pa.Table.from_pylist(rows, schema=schema), pa.Table.from_pylist(failed, schema=fail_schema)


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
